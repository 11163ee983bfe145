#include "cli/job_flags.h"

#include <cstdio>

#include "ckpt/gpu/gpu.h"
#include "cli/commands.h"
#include "cli/harness_seam.h"

namespace ckpt::cli {

void PrintLoadWarnings(const GptJob& j, const JobFlags& f, const LoadStats& r) {
  if (j.rank() != 0) return;
  for (const std::string& why : r.skipped)
    std::fprintf(stderr, "ckpt load: warning: loaded iteration %lld, not %s: skipped %s\n",
                 static_cast<long long>(r.iteration),
                 f.iteration < 0 ? "the latest" : std::to_string(f.iteration).c_str(), why.c_str());
  for (const auto* keys : {&r.missing_keys, &r.unexpected_keys})
    for (const auto& k : *keys)
      std::printf("load  %s key (strict %s): %s\n", keys == &r.missing_keys ? "missing" : "unexpected",
                  f.strict.c_str(), k.c_str());
  std::fflush(stdout);
}

Status Fail(const char* cmd, int rank, const Status& st) {
  if (rank < 0)  // before the job knows its rank: say none rather than "rank -1"
    std::fprintf(stderr, "ckpt %s: %s\n", cmd, st.ToString().c_str());
  else
    std::fprintf(stderr, "ckpt %s: rank %d: %s\n", cmd, rank, st.ToString().c_str());
  if (st.code() == Code::kTimeout) NoteDeadlineFailed();  // a peer may hang: main ends the job
  return st;
}

// The communicator whose ranks share load reads (load_share.h): "dp" = ranks
// with the same TP and PP coordinates (the DP x CP group of MCore's fully
// parallel load), "job" = every rank, "none" = each rank reads what it needs.
// Collective over the job (MPI_Comm_split) for dp. `transport` mpi keeps the
// bytes on MPI; nccl moves them over NCCL (ckpt/gpu/gpu.h).
Result<std::unique_ptr<Comm>> ShareComm(GptJob& j, const std::string& mode, const std::string& transport,
                                        Millis timeout) {
  if (transport != "mpi" && transport != "nccl")
    return Status::InvalidArgument("--share-transport must be mpi or nccl, not '" + transport + "'");
  std::unique_ptr<MpiComm> group;
  if (mode == "none") return std::unique_ptr<Comm>();
  if (mode == "job") {
    CKPT_ASSIGN_OR_RETURN(group, j.comm->Split(0, j.rank()));
  } else if (mode == "dp") {
    CKPT_ASSIGN_OR_RETURN(auto dp_cp, GroupRanks(j.layout, j.rank(), Group::kDpCp));  // same TP and PP
    CKPT_ASSIGN_OR_RETURN(group, j.comm->Split(dp_cp.front(), j.rank()));
  } else {
    return Status::InvalidArgument("--share-reads must be none, dp or job, not '" + mode + "'");
  }
  // A group of one shares nothing (LoadOptions::share_comm): no device needed.
  if (transport == "nccl" && group->size() > 1) return gpu::MakeNcclComm(std::move(group), timeout);
  return std::unique_ptr<Comm>(std::move(group));
}

Status ApplyNaiveFc1(const JobFlags& f, GptJob& j) {
  if (!f.naive_fc1 && !f.naive_layer_offset) return Status::Ok();
  if (!Harness().naive_shards) return NoHarness("--naive-fc1/--naive-layer-offset");
  Status st = Harness().naive_shards(f, j);
  return st.ok() ? st : st.WithContext("rank " + std::to_string(j.rank()));
}

}  // namespace ckpt::cli
