"""probe.py (--hash-activations) and the --nondeterministic embedding backward,
in this process at TP1 (the TP2 comparison is scenario M120's)."""
from __future__ import annotations

import torch

from torch_gpt import probe
from torch_gpt.config import preset
from torch_gpt.layers import _UnorderedEmbedding
from torch_gpt.model import GPTModel
from torch_gpt.parallel import build_parallel_state
from torch_gpt.reference import global_init, scatter_global
from torch_gpt.rng import RngState
from torch_gpt.state import model_shards
from torch_gpt.train import set_deterministic


def _model():
    cfg = preset("tiny")
    ps = build_parallel_state(1, 0, 1)
    model = GPTModel(cfg, ps, RngState(0, ps))
    scatter_global(model_shards(model), global_init(cfg, 3))
    return cfg, ps, model


def _hashes(model, ps, tokens):
    h = probe.ActivationHasher(model, ps, None)
    h.arm()
    with torch.no_grad():
        model(tokens)
    points = h.points
    h.disarm(1)
    return points


def test_hashes_every_point_in_forward_order_and_find_the_first_difference():
    cfg, ps, model = _model()
    tokens = torch.randint(0, cfg.vocab_size, (2, cfg.seq_length), generator=torch.Generator().manual_seed(1))
    a = _hashes(model, ps, tokens)
    per_layer = ["input_layernorm", "linear_qkv", "linear_proj", "pre_mlp_layernorm", "linear_fc1",
                 "linear_fc2", "out"]
    names = ["embedding"] + [f"{i}.{n}" for i in range(cfg.num_layers) for n in per_layer]
    assert [n for n, _ in a] == names + ["final_layernorm", "logits"]
    assert probe.first_difference(a, _hashes(model, ps, tokens)) == (len(a), "")
    with torch.no_grad():  # a change in layer 1's row-parallel weight
        model.decoder.layers[1].self_attention.linear_proj.weight[0, 0] += 1e-3
    b = _hashes(model, ps, tokens)
    assert probe.first_difference(a, b) == (names.index("1.linear_proj"), "1.linear_proj")


def test_hasher_records_only_when_armed():
    cfg, ps, model = _model()
    h = probe.ActivationHasher(model, ps, None)
    with torch.no_grad():
        model(torch.zeros(1, 8, dtype=torch.long))
    assert h.points == []


def test_unordered_embedding_backward_sums_the_same_terms_in_another_order():
    set_deterministic()  # as a training job: one thread, deterministic kernels
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 4, (4096,), generator=g)  # 4 rows, ~1000 terms each
    weight = torch.zeros(4, 16, requires_grad=True)
    upstream = torch.randn(4096, 16, generator=g)

    def grad(fn):
        weight.grad = None
        fn(idx, weight).backward(upstream)
        return weight.grad.clone()

    ref = grad(torch.nn.functional.embedding)
    assert torch.equal(ref, grad(torch.nn.functional.embedding))  # the deterministic path
    x, y = grad(_UnorderedEmbedding.apply), grad(_UnorderedEmbedding.apply)
    # Each entry sums ~1000 float32 terms; reordering moves it by at most n * eps * sum|term|
    # (Higham's bound), a fixed atol is not a bound (1e-4 failed on an entry of ~25 in CI).
    abs_sum = torch.zeros(4, 16, dtype=torch.float64).index_add_(0, idx, upstream.abs().double())
    bound = 1024 * torch.finfo(torch.float32).eps * abs_sum
    assert bool(((x - ref).abs() <= bound).all()) and bool(((y - ref).abs() <= bound).all())
    assert not torch.equal(x, y)  # another summation order, other last bits
