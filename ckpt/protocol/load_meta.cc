// load --fallback's metadata check (load_internal.h CheckMetaOfReadFiles).
#include <set>

#include "ckpt/format/file_meta_hash.h"
#include "ckpt/protocol/load_internal.h"

namespace ckpt::load_internal {

Status CheckMetaOfReadFiles(Env* env, const std::string& dir, const Manifest& m, const ChunkPlan& cp,
                            const ShardedStateDict& state) {
  std::set<int> files;
  for (const ChunkKey& key : cp.order) files.insert(m.shards[size_t(key.first)].file);
  std::set<std::string> objects;
  for (const auto& o : state.objects()) objects.insert(o.meta.key);
  for (const auto& o : m.objects)
    if (objects.count(o.meta.key)) files.insert(o.file);
  for (int f : files)
    CKPT_RETURN_IF_ERROR(CheckMetaHash(env, JoinPath(dir, m.files[size_t(f)].name), m, f));
  return Status::Ok();
}

}  // namespace ckpt::load_internal
