// LatestIteration: the tracker as a lower bound, committed dirs above it first;
// IterationPresent: whether an iteration's dir is still there (removed, not damaged).
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/commit.h"

namespace ckpt {

Result<int64_t> LatestIteration(Storage* storage) {
  Result<int64_t> tracked = ReadTracker(storage);
  if (!tracked.ok() && tracked.status().code() != Code::kNotFound) return tracked.status();
  Result<std::vector<int64_t>> iters = ListIterations(storage);
  if (!iters.ok()) return tracked;  // no listing: the tracker alone, as before
  for (auto it = iters->rbegin(); it != iters->rend(); ++it) {
    if (tracked.ok() && *it <= *tracked) break;
    if (ReadManifest(storage, *it).ok()) return *it;
  }
  return tracked;
}

Result<int64_t> LatestIteration(Env* env, const std::string& root) {
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(env, root));
  return LatestIteration(storage.get());
}

std::string IterationDir(Storage* storage, int64_t iteration) {
  return JoinPath(storage->root(), IterDirName(iteration));
}

bool IterationPresent(Storage* storage, int64_t iteration) {
  Result<FileInfo> info = storage->env()->Stat(IterationDir(storage, iteration));
  return !info.ok() || info->IsDirOrLinkToDir();
}

bool IterationPresent(Env* env, const std::string& root, int64_t iteration) {
  auto storage = OpenRoot(env, root);
  return !storage.ok() || IterationPresent(storage->get(), iteration);  // a failing look counts as present
}

}  // namespace ckpt
