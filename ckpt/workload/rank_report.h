// Per-rank reports of a job: every rank's JSON figures gathered on every rank,
// parsed with checked errors (a peer's malformed report is a Status naming
// the rank, never an exception), and the usual reductions over them.
// Collective over `comm` (all ranks call with the same phase); not thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/comm.h"
#include "ckpt/protocol/checkpoint.h"

namespace ckpt::workload {

// Every rank's `mine` (index = rank), on every rank.
Result<std::vector<nlohmann::json>> AllGatherJson(Comm& comm, const nlohmann::json& mine, Millis timeout,
                                                  Phase phase);

// Sum / max / min of the integer field `key` over the reports (0 / 0 / 0
// for none); kInvalidArgument naming the rank when one lacks it.
Result<int64_t> SumOf(const std::vector<nlohmann::json>& all, const std::string& key);
Result<int64_t> MaxOf(const std::vector<nlohmann::json>& all, const std::string& key);
Result<int64_t> MinOf(const std::vector<nlohmann::json>& all, const std::string& key);

// The job-wide figures of a `ckpt load` from every rank's report (its
// LoadStatsJson, ckpt/protocol/stats_json.h - bytes_read, bytes_received,
// share_rounds, elements, zero_filled - plus bad, opt_bad, opt_elements,
// first_bad, rss_before, peak, extra, state, largest_shard, peak_reset): sums
// (as bytes, received, elements, zero_filled, bad, opt_bad, opt_elements),
// maxima (max_rank_bytes, rounds, extra, state, largest_shard), peak_reset of all
// ranks, the first rank's first_bad that is not empty, and per_rank figures
// (memory: rss_before, peak, extra, state; reads: bytes read from disk,
// bytes received from a rank that read them for it).
// kInvalidArgument naming the rank when a report lacks a key.
Result<nlohmann::json> ReduceLoadReports(const std::vector<nlohmann::json>& all);

// The job-wide figures of a `ckpt save` from every rank's report (its
// SaveStatsJson: bytes_written, phase_seconds = {phase: seconds}): per_rank
// [{rank, bytes, plan_s, write_s, wait_s (vote + commit: waiting for the
// others)}] and the straggler: the rank whose own work (the "write" phase:
// its shards written and fsynced) took longest, with write_s, the median
// write_s over all ranks, their ratio, and the rank that waited longest.
// A slow writer shows on the other ranks as waiting, so only per-rank phase
// times can name it (rank 0's own timings show the wait, not the writer).
// kInvalidArgument naming the rank when a report lacks a key.
Result<nlohmann::json> ReduceSaveReports(const std::vector<nlohmann::json>& all);

// The job-wide figures of a tiered restore (`ckpt train --local-dir`) from every
// rank's report (keys: seconds, fetched_bytes, phases = {phase: seconds}):
// seconds (the slowest rank's: the job waits for it), slowest_rank {rank,
// phases_seconds}, per_rank [{rank, seconds, cpu_seconds (-1 if absent), phases_seconds}],
// fetched_bytes_all_ranks, ranks_fetched_from_peers.
// kInvalidArgument naming the rank when a report lacks a key.
Result<nlohmann::json> ReduceRestoreReports(const std::vector<nlohmann::json>& all);
// `phases` plus where a load's time went (LoadStats: load_read, load_hash,
// load_decode, load_copy, summed over its load_threads read workers): one
// rank's restore phases.
nlohmann::json WithLoadPhases(nlohmann::json phases, const LoadStats& ls);
// Seconds since this process started (Linux /proc, 10 ms resolution; -1 if
// unknown): a restart's process start, MPI init and state set-up, measured
// from inside it.
double ProcessAgeSeconds();
// One rank's restore, timed from its construction: Report() gives {seconds
// (wall), cpu_seconds (this process, all threads: wall well above it means the
// rank waited - for peers or for a core), fetched_bytes, phases} with
// phases.before_restore = ProcessAgeSeconds() at the start.
class RestoreTimer {
 public:
  RestoreTimer();
  double Since() const;  // wall seconds since the start
  nlohmann::json Report(nlohmann::json phases, int64_t fetched_bytes) const;

 private:
  std::chrono::steady_clock::time_point wall_;
  double cpu_ = 0, age_ = -1;
};

}  // namespace ckpt::workload
