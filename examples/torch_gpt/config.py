"""Model and training configuration.

GPTConfig mirrors the fields of ckpt's C++ GptConfig (reshard/megatron_gpt.h)
that this job supports, with the same names, so model_config_json() in
state.py can emit the config of ckpt's "megatron_gpt" family directly. TrainConfig holds the
optimizer, schedule, data and parallel settings of a run; both are plain
dataclasses that round-trip through JSON (to_json / from_json).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field


@dataclass
class GPTConfig:
    vocab_size: int = 257            # 256 bytes + one end-of-document token
    hidden: int = 64
    ffn_hidden: int = 128
    num_layers: int = 2
    num_heads: int = 8               # np
    num_query_groups: int = 4        # ng (GQA); 0 = num_heads
    kv_channels: int = 0             # hn; 0 = hidden // num_heads
    swiglu: bool = True
    tied_embeddings: bool = False
    make_vocab_size_divisible_by: int = 128  # Megatron's default; the presets use 16
    seq_length: int = 64
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02
    attention_dropout: float = 0.0   # > 0 makes the RNG state matter
    hidden_dropout: float = 0.0

    def query_groups(self) -> int:
        return self.num_query_groups if self.num_query_groups > 0 else self.num_heads

    def head_dim(self) -> int:
        return self.kv_channels if self.kv_channels > 0 else self.hidden // self.num_heads

    def qkv_rows(self) -> int:
        """Rows of the fused QKV weight: ng * (np/ng + 2) * hn (as ckpt's qkv_rows)."""
        ng = self.query_groups()
        return ng * (self.num_heads // ng + 2) * self.head_dim()

    def padded_vocab_size(self, tp: int) -> int:
        """Megatron vocab_size_with_padding: ceil(V / (d * tp)) * d * tp."""
        multiple = self.make_vocab_size_divisible_by * tp
        return math.ceil(self.vocab_size / multiple) * multiple

    def validate(self, tp: int = 1) -> None:
        """Raises ValueError naming the field when the model cannot run at this TP."""
        ng = self.query_groups()
        if self.num_heads % ng:
            raise ValueError(f"num_heads={self.num_heads} not a multiple of num_query_groups={ng}")
        if self.kv_channels == 0 and self.hidden % self.num_heads:
            raise ValueError(f"hidden={self.hidden} not divisible by num_heads={self.num_heads}")
        if self.head_dim() % 2:
            raise ValueError(f"head dim {self.head_dim()} must be even for RoPE")
        for name, v in (("num_heads", self.num_heads), ("num_query_groups", ng),
                        ("ffn_hidden", self.ffn_hidden)):
            if v % tp:
                raise ValueError(f"{name}={v} is not divisible by tp={tp} "
                                 "(QKV rows per TP rank are whole query groups)")

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, j: dict) -> "GPTConfig":
        return cls(**j)


@dataclass
class TrainConfig:
    tp: int = 1
    micro_batch: int = 4
    global_batch: int = 8            # = micro_batch * dp * num_microbatches
    steps: int = 40
    seed: int = 1234
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 4
    decay_steps: int = 200           # fixed, so a resumed run keeps the same schedule
    lr_style: str = "cosine"
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    clip_grad: float = 1.0
    data_seed: int = 1234
    data_files: list = field(default_factory=list)  # empty = Debian's common licenses

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, j: dict) -> "TrainConfig":
        return cls(**j)


PRESETS = {
    # 2 layers, hidden 64, 8 heads in 4 query groups, vocab 257: padded to
    # 272 / 288 / 320 at tp 1 / 2 / 4 with divisible_by 16, so padding differs per TP.
    "tiny": GPTConfig(make_vocab_size_divisible_by=16),
    "small": GPTConfig(hidden=128, ffn_hidden=256, num_layers=4, num_heads=8,
                       num_query_groups=4, seq_length=128, make_vocab_size_divisible_by=16),
}


def preset(name: str) -> GPTConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset '{name}' (known: {', '.join(PRESETS)})")
    return dataclasses.replace(PRESETS[name])
