"""A Megatron-Core-style GPT (local layer spec) with real tensor parallelism.

Module paths equal Megatron-Core's local spec, so named_parameters() yields
ckpt's keys, except the two layer norms, which Megatron-Core (and ckpt) key as
decoder.layers.<L>.self_attention.linear_qkv.layer_norm_weight and
decoder.layers.<L>.mlp.linear_fc1.layer_norm_weight (state.checkpoint_key):
  embedding.word_embeddings.weight                 vocab-parallel [Vp/tp, h]
  decoder.layers.<L>.input_layernorm.weight        RMSNorm [h]
  decoder.layers.<L>.self_attention.linear_qkv.weight   column-parallel [qkv_rows/tp, h]
  decoder.layers.<L>.self_attention.linear_proj.weight  row-parallel [h, np*hn/tp]
  decoder.layers.<L>.pre_mlp_layernorm.weight      RMSNorm [h]
  decoder.layers.<L>.mlp.linear_fc1.weight         column-parallel; SwiGLU: [W_r; V_r] [2*ffn/tp, h]
  decoder.layers.<L>.mlp.linear_fc2.weight         row-parallel [h, ffn/tp]
  decoder.final_layernorm.weight                   RMSNorm [h]
  output_layer.weight                              vocab-parallel [Vp/tp, h] (absent when tied)
Fused QKV rows per TP rank are whole query groups: viewed as
[ng/tp, np/ng + 2, hn, h], each group holds its np/ng query heads, then k,
then v (MCore SelfAttention.get_query_key_value_tensors). No biases
(Megatron's --disable-bias-linear), RoPE, causal softmax attention, pre-norm.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .config import GPTConfig
from .layers import (ColumnParallelLinear, RMSNorm, RowParallelLinear, VocabParallelEmbedding,
                     apply_rope, mask_padded_vocab, rope_tables, vocab_parallel_cross_entropy)
from .parallel import ParallelState, copy_to_tp
from .rng import RngState, dropout


class SelfAttention(torch.nn.Module):
    def __init__(self, cfg: GPTConfig, ps: ParallelState, rng: RngState):
        super().__init__()
        self.cfg, self.rng = cfg, rng
        self.groups = cfg.query_groups() // ps.tp
        self.q_per_group = cfg.num_heads // cfg.query_groups()
        self.linear_qkv = ColumnParallelLinear(cfg.hidden, cfg.qkv_rows(), ps)
        self.linear_proj = RowParallelLinear(cfg.num_heads * cfg.head_dim(), cfg.hidden, ps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        hn, qg = self.cfg.head_dim(), self.q_per_group
        qkv = self.linear_qkv(x).view(b, s, self.groups, qg + 2, hn)
        q = apply_rope(qkv[:, :, :, :qg].reshape(b, s, self.groups * qg, hn), cos, sin)
        k = apply_rope(qkv[:, :, :, qg], cos, sin).repeat_interleave(qg, dim=2)
        v = qkv[:, :, :, qg + 1].repeat_interleave(qg, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))          # [b, heads, s, hn]
        scores = q @ k.transpose(-1, -2) / math.sqrt(hn)
        causal = torch.ones(s, s, dtype=torch.bool).triu(1)
        probs = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
        probs = dropout(probs, self.cfg.attention_dropout, self.rng.tensor_parallel, self.training)
        ctx = (probs @ v).transpose(1, 2).reshape(b, s, -1)        # heads in global order
        return self.linear_proj(ctx)


class MLP(torch.nn.Module):
    def __init__(self, cfg: GPTConfig, ps: ParallelState):
        super().__init__()
        self.swiglu = cfg.swiglu
        fc1_out = 2 * cfg.ffn_hidden if cfg.swiglu else cfg.ffn_hidden
        self.linear_fc1 = ColumnParallelLinear(cfg.hidden, fc1_out, ps)
        self.linear_fc2 = RowParallelLinear(cfg.ffn_hidden, cfg.hidden, ps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_fc1(x)
        if self.swiglu:  # local [W_r; V_r]: gate then up, as MCore's glu(): silu(x W) * (x V)
            gate, up = y.chunk(2, dim=-1)
            y = F.silu(gate) * up
        else:
            y = F.gelu(y)
        return self.linear_fc2(y)


class TransformerLayer(torch.nn.Module):
    def __init__(self, cfg: GPTConfig, ps: ParallelState, rng: RngState):
        super().__init__()
        self.cfg, self.rng = cfg, rng
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.self_attention = SelfAttention(cfg, ps, rng)
        self.pre_mlp_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.mlp = MLP(cfg, ps)

    def forward(self, x, cos, sin):
        p, gen = self.cfg.hidden_dropout, self.rng.default  # replicated over TP: same mask
        x = x + dropout(self.self_attention(self.input_layernorm(x), cos, sin), p, gen, self.training)
        return x + dropout(self.mlp(self.pre_mlp_layernorm(x)), p, gen, self.training)


class Decoder(torch.nn.Module):
    def __init__(self, cfg: GPTConfig, ps: ParallelState, rng: RngState):
        super().__init__()
        self.layers = torch.nn.ModuleList(TransformerLayer(cfg, ps, rng)
                                          for _ in range(cfg.num_layers))
        self.final_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)


class Embedding(torch.nn.Module):
    def __init__(self, cfg: GPTConfig, ps: ParallelState):
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(cfg.padded_vocab_size(ps.tp), cfg.hidden, ps)


class GPTModel(torch.nn.Module):
    """forward(tokens) -> local logits [b, s, Vp/tp] (padded ids at -inf);
    loss(tokens, targets) -> mean per-token cross entropy over the micro batch."""

    def __init__(self, cfg: GPTConfig, ps: ParallelState, rng: RngState):
        super().__init__()
        cfg.validate(ps.tp)
        self.cfg, self.ps, self.rng = cfg, ps, rng
        self.embedding = Embedding(cfg, ps)
        self.decoder = Decoder(cfg, ps, rng)
        if not cfg.tied_embeddings:
            self.output_layer = ColumnParallelLinear(cfg.hidden, cfg.padded_vocab_size(ps.tp), ps)
        cos, sin = rope_tables(cfg.seq_length, cfg.head_dim(), cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def output_weight(self) -> torch.nn.Parameter:
        if self.cfg.tied_embeddings:
            return self.embedding.word_embeddings.weight
        return self.output_layer.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        x = self.embedding.word_embeddings(tokens)
        x = dropout(x, self.cfg.hidden_dropout, self.rng.default, self.training)
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        for layer in self.decoder.layers:
            x = layer(x, cos, sin)
        x = self.decoder.final_layernorm(x)
        logits = F.linear(copy_to_tp(x, self.ps), self.output_weight())
        return mask_padded_vocab(logits, self.cfg.vocab_size, self.ps)

    def loss(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return vocab_parallel_cross_entropy(self(tokens), targets, self.ps).mean()
