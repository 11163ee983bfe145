"""Sampler semantics (MegatronPretrainingSampler) and resume at another DP size."""
from __future__ import annotations

import pytest

from torch_gpt.data import ByteDataset, PretrainingSampler, SampleLedger, load_corpus


def _consume(samplers, steps):
    """Runs every DP rank's sampler for `steps` global batches; returns, per step,
    the ids of the global batch in (micro step, dp rank) order."""
    out = []
    for _ in range(steps):
        per_rank = [s.next_global_batch() for s in samplers]
        ids = []
        for m in range(samplers[0].num_microbatches):
            for r in range(len(samplers)):
                ids += per_rank[r][m]
        out.append(ids)
    return out


def _samplers(dp, mb, gb, total=1000, consumed=0):
    return [PretrainingSampler(total, mb, gb, r, dp, consumed) for r in range(dp)]


def test_global_batch_is_the_next_ids_whatever_dp_and_micro_batch():
    for dp, mb in ((1, 8), (2, 4), (4, 2), (2, 1)):
        steps = _consume(_samplers(dp, mb, 8), 3)
        assert steps == [list(range(8 * i, 8 * i + 8)) for i in range(3)], (dp, mb)


def test_rank_slices_follow_megatron():
    s0, s1 = _samplers(2, 2, 8)
    assert s0.next_global_batch() == [[0, 1], [4, 5]]
    assert s1.next_global_batch() == [[2, 3], [6, 7]]


def test_resume_at_another_dp_continues_with_the_exact_next_samples():
    before = _samplers(2, 2, 8)
    _consume(before, 5)
    merged = SampleLedger()
    for s in before:
        merged.merge(s.ledger)
    state = before[0].state_json(merged)
    assert state["consumed_samples"] == 40 and merged == SampleLedger.range(0, 40)

    uninterrupted = _samplers(1, 8, 8)
    _consume(uninterrupted, 5)
    expected = _consume(uninterrupted, 3)
    for dp, mb in ((4, 1), (1, 4), (4, 2)):
        after = _samplers(dp, mb, 8)
        for s in after:
            s.load_json(state)
        assert _consume(after, 3) == expected, (dp, mb)
        ledger = SampleLedger()
        for s in after:
            ledger.merge(s.ledger)
        assert ledger == SampleLedger.range(0, 64)  # nothing skipped, nothing repeated


def test_bad_states_are_refused():
    with pytest.raises(ValueError):
        PretrainingSampler(100, 3, 8, 0, 2)  # 8 % (3 * 2) != 0
    s = _samplers(2, 2, 8)[0]
    with pytest.raises(ValueError):
        s.load_json({"consumed_samples": 16, "ledger": {"count": 8, "digest": 0}})


def test_dataset_samples_are_shifted_windows():
    ds = ByteDataset(load_corpus(), 64, seed=1)
    assert len(ds) > 3000
    tokens, targets = ds.batch([0, 5])
    assert tokens.shape == (2, 64) and bool((tokens[:, 1:] == targets[:, :-1]).all())
    assert int(tokens.max()) <= 256
