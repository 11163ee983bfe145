// A GPT job rank for `ckpt save` / `ckpt load` / `ckpt faults`: MPI start-up, the rank's
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

#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/protocol/checkpoint.h"
#include "reshard/parallel_state.h"
#include "reshard/dist_optimizer.h"
#include "reshard/megatron_gpt.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/dist_optimizer_state.h"
#include "ckpt/workload/job_setup.h"

namespace ckpt::workload {

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
// state for `model` (registered with the true GptShards descriptors) and,
// when asked, its distributed-optimizer state. Refuses (kInvalidArgument) a
// state this rank cannot hold (e.g. a simulation-only preset) before allocating it.
Result<std::unique_ptr<GptJob>> StartGptJob(const std::string& layout_spec, const reshard::GptConfig& model,
                                            const std::string& model_name, const OptimizerSpec& optimizer = {});

// --model: ResolveModel (ckpt/workload/job_setup.h).

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
// dp_reshardable only: loads the checkpoint's param-layout objects (every
// buffer's, a few KB) and hands them to the job's optimizer state
// (DistOptimizerState::UseSavedDpLayouts), so that a load at another EP,
// DP or bucket size reads each fragment from the saved bucket holding it. All
// ranks agree: each returns the first failing rank's error.
Status PrepareDpReshardableLoad(GptJob& job, const std::string& root, int64_t iteration);

// The iteration a load of `iteration` (-1: latest) should ask for: itself
// when >= 0, else LatestIteration (the newest committed iteration at or above
// the tracker's, which finds a save whose tracker update failed), else -1
// (the loader then reports the tracker's problem, or falls back).
int64_t ResolveLoadIteration(const std::string& root, int64_t iteration);

// One rank's memory during a load (bytes; -1: unknown).
struct LoadMemory {
  int64_t rss_before = -1, peak = -1, state = 0, largest_shard = 0;
  bool peak_reset = false;
  int64_t extra() const { return peak >= 0 && rss_before >= 0 ? peak - rss_before : -1; }
};
// The largest tensor of `sd`, and the largest (raw) chunk of `m`, in bytes.
int64_t LargestShard(const ShardedStateDict& sd);
int64_t LargestChunk(const Manifest& m);

// Resident-set figures of this process from /proc/self/status, in bytes (-1 if unknown).
struct MemoryProbe {
  // Resets the peak (VmHWM) to the current RSS via /proc/self/clear_refs; false if not allowed.
  bool ResetPeak();
  int64_t Rss() const;
  int64_t Peak() const;
};

}  // namespace ckpt::workload
