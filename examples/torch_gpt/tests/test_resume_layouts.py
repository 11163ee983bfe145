"""Resume at another layout through the reference checkpoint (global tensors
scattered at the new TP/DP): the run continues with the next samples and stays
within fp32 noise of the uninterrupted run. The RNG state is per (pp, tp) rank,
so a TP change drops it (as Megatron does); dropout is 0 here."""
from __future__ import annotations

from conftest import run_train

TINY = ["--model", "tiny", "--micro-batch", "2", "--global-batch", "8"]


def test_resume_at_tp1_dp2_and_tp4_follows_the_tp2_run(tmp_path):
    full = run_train(2, TINY + ["--tp", "2", "--steps", "10"], tmp_path, "full")
    run_train(2, TINY + ["--tp", "2", "--steps", "5"], tmp_path, "half")
    ckpt = str(tmp_path / "half.pt")
    tail = [r["loss"] for r in full["log"][5:]]
    for tp, nproc in ((1, 2), (4, 4)):
        r = run_train(nproc, TINY + ["--tp", str(tp), "--steps", "10", "--load-ref", ckpt],
                      tmp_path, f"tp{tp}")
        assert [x["consumed_samples"] for x in r["log"]] == [8 * i for i in range(6, 11)]
        d = max(abs(a["loss"] - b) for a, b in zip(r["log"], tail))
        print(f"TP2 -> TP{tp} x DP{nproc // tp} at step 5: loss max|diff| vs uninterrupted "
              f"{d:.3e} over steps 6-10")
        assert d < 1e-4
