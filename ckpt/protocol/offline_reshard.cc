#include "ckpt/protocol/offline_reshard.h"

#include <chrono>
#include <map>
#include <set>

#include "ckpt/base/clock.h"
#include "ckpt/base/created_dirs.h"
#include "ckpt/protocol/commit.h"

namespace ckpt {

namespace {

using CarriedObjects = std::map<std::pair<std::string, int64_t>, const ManifestObject*>;

// Target rank `r`: its state from the factory (rank 0 also takes the
// single-cell objects nobody requested), loaded from `src` and written into
// `tmp`; the tensor keys it requested go into *requested.
Result<Manifest> ReshardRank(const OfflineReshardOptions& opts, const RankStateFactory& factory, Storage* from,
                             Env* env, const Manifest& src, const std::string& tmp, int r, std::set<std::string>* requested,
                             CarriedObjects* carry, OfflineReshardStats* stats) {
  auto state = factory(r);
  if (!state.ok()) return state.status().WithContext("target rank " + std::to_string(r));
  for (const auto& t : (*state)->dict().tensors()) requested->insert(t.meta.key);
  for (const auto& o : (*state)->dict().objects()) carry->erase({o.meta.key, o.meta.cell()});
  if (r == 0)
    for (const auto& [cell, o] : *carry)
      if (NumElements(o->meta.global_shape) == 1) (*state)->dict().AddObject(o->meta);
  LoadOptions lo;
  lo.storage = from;
  lo.iteration = src.iteration;
  auto loaded = LoadCheckpoint((*state)->dict(), lo);
  if (!loaded.ok()) return loaded.status().WithContext("reshard, target rank " + std::to_string(r));
  stats->bytes_read += loaded->bytes_read;
  stats->elements += loaded->elements;
  std::vector<const TensorEntry*> tensors;
  for (const auto& t : (*state)->dict().tensors())
    if (t.meta.is_main_replica()) {
      tensors.push_back(&t);
      stats->bytes_written += t.meta.num_bytes();
    }
  std::vector<const ObjectEntry*> objects;
  for (const auto& o : (*state)->dict().objects())
    if (o.meta.is_main_replica()) objects.push_back(&o);
  auto part = WriteRankFile(env, tmp, r, tensors, objects, opts.write, nullptr);
  if (!part.ok()) return part.status().WithContext("reshard, target rank " + std::to_string(r));
  return part;
}

// The source state no target rank requested (tensors, and objects of more
// than one cell), named; "" if none.
std::string DroppedState(const Manifest& src, const std::set<std::string>& requested, const CarriedObjects& carry) {
  std::string dropped;
  for (const auto& s : src.shards)
    if (!requested.count(s.meta.key) && dropped.find("'" + s.meta.key + "'") == std::string::npos)
      dropped += (dropped.empty() ? "" : ", ") + ("'" + s.meta.key + "'");
  for (const auto& [cell, o] : carry)
    if (NumElements(o->meta.global_shape) != 1) dropped += (dropped.empty() ? "" : ", ") + ("object '" + o->meta.key + "'");
  return dropped;
}

}  // namespace

Result<OfflineReshardStats> ReshardOffline(const OfflineReshardOptions& opts, const RankStateFactory& factory) {
  const auto start = std::chrono::steady_clock::now();
  // Source and destination may be any URLs (a POSIX root to s3:// and back):
  // each is opened once and read or written through its own Env.
  CKPT_ASSIGN_OR_RETURN(auto from, OpenRoot(opts.env, opts.src_root));
  CKPT_ASSIGN_OR_RETURN(auto to, OpenRoot(opts.env, opts.dst_root));
  Env* env = to->env();
  OfflineReshardStats stats;
  CKPT_ASSIGN_OR_RETURN(Manifest src, ReadManifest(from.get(), opts.src_iteration));
  stats.src_iteration = src.iteration;
  const int64_t dst_iter = opts.dst_iteration >= 0 ? opts.dst_iteration : src.iteration;
  CreatedDirs made(env);  // a refused reshard leaves no destination it created
  if (UrlScheme(opts.dst_root) == "file") CKPT_RETURN_IF_ERROR(made.Create(to->root()));  // object stores: no dirs
  std::unique_ptr<StagedSave> staged;  // the tmp dir and its lease, held until the commit or the abandon
  std::string tmp;
  auto abandon = [&](const Status& st) {
    if (staged) staged->Abandon().IgnoreError();  // nothing visible yet
    staged.reset();
    made.RemoveIfEmpty();
    return st;
  };
  auto prepared = PrepareSaveDir(to.get(), dst_iter, nullptr, /*allow_older=*/true);  // explicit iteration
  if (!prepared.ok()) return abandon(prepared.status());
  staged = std::move(prepared).value();
  tmp = staged->dir();
  // Nothing may be dropped silently: tensors the target layout does not
  // request make the reshard fail; single-cell (layout-free) objects the
  // factory does not request are carried over by target rank 0.
  std::set<std::string> requested;
  CarriedObjects carry;
  std::set<std::string> dropped_objects;  // named by the caller, recorded in the metadata
  for (const auto& o : src.objects) {
    if (opts.drop_objects.count(o.meta.key)) dropped_objects.insert(o.meta.key);
    else carry[{o.meta.key, o.meta.cell()}] = &o;
  }
  std::vector<Manifest> parts;
  for (int r = 0; r < opts.world_size; ++r) {
    auto part = ReshardRank(opts, factory, from.get(), env, src, tmp, r, &requested, &carry, &stats);
    if (!part.ok()) return abandon(part.status());
    parts.push_back(std::move(part).value());
  }
  const std::string dropped = DroppedState(src, requested, carry);
  if (!dropped.empty())
    return abandon(Status::FailedPrecondition("offline reshard would drop state the target layout does not describe: " +
                                              dropped.substr(0, 400) + "; nothing was written"));
  nlohmann::json metadata = opts.metadata;
  if (!dropped_objects.empty()) metadata["dropped_objects"] = nlohmann::json(dropped_objects);
  auto merged = MergeManifests(parts, dst_iter, opts.layout, metadata);
  if (!merged.ok()) return abandon(merged.status());
  bool published = false;
  Status st = PublishCheckpoint(staged.get(), *merged, nullptr, &published);
  if (!st.ok()) return published ? st : abandon(st);
  CKPT_RETURN_IF_ERROR(UpdateTracker(to.get(), dst_iter, nullptr)
                           .WithContext("committed " + IterationDir(to.get(), dst_iter) +
                                        " but could not update the tracker"));
  stats.seconds = Since(start);
  return stats;
}

}  // namespace ckpt
