// FsStorage (fs_storage.h): today's POSIX commit, moved here from
// ckpt/protocol/commit.cc (staging, lease, publish), load.cc (tracker,
// listing), retention.cc (delete) - the same steps and bytes on disk.
#include "ckpt/storage/fs_storage.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "ckpt/base/dir_lock.h"
#include "ckpt/storage/layout.h"

namespace ckpt {
namespace {

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

// Holds copies of what it needs: it may outlive its FsStorage.
class FsStagedSave final : public StagedSave {
 public:
  FsStagedSave(Env* env, std::string root, int64_t iteration, std::string dir, std::unique_ptr<Lease> lease)
      : env_(env), root_(std::move(root)), iteration_(iteration), dir_(std::move(dir)), lease_(std::move(lease)) {}
  int64_t iteration() const override { return iteration_; }
  const std::string& dir() const override { return dir_; }
  Status Publish(std::string_view manifest, const StepHook& hook, bool* published) override;
  Status Abandon() override;

 private:
  Env* env_;
  std::string root_;
  int64_t iteration_;
  std::string dir_;
  std::unique_ptr<Lease> lease_;  // held until destroyed (after a publish too: harmless)
  bool published_ = false;
};

class FsStorage final : public Storage {
 public:
  FsStorage(Env* env, std::string url, std::string root, LeaseFn lease)
      : env_(env), url_(std::move(url)), root_(std::move(root)), lease_(std::move(lease)) {}
  const std::string& url() const override { return url_; }
  const std::string& root() const override { return root_; }
  Env* env() override { return env_; }
  Result<std::unique_ptr<StagedSave>> Stage(int64_t iteration, const std::function<Status()>& precheck) override;
  Result<std::vector<int64_t>> ListIterations() override;
  Result<int64_t> ReadTracker() override;
  Status WriteTracker(int64_t iteration, const StepHook& hook) override;
  Status DeleteIteration(int64_t iteration, bool* was_link) override;

 private:
  Status CleanStale(int64_t iteration);

  Env* env_;
  std::string url_;
  std::string root_;
  LeaseFn lease_;
};

// Removes tmp dirs of saves that are provably abandoned: their lease can be
// taken, so the process that made them is gone. A live save's tmp dir is
// left alone; one for `iteration` means another job is saving the same
// iteration now: kAlreadyExists naming it. (Tracker tmp files are not
// touched: a concurrent save may be writing one, and WriteFileAtomic replaces
// a stale one anyway.) ckpt never makes a tmp entry that is not a real
// directory: such a one (a link, say) is refused, naming it, and neither it
// nor anything it names is touched.
Status FsStorage::CleanStale(int64_t iteration) {
  CKPT_ASSIGN_OR_RETURN(auto names, env_->ListDir(root_));
  const std::string same = "." + IterDirName(iteration) + ".tmp-";
  for (const auto& n : names) {
    if (!IsTmpIterDirName(n)) continue;
    const std::string path = JoinPath(root_, n);
    CKPT_ASSIGN_OR_RETURN(FileInfo info, env_->Stat(path));
    if (!info.exists) continue;  // gone meanwhile
    if (!info.is_dir)
      return Status::FailedPrecondition("'" + path + "' has the name of a save's tmp dir but is " +
                                        FileKindName(info.kind) + ": not made by ckpt; refusing to remove it or "
                                        "anything through it (remove it, or save to another root)");
    auto lease = lease_(path);
    if (!lease.ok()) {
      if (lease.status().code() == Code::kAlreadyExists && n.rfind(same, 0) == 0)
        return Status::AlreadyExists("iteration " + std::to_string(iteration) + " is being saved by " + OwnerOf(n) +
                                     " (tmp dir '" + path + "'); refusing a second save of it");
      continue;  // a live save of another iteration, or gone meanwhile
    }
    Status st = RemoveTree(env_, path);  // while holding its lease
    if (!st.ok() && st.code() != Code::kNotFound) return st;
  }
  return Status::Ok();
}

Result<std::unique_ptr<StagedSave>> FsStorage::Stage(int64_t iteration, const std::function<Status()>& precheck) {
  CKPT_RETURN_IF_ERROR(CreateDirs(env_, root_));
  CKPT_RETURN_IF_ERROR(CleanStale(iteration));
  const std::string final_dir = JoinPath(root_, IterDirName(iteration));
  CKPT_ASSIGN_OR_RETURN(FileInfo existing, env_->Stat(final_dir));
  if (existing.exists)
    return Status::AlreadyExists("iteration " + std::to_string(iteration) + " already exists ('" + final_dir +
                                 "'); refusing to replace it");
  if (precheck) CKPT_RETURN_IF_ERROR(precheck());
  // mkdir, then take its lease; a cleaner that took the lease first (between
  // the two) removes the dir: then try a fresh name.
  Status last;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::string tmp = JoinPath(root_, TmpIterDirName(iteration, NewStagingNonce()));
    CKPT_RETURN_IF_ERROR(env_->CreateDir(tmp));
    auto lock = lease_(tmp);
    if (lock.ok()) return std::unique_ptr<StagedSave>(new FsStagedSave(env_, root_, iteration, tmp, std::move(*lock)));
    last = lock.status();
  }
  return last.WithContext("taking the lease of a tmp dir under '" + root_ + "'");
}

// manifest (tmp, fsync, rename, fsync dir), fsync tmp dir, rename it to
// iter_N without replacing, fsync root.
Status FsStagedSave::Publish(std::string_view manifest_text, const StepHook& hook, bool* published) {
  Env* env = env_;
  const std::string& root = root_;
  const std::string manifest = JoinPath(dir_, kManifestName);
  CKPT_RETURN_IF_ERROR(RunHook(hook, "manifest_write", 0));
  CKPT_RETURN_IF_ERROR(WriteStringToFileSync(env, manifest + ".tmp", manifest_text));
  CKPT_RETURN_IF_ERROR(RunHook(hook, "manifest_rename", 0));
  CKPT_RETURN_IF_ERROR(env->Rename(manifest + ".tmp", manifest));
  CKPT_RETURN_IF_ERROR(env->SyncDir(dir_));
  CKPT_RETURN_IF_ERROR(RunHook(hook, "dir_rename", 0));
  const std::string final_dir = JoinPath(root, IterDirName(iteration_));
  Status renamed = env->RenameNoReplace(dir_, final_dir);
  if (renamed.code() == Code::kAlreadyExists)
    return renamed.WithContext("iteration " + std::to_string(iteration_) +
                               " already exists: another job committed it while this save was writing");
  CKPT_RETURN_IF_ERROR(renamed);
  published_ = *published = true;
  const std::string not_durable = final_dir + " is visible but its rename may not survive a crash";
  CKPT_RETURN_IF_ERROR(RunHook(hook, "root_fsync", 0).WithContext(not_durable));
  return env->SyncDir(root).WithContext(not_durable);
}

Status FsStagedSave::Abandon() {
  if (published_) return Status::FailedPrecondition("iteration " + std::to_string(iteration_) +
                                                    " is published: refusing to abandon it");
  Status st = RemoveTree(env_, dir_);  // under the lease
  return st.code() == Code::kNotFound ? Status::Ok() : st;
}

Result<std::vector<int64_t>> FsStorage::ListIterations() {
  CKPT_ASSIGN_OR_RETURN(auto names, env_->ListDir(root_));
  std::vector<int64_t> iters;
  for (const auto& n : names) {
    auto it = ParseIterDirName(n);
    if (!it.ok()) continue;
    CKPT_ASSIGN_OR_RETURN(FileInfo info, env_->Stat(JoinPath(root_, n)));
    if (info.IsDirOrLinkToDir()) iters.push_back(*it);  // a link to an archived iteration loads
  }
  std::sort(iters.begin(), iters.end());
  return iters;
}

Result<int64_t> FsStorage::ReadTracker() {
  const std::string path = JoinPath(root_, kTrackerName);
  CKPT_ASSIGN_OR_RETURN(FileInfo info, env_->Stat(path));
  if (!info.exists) return Status::NotFound("no checkpoint tracker '" + path + "'");
  CKPT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env_, path));
  return ParseTrackerText(path, text);
}

