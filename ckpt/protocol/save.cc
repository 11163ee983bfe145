// SaveCheckpoint: the multi-rank commit protocol (see checkpoint.h), built
// from the blocks in commit.h plus the collectives that tie the ranks together.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <thread>

#include "ckpt/base/clock.h"
#include "ckpt/base/status_wire.h"
#include "ckpt/base/timeout.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/commit.h"
#include "ckpt/protocol/save_plan.h"
#include "ckpt/protocol/save_progress.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

// Messages between ranks are outcomes (status_wire.h): a payload, or a
// failure with its typed fields.
std::string OkMsg(const std::string& payload) { return EncodeOutcome(payload); }
std::string ErrMsg(const Status& s) { return EncodeFailure(s); }
// This rank aborts because another failed: Aborted, naming the cause as
// "<CodeName>: <message>" (an abort's text without stacking "Aborted: "),
// keeping the cause's origin rank, phase and code (Status::cause()). A deadline failure stays
// kTimeout (as GatherDecide relays one: the job may have a hung rank) and an
// unknown outcome stays one (every rank must say so: it may be committed).
Status RemoteFailure(const Status& cause) {
  if (cause.code() == Code::kOutcomeUnknown || cause.code() == Code::kTimeout) return cause;
  std::string text = cause.code() == Code::kAborted ? cause.message() : cause.ToString();
  return Status(Code::kAborted, std::move(text), cause.origin_rank(), cause.phase()).WithCause(cause.cause());
}

// A post-commit warning: "<what>: <cause>", with the cause's code.
Status Warning(std::string_view what, const Status& cause) {
  return {cause.code(), std::string(what) + ": " + cause.ToString()};
}

class SaveRun {
 public:
  SaveRun(const ShardedStateDict& state, const SaveOptions& opts)
      : state_(state), opts_(opts),
        comm_(opts.comm ? opts.comm : &local_), rank_(comm_->rank()) {}

  Result<SaveStats> Run();

 private:
  Status Step(std::string_view step) { return opts_.hook ? opts_.hook(step, rank_) : Status::Ok(); }
  std::string Where(Phase phase) const {
    return "save iter " + std::to_string(opts_.iteration) + ", rank " + std::to_string(rank_) +
           ", phase '" + std::string(PhaseName(phase)) + "'";
  }
  // `st` as this rank's own failure in `phase`: context and typed origin.
  Status Mine(const Status& st, Phase phase) const { return st.WithContext(Where(phase)).At(rank_, phase); }
  void Timed(Phase phase, Clock::time_point t0, Clock::time_point t1 = Clock::now()) {
    stats_.phase_seconds[std::string(PhaseName(phase))] += SecondsBetween(t0, t1);
  }

  // Opens the root (every rank: each writes its file through the root's
  // Env); storage_ and env_ from then on. A failure is this rank's "begin".
  Status OpenRoot();
  Result<std::string> Begin(const Status& opened);  // rank 0 prepares; all learn the tmp dir
  // Indices of my tensors to write. `ready` is this rank's failure so far
  // (validate, the "plan" step): it travels in the plan gather, so every rank
  // fails at once naming this one instead of waiting a deadline for it.
  Result<std::vector<int>> PlanMyWrites(const Status& ready);
  std::string DecidePlan(const std::vector<std::string>& held);  // rank 0
  Result<Manifest> WriteMine(Env* env, const std::vector<int>& mine);
  Status CheckNonFinite(const TensorEntry& t);
  // Writes my share on a worker thread while this thread takes part in the
  // vote rounds (save_progress.h); rank 0 commits and everyone learns the
  // outcome and any post-commit warning (stats_.warning). The worker is
  // joined before this returns (cancelled first if the save failed).
  Result<std::string> WriteAndVote(const std::vector<int>& mine);
  std::string DecideRound(VoteTally& tally, const std::vector<std::string>& msgs);  // rank 0
  // After a failed round: a committed save (root), a wait on disk for root's
  // outcome (my vote was sent), or the failure.
  Result<std::string> RoundFailed(const Status& st, bool my_vote_ok);
  // Non-root, after its wait for rank 0's outcome timed out. Rank 0 answers
  // the rounds while it writes its share, so its silence was the commit
  // (manifest, rename, fsyncs) or a hang: poll the disk until the iteration
  // is visible (-> kOutcomeUnknown: rank 0 may have stopped before the root
  // fsync that makes the rename durable, so "committed" would be a guess),
  // the tmp dir is gone, or rank 0's files did not change for kRootCommitLook
  // from now (a change gives it a whole deadline more) (-> `timed_out`). The
  // sizes are taken now, not at my vote: rank 0 finishing its share during the
  // failed round is not progress of the commit.
  Result<std::string> AwaitOutcomeOnDisk(const Status& timed_out);
  uint64_t RootFileBytes();
  std::string DecideCommit(const std::vector<std::string>& votes);  // rank 0
  Result<Manifest> MergeVotes(const std::vector<std::string>& votes);
  Status Commit(const std::vector<std::string>& votes);
  // Rank 0, after a failure before the directory rename: the tmp dir is
  // never visible, drop it.
  void Abandon() {
    if (rank_ == 0 && !published_ && staged_) staged_->Abandon().IgnoreError();
  }

