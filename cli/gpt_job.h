// A GPT job rank for `ckpt save` / `ckpt load`: MPI start-up, the rank's
// layout and coordinates, and its Megatron-Core model state - plus, when asked,
// its distributed-optimizer state (reshard/dist_optimizer.h) in model or bucket
// space - filled with (or checked against) the deterministic expected values.
// Run under mpirun with as many processes as the layout's world size (or alone
// for world 1). Failures are Status values naming the rank; not thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/format/manifest.h"
#include "ckpt/mpi/comm_mpi.h"
#include "reshard/parallel_state.h"
#include "reshard/dist_optimizer.h"
#include "reshard/megatron_gpt.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/dist_optimizer_state.h"

namespace ckpt::cli {

// Whether the job carries distributed-optimizer state, and in which format.
struct OptimizerSpec {
  std::optional<reshard::OptimizerFormat> format;  // nullopt: model state only
  int64_t bucket_elems = 0;                        // DDP bucket size (<= 0: no bucketing)
};

struct GptJob {
  std::unique_ptr<MpiSession> session;
  std::unique_ptr<MpiComm> comm;
  ParallelConfig layout;
  RankCoords coords;
  reshard::GptConfig model;
  std::string model_name;
  std::unique_ptr<workload::GptLocalState> state;  // correct layout: filled and checked
  std::vector<reshard::GptShard> registered;        // the descriptors handed to save/load
  OptimizerSpec optimizer_spec;
  Millis timeout{60000};  // deadline of the job's own collectives (--timeout-ms)
  std::unique_ptr<workload::DistOptimizerState> optimizer;  // set iff optimizer_spec.format

  // The model entries over `state` with the `registered` descriptors, then the
  // optimizer's (fragments or bucket slices + layout objects, and the step).
  Result<ShardedStateDict> StateDict();
  // Model and optimizer expected values / mismatches (optimizer ones also in
  // *optimizer_bad when non-null; first_bad names the first of all).
  Status FillExpected();
  Result<int64_t> CountMismatches(std::string* first_bad, int64_t* optimizer_bad) const;
  int64_t StateBytes() const;  // model + optimizer bytes this rank holds

  int rank() const { return comm->rank(); }
  // Gathers one JSON value per rank on every rank (phase "report", `timeout`).
  Result<std::vector<nlohmann::json>> AllGatherJson(const nlohmann::json& mine);
};

// Starts MPI, checks the world size against `layout_spec`, builds the rank's
// state for `model`. With `naive_fc1` the local memory still holds the right
// values but SwiGLU fc1 is registered as one plain axis-0 slice (the naive
// concatenation bug): loading such a checkpoint at another TP gives wrong values.
// The optimizer state is built over the true (not the naive) model layout.
Result<std::unique_ptr<GptJob>> StartGptJob(const std::string& layout_spec, const reshard::GptConfig& model,
                                            const std::string& model_name, bool naive_fc1,
                                            const OptimizerSpec& optimizer = {});

// The "gpt" metadata of a checkpoint: GptConfigToJson plus the MoE fields.
nlohmann::json ModelToJson(const reshard::GptConfig& cfg);

// The manifest of `iteration` (-1: the latest), else of the newest older
// committed iteration whose manifest reads: the model config and optimizer
// format are the same in every iteration of a run, so a damaged latest
// manifest or a tracker naming a missing iteration does not stop a load
// (--fallback then decides what loads). The first error if none reads.
Result<Manifest> ReadManifestOrOlder(const std::string& root, int64_t iteration);

// Resolves --model: a preset name, else the "gpt" config in the checkpoint's
// metadata (ReadManifestOrOlder), refused when it describes more parameter
// bytes than the checkpoint holds (untrusted metadata).
Result<reshard::GptConfig> ResolveModel(const std::string& model, const std::string& root, int64_t iteration,
                                        std::string* name);

// The optimizer part of `ckpt save`: "none", "model" or "bucket".
Result<OptimizerSpec> SaveOptimizerSpec(const std::string& flag, int64_t bucket_elems);
// The optimizer part of `ckpt load` given the checkpoint's metadata: "auto"
// loads what was saved (nothing if nothing was), "none" skips it, "model" /
// "bucket" must match what was saved (else FailedPrecondition saying which
// flag would load it). bucket_elems < 0: as saved (0 if not recorded).
Result<OptimizerSpec> LoadOptimizerSpec(const std::string& flag, int64_t bucket_elems,
                                        const nlohmann::json& metadata);
// The manifest metadata recording `spec` ({"format", "bucket_elems", "states"}).
nlohmann::json OptimizerMetadata(const OptimizerSpec& spec);

// Bucket space only: loads this rank's bucket-layout descriptors (a few hundred
// bytes each, before any tensor) and compares them with its own; all ranks
// agree, so every rank returns the first failing rank's explanation.
Status PrecheckBucketLayout(GptJob& job, const std::string& root, int64_t iteration);

// The iteration a load of `iteration` (-1: latest) should ask for: itself
// when >= 0, else LatestIteration (the newest committed iteration at or above
// the tracker's, which finds a save whose tracker update failed), else -1
// (the loader then reports the tracker's problem, or falls back).
int64_t ResolveLoadIteration(const std::string& root, int64_t iteration);

// The exit code of a failed load, the same on every rank: kExitCheckFailed
// when the first failing rank's failure is damage (kCorruption), else
// kExitError. The loader's Status differs by rank (the failing rank holds its
// own error, the others an Aborted "failed on rank N: <its error>"), so the
// ranks compare what they hold in one more round (phase "exit code",
// `timeout`). Without it - world 1, a Timeout (no agreement was reached) or
// the round failing - this rank's own view decides.
int AgreedLoadExitCode(Comm* comm, const Status& st, Millis timeout);

// Resident-set figures of this process from /proc/self/status, in bytes (-1 if unknown).
struct MemoryProbe {
  // Resets the peak (VmHWM) to the current RSS via /proc/self/clear_refs; false if not allowed.
  bool ResetPeak();
  int64_t Rss() const;
  int64_t Peak() const;
};

// Prints on rank 0 only.
void Print0(const GptJob& job, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ckpt::cli
