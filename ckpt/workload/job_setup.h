// Start-up of a GPT job rank, shared by `ckpt save/load/train/faults`: the
// rank's place in the layout (checked against the job's size) and the model
// config a command asks for (a preset with overrides, a JSON config, or the
// config a checkpoint recorded).
//
// Pure functions of their arguments and the checkpoint on disk; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/base/comm.h"
#include "ckpt/format/manifest.h"
#include "reshard/megatron_gpt.h"
#include "reshard/parallel_state.h"

namespace ckpt::workload {

// Parses `layout_spec` and checks that `comm` has its world size; the rank's
// coordinates. A spec without dp (e.g. the default "tp=1") takes
// dp = world / (tp*pp*cp) when that divides. kInvalidArgument "layout tp=4
// needs 4 ranks, but the job has 2 (mpirun -np 4)" otherwise, saying why DP
// could not fill the world.
Result<ParallelConfig> JobLayout(const std::string& layout_spec, const Comm& comm);
Result<RankCoords> JobCoords(const ParallelConfig& layout, const Comm& comm);

// The manifest of `iteration` (-1: the latest), else of the newest older
// committed iteration whose manifest reads: the model config and optimizer
// format are the same in every iteration of a run, so a damaged latest
// manifest or a tracker naming a missing iteration does not stop a load
// (--fallback then decides what loads); one removed since it was resolved
// (retention) gives the new latest's. The first error if none reads.
Result<Manifest> ReadManifestOrOlder(const std::string& root, int64_t iteration);

// Resolves a --model value: a preset name with optional overrides
// ("tiny:hidden=256,num_layers=4", each value a JSON scalar or a bare
// string), a JSON config ("{...}"), or - empty or ":k=v,..." - the GPT
// config recorded in the checkpoint under `root` ("model" of family
// megatron_gpt, or an older checkpoint's "gpt"; another family is
// kFailedPrecondition) (iteration `iteration`, -1:
// the latest; with a damaged tracker the newest readable manifest), adjusted
// by the overrides. *name gets the preset name, "custom" or the recorded name.
// A recorded config is untrusted: refused when it describes more parameter
// bytes than the checkpoint holds. A preset or JSON model takes the layer-norm
// key style (GptConfig::norm_keys) of the checkpoint under `root` when there
// is one (old checkpoints: legacy names), else MCore's; ":norm_keys=" or a
// JSON "norm_keys" overrides.
Result<reshard::GptConfig> ResolveModel(const std::string& model, const std::string& root, int64_t iteration,
                                        std::string* name);

}  // namespace ckpt::workload
