// LatestIteration: the tracker as a lower bound, committed dirs above it first;
// IterationPresent: whether an iteration's dir is still there (removed, not damaged).
#include "ckpt/protocol/checkpoint.h"

namespace ckpt {

Result<int64_t> LatestIteration(Env* env, const std::string& root) {
  Result<int64_t> tracked = ReadTracker(env, root);
  if (!tracked.ok() && tracked.status().code() != Code::kNotFound) return tracked.status();
  Result<std::vector<int64_t>> iters = ListIterations(env, root);
  if (!iters.ok()) return tracked;  // no listing: the tracker alone, as before
  for (auto it = iters->rbegin(); it != iters->rend(); ++it) {
    if (tracked.ok() && *it <= *tracked) break;
    if (ReadManifest(env, root, *it).ok()) return *it;
  }
  return tracked;
}

bool IterationPresent(Env* env, const std::string& root, int64_t iteration) {
  Result<FileInfo> info = env->Stat(JoinPath(root, IterDirName(iteration)));
  return !info.ok() || info->IsDirOrLinkToDir();
}

}  // namespace ckpt
