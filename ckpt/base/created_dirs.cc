#include "ckpt/base/created_dirs.h"

#include <algorithm>

namespace ckpt {

Status CreatedDirs::Create(const std::string& path) {
  std::string dir = path;  // "out/" names the same directory as "out"
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::vector<std::string> missing;  // deepest first
  for (std::string p = dir;; p = DirName(p)) {
    CKPT_ASSIGN_OR_RETURN(FileInfo info, env_->Stat(p));
    if (info.exists) break;
    missing.push_back(p);
    if (DirName(p) == p) break;
  }
  Status st = CreateDirs(env_, dir);
  // Note what exists now even on failure: a partial mkdir -p is removed too.
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    auto info = env_->Stat(*it);
    if (info.ok() && info->exists) dirs_.push_back(*it);
  }
  return st;
}

void CreatedDirs::RemoveIfEmpty() {
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    auto names = env_->ListDir(*it);
    if (!names.ok() || !names->empty()) break;  // filled meanwhile (or gone): leave it and its parents
    if (!env_->RemoveDir(*it).ok()) break;
  }
  dirs_.clear();
}

}  // namespace ckpt
