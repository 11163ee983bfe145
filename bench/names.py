"""Row names shared by bench/run.py (which measures) and bench/report.py
(which pairs each ckpt row with its limits and peers). n = ranks = writers."""


def save_rows(n: int) -> dict:
    w = "writer" if n == 1 else "writers"
    r = "rank" if n == 1 else "ranks"
    return {
        "dd_buf": f"dd write buffered+fsync, {n} {w}",
        "dd_direct": f"dd write O_DIRECT+fsync, {n} {w}",
        "ckpt_raw": f"ckpt save raw (default: O_DIRECT), {n} {r}",
        "ckpt_raw_buffered": f"ckpt save raw buffered (--buffered-io), {n} {r}",
        "ckpt_raw_wb": f"ckpt save raw buffered, early writeback 64 MiB, {n} {r}",
        "ckpt_zstd": f"ckpt save zstd, {n} {r}",
        "torch_save": f"torch.save+fsync, {n} {r}",
        "h5py_save": f"h5py+fsync, {n} {r}",
    }


def load_rows(n: int, cache: str) -> dict:
    """cache: 'page cache', 'host-cached' or 'cold'."""
    return {
        "dd_read": f"dd read, {cache}, {n} readers",
        "dd_read_direct": f"dd read O_DIRECT, {cache}, {n} readers",
        "ckpt_load": f"ckpt load raw (default: auto), {cache}, {n} ranks",
        "ckpt_load_buffered": f"ckpt load raw buffered (--buffered-io), {cache}, {n} ranks",
        "ckpt_load_xxh3": f"ckpt load raw XXH3-128 (auto), {cache}, {n} ranks",
        "ckpt_load_xxh3_buffered": f"ckpt load raw XXH3-128 buffered, {cache}, {n} ranks",
        "torch_load": f"torch.load, {cache}, {n} ranks",
        "rv_sha256": f"read+SHA-256+copy into memory (C, no ckpt), {cache}, {n} readers",
        "rv_xxh3": f"read+XXH3-128+copy into memory (C, no ckpt), {cache}, {n} readers",
    }


def other_rows(n: int) -> dict:
    return {
        "ckpt_load_zstd": f"ckpt load zstd, page cache, {n} ranks",
        "reshard": f"ckpt load+reshard TP{n}->TP1, page cache, 1 rank",
        "reshard_cold": f"ckpt load+reshard TP{n}->TP1 XXH3-128 (auto), cold, 1 rank",
        "dd_read_1": f"dd read, page cache, 1 reader ({n} files in sequence)",
        "dio_write": f"O_DIRECT write+fdatasync from huge-page buffers, {n} writers (state bytes)",
        "dio_read": f"O_DIRECT read into huge-page buffers, cold, {n} readers (state bytes)",
        "memcpy": "memcpy contiguous, 1 process (state bytes)",
        "sha256": "SHA-256, 1 core, 4 MiB chunks",
        "async": f"async save, {n} ranks",
    }


CACHES = ("page cache", "host-cached", "cold")