// tmp, fsync, rename, fsync root (WriteFileAtomic).
Status FsStorage::WriteTracker(int64_t iteration, const StepHook& hook) {
  CKPT_RETURN_IF_ERROR(RunHook(hook, "tracker_update", 0));
  return WriteFileAtomic(env_, JoinPath(root_, kTrackerName), std::to_string(iteration) + "\n");
}

// Renames iter_N to a tmp name (so no reader can pick a half-deleted dir),
// makes the rename durable, then removes the tree under its lease. An iter_N
// that is a link (to an archived iteration, say) loses only the link: one
// unlink, atomic, and what it names is never touched (`*was_link`).
Status FsStorage::DeleteIteration(int64_t iteration, bool* was_link) {
  const std::string from = JoinPath(root_, IterDirName(iteration));
  CKPT_ASSIGN_OR_RETURN(FileInfo info, env_->Stat(from));
  const bool link = info.kind == FileKind::kSymlink;
  if (was_link) *was_link = link;
  if (link) {
    CKPT_RETURN_IF_ERROR(env_->RemoveFile(from));
    return env_->SyncDir(root_);
  }
  if (!info.is_dir) return Status::Ok();  // gone meanwhile
  const std::string to = JoinPath(root_, TmpIterDirName(iteration, NewStagingNonce()));
  CKPT_RETURN_IF_ERROR(env_->RenameNoReplace(from, to));
  CKPT_RETURN_IF_ERROR(env_->SyncDir(root_));
  auto lease = lease_(to);  // a concurrent save's cleanup leaves a leased tmp dir alone
  Status st = RemoveTree(env_, to);
  return st.ok() || st.code() == Code::kNotFound ? Status::Ok() : st;
}

}  // namespace

std::string NewStagingNonce() {
  std::random_device rd;
  const uint64_t v = (uint64_t(rd()) << 32) ^ rd() ^
                     uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return ProcessOwnerTag() + "-" + buf;
}

std::unique_ptr<Storage> NewFsStorage(Env* env, std::string url, std::string root, LeaseFn lease) {
  return std::make_unique<FsStorage>(env, std::move(url), std::move(root), std::move(lease));
}

}  // namespace ckpt
