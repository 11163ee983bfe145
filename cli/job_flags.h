// `ckpt save` and `ckpt load` (cmd_save.cc, cmd_load.cc): their shared options
// (parsed in cli/flags_data.cc), entry points, and how a failing rank reports.
#pragma once

#include <memory>
#include <string>

#include "ckpt/base/comm.h"
#include "ckpt/protocol/checkpoint.h"
#include "cli/gpt_job.h"

namespace ckpt::cli {

struct JobFlags {
  std::string root, model, layout = "tp=1", compression = "none", optimizer, share_reads = "dp",
              share_transport = "mpi", strict = "all", faults, hash = "sha256";
  int64_t iteration = -1;
  int64_t share_round_mb = 64;
  int64_t bucket_elems = -1;
  int64_t chunk_kb = 4096;
  int encode_threads = kAutoThreads;  // DefaultWorkerThreads(job comm)
  int load_threads = kAutoThreads;    // ckpt load --threads
  int64_t timeout_ms = 60000;
  bool naive_layer_offset = false;  // ckpt-lab --naive-layer-offset (negative control, see ApplyNaiveFc1)
  bool json = false, naive_fc1 = false, no_balance = false, fallback = false, no_check = false, allow_older = false,
       direct_io = false, buffered_io = false;  // --direct-io / --buffered-io (exclusive)
  bool no_progress = false;  // --no-progress (cli/progress.h)
};

// The command's outcome on this rank (main maps it to the exit code).
Status RunSave(const JobFlags& f);
Status RunLoad(const JobFlags& f);

// Prints "ckpt <cmd>: rank <r>: <status>" ("ckpt <cmd>: <status>" for a
// rank < 0: not known yet) and returns st.
Status Fail(const char* cmd, int rank, const Status& st);

// Rank 0 of a load prints what it passed over (stderr: the iterations
// skipped by --fallback or a lagging tracker, and why) and the keys the strict
// mode let through unloaded (stdout).
void PrintLoadWarnings(const GptJob& j, const JobFlags& f, const LoadStats& r);

// The communicator whose ranks share load reads (load_share.h): "dp" = ranks
// with the same TP and PP coordinates, "job" = every rank, "none" = nullptr.
// Collective over the job; transport "nccl" moves the bytes over NCCL.
Result<std::unique_ptr<Comm>> ShareComm(GptJob& j, const std::string& mode, const std::string& transport,
                                        Millis timeout);

// --naive-fc1 / --naive-layer-offset (ckpt-lab only; negative controls of
// harness/negative_controls.h through the harness seam, cli/harness_seam.h):
// SwiGLU fc1 registered as one plain axis-0 slice, or layers keyed by a
// contiguous stage offset that ignores the VPP interleave, so a load at
// another layout gives wrong values. OK when neither is set.
Status ApplyNaiveFc1(const JobFlags& f, GptJob& j);

}  // namespace ckpt::cli
