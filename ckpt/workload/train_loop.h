// The training loop of `ckpt train` as library code: step the workload to a
// target iteration, checkpoint on a schedule (through a TrainCheckpointer:
// synchronous or asynchronous, the caller's choice), and summarize the run
// (samples consumed exactly once, LR, RNG offset, step time).
//
// Collective over the job: every rank runs the loop with the same options.
// Failure: the first failing step or save is returned; the workload is then
// mid-step or mid-save and the job should stop. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/collectives.h"
#include "ckpt/workload/train_workload.h"

namespace ckpt::workload {

// Where the loop's checkpoints go. Implementations: a synchronous
// SaveCheckpoint, an AsyncSaver (cli/train_saver.h), a test's recorder.
class TrainCheckpointer {
 public:
  virtual ~TrainCheckpointer() = default;
  // Saves (or starts saving) the workload's current iteration; a log line.
  virtual Result<std::string> Save(TrainWorkload& w) = 0;
  // Joins a save in flight (if any); a log line ("" if nothing was joined).
  virtual Result<std::string> Finish(int64_t iteration_now) = 0;
  // The training thread finished a step (an async saver times its overlap).
  virtual void OnStep() {}
};

struct TrainLoopOptions {
  int64_t steps = 10;          // train until this iteration (total, as --train-iters)
  int64_t save_every = 0;      // save every K iterations (0: never), and always at `steps`
  std::set<int64_t> save_at = {};  // ... and at these iterations
  bool stop_after_first_save = false;  // return once the first save has committed (joined)
  int64_t log_interval = 0;    // log "train: iteration N" every K iterations (0: never)
  // Asked after every step, on every rank (collective: it must return the
  // same on all ranks, e.g. ExitSignal::AnyRankReceived). true: save this
  // iteration, join the save and return with stopped_by_signal (the
  // preemption exit). An error fails the loop.
  std::function<Result<bool>()> stop_requested = nullptr;
};

struct TrainLoopResult {
  int64_t start_iteration = 0;
  double step_seconds = 0;   // total time in Step
  bool stopped_early = false;  // stop_after_first_save fired
  bool stopped_by_signal = false;  // stop_requested returned true: saved and left at that iteration
};

// "5,10,15" -> {5, 10, 15}; kInvalidArgument naming the bad item.
Result<std::set<int64_t>> ParseSaveAt(const std::string& list);
// "refuse", "warn" or "allow".
Result<NonFinitePolicy> ParseNonFinitePolicy(const std::string& name);

// Steps `w` (already initialized or resumed) to opts.steps; saves through
// `ckpt` when due; `log` receives each save's line (and the join's); the
// last save is joined before the loop returns.
Result<TrainLoopResult> RunTrainLoop(TrainWorkload& w, Collectives& coll, TrainCheckpointer& ckpt,
                                     const TrainLoopOptions& opts, const std::function<void(const std::string&)>& log);

// The summary of a run: op, iterations, samples consumed (and whether each of
// [0, consumed) was consumed exactly once, and consumed = iterations x
// global batch), rng offset, lr, mean step seconds.
nlohmann::json TrainSummary(const TrainWorkload& w, const TrainLoopResult& r);
// The one-line text form of TrainSummary (`layout` and `mode` as given).
std::string TrainSummaryLine(const nlohmann::json& summary);

}  // namespace ckpt::workload
