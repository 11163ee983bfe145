#include "ckpt/protocol/commit.h"

#include <map>

#include "ckpt/format/file_meta_hash.h"
#include "reshard/geometry/intersect.h"

namespace ckpt {
namespace {

Status RunHook(const StepHook& hook, std::string_view step, int rank) {
  return hook ? hook(step, rank) : Status::Ok();
}

Status CheckNotOlder(Storage* storage, int64_t iteration) {
  CKPT_ASSIGN_OR_RETURN(auto iters, storage->ListIterations());
  if (iters.empty() || iters.back() < iteration) return Status::Ok();
  return Status::FailedPrecondition(
      "root '" + storage->url() + "' already holds iteration " + std::to_string(iters.back()) + ", newer than " +
      std::to_string(iteration) + ": after this save 'latest' (inspect, train --resume, load of the latest) would "
      "still pick iteration " + std::to_string(iters.back()) + " (probably of an older run); use a fresh root, or "
      "allow it explicitly (--allow-older / SaveOptions::allow_older)");
}

// "begin", then the iteration's range.
Status BeginSave(const StepHook& hook, int64_t iteration) {
  CKPT_RETURN_IF_ERROR(RunHook(hook, "begin", 0));
  if (iteration < 0 || iteration > kMaxIteration)
    return Status::InvalidArgument("iteration " + std::to_string(iteration) + " is out of range [0, " +
                                   std::to_string(kMaxIteration) + "]");
  return Status::Ok();
}

Result<std::unique_ptr<StagedSave>> StageSave(Storage* s, int64_t iteration, bool allow_older) {
  return s->Stage(iteration, [&]() { return allow_older ? Status::Ok() : CheckNotOlder(s, iteration); });
}

}  // namespace

Result<std::unique_ptr<Storage>> OpenRoot(Env* env, const std::string& root) {
  StorageOptions opts;
  // A URL root of another scheme does its IO through its backend's own Env:
  // the caller's (a POSIX Env, maybe decorated) would not find its paths.
  if (UrlScheme(root) == "file") opts.env = env;
  Result<std::unique_ptr<Storage>> opened = OpenStorage(root, opts);
  // A backend's own error (an endpoint that does not answer, refused
  // credentials) names its request; the caller's message names the root.
  if (!opened.ok()) return opened.status().WithContext("opening checkpoint root '" + root + "'");
  return opened;
}

Result<std::unique_ptr<Storage>> OpenRootToList(Env* env, const std::string& root) { return OpenRoot(env, root); }

Result<std::unique_ptr<StagedSave>> PrepareSaveDir(Env* env, const std::string& root, int64_t iteration,
                                                   const StepHook& hook, bool allow_older) {
  CKPT_RETURN_IF_ERROR(BeginSave(hook, iteration));
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(env, root));
  return StageSave(storage.get(), iteration, allow_older);
}

Result<std::unique_ptr<StagedSave>> PrepareSaveDir(Storage* storage, int64_t iteration, const StepHook& hook,
                                                   bool allow_older) {
  CKPT_RETURN_IF_ERROR(BeginSave(hook, iteration));
  return StageSave(storage, iteration, allow_older);
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

Status PublishCheckpoint(StagedSave* staged, const Manifest& m, const StepHook& hook, bool* published) {
  if (m.iteration != staged->iteration())
    return Status::InvalidArgument("manifest of iteration " + std::to_string(m.iteration) + " for the save of " +
                                   std::to_string(staged->iteration()));
  return staged->Publish(SerializeManifest(m), hook, published);
}

Status UpdateTracker(Env* env, const std::string& root, int64_t iteration, const StepHook& hook) {
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(env, root));
  return UpdateTracker(storage.get(), iteration, hook);
}

Status UpdateTracker(Storage* storage, int64_t iteration, const StepHook& hook) {
  return storage->WriteTracker(iteration, hook);
}

}  // namespace ckpt