  const ShardedStateDict& state_;
  const SaveOptions& opts_;
  std::unique_ptr<Storage> owned_;  // the root, when opened here (not SaveOptions::storage)
  Storage* storage_ = nullptr;
  std::string url_;  // the root as named in messages
  Env* env_ = nullptr;  // storage_->env() once the root is open (a failed open ends the save at "plan")
  LocalComm local_;
  Comm* comm_;
  int rank_;
  std::string tmp_dir_;
  std::unique_ptr<StagedSave> staged_;  // rank 0: the tmp dir and its lease, held for the whole save
  bool published_ = false;  // rank 0: the directory rename happened
  bool committed_ = false;  // rank 0: ... and was made durable
  Status vote_step_;        // my write and "vote" step (a failure is mine, reported first)
  Status stalled_;          // rank 0: the save failed because ranks made no progress
  Clock::time_point t_decide_;  // rank 0: when every vote was in
  SaveStats stats_;
};

Status SaveRun::OpenRoot() {
  url_ = opts_.root;
  if (!opts_.storage) {
    CKPT_ASSIGN_OR_RETURN(owned_, ckpt::OpenRoot(opts_.env, opts_.root));
  }
  storage_ = opts_.storage ? opts_.storage : owned_.get();
  url_ = storage_->url();
  env_ = storage_->env();
  return Status::Ok();
}

