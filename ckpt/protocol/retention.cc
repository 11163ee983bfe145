#include "ckpt/protocol/retention.h"

#include <algorithm>

#include "ckpt/format/manifest.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/commit.h"

namespace ckpt {

Status ValidateRetention(const RetentionPolicy& p) {
  if (p.keep_last < 0 || p.keep_every < 0)
    return Status::InvalidArgument("retention: keep_last and keep_every must be >= 0 (got " +
                                   std::to_string(p.keep_last) + ", " + std::to_string(p.keep_every) + ")");
  return Status::Ok();
}

std::vector<int64_t> RetentionVictims(const std::vector<int64_t>& committed, int64_t newest,
                                      const RetentionPolicy& p) {
  std::vector<int64_t> older;
  for (int64_t it : committed)
    if (it < newest) older.push_back(it);
  std::sort(older.begin(), older.end());
  if (!p.enabled()) return {};
  // The newest is kept by definition; keep_last counts it.
  const size_t protect_newest = p.keep_last > 1 ? size_t(p.keep_last - 1) : 0;
  std::vector<int64_t> victims;
  for (size_t i = 0; i < older.size(); ++i) {
    const bool recent = older.size() - i <= protect_newest;
    const bool multiple = p.keep_every > 0 && older[i] % p.keep_every == 0;
    if (!recent && !multiple) victims.push_back(older[i]);
  }
  return victims;
}

Result<RetentionResult> ApplyRetention(Env* env, const std::string& root, int64_t newest,
                                       const RetentionPolicy& p) {
  CKPT_RETURN_IF_ERROR(ValidateRetention(p));
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(env, root));  // any URL; env nullptr: the backend's own
  return ApplyRetention(storage.get(), newest, p);
}

Result<RetentionResult> ApplyRetention(Storage* storage, int64_t newest, const RetentionPolicy& p) {
  CKPT_RETURN_IF_ERROR(ValidateRetention(p));
  CKPT_ASSIGN_OR_RETURN(int64_t tracked, ReadTracker(storage));
  CKPT_ASSIGN_OR_RETURN(int64_t latest, LatestIteration(storage));
  if (tracked != newest || latest != newest)
    return Status::FailedPrecondition("retention skipped: iteration " + std::to_string(newest) +
                                      " is not durable as the latest (tracker names " + std::to_string(tracked) +
                                      ", latest committed is " + std::to_string(latest) + "); nothing deleted");
  CKPT_ASSIGN_OR_RETURN(auto committed, storage->ListIterations());
  RetentionResult r;
  for (int64_t it : RetentionVictims(committed, newest, p)) {
    bool was_link = false;
    CKPT_RETURN_IF_ERROR(storage->DeleteIteration(it, &was_link).WithContext("retention: deleting " + IterDirName(it)));
    r.deleted.push_back(it);
    if (was_link) r.unlinked.push_back(it);
  }
  CKPT_ASSIGN_OR_RETURN(r.kept, ListIterations(storage));
  return r;
}

}  // namespace ckpt
