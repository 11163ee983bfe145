#include "ckpt/protocol/commit.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "ckpt/base/dir_lock.h"
#include "ckpt/format/file_meta_hash.h"
#include "reshard/intersect.h"

namespace ckpt {
namespace {

std::string MakeNonce() {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Status RunHook(const StepHook& hook, std::string_view step, int rank) {
  return hook ? hook(step, rank) : Status::Ok();
}

// "<host>-<pid>" of the save owning tmp dir `name` (".iter_N.tmp-<host>-<pid>-<hex>").
std::string OwnerOf(const std::string& name) {
  const size_t at = name.find(".tmp-");
  std::string rest = at == std::string::npos ? "" : name.substr(at + 5);
  const size_t dash = rest.rfind('-');
  if (dash == std::string::npos || dash == 0) return "an unknown process";
  rest = rest.substr(0, dash);
  const size_t pid = rest.rfind('-');
  if (pid == std::string::npos) return "process " + rest;
  return "host " + rest.substr(0, pid) + " pid " + rest.substr(pid + 1);
}

// Removes tmp dirs of saves that are provably abandoned: their lease (a
// DirLock, dir_lock.h) can be taken, so the process that made them is gone.
// A live save's tmp dir is left alone; one for `iteration` means another job
// is saving the same iteration now: kAlreadyExists naming it. (Tracker tmp
// files are not touched: a concurrent save may be writing one, and
// WriteFileAtomic replaces a stale one anyway.) ckpt never makes a tmp entry
// that is not a real directory: such a one (a link, say) is refused, naming
// it, and neither it nor anything it names is touched.
Status CleanStale(Env* env, const std::string& root, int64_t iteration) {
  CKPT_ASSIGN_OR_RETURN(auto names, env->ListDir(root));
  const std::string same = "." + IterDirName(iteration) + ".tmp-";
  for (const auto& n : names) {
    if (!IsTmpIterDirName(n)) continue;
    const std::string path = JoinPath(root, n);
    CKPT_ASSIGN_OR_RETURN(FileInfo info, env->Stat(path));
    if (!info.exists) continue;  // gone meanwhile
    if (!info.is_dir)
      return Status::FailedPrecondition("'" + path + "' has the name of a save's tmp dir but is " +
                                        FileKindName(info.kind) + ": not made by ckpt; refusing to remove it or "
                                        "anything through it (remove it, or save to another root)");
    auto lease = DirLock::TryLock(path);
    if (!lease.ok()) {
      if (lease.status().code() == Code::kAlreadyExists && n.rfind(same, 0) == 0)
        return Status::AlreadyExists("iteration " + std::to_string(iteration) + " is being saved by " + OwnerOf(n) +
                                     " (tmp dir '" + path + "'); refusing a second save of it");
      continue;  // a live save of another iteration, or gone meanwhile
    }
    Status st = RemoveTree(env, path);  // while holding its lease
    if (!st.ok() && st.code() != Code::kNotFound) return st;
  }
  return Status::Ok();
}

Status CheckNotOlder(Env* env, const std::string& root, int64_t iteration) {
  CKPT_ASSIGN_OR_RETURN(auto iters, ListIterations(env, root));
  if (iters.empty() || iters.back() < iteration) return Status::Ok();
  return Status::FailedPrecondition(
      "root '" + root + "' already holds iteration " + std::to_string(iters.back()) + ", newer than " +
      std::to_string(iteration) + ": after this save 'latest' (inspect, train --resume, load of the latest) would "
      "still pick iteration " + std::to_string(iters.back()) + " (probably of an older run); use a fresh root, or "
      "allow it explicitly (--allow-older / SaveOptions::allow_older)");
}

}  // namespace

Result<std::string> PrepareSaveDir(Env* env, const std::string& root, int64_t iteration, const StepHook& hook,
                                   std::unique_ptr<DirLock>* lease, bool allow_older) {
  CKPT_RETURN_IF_ERROR(RunHook(hook, "begin", 0));
  if (iteration < 0 || iteration > kMaxIteration)
    return Status::InvalidArgument("iteration " + std::to_string(iteration) + " is out of range [0, " +
                                   std::to_string(kMaxIteration) + "]");
  CKPT_RETURN_IF_ERROR(CreateDirs(env, root));
  CKPT_RETURN_IF_ERROR(CleanStale(env, root, iteration));
  const std::string final_dir = JoinPath(root, IterDirName(iteration));
  CKPT_ASSIGN_OR_RETURN(FileInfo existing, env->Stat(final_dir));
  if (existing.exists)
    return Status::AlreadyExists("iteration " + std::to_string(iteration) + " already exists ('" + final_dir +
                                 "'); refusing to replace it");
  if (!allow_older) CKPT_RETURN_IF_ERROR(CheckNotOlder(env, root, iteration));
  // mkdir, then take its lease; a cleaner that took the lease first (between
  // the two) removes the dir: then try a fresh name.
  Status last;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::string tmp = JoinPath(root, TmpIterDirName(iteration, ProcessOwnerTag() + "-" + MakeNonce()));
    CKPT_RETURN_IF_ERROR(env->CreateDir(tmp));
    auto lock = DirLock::TryLock(tmp);
    if (lock.ok()) {
      *lease = std::move(lock).value();
      return tmp;
    }
    last = lock.status();
  }
  return last.WithContext("taking the lease of a tmp dir under '" + root + "'");
}

Result<Manifest> WriteRankFile(Env* env, const std::string& tmp_dir, int rank,
                               const std::vector<const TensorEntry*>& tensors,
                               const std::vector<const ObjectEntry*>& objects, const ShardWriteOptions& opts,
                               const StepHook& hook, ShardWriteStats* stats) {
  Manifest part;
  part.chunk_hash = opts.hash;
  if (tensors.empty() && objects.empty()) return part;
  CKPT_RETURN_IF_ERROR(RunHook(hook, "shard_write", rank));
  const std::string name = ShardFileName(rank);
  CKPT_ASSIGN_OR_RETURN(auto writer, ShardFileWriter::Create(env, JoinPath(tmp_dir, name), rank, opts.direct_io));
  for (const TensorEntry* t : tensors) {
    ShardedTensor meta = t->meta;
    meta.replica_id.assign(meta.replica_id.size(), 0);  // the written copy is the main one
    CKPT_ASSIGN_OR_RETURN(DatasetRecord rec, writer->WriteTensor(meta, t->data, opts));
    part.shards.push_back({std::move(meta), 0, std::move(rec)});
  }
  for (const ObjectEntry* o : objects) {
    CKPT_ASSIGN_OR_RETURN(DatasetRecord rec, writer->WriteObject(o->meta, o->bytes, opts.hash));
    part.objects.push_back({o->meta, 0, o->bytes.size(), std::move(rec)});
  }
  CKPT_RETURN_IF_ERROR(RunHook(hook, "shard_fsync", rank));
  CKPT_RETURN_IF_ERROR(writer->Finish());
  if (stats) *stats = writer->stats();
  part.files.push_back({name, rank, writer->file_size(), ""});
  CKPT_RETURN_IF_ERROR(RecordMetaHash(env, JoinPath(tmp_dir, name), 0, &part));
  return part;
}

Result<Manifest> MergeManifests(const std::vector<Manifest>& parts, int64_t iteration, const nlohmann::json& layout,
                                const nlohmann::json& metadata) {
  Manifest m;
  m.iteration = iteration;
  m.layout = layout;
  m.metadata = metadata;
  if (!parts.empty()) m.chunk_hash = parts[0].chunk_hash;
  for (const Manifest& part : parts) {
    if (part.chunk_hash != m.chunk_hash)
      return Status::InvalidArgument("ranks disagree on the chunk hash (" + std::string(ChunkHashName(part.chunk_hash)) +
                                     " vs " + std::string(ChunkHashName(m.chunk_hash)) + ")");
    if (part.files.empty()) continue;
    const int file = int(m.files.size());
    m.files.push_back(part.files[0]);
    for (const auto& s : part.shards) m.shards.push_back({s.meta, file, s.record});
    for (const auto& o : part.objects) m.objects.push_back({o.meta, file, o.size, o.record});
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

Status PublishCheckpoint(Env* env, const std::string& root, const std::string& tmp_dir, const Manifest& m,
                         const StepHook& hook, bool* published) {
  const std::string manifest = JoinPath(tmp_dir, kManifestName);
  CKPT_RETURN_IF_ERROR(RunHook(hook, "manifest_write", 0));
  CKPT_RETURN_IF_ERROR(WriteStringToFileSync(env, manifest + ".tmp", SerializeManifest(m)));
  CKPT_RETURN_IF_ERROR(RunHook(hook, "manifest_rename", 0));
  CKPT_RETURN_IF_ERROR(env->Rename(manifest + ".tmp", manifest));
  CKPT_RETURN_IF_ERROR(env->SyncDir(tmp_dir));
  CKPT_RETURN_IF_ERROR(RunHook(hook, "dir_rename", 0));
  const std::string final_dir = JoinPath(root, IterDirName(m.iteration));
  Status renamed = env->RenameNoReplace(tmp_dir, final_dir);
  if (renamed.code() == Code::kAlreadyExists)
    return renamed.WithContext("iteration " + std::to_string(m.iteration) +
                               " already exists: another job committed it while this save was writing");
  CKPT_RETURN_IF_ERROR(renamed);
  *published = true;
  const std::string not_durable = final_dir + " is visible but its rename may not survive a crash";
  CKPT_RETURN_IF_ERROR(RunHook(hook, "root_fsync", 0).WithContext(not_durable));
  return env->SyncDir(root).WithContext(not_durable);
}

Status UpdateTracker(Env* env, const std::string& root, int64_t iteration, const StepHook& hook) {
  CKPT_RETURN_IF_ERROR(RunHook(hook, "tracker_update", 0));
  return WriteFileAtomic(env, JoinPath(root, kTrackerName), std::to_string(iteration) + "\n");
}

}  // namespace ckpt
