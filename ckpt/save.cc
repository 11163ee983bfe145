// SaveCheckpoint: the multi-rank commit protocol (see checkpoint.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "ckpt/checkpoint.h"
#include "ckpt/save_plan.h"
#include "reshard/intersect.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

std::string MakeNonce() {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(Clock::now().time_since_epoch().count());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Messages between ranks carry either "OK<payload>" or "ERR<status text>".
std::string OkMsg(const std::string& payload) { return "OK" + payload; }
std::string ErrMsg(const Status& s) { return "ERR" + s.ToString(); }
bool IsOk(const std::string& m) { return m.rfind("OK", 0) == 0; }

class SaveRun {
 public:
  SaveRun(const ShardedStateDict& state, const SaveOptions& opts)
      : state_(state), opts_(opts), env_(opts.env ? opts.env : DefaultEnv()),
        comm_(opts.comm ? opts.comm : &local_), rank_(comm_->rank()) {}

  Result<SaveStats> Run();

 private:
  Status Step(std::string_view step) { return opts_.hook ? opts_.hook(step, rank_) : Status::Ok(); }
  std::string Where(std::string_view phase) const {
    return "save iter " + std::to_string(opts_.iteration) + ", rank " + std::to_string(rank_) +
           ", phase '" + std::string(phase) + "'";
  }
  void Timed(const char* phase, Clock::time_point t0) {
    stats_.phase_seconds[phase] += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  Result<std::string> Begin();              // rank 0 prepares; all learn the tmp dir
  Result<std::vector<int>> PlanMyWrites();  // indices of my tensors to write
  Result<Manifest> WriteMine(const std::vector<int>& mine);
  Status CheckNonFinite(const TensorEntry& t);
  Result<Manifest> Merge(const std::vector<std::string>& votes);
  Status Publish(const Manifest& m);
  Status CleanStale();

  const ShardedStateDict& state_;
  const SaveOptions& opts_;
  Env* env_;
  LocalComm local_;
  Comm* comm_;
  int rank_;
  std::string tmp_dir_;
  bool published_ = false;  // the iter dir is visible: never remove it
  SaveStats stats_;
};

Status SaveRun::CleanStale() {
  CKPT_ASSIGN_OR_RETURN(auto names, env_->ListDir(opts_.root));
  for (const auto& n : names) {
    if (IsTmpIterDirName(n)) CKPT_RETURN_IF_ERROR(RemoveTree(env_, JoinPath(opts_.root, n)));
    if (n == std::string(kTrackerName) + ".tmp") CKPT_RETURN_IF_ERROR(env_->RemoveFile(JoinPath(opts_.root, n)));
  }
  return Status::Ok();
}

Result<std::string> SaveRun::Begin() {
  std::string msg;
  if (rank_ == 0) {
    auto prepare = [&]() -> Result<std::string> {
      CKPT_RETURN_IF_ERROR(Step("begin"));
      CKPT_RETURN_IF_ERROR(CreateDirs(env_, opts_.root));
      CKPT_RETURN_IF_ERROR(CleanStale());
      std::string final_dir = JoinPath(opts_.root, IterDirName(opts_.iteration));
      CKPT_ASSIGN_OR_RETURN(FileInfo existing, env_->Stat(final_dir));
      if (existing.exists)
        return Status::AlreadyExists("checkpoint directory '" + final_dir + "' already exists; refusing to replace it");
      std::string tmp = JoinPath(opts_.root, TmpIterDirName(opts_.iteration, MakeNonce()));
      CKPT_RETURN_IF_ERROR(env_->CreateDir(tmp));
      return tmp;
    };
    auto tmp = prepare();
    msg = tmp.ok() ? OkMsg(*tmp) : ErrMsg(tmp.status().WithContext(Where("begin")));
  }
  CKPT_ASSIGN_OR_RETURN(std::string got, comm_->Broadcast(msg, 0, opts_.timeout, "begin"));
  if (!IsOk(got)) return Status::Aborted(got.substr(3));
  return got.substr(2);
}

Result<std::vector<int>> SaveRun::PlanMyWrites() {
  std::vector<HeldShard> held;
  for (const auto& t : state_.tensors())
    held.push_back({ShardIdentity(t.meta), t.meta.num_bytes(), t.meta.is_main_replica()});
  CKPT_ASSIGN_OR_RETURN(auto all, comm_->Gather(EncodeHeldShards(held), 0, opts_.timeout, "plan"));
  std::string msg;
  if (rank_ == 0) {
    auto plan = [&]() -> Result<WritePlan> {
      std::vector<std::vector<HeldShard>> per_rank;
      for (const auto& m : all) {
        CKPT_ASSIGN_OR_RETURN(auto h, DecodeHeldShards(m));
        per_rank.push_back(std::move(h));
      }
      return PlanWrites(per_rank, opts_.balance_replicas);
    }();
    msg = plan.ok() ? OkMsg(EncodeWritePlan(*plan)) : ErrMsg(plan.status().WithContext(Where("plan")));
  }
  CKPT_ASSIGN_OR_RETURN(std::string got, comm_->Broadcast(msg, 0, opts_.timeout, "plan"));
  if (!IsOk(got)) return Status::Aborted(got.substr(3));
  CKPT_ASSIGN_OR_RETURN(WritePlan plan, DecodeWritePlan(got.substr(2)));
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
                     " at local flat index " + std::to_string(bad) + " (" + t.meta.DebugString() + ")";
  if (opts_.nonfinite == NonFinitePolicy::kWarn) {
    std::fprintf(stderr, "ckpt warning: %s\n", what.c_str());
    return Status::Ok();
  }
  return Status::FailedPrecondition("refusing to commit non-finite state: " + what);
}

Result<Manifest> SaveRun::WriteMine(const std::vector<int>& mine) {
  Manifest part;
  std::vector<const ObjectEntry*> objects;
  for (const auto& o : state_.objects())
    if (o.meta.is_main_replica()) objects.push_back(&o);
  if (mine.empty() && objects.empty()) return part;
  for (int i : mine) CKPT_RETURN_IF_ERROR(CheckNonFinite(state_.tensors()[i]));
  CKPT_RETURN_IF_ERROR(Step("shard_write"));
  const std::string name = ShardFileName(rank_);
  CKPT_ASSIGN_OR_RETURN(auto writer, ShardFileWriter::Create(env_, JoinPath(tmp_dir_, name), rank_));
  for (int i : mine) {
    const TensorEntry& t = state_.tensors()[i];
    ShardedTensor meta = t.meta;
    meta.replica_id.assign(meta.replica_id.size(), 0);  // the written copy is the main one
    CKPT_ASSIGN_OR_RETURN(DatasetRecord rec, writer->WriteTensor(meta, t.data, opts_.write));
    part.shards.push_back({std::move(meta), 0, std::move(rec)});
    stats_.bytes_written += t.meta.num_bytes();
  }
  for (const ObjectEntry* o : objects) {
    CKPT_ASSIGN_OR_RETURN(DatasetRecord rec, writer->WriteObject(o->meta, o->bytes));
    part.objects.push_back({o->meta, 0, o->bytes.size(), std::move(rec)});
    stats_.bytes_written += int64_t(o->bytes.size());
  }
  CKPT_RETURN_IF_ERROR(Step("shard_fsync"));
  CKPT_RETURN_IF_ERROR(writer->Finish());
  part.files.push_back({name, rank_, writer->file_size()});
  stats_.file_bytes = int64_t(writer->file_size());
  stats_.shards_written = int64_t(part.shards.size());
  return part;
}

Result<Manifest> SaveRun::Merge(const std::vector<std::string>& votes) {
  Manifest m;
  m.iteration = opts_.iteration;
  m.layout = opts_.layout;
  m.metadata = opts_.metadata;
  for (int r = 0; r < int(votes.size()); ++r) {
    if (!IsOk(votes[r])) return Status::Aborted("rank " + std::to_string(r) + " failed: " + votes[r].substr(3));
    CKPT_ASSIGN_OR_RETURN(Manifest part, ParseManifest(votes[r].substr(2), "vote of rank " + std::to_string(r)));
    if (part.files.empty()) continue;
    int file = int(m.files.size());
    m.files.push_back(part.files[0]);
    for (auto& s : part.shards) m.shards.push_back({std::move(s.meta), file, std::move(s.record)});
    for (auto& o : part.objects) m.objects.push_back({std::move(o.meta), file, o.size, std::move(o.record)});
  }
  std::map<std::string, std::vector<ShardedTensor>> by_key;
  for (const auto& s : m.shards) by_key[s.meta.key].push_back(s.meta);
  for (const auto& [key, shards] : by_key) {
    for (const auto& s : shards)
      if (s.dtype != shards[0].dtype || s.global_shape != shards[0].global_shape)
        return Status::InvalidArgument("tensor '" + key + "': ranks disagree on dtype or global shape (" +
                                       s.DebugString() + " vs " + shards[0].DebugString() + ")");
    CKPT_RETURN_IF_ERROR(reshard::CheckCoverage(key, shards[0].global_shape, shards));
  }
  std::map<std::pair<std::string, int64_t>, int> cells;
  for (const auto& o : m.objects)
    if (cells[{o.meta.key, o.meta.cell()}]++)
      return Status::InvalidArgument("object '" + o.meta.key + "' cell " + std::to_string(o.meta.cell()) +
                                     " written by two ranks");
  return m;
}

Status SaveRun::Publish(const Manifest& m) {
  const std::string manifest = JoinPath(tmp_dir_, kManifestName);
  CKPT_RETURN_IF_ERROR(Step("manifest_write"));
  CKPT_RETURN_IF_ERROR(WriteStringToFileSync(env_, manifest + ".tmp", SerializeManifest(m)));
  CKPT_RETURN_IF_ERROR(Step("manifest_rename"));
  CKPT_RETURN_IF_ERROR(env_->Rename(manifest + ".tmp", manifest));
  CKPT_RETURN_IF_ERROR(env_->SyncDir(tmp_dir_));
  CKPT_RETURN_IF_ERROR(Step("dir_rename"));
  const std::string final_dir = JoinPath(opts_.root, IterDirName(opts_.iteration));
  CKPT_RETURN_IF_ERROR(env_->RenameNoReplace(tmp_dir_, final_dir));
  published_ = true;
  CKPT_RETURN_IF_ERROR(Step("root_fsync"));
  CKPT_RETURN_IF_ERROR(env_->SyncDir(opts_.root));
  CKPT_RETURN_IF_ERROR(Step("tracker_update"));
  return WriteFileAtomic(env_, JoinPath(opts_.root, kTrackerName), std::to_string(opts_.iteration) + "\n")
      .WithContext("committed " + final_dir + " but could not update the tracker");
}

Result<SaveStats> SaveRun::Run() {
  const auto start = Clock::now();
  stats_.iteration = opts_.iteration;
  CKPT_RETURN_IF_ERROR(state_.Validate().WithContext(Where("validate")));
  auto t0 = Clock::now();
  CKPT_ASSIGN_OR_RETURN(tmp_dir_, Begin());
  CKPT_RETURN_IF_ERROR(Step("plan"));
  CKPT_ASSIGN_OR_RETURN(std::vector<int> mine, PlanMyWrites());
  Timed("plan", t0);

  t0 = Clock::now();
  Result<Manifest> part = WriteMine(mine);
  Timed("write", t0);

  t0 = Clock::now();
  Status vote_step = part.ok() ? Step("vote") : part.status();
  std::string vote = vote_step.ok() ? OkMsg(SerializeManifest(*part)) : ErrMsg(vote_step.WithContext(Where("write")));
  CKPT_ASSIGN_OR_RETURN(auto votes, comm_->Gather(vote, 0, opts_.timeout, "vote"));
  Timed("vote", t0);

  t0 = Clock::now();
  std::string outcome;
  if (rank_ == 0) {
    Result<Manifest> merged = Merge(votes);
    Status st = merged.ok() ? Publish(*merged) : merged.status();
    if (!st.ok() && !published_) RemoveTree(env_, tmp_dir_).IgnoreError();  // never visible: drop it
    outcome = st.ok() ? OkMsg("") : ErrMsg(st.WithContext(Where("commit")));
  }
  CKPT_ASSIGN_OR_RETURN(std::string got, comm_->Broadcast(outcome, 0, opts_.timeout, "commit"));
  Timed("commit", t0);
  if (!IsOk(got)) {
    if (!vote_step.ok()) return vote_step.WithContext(Where("write"));
    return Status::Aborted(got.substr(3));
  }
  CKPT_RETURN_IF_ERROR(Step("commit"));
  stats_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats_;
}

}  // namespace

Result<SaveStats> SaveCheckpoint(const ShardedStateDict& state, const SaveOptions& opts) {
  SaveRun run(state, opts);
  return run.Run();
}

}  // namespace ckpt
