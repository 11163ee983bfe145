#!/usr/bin/env python3
# title: 数据顺序的确定性：续训时改了种子或 global batch
# question: seeds/level8/L8-X03.md
"""Resuming is exactly-once only if the sample order is the same function of
the sample id before and after the restart: consumed_samples is a cursor into
an index built from (data seed, sequence length, split, num_samples, ...).
(1) `ckpt train` records the data-order arguments in the checkpoint and its
strict resume refuses a changed seed or global batch (exit code, message).
(2) The PyTorch training example, like Megatron-LM (check_checkpoint_args
compares model shape and tokenizer, not the seed or the data split), accepts
a resume with another --data-seed. Its real dataset (ByteDataset: samples are
windows perm[j] of the corpus, perm from the data seed) then serves other
windows after the restart; counted here with the example's own code: windows
trained twice and windows never seen, vs the uninterrupted run.
Negative control: (2) - the resume that nothing refuses."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "helpers"))
from scenlib import *  # noqa: F403,E402
import torch_gpt_job as tg  # noqa: E402

sys.path.insert(0, tg.EXAMPLES)
from torch_gpt.config import preset  # noqa: E402
from torch_gpt.data import ByteDataset, load_corpus  # noqa: E402

T = ["--model", "tiny", "--seed", 3]
must("base", mpi("tp=1", "train", "--root", path("c"), *T, "--steps", 4, "--json"))
run_to("seed", mpi("tp=1", "train", "--root", path("c"), "--model", "tiny", "--seed", 4, "--steps", 8, "--resume", "--json"))
run_to("gb", mpi("tp=1", "train", "--root", path("c"), *T, "--global-batch", 32, "--steps", 8, "--resume", "--json"))
must("same", mpi("tp=1", "train", "--root", path("c"), *T, "--steps", 8, "--resume", "--json"))

H, N, GB, SEED_A, SEED_B = (3, 6, 8, 1234, 999) if REDUCED else (4, 10, 8, 1234, 999)
TA = ["--model", "tiny", "--seed", 5, "--global-batch", GB, "--micro-batch", 4]
port = 29700 + os.getpid() % 200
must("t_half", tg.argv(MPIRUN, PY, 1, "--tp", 1, *TA, "--data-seed", SEED_A, "--steps", H, "--save-ref",
                       path("h.pt"), port=port))
run_to("t_res", tg.argv(MPIRUN, PY, 1, "--tp", 1, *TA, "--data-seed", SEED_B, "--steps", N, "--load-ref",
                        path("h.pt"), "--log", path("t_res.jsonl"), port=port + 1))

seq = preset("tiny").seq_length
corpus = load_corpus()
a, b = ByteDataset(corpus, seq, SEED_A), ByteDataset(corpus, seq, SEED_B)
# Over one epoch (every window once, as the straight run would see them), restarted at sample H*GB.
epoch = len(a)
resumed = [int(a.perm[j]) for j in range(H * GB)] + [int(b.perm[j]) for j in range(H * GB, epoch)]
seen = {}
for w in resumed:
    seen[w] = seen.get(w, 0) + 1
twice = sum(c - 1 for c in seen.values() if c > 1)
missed = epoch - len(seen)
res_log = tg.losses(path("t_res.jsonl")) if os.path.exists(path("t_res.jsonl")) else []
seed_msg = re.search(r"training arguments differ[^\n]*", TXT("seed"))
gb_msg = re.search(r"training arguments differ[^\n]*", TXT("gb"))
n = {"seed_resume_rc": RC("seed"), "seed_refusal": seed_msg.group(0) if seed_msg else "",
     "global_batch_resume_rc": RC("gb"), "global_batch_refusal": gb_msg.group(0) if gb_msg else "",
     "same_args_resume_rc": RC("same"), "same_args_resumed_from": J("same")["resumed"]["iteration"]}
nc = {"resume_rc": RC("t_res"), "resumed_steps": len(res_log), "epoch_windows": epoch, "resumed_at_sample": H * GB,
      "windows_twice": twice, "windows_missed": missed}
checks = [
    ("ckpt: a resume with another seed is refused, naming the seed", RC("seed") != 0 and "seed" in n["seed_refusal"]),
    ("ckpt: a resume with another global batch is refused, naming it",
     RC("gb") != 0 and "global_batch" in n["global_batch_refusal"]),
    ("ckpt: the same arguments resume", RC("same") == 0 and n["same_args_resumed_from"] == 4),
]
emit("数据顺序的确定性：续训时改了种子或 global batch",
     f"ckpt train tiny (strict resume); examples/torch_gpt tiny, data seed {SEED_A} for {H} steps, resumed with data seed "
     f"{SEED_B} to {N} (global batch {GB})",
     n, checks,
     "consumed_samples 只是游标，样本顺序由 (数据种子, 序列长度, split, num_samples …) 建出的索引决定；续训时这些参数必须与检查点一致。"
     "ckpt 把它们存进检查点并在 strict resume 时拒绝不一致；不检查的实现（Megatron-LM 的 check_checkpoint_args 不比较 seed 与数据参数）会静默接受，"
     "重启后有的样本训练两次、有的永远见不到",
     "PyTorch 示例用另一个数据种子续训（与 Megatron-LM 一样不检查）",
     nc, nc["resume_rc"] == 0 and twice > 0 and missed > 0,
     headline="换种子续训 rc={seed_resume_rc}（{seed_refusal}）；换 global batch rc={global_batch_resume_rc}；参数一致时从 {same_args_resumed_from} 续训 rc={same_args_resume_rc}",
     headline_en="resume with another seed rc={seed_resume_rc} ({seed_refusal}); with another global batch "
                 "rc={global_batch_resume_rc}; with the same arguments rc={same_args_resume_rc} from {same_args_resumed_from}",
     nc_headline="示例换数据种子续训 rc={nc.resume_rc}（无人拒绝）：一个 epoch 的 {nc.epoch_windows} 个窗口中 {nc.windows_twice} 个会训练两次、"
                 "{nc.windows_missed} 个从未见过（第 {nc.resumed_at_sample} 个样本处重启）",
     nc_headline_en="the example resumed with another data seed rc={nc.resume_rc} (nothing refuses): of the "
                    "{nc.epoch_windows} windows of an epoch {nc.windows_twice} are trained twice and {nc.windows_missed} "
                    "never seen (restart at sample {nc.resumed_at_sample})")
