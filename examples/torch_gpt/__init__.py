"""torch_gpt: a small Megatron-style GPT training job in pure PyTorch (CPU, gloo).

Tensor parallelism (TP) is done for real over a TP process group with
Megatron-Core's layouts (vocab-parallel embedding and cross entropy, fused
GQA QKV in per-query-group order, SwiGLU fc1 stored as [W_r; V_r]); data
parallelism (DP) all-reduces gradients. Pipeline parallelism is not
implemented (pp = 1 only). A ckpt checkpoint goes through ckpt's torch bridge
(ckpt_adapter: a TP rule table, MCore's key map, the job's resume values); the
job's own pure-PyTorch reference checkpoint describes the same state with
state.sharded_state_dict() over the small descriptor layer in sharding.py.

Modules: config (model/training config), dist_env (torchrun-style env and the
mpirun shim), parallel (process groups, f/g conjugate operators), layers,
model, optim (AdamW, LR schedule), data (byte dataset, sampler), rng,
sharding, state, reference (gather/scatter of global tensors, one-file reference
checkpoint), ckpt_adapter (the job as a ckpt.TorchState), train, launch,
harness (multi-process helpers for tests). See README.md.
"""
