// RunTrainLoop and the run summary: see train_loop.h.
#include "ckpt/workload/train_loop.h"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "ckpt/base/clock.h"

namespace ckpt::workload {

Result<std::set<int64_t>> ParseSaveAt(const std::string& list) {
  std::set<int64_t> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0)
      return Status::InvalidArgument("--save-at: '" + item + "' is not an iteration");
    out.insert(v);
  }
  return out;
}

Result<NonFinitePolicy> ParseNonFinitePolicy(const std::string& s) {
  if (s == "refuse") return NonFinitePolicy::kRefuse;
  if (s == "warn") return NonFinitePolicy::kWarn;
  if (s == "allow") return NonFinitePolicy::kAllow;
  return Status::InvalidArgument("--nonfinite must be refuse, warn or allow, not '" + s + "'");
}

namespace {

bool SaveDue(const TrainLoopOptions& o, int64_t it) {
  return it == o.steps || o.save_at.count(it) || (o.save_every > 0 && it % o.save_every == 0);
}

void Log(const std::function<void(const std::string&)>& log, const std::string& line) {
  if (log && !line.empty()) log(line);
}

}  // namespace

Result<TrainLoopResult> RunTrainLoop(TrainWorkload& w, Collectives& coll, TrainCheckpointer& ckpt,
                                     const TrainLoopOptions& opts, const std::function<void(const std::string&)>& log) {
  using Clock = std::chrono::steady_clock;
  TrainLoopResult r;
  r.start_iteration = w.iteration();
  while (w.iteration() < opts.steps) {
    const auto t0 = Clock::now();
    CKPT_RETURN_IF_ERROR(w.Step(coll));
    r.step_seconds += Since(t0);
    ckpt.OnStep();
    const int64_t it = w.iteration();
    if (opts.log_interval > 0 && it % opts.log_interval == 0) Log(log, "train: iteration " + std::to_string(it) + "\n");
    bool stop = false;
    if (opts.stop_requested) {
      CKPT_ASSIGN_OR_RETURN(stop, opts.stop_requested());
    }
    if (!stop && !SaveDue(opts, it)) continue;
    CKPT_ASSIGN_OR_RETURN(std::string saved, ckpt.Save(w));
    Log(log, saved);
    if (stop) {  // every rank agreed: this save is the last one, then leave together
      r.stopped_by_signal = true;
      Log(log, "train: exit signal received: saved iteration " + std::to_string(it) + ", exiting\n");
      break;
    }
    if (opts.stop_after_first_save) {
      r.stopped_early = true;
      break;
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::string joined, ckpt.Finish(w.iteration()));  // never end with a save in flight
  Log(log, joined);
  return r;
}

nlohmann::json TrainSummary(const TrainWorkload& w, const TrainLoopResult& r) {
  const int64_t consumed = w.consumed_samples();
  const int64_t steps = w.iteration() - r.start_iteration;
  return {{"op", "train"},
          {"start_iteration", r.start_iteration},
          {"iteration", w.iteration()},
          {"consumed_samples", consumed},
          {"samples_exactly_once", w.ledger() == SampleLedger::Range(0, consumed)},
          {"consumed_matches_iterations", consumed == w.iteration() * w.config().global_batch},
          {"rng_offset", w.rng().offset},
          {"lr", w.lr().Lr()},
          {"step_seconds_mean", steps > 0 ? r.step_seconds / double(steps) : 0.0},
          {"exit_signal", r.stopped_by_signal}};
}

std::string TrainSummaryLine(const nlohmann::json& s) {
  char line[512];
  const long long consumed = s.value("consumed_samples", int64_t(0));
  std::snprintf(line, sizeof line,
                "train: %s %s iterations %lld -> %lld; samples consumed %lld (each of [0, %lld) exactly once: %s; "
                "= iterations x global batch: %s); %.1f ms/step\n",
                s.value("mode", std::string()).c_str(), s.value("layout", std::string()).c_str(),
                static_cast<long long>(s.value("start_iteration", int64_t(0))),
                static_cast<long long>(s.value("iteration", int64_t(0))), consumed, consumed,
                s.value("samples_exactly_once", false) ? "yes" : "NO",
                s.value("consumed_matches_iterations", false) ? "yes" : "NO",
                1e3 * s.value("step_seconds_mean", 0.0));
  return line;
}

}  // namespace ckpt::workload
