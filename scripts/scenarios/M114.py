#!/usr/bin/env python3
# title: PP/VPP reshard 与 tied embeddings
# question: seeds/level8/M114.md
"""A PP2 x VPP2 job with tied embeddings saves; PP4, TP2xPP1, PP4xVPP2 and an
uneven PP3 (first stage 1 layer, last stage 3) load it and check every element.
Layer keys are global (stage offset + local index, MCore
get_transformer_layer_offset); the tied output weight on the last stage is a
non-main replica (1, 0, dp) of embedding.word_embeddings.weight: written once,
refilled on load. The untied twin shows what tying saves.
Negative control, through ckpt's real save and load: the same job saved with
`--naive-layer-offset` (testing::ContiguousLayerKeys: chunk v, local layer i of
stage p keyed p*L/pp + v*L/(pp*vpp) + i, the contiguous offset of a converter
that ignores the interleave; the data is still the right local layer's). It
round-trips at the same PP2xVPP2 (the bug hides there) and a correct PP4 job
loading it counts the wrong elements with its own element check."""
import glob

import h5py

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
N = path("naive")
must("nsave", mpi(L, "save", "--root", N, "--iter", 300, "--model", BASE + "tied_embeddings=true",
                  "--naive-layer-offset", "--json"))
must("nsame", mpi(L, "load", "--root", N, "--naive-layer-offset", "--json"))
run_to("npp4", mpi("tp=1,pp=4", "load", "--root", N, "--json"))  # expected to fail its element check

ins, uins = J("ins"), J("uins")
keys = {t["key"] for t in ins["tensors"]}
meta = ins["metadata"]["model"]["config"]
Lyr, pp, vpp = meta["num_layers"], 2, 2
Lc = Lyr // (pp * vpp)
emb = "embedding.word_embeddings.weight"


def dataset_names(root):
    out = []
    for p in sorted(glob.glob(os.path.join(root, "iter_*", "rank_*.h5"))):
        with h5py.File(p, "r") as f:
            out.append(sorted(f["tensors"].keys()))
    return out


layer_re = re.compile(r"decoder\.layers\.(\d+)\.")


def layers_of(names):
    return sorted({int(m.group(1)) for nm in names if (m := layer_re.match(nm))})


per_rank = dataset_names(R)
emb_holders = sum(any(nm.startswith(emb + "@") for nm in d) for d in per_rank)
stage_layers = [layers_of(d) for d in per_rank]
# Which layers the naive save filed under another layer's key: rank p's true layers (in local order) against
# the keys the naive save of the same rank wrote, in the same order.
naive_layers = [layers_of(d) for d in dataset_names(N)]
moved_layers = {g for t, nv in zip(stage_layers, naive_layers) for g, h in zip(t, nv) if g != h}

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
npp4 = J("npp4") if RC("npp4") in (0, 1) else {}
bad_elems, total_elems = npp4.get("mismatches", 0), npp4.get("elements_checked", 0)
nc = {"layers_misplaced": len(moved_layers), "elements_wrong": bad_elems, "elements_compared": total_elems,
      "wrong_fraction": round(bad_elems / total_elems, 3) if total_elems else 0.0,
      "same_layout_mismatches": J("nsame")["mismatches"], "pp4_rc": RC("npp4"),
      "first_wrong": npp4.get("first_mismatch", "")}
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
     "保存时按连续 stage 规则给层编号（忽略 VPP 交错，--naive-layer-offset），再由正确的 PP4 作业加载",
     nc, len(moved_layers) > 0 and bad_elems > 0 and RC("npp4") != 0 and nc["same_layout_mismatches"] == 0,
     headline="stage0 持有层 {stage0_layers}、stage1 持有层 {stage1_layers}；PP4/TP2/PP4xVPP2/PP3(1,4,3) 重载 "
              "{pp4_mismatches}/{tp2_mismatches}/{vpp_mismatches}/{uneven_mismatches} mismatch；tied 少写 {tied_saved_bytes} B"
              "（= embedding {embedding_bytes} B，{embedding_files} 个 rank 写）",
     headline_en="stage 0 holds layers {stage0_layers}, stage 1 layers {stage1_layers}; PP4/TP2/PP4xVPP2/PP3(1,4,3) "
                 "reloads {pp4_mismatches}/{tp2_mismatches}/{vpp_mismatches}/{uneven_mismatches} mismatches; tying "
                 "writes {tied_saved_bytes} B less (= the embedding's {embedding_bytes} B, written by {embedding_files} rank)",
     nc_headline="同布局往返 {nc.same_layout_mismatches} mismatch（错误被掩盖）；PP4 加载 rc={nc.pp4_rc}：{nc.layers_misplaced}/{layers} 层放错，"
                 "{nc.elements_wrong}/{nc.elements_compared} 元素错（{nc.wrong_fraction}）",
     nc_headline_en="same-layout round trip {nc.same_layout_mismatches} mismatches (the bug hides); PP4 load rc={nc.pp4_rc}: "
                    "{nc.layers_misplaced}/{layers} layers misplaced, {nc.elements_wrong}/{nc.elements_compared} "
                    "elements wrong ({nc.wrong_fraction})")
