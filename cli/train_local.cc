// TrainSaver's Save/Finish, and with the local tier (train_saver.h, ckpt/protocol/local_tier.h):
// local saves every --local-every iterations, global saves drained from the
// local copy, and --kill-at (a whole-job SIGKILL after an iteration's saves).
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "ckpt/mpi/launcher_term.h"
#include "ckpt/protocol/stats_json.h"
#include "cli/train_saver.h"

namespace ckpt::cli {

// The loop's checkpointer entry points (here: they choose between the tiers).
Result<std::string> TrainSaver::Save(workload::TrainWorkload& w) {
  const TermDeferral saving;  // SIGTERM between saves is not deferred, during one it is (launcher_term.h)
  if (local_) return SaveLocal(w);
  SaveOptions o = base_;
  o.iteration = w.iteration();
  return Save(w.SaveDict(parts_), std::move(o), w.iteration());
}

Result<std::string> TrainSaver::Finish(int64_t iteration_now) {
  const TermDeferral joining;
  if (local_) {
    CKPT_ASSIGN_OR_RETURN(std::string log, JoinLocal(iteration_now));
    CKPT_ASSIGN_OR_RETURN(std::string drained, JoinDrain(iteration_now));
    return log + drained;
  }
  if (!saver_ || !saver_->in_flight()) return std::string();
  Result<SaveStats> joined = saver_->Wait();
  if (async_progress_) async_progress_->Finish();  // its final progress line
  async_progress_.reset();
  CKPT_ASSIGN_OR_RETURN(SaveStats st, std::move(joined));
  return Joined(st, iteration_now);
}

Status TrainSaver::PrepareLocal() {
  LocalTierOptions o;
  o.dir = flags_.local_dir;
  o.ranks_per_node = flags_.ranks_per_node > 0 ? flags_.ranks_per_node : job_->local_size();
  o.replicas = flags_.replicas;
  o.env = faulted_.env ? faulted_.env.get() : DefaultEnv();
  o.hook = faulted_.hook;
  o.comm = job_;
  o.timeout = base_.timeout;
  o.write = base_.write;
  o.layout = base_.layout;
  if (flags_.local_every < 0) return Status::InvalidArgument("--local-every must be >= 0");
  CKPT_RETURN_IF_ERROR(o.Validate(job_->size()));
  local_ = std::move(o);
  return Status::Ok();
}

Status TrainSaver::KillIfAsked(int64_t it) {
  if (flags_.kill_at != it && flags_.stall_at != it) return Status::Ok();
  CKPT_RETURN_IF_ERROR(JoinLocal(it).status());  // this iteration's background local save and drain
  CKPT_RETURN_IF_ERROR(JoinDrain(it).status());  // the global save of this iteration (if any) too
  CKPT_RETURN_IF_ERROR(job_->Barrier(base_.timeout, Phase::kKill));  // every rank is past this iteration's saves
  if (flags_.kill_at == it) {
    if (job_->rank() == 0)
      std::fprintf(stdout, "train: killing the job after iteration %lld (SIGKILL)\n", static_cast<long long>(it));
    std::fflush(stdout);
    std::raise(SIGKILL);
  }
  // --stall-at: wait here (bounded) for the test to kill a node.
  if (job_->rank() == 0)
    std::fprintf(stdout, "train: stalled after iteration %lld\n", static_cast<long long>(it)), std::fflush(stdout);
  // A launcher's SIGTERM (mpirun ending the job after the node loss) ends the
  // stall: it is a test hook, not a save worth deferring the signal for.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (!LauncherTerminating() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (LauncherTerminating()) return Status::Aborted("--stall-at " + std::to_string(it) + ": ended by SIGTERM");
  return Status::Timeout("--stall-at " + std::to_string(it) + ": nobody killed the job within 300 s");
}

Result<std::string> TrainSaver::SaveLocal(workload::TrainWorkload& w) {
  const int64_t it = w.iteration();
  const bool global = !global_due_ || global_due_(it);
  std::string log;
  const bool due = (flags_.local_every > 0 && it % flags_.local_every == 0) || global;  // a drain reads this copy
  if (due && saver_) {
    CKPT_ASSIGN_OR_RETURN(log, SaveLocalAsync(w, global));
    CKPT_RETURN_IF_ERROR(KillIfAsked(it));
    return log;
  }
  if (due) {
    local_->pinned = drain_.valid() ? rows_[size_t(drain_row_)]["iteration"].get<int64_t>() : -1;
    CKPT_ASSIGN_OR_RETURN(LocalSaveStats st, LocalSave(w.SaveDict(parts_), it, *local_));
    nlohmann::json row = LocalSaveStatsJson(st);
    row.update({{"tier", "local"}, {"iteration", it}, {"blocking_seconds", st.seconds},
                {"state_bytes", w.SaveDict(parts_).TotalBytes()}});
    rows_.push_back(std::move(row));
    char line[256];
    std::snprintf(line, sizeof line,
                  "train: local save of iteration %lld committed on %d replica(s): blocked %.3f ms (write %.3f ms), "
                  "sent %lld bytes\n",
                  static_cast<long long>(it), local_->replicas, 1e3 * st.seconds, 1e3 * st.write_seconds,
                  static_cast<long long>(st.sent_bytes));
    log += line;
  }
  if (global) {
    CKPT_ASSIGN_OR_RETURN(std::string d, DrainGlobal(w));
    log += d;
  }
  CKPT_RETURN_IF_ERROR(KillIfAsked(it));
  return log;
}

std::function<Result<SaveStats>()> TrainSaver::MakeDrain(workload::TrainWorkload& w, Comm* comm) {
  const int64_t it = w.iteration();
  // The drain's own buffers, shaped like the training state (allocated once).
  drain_sd_ = DrainBuffers(w.SaveDict(parts_), &drain_buf_);
  SaveOptions o = base_;
  o.iteration = it;
  if (faulted_.env) o.env = faulted_.env.get(), o.hook = faulted_.hook;
  o.comm = comm;
  LoadOptions from;
  from.root = JoinPath(local_->NodeDir(local_->node_of(job_->rank())), "rank_" + std::to_string(job_->rank()));
  from.iteration = it;
  from.env = local_->env;
  return [this, o, from, it]() -> Result<SaveStats> {
    return DrainLocalCopy(drain_sd_, from, o,
                          "global drain of iteration " + std::to_string(it) + " from the local tier");
  };
}

Result<std::string> TrainSaver::DrainGlobal(workload::TrainWorkload& w) {
  CKPT_ASSIGN_OR_RETURN(std::string log, JoinDrain(w.iteration()));
  const int64_t it = w.iteration();
  auto drain = MakeDrain(w, saver_ ? static_cast<Comm*>(save_comm_.get()) : job_);
  rows_.push_back(
      {{"tier", "global"}, {"iteration", it}, {"drained_from", "local"}, {"mode", saver_ ? "background" : "sync"}});
  drain_row_ = int64_t(rows_.size()) - 1;
  if (saver_) {
    drain_ = std::async(std::launch::async, drain);
    return log + "train: global save of iteration " + std::to_string(it) + " draining from the local tier\n";
  }
  drain_ = std::async(std::launch::deferred, drain);
  CKPT_ASSIGN_OR_RETURN(std::string joined, JoinDrain(it));
  return log + joined;
}

// Retention after a committed global save (rank 0), one line for the log.
std::string TrainSaver::Retain(const SaveStats& st) {
  if (!flags_.retention.enabled() || job_->rank() != 0) return "";
  const std::string it = std::to_string(st.iteration);
  if (!st.warning.ok()) return "train: retention skipped after iteration " + it + ": " + st.warning.ToString() + "\n";
  auto r = ApplyRetention(DefaultEnv(), base_.root, st.iteration, flags_.retention);
  if (!r.ok()) return "train: retention after iteration " + it + " failed: " + r.status().ToString() + "\n";
  auto list = [](const auto& its) {
    std::string out;
    for (size_t i = 0; i < its.size(); ++i) out += (i ? "," : "") + std::to_string(its[i]);
    return "[" + out + "]";
  };
  std::string line = "train: retention after iteration " + it + ": deleted " + list(r->deleted);
  if (!r->unlinked.empty())  // say so: these were links, their targets are untouched
    line += " (links removed, targets kept: " + list(r->unlinked) + ")";
  return line + ", kept " + list(r->kept) + "\n";
}

}  // namespace ckpt::cli
