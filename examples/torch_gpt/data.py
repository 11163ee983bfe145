"""Byte-level language-model data and Megatron's pretraining sampler.

Corpus: the license texts Debian ships in /usr/share/common-licenses (about
260 KB after dropping symlinked duplicates), or any files given; bytes are
tokens 0..255 and token 256 ends each document. Sample j of ByteDataset is
the window tokens[k*seq : k*seq + seq + 1] with k = perm[j], perm a fixed
permutation from data_seed (as Megatron's GPTDataset shuffles its sample
index), so sample ids alone decide the data: layout-independent.

PretrainingSampler has the semantics of MegatronPretrainingSampler
(megatron/legacy/data/data_samplers.py) and of ckpt's C++ sampler
(ckpt/workload/sampler.h): samples are consumed in order from
consumed_samples; one micro step takes micro_batch * dp consecutive ids and DP
rank r gets ids [r*mb, (r+1)*mb) of them; a global batch is
global_batch / (micro_batch * dp) micro steps. The checkpointed iterator state
is consumed_samples (plus a ledger digest of the ids consumed); a job at
another DP or micro batch recomputes its slices from it: nothing skipped or
repeated. SampleLedger matches ckpt's C++ SampleLedger bit for bit.
"""
from __future__ import annotations

import glob
import os

import numpy as np
import torch

EOD = 256
DEFAULT_GLOB = "/usr/share/common-licenses/*"
MASK64 = (1 << 64) - 1


def default_files() -> list[str]:
    """Regular files of Debian's common licenses, symlinked duplicates removed, sorted."""
    real = {os.path.realpath(p) for p in glob.glob(DEFAULT_GLOB)}
    return sorted(p for p in real if os.path.isfile(p))


def load_corpus(files: list[str] | None = None) -> np.ndarray:
    """All bytes of `files` (default: default_files()), each followed by EOD, as int64."""
    files = files or default_files()
    if not files:
        raise FileNotFoundError(f"no corpus files (looked for {DEFAULT_GLOB})")
    parts = []
    for path in files:
        with open(path, "rb") as f:
            parts.append(np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64))
        parts.append(np.array([EOD], dtype=np.int64))
    return np.concatenate(parts)


class ByteDataset:
    def __init__(self, tokens: np.ndarray, seq_length: int, seed: int):
        self.tokens, self.seq = tokens, seq_length
        n = (len(tokens) - 1) // seq_length
        if n <= 0:
            raise ValueError(f"corpus of {len(tokens)} tokens is shorter than one sample")
        self.perm = np.random.RandomState(seed).permutation(n)

    def __len__(self) -> int:
        return len(self.perm)

    def sample(self, j: int) -> np.ndarray:
        k = int(self.perm[j]) * self.seq
        return self.tokens[k:k + self.seq + 1]

    def batch(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens, targets), each [len(ids), seq]: targets are tokens shifted by one."""
        rows = torch.from_numpy(np.stack([self.sample(j) for j in ids]))
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def mix64(x: int) -> int:
    """SplitMix64 finaliser (ckpt/workload/philox.h Mix64)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class SampleLedger:
    """Order-independent digest of consumed sample ids (count, sum of hashes mod 2^64)."""

    def __init__(self, count: int = 0, digest: int = 0):
        self.count, self.digest = count, digest

    def add(self, sample_id: int) -> None:
        self.count += 1
        self.digest = (self.digest + mix64((sample_id ^ 0x5A4D504C45) & MASK64)) & MASK64

    def merge(self, other: "SampleLedger") -> None:
        self.count += other.count
        self.digest = (self.digest + other.digest) & MASK64

    @classmethod
    def range(cls, begin: int, end: int) -> "SampleLedger":
        led = cls()
        for i in range(begin, end):
            led.add(i)
        return led

    def __eq__(self, other) -> bool:
        return (self.count, self.digest) == (other.count, other.digest)


class PretrainingSampler:
    def __init__(self, total_samples: int, micro_batch: int, global_batch: int,
                 dp_rank: int, dp_size: int, consumed_samples: int = 0):
        if min(total_samples, micro_batch, global_batch, dp_size) <= 0:
            raise ValueError("sampler: sizes must be positive")
        if not 0 <= dp_rank < dp_size:
            raise ValueError(f"sampler: dp rank {dp_rank} outside [0, {dp_size})")
        if global_batch % (micro_batch * dp_size):
            raise ValueError(f"sampler: global batch {global_batch} not divisible by micro batch "
                             f"{micro_batch} x dp {dp_size}")
        if not 0 <= consumed_samples <= total_samples:
            raise ValueError(f"sampler: consumed_samples {consumed_samples} outside "
                             f"[0, {total_samples}]")
        self.total, self.mb, self.gb = total_samples, micro_batch, global_batch
        self.dp_rank, self.dp = dp_rank, dp_size
        self.consumed_samples = consumed_samples
        self.ledger = SampleLedger()  # ids this rank consumed (merge over DP to save)

    @property
    def num_microbatches(self) -> int:
        return self.gb // (self.mb * self.dp)

    def next_global_batch(self) -> list[list[int]]:
        """This DP rank's micro batches (sample ids) of the next global batch."""
        if self.consumed_samples + self.gb > self.total:
            raise RuntimeError(f"data exhausted: {self.consumed_samples} of {self.total} samples "
                               f"consumed, a global batch needs {self.gb}")
        step = self.mb * self.dp
        micro = []
        for m in range(self.num_microbatches):
            first = self.consumed_samples + m * step + self.dp_rank * self.mb
            micro.append(list(range(first, first + self.mb)))
        for ids in micro:
            for i in ids:
                self.ledger.add(i)
        self.consumed_samples += self.gb
        return micro

    def state_json(self, merged_ledger: SampleLedger) -> dict:
        """ckpt's DataIteratorState JSON (ckpt/workload/sampler.h); `merged_ledger`
        is the ledger merged over all DP ranks."""
        return {"consumed_samples": self.consumed_samples, "global_batch": self.gb,
                "total_samples": self.total,
                "ledger": {"count": merged_ledger.count, "digest": merged_ledger.digest}}

    def load_json(self, j: dict) -> None:
        """Restores consumed_samples; this rank's ledger part is the saved ledger on
        DP rank 0 and empty elsewhere, so merging over DP gives the saved total."""
        consumed, led = int(j["consumed_samples"]), j["ledger"]
        if int(led["count"]) != consumed:
            raise ValueError(f"data iterator state: ledger counts {led['count']} samples, "
                             f"consumed_samples is {consumed}")
        if not 0 <= consumed <= self.total:
            raise ValueError(f"data iterator state: consumed {consumed} outside [0, {self.total}]")
        self.consumed_samples = consumed
        self.ledger = SampleLedger(consumed, int(led["digest"])) if self.dp_rank == 0 \
            else SampleLedger()
