"""Conversions between ckpt checkpoints and HF safetensors / torch.save files:
the same library functions as `ckpt convert` (one process, no comm)."""
from . import _ckpt


def convert(src, dst, to, layout="tp=1", iteration=None, stack_layers=False, extra_state=False,
            vocab_divisible_by=128, compress="none", max_shard_bytes=0, keep_vocab_padding=False,
            progress=None):
    """Converts `src` into `dst` and returns the conversion's stats dict.

    to="ckpt":  src is a HF Llama-style model directory (config.json +
                model.safetensors or an index), dst a checkpoint root; the
                checkpoint is committed at `iteration` (None: 0) in `layout`
                ("tp=4,pp=2", "pp=4,vpp=2", ...), vocab padded for that TP.
    to="hf":    src a ckpt GPT checkpoint root (any layout), dst a directory of
                safetensors files + config.json (+ index when sharded at
                max_shard_bytes; 0: the library default; < 0 is refused).
    to="torch": src a checkpoint root, dst one torch.save file (MCore key names)
                that torch.load opens without ckpt.
    progress: a callable, as for ckpt.save (bytes of the source read).
    Raises ckpt.CkptError naming the file and tensor; nothing partial is left."""
    it = -1 if iteration is None else int(iteration)
    if to == "ckpt":
        return _ckpt.convert_hf_to_ckpt(str(src), str(dst), max(it, 0), layout, bool(stack_layers),
                                        bool(extra_state), int(vocab_divisible_by), compress, progress)
    if to == "hf":
        return _ckpt.convert_ckpt_to_hf(str(src), str(dst), it, int(max_shard_bytes), progress)
    if to == "torch":
        return _ckpt.convert_ckpt_to_torch(str(src), str(dst), it, bool(keep_vocab_padding), progress)
    raise ValueError(f"convert: to must be 'ckpt', 'hf' or 'torch', not {to!r}")