Result<std::string> SaveRun::Begin(const Status& opened) {
  std::string msg;
  if (rank_ == 0) {
    auto staged = opened.ok() ? PrepareSaveDir(storage_, opts_.iteration, opts_.hook, opts_.allow_older)
                              : Result<std::unique_ptr<StagedSave>>(opened);
    msg = staged.ok() ? OkMsg((*staged)->dir()) : ErrMsg(Mine(staged.status(), Phase::kBegin));
    if (staged.ok()) {
      staged_ = std::move(staged).value();
      tmp_dir_ = staged_->dir();  // Abandon() drops it if the broadcast fails
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::string got, comm_->Broadcast(msg, 0, opts_.timeout, Phase::kBegin));
  Result<std::string> dir = DecodeOutcome(got);
  if (!dir.ok()) return RemoteFailure(dir.status());
  return dir;
}

std::string SaveRun::DecidePlan(const std::vector<std::string>& held) {
  auto plan = [&]() -> Result<WritePlan> {
    CKPT_RETURN_IF_ERROR(RoundFailure(held, Phase::kPlan));  // the failed rank every agreement would name
    std::vector<std::vector<HeldShard>> per_rank;
    for (int r = 0; r < int(held.size()); ++r) {
      Result<std::string> msg = DecodeOutcome(held[r]);
      if (!msg.ok()) return msg.status().At(r, Phase::kPlan);  // empty (RoundFailure took it as not in)
      CKPT_ASSIGN_OR_RETURN(auto h, DecodeHeldShards(*msg));
      per_rank.push_back(std::move(h));
    }
    return PlanWrites(per_rank, opts_.balance_replicas);
  }();
  return plan.ok() ? OkMsg(EncodeWritePlan(*plan)) : ErrMsg(Mine(plan.status(), Phase::kPlan));
}

Result<std::vector<int>> SaveRun::PlanMyWrites(const Status& ready) {
  std::vector<HeldShard> held;
  for (const auto& t : state_.tensors())
    held.push_back({ShardIdentity(t.meta), t.meta.num_bytes(), t.meta.is_main_replica()});
  const std::string mine = ready.ok() ? OkMsg(EncodeHeldShards(held)) : ErrMsg(ready);
  Result<std::string> got = comm_->GatherDecide(mine, 0, opts_.timeout, Phase::kPlan, Phase::kPlan,
                                                [&](std::vector<std::string> all) { return DecidePlan(all); });
  if (!ready.ok()) return ready;  // my own failure first, whatever the others did
  CKPT_RETURN_IF_ERROR(got.status());
  Result<std::string> decided = DecodeOutcome(*got);
  if (!decided.ok()) return RemoteFailure(decided.status());
  CKPT_ASSIGN_OR_RETURN(WritePlan plan, DecodeWritePlan(*decided));
  if (plan.writes.size() != size_t(comm_->size())) return Status::Internal("write plan has wrong rank count");
  stats_.bytes_per_rank = plan.bytes_per_rank;
  return plan.writes[rank_];
}

Status SaveRun::CheckNonFinite(const TensorEntry& t) {
  if (opts_.nonfinite == NonFinitePolicy::kAllow) return Status::Ok();
  int64_t bad = FindNonFinite(t.meta.dtype, t.data.data(), t.meta.num_elements());
  if (bad < 0) return Status::Ok();
  const char* kind = std::isnan(ElementAsDouble(t.meta.dtype, t.data.data(), bad)) ? "NaN" : "Inf";
  std::string what = "rank " + std::to_string(rank_) + ": tensor '" + t.meta.key + "' holds " + kind +
                     " at local flat index " + std::to_string(bad) + ", global index " +
                     ShapeToString(GlobalIndexOf(t.meta, bad)) + " (" + t.meta.DebugString() + ")";
  if (opts_.nonfinite == NonFinitePolicy::kWarn) {
    std::fprintf(stderr, "ckpt warning: %s\n", what.c_str());
    return Status::Ok();
  }
  return Status(Code::kFailedPrecondition, "refusing to commit non-finite state: " + what, rank_,
                Phase::kNonFiniteGuard);
}

Result<Manifest> SaveRun::WriteMine(Env* env, const std::vector<int>& mine) {
  std::vector<const TensorEntry*> tensors;
  for (int i : mine) {
    CKPT_RETURN_IF_ERROR(CheckNonFinite(state_.tensors()[i]));
    tensors.push_back(&state_.tensors()[i]);
    stats_.bytes_written += state_.tensors()[i].meta.num_bytes();
  }
  std::vector<const ObjectEntry*> objects;
  for (const auto& o : state_.objects()) {
    if (!o.meta.is_main_replica()) continue;
    objects.push_back(&o);
    stats_.bytes_written += int64_t(o.bytes.size());
  }
  ShardWriteOptions write = opts_.write;
  if (write.encode_threads == kAutoThreads) write.encode_threads = DefaultWorkerThreads(comm_);
  ShardWriteStats ws;
  CKPT_ASSIGN_OR_RETURN(Manifest part,
                        WriteRankFile(env, tmp_dir_, rank_, tensors, objects, write, opts_.hook, &ws));
  stats_.direct_io = ws.direct_io;
  if (!part.files.empty()) stats_.file_bytes = int64_t(part.files[0].size);
  stats_.shards_written = int64_t(part.shards.size());
  return part;
}

// Rank 0: any failed vote aborts; else the merged, checked manifest.
Result<Manifest> SaveRun::MergeVotes(const std::vector<std::string>& votes) {
  CKPT_RETURN_IF_ERROR(RoundFailure(votes, Phase::kVote));  // a failed vote first, whoever has not voted yet
  std::vector<Manifest> parts;
  for (int r = 0; r < int(votes.size()); ++r) {
    Result<std::string> vote = DecodeOutcome(votes[r]);
    if (!vote.ok()) return vote.status().At(r, Phase::kVote);  // not voted (RoundFailure took it as not in)
    CKPT_ASSIGN_OR_RETURN(Manifest part, ParseManifest(*vote, "vote of rank " + std::to_string(r)));
    parts.push_back(std::move(part));
  }
  return MergeManifests(parts, opts_.iteration, opts_.layout, opts_.metadata);
}

// Rank 0: publish (the commit point is the durable directory rename), then
// the tracker. Whatever fails before the rename, the tmp dir (every rank's
// files) goes. A tracker failure leaves the iteration committed: a warning.
Status SaveRun::Commit(const std::vector<std::string>& votes) {
  Result<Manifest> m = MergeVotes(votes);
  Status st = m.ok() ? PublishCheckpoint(staged_.get(), *m, opts_.hook, &published_) : m.status();
  if (!st.ok() && published_)  // visible, but the commit point (root fsync) was not reached
    return Status(Code::kOutcomeUnknown, "outcome unknown: " + st.ToString(), rank_, Phase::kCommit);
  if (!st.ok()) {
    Abandon();
    return st;
  }
  committed_ = true;
  Status tracker = UpdateTracker(storage_, opts_.iteration, opts_.hook);
  if (!tracker.ok()) stats_.warning = Warning("tracker update failed", tracker);
  return Status::Ok();
}

std::string SaveRun::DecideCommit(const std::vector<std::string>& votes) {
  Status st = Commit(votes);
  return st.ok() ? OkMsg(EncodeStatus(stats_.warning)) : ErrMsg(Mine(st, Phase::kCommit));
}

uint64_t SaveRun::RootFileBytes() {
  auto info = env_->Stat(JoinPath(tmp_dir_, ShardFileName(0)));
  auto manifest = env_->Stat(JoinPath(tmp_dir_, std::string(kManifestName) + ".tmp"));
  return (info.ok() ? info->size : 0) + (manifest.ok() ? manifest->size : 0);
}

Result<std::string> SaveRun::AwaitOutcomeOnDisk(const Status& timed_out) {
  uint64_t last = RootFileBytes();
  auto last_change = Clock::now() - opts_.timeout + std::min(kRootCommitLook, opts_.timeout);
  auto committed = [&]() { return ReadManifest(storage_, opts_.iteration).ok(); };
  while (true) {
    if (committed())  // visible; whether rank 0 made it durable (root fsync) nobody told us
      return Status(Code::kOutcomeUnknown,
                    "outcome unknown: iteration " + std::to_string(opts_.iteration) + " is visible under '" +
                        url_ + "', but rank 0 did not confirm that it is durable (the root fsync after " +
                        "the rename): check it (ckpt verify / load) before relying on it or saving it again; " +
                        timed_out.message(),
                    timed_out.origin_rank(), timed_out.phase());
    auto tmp = env_->Stat(tmp_dir_);
    if (!tmp.ok() || !tmp->exists) {
      if (committed()) continue;  // renamed between the two looks
      return timed_out;
    }
    const uint64_t now_bytes = RootFileBytes();
    if (now_bytes != last) {
      last = now_bytes;
      last_change = Clock::now();
    } else if (Clock::now() - last_change >= opts_.timeout) {
      return timed_out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string SaveRun::DecideRound(VoteTally& tally, const std::vector<std::string>& msgs) {
  const auto now = Clock::now();
  tally.Add(msgs, now);
  if (tally.Decided()) {
    t_decide_ = now;
    const auto& votes = tally.votes();
    // A failed vote decides before every vote is in (MergeVotes names it: RoundFailure);
    // root's own writer may still run, so nothing is removed here (Run does, after it).
    const bool failed = std::any_of(votes.begin(), votes.end(),
                                    [](const std::string& v) { return !v.empty() && !DecodeOutcome(v).ok(); });
    return EncodeFinal(failed ? ErrMsg(Mine(MergeVotes(votes).status(), Phase::kCommit)) : DecideCommit(votes));
  }
  stalled_ = tally.Stalled(now, rank_, comm_).At(rank_, Phase::kVote);
  return stalled_.ok() ? EncodeGoOn() : EncodeFinal(ErrMsg(stalled_));
}

Result<std::string> SaveRun::RoundFailed(const Status& st, bool my_vote_ok) {
  // Root committed, but a rank did not take the outcome (gone since its vote).
  if (committed_) return OkMsg(EncodeStatus(Warning("the outcome did not reach every rank", st)));
  if (rank_ != 0 && st.code() == Code::kTimeout && my_vote_ok) return AwaitOutcomeOnDisk(st);
  return st;
}

Result<std::string> SaveRun::WriteAndVote(const std::vector<int>& mine) {
  ProgressEnv progress(env_);
  const auto t0 = Clock::now();
  Clock::time_point t_written;  // set by the worker, read after it is joined
  Result<Manifest> part = Status::Internal("not written");
  std::future<void> writer = std::async(std::launch::async, [&] {
    part = WriteMine(&progress, mine);
    t_written = Clock::now();
  });
  // Every path out joins the worker: it reads the caller's state dict.
  struct Join {
    std::future<void>& f;
    ProgressEnv& p;
    bool cancel = true;
    ~Join() {
      if (cancel) p.Cancel();
      if (f.valid()) f.wait();
    }
  } join{writer, progress};
  VoteTally tally(comm_->size(), opts_.timeout, t0);  // rank 0's
  std::string vote;
  Clock::time_point t_voted = t0;
  while (true) {
    const bool written =
        vote.empty() && writer.wait_for(ProgressInterval(opts_.timeout)) == std::future_status::ready;
    std::string msg = !vote.empty() ? EncodeVoted() : EncodeWriting(progress.count());
    if (written) {
      writer.get();
      Timed(Phase::kWrite, t0, t_written);
      vote_step_ = part.ok() ? Step("vote") : part.status();
      vote = vote_step_.ok() ? OkMsg(SerializeManifest(*part)) : ErrMsg(Mine(vote_step_, Phase::kWrite));
      msg = EncodeVote(vote);
      t_voted = t_decide_ = Clock::now();
    }
    auto got = comm_->GatherDecide(msg, 0, opts_.timeout, Phase::kVote, Phase::kCommit,
                                   [&](std::vector<std::string> msgs) { return DecideRound(tally, msgs); });
    std::string final_outcome;
    Result<bool> go_on = got.ok() ? DecodeGoOn(*got, &final_outcome) : got.status();
    if (go_on.ok() && *go_on) continue;
    join.cancel = vote.empty();  // the save ended before my write did
    if (!vote.empty()) {
      Timed(Phase::kVote, t_voted, std::max(t_voted, t_decide_));
      Timed(Phase::kCommit, std::max(t_voted, t_decide_));
    }
    if (!go_on.ok()) return RoundFailed(go_on.status(), !vote.empty() && DecodeOutcome(vote).ok());
    return final_outcome;
  }
}

Result<SaveStats> SaveRun::Run() {
  const auto start = Clock::now();
  stats_.iteration = opts_.iteration;
  Status ready = Mine(state_.Validate(), Phase::kValidate);
  auto t0 = Clock::now();
  const Status opened = OpenRoot();
  if (!opened.ok() && ready.ok()) ready = Mine(opened, Phase::kBegin);  // told to all in the plan gather
  Result<std::string> begun = Begin(opened);
  if (!begun.ok()) {
    Abandon();
    return begun.status();
  }
  tmp_dir_ = *begun;
  if (ready.ok()) ready = Mine(Step("plan"), Phase::kPlan);
  Result<std::vector<int>> mine = PlanMyWrites(ready);
  Timed(Phase::kPlan, t0);
  if (!mine.ok()) {
    Abandon();
    return mine.status();
  }

  Result<std::string> got = WriteAndVote(*mine);  // my writer is joined from here on
  Result<std::string> outcome = got.ok() ? DecodeOutcome(*got) : got;
  if (!outcome.ok()) {
    Abandon();  // root: nothing was published (else a no-op)
    if (!vote_step_.ok()) return Mine(vote_step_, Phase::kWrite);  // my own failure first
    if (!stalled_.ok()) return stalled_;  // root: the deadline failure is mine (kTimeout, not relayed)
    return got.ok() ? RemoteFailure(outcome.status()) : got.status();
  }
  // Committed. What fails from here on is a warning, never a failed save.
  stats_.warning = DecodeStatus(*outcome);
  Status after = Step("commit");
  if (!after.ok() && stats_.warning.ok())
    stats_.warning = Warning("the 'commit' step failed on rank " + std::to_string(rank_), after);
  stats_.seconds = Since(start);
  return stats_;
}

}  // namespace

Result<SaveStats> SaveCheckpoint(const ShardedStateDict& state, const SaveOptions& opts) {
  CKPT_RETURN_IF_ERROR(CheckTimeout(opts.timeout, "SaveOptions::timeout"));
  SaveRun run(state, opts);
  return run.Run();
}

}  // namespace ckpt
