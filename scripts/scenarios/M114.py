#!/usr/bin/env python3
# title: PP/VPP reshard 与 tied embeddings
# question: seeds/level8/M114.md
"""A PP2 x VPP2 job with tied embeddings saves; PP4, TP2xPP1, PP4xVPP2 and an
uneven PP3 (first stage 1 layer, last stage 3) load it and check every element.
Layer keys are global (stage offset + local index, MCore
get_transformer_layer_offset); the tied output weight on the last stage is a
non-main replica (1, 0, dp) of embedding.word_embeddings.weight: written once,
refilled on load. The untied twin shows what tying saves.
Negative control (over the real shard files): a loader that keys layers by
local index and reassembles stages contiguously (global = p*L/pp + v*L/(pp*vpp)
+ i, ignoring the interleave) - compared element by element with the PP1
checkpoint the offline resharder produced."""
import glob

import h5py
import numpy as np

from scenlib import *  # noqa: F403

BASE = "tiny:" if REDUCED else model("num_layers=8,hidden=512,ffn_hidden=1408") + ","
R, U = path("tied"), path("untied")
L = "tp=1,pp=2,vpp=2"
must("save", mpi(L, "save", "--root", R, "--iter", 300, "--model", BASE + "tied_embeddings=true", "--json"))
must("usave", mpi(L, "save", "--root", U, "--iter", 300, "--model", BASE + "tied_embeddings=false", "--json"))
must("ins", ck("inspect", R, "--json"))
must("uins", ck("inspect", U, "--json"))
must("pp4", mpi("tp=1,pp=4", "load", "--root", R, "--json"))
must("tp2", mpi("tp=2,pp=1", "load", "--root", R, "--json"))
must("vpp", mpi("tp=1,pp=4,vpp=2", "load", "--root", R, "--json"))
must("uneven", mpi("tp=1,pp=3", "load", "--root", R, "--model", ":first_stage_layers=1,last_stage_layers=3", "--json"))
must("rs1", ck("reshard", R, path("pp1"), "--to", "tp=1,pp=1", "--json"))

ins, uins = J("ins"), J("uins")
keys = {t["key"] for t in ins["tensors"]}
meta = ins["metadata"]["gpt"]
Lyr, pp, vpp = meta["num_layers"], 2, 2
Lc = Lyr // (pp * vpp)
emb = "embedding.word_embeddings.weight"


def datasets(p):
    with h5py.File(p, "r") as f:
        return {name: ds[()] for name, ds in f["tensors"].items()}


per_rank = [datasets(p) for p in sorted(glob.glob(path("tied", "iter_*", "rank_*.h5")))]
emb_holders = sum(any(nm.startswith(emb + "@") for nm in d) for d in per_rank)
ref = datasets(glob.glob(path("pp1", "iter_*", "rank_*.h5"))[0])
layer_re = re.compile(r"decoder\.layers\.(\d+)\.(.*)")
moved_layers, bad_elems, total_elems, stage_layers = set(), 0, 0, []
for p, d in enumerate(per_rank):
    stage_layers.append(sorted({int(m.group(1)) for nm in d if (m := layer_re.match(nm))}))
    for name, arr in d.items():
        m = layer_re.match(name)
        if not m:
            continue
        g = int(m.group(1))
        c = g // Lc
        v, i = c // pp, g % Lc
        assert c % pp == p, (name, p)
        g_naive = p * (Lyr // pp) + v * Lc + i
        total_elems += arr.size
        if g_naive != g:
            moved_layers.add(g)
        bad_elems += int(np.count_nonzero(ref[f"decoder.layers.{g_naive}.{m.group(2)}"] != arr))

loads = {k: J(k) for k in ("pp4", "tp2", "vpp", "uneven")}
save, usave = J("save"), J("usave")
n = {
    "layers": Lyr,
    "stage0_layers": ",".join(map(str, stage_layers[0])),
    "stage1_layers": ",".join(map(str, stage_layers[1])),
    "tied_bytes": save["bytes"], "untied_bytes": usave["bytes"],
    "tied_saved_bytes": usave["bytes"] - save["bytes"],
    "embedding_bytes": next(t["bytes"] for t in ins["tensors"] if t["key"] == emb),
    "embedding_files": emb_holders,
    "output_key_in_tied": "output_layer.weight" in keys,
}
for k, ld in loads.items():
    n[f"{k}_elements"] = ld["elements_checked"]
    n[f"{k}_mismatches"] = ld["mismatches"]
nc = {"layers_misplaced": len(moved_layers), "elements_wrong": bad_elems, "elements_compared": total_elems,
      "wrong_fraction": round(bad_elems / total_elems, 3)}
checks = [
    ("PP4 / TP2xPP1 / PP4xVPP2 / uneven PP3 loads: 0 mismatches",
     all(ld["mismatches"] == 0 and ld["elements_checked"] > 0 for ld in loads.values())),
    ("VPP interleave: stage 0 holds chunks 0 and 2 (layers 0..Lc-1 and 2Lc..3Lc-1)",
     stage_layers[0] == list(range(0, Lc)) + list(range(2 * Lc, 3 * Lc))),
    ("tied: no output_layer.weight key; embedding written by exactly one rank",
     not n["output_key_in_tied"] and emb_holders == 1),
    ("tying saves exactly one padded [V, h] tensor", n["tied_saved_bytes"] == n["embedding_bytes"]),
]
emit("PP/VPP reshard 与 tied embeddings",
     f"{save['model']} tied, saved at PP2xVPP2 (L={Lyr}); loads at PP4, TP2xPP1, PP4xVPP2, uneven PP3 (1/4/3)",
     n, checks,
     "层按全局编号保存（stage offset + local index，VPP 第 v 个 chunk 在 stage p 上持有第 v*pp+p 段），所以 PP/VPP/不均匀首尾 stage 都能互换；"
     "tied 输出层在最后一个 stage 是 embedding 的非主副本 (1,0,dp)，只写一次、加载时回填",
     "按本地层号保存、再按连续 stage 规则拼回（忽略 VPP 交错）",
     nc, len(moved_layers) > 0 and bad_elems > 0,
     headline="stage0 持有层 {stage0_layers}、stage1 持有层 {stage1_layers}；PP4/TP2/PP4xVPP2/PP3(1,4,3) 重载 "
              "{pp4_mismatches}/{tp2_mismatches}/{vpp_mismatches}/{uneven_mismatches} mismatch；tied 少写 {tied_saved_bytes} B"
              "（= embedding {embedding_bytes} B，{embedding_files} 个 rank 写）",
     headline_en="stage 0 holds layers {stage0_layers}, stage 1 layers {stage1_layers}; PP4/TP2/PP4xVPP2/PP3(1,4,3) "
                 "reloads {pp4_mismatches}/{tp2_mismatches}/{vpp_mismatches}/{uneven_mismatches} mismatches; tying "
                 "writes {tied_saved_bytes} B less (= the embedding's {embedding_bytes} B, written by {embedding_files} rank)",
     nc_headline="{nc.layers_misplaced}/{layers} 层放错，{nc.elements_wrong}/{nc.elements_compared} 元素错（{nc.wrong_fraction}）",
     nc_headline_en="{nc.layers_misplaced}/{layers} layers misplaced, {nc.elements_wrong}/{nc.elements_compared} "
                    "elements wrong ({nc.wrong_fraction})")
