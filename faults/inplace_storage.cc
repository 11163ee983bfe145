// NewInPlaceStorage (inplace_storage.h): MCore's in-place commit, the
// negative control of FsStorage's rename commit.
#include "faults/inplace_storage.h"

#include "ckpt/storage/layout.h"

namespace ckpt::faults {
namespace {

Status RunHook(const StepHook& hook, std::string_view step) { return hook ? hook(step, 0) : Status::Ok(); }

// open(path, 'w') + write: truncates first, no fsync, no rename. A crash
// between the two leaves an empty file; one before the page cache is written
// back (power loss) may lose both.
Status WriteInPlace(Env* env, const std::string& path, std::string_view text) {
  CKPT_ASSIGN_OR_RETURN(auto file, env->OpenFile(path, OpenMode::kCreate));
  CKPT_RETURN_IF_ERROR(file->PWrite(0, std::as_bytes(std::span(text.data(), text.size()))));
  return file->Close();
}

class InPlaceStagedSave final : public StagedSave {
 public:
  InPlaceStagedSave(Env* env, int64_t iteration, std::string dir)
      : env_(env), iteration_(iteration), dir_(std::move(dir)) {}
  int64_t iteration() const override { return iteration_; }
  const std::string& dir() const override { return dir_; }

  // The hooks in the contract's order, all before the one write that makes
  // the iteration complete; no step makes anything durable.
  Status Publish(std::string_view manifest, const StepHook& hook, bool* published) override {
    for (const char* step : {"manifest_write", "manifest_rename", "dir_rename"})
      CKPT_RETURN_IF_ERROR(RunHook(hook, step));
    CKPT_RETURN_IF_ERROR(WriteInPlace(env_, JoinPath(dir_, kManifestName), manifest));
    *published = true;
    return RunHook(hook, "root_fsync");
  }
  // MCore leaves a failed save's files where they were written.
  Status Abandon() override { return Status::Ok(); }

 private:
  Env* env_;
  int64_t iteration_;
  std::string dir_;
};

class InPlaceStorage final : public Storage {
 public:
  InPlaceStorage(Env* env, const std::string& root) : posix_(NewPosixStorage(env, root)), env_(env) {}
  const std::string& url() const override { return posix_->url(); }
  const std::string& root() const override { return posix_->root(); }
  Env* env() override { return env_; }

  // Refuses an existing iter_N like MCore 0.5-0.11 ("Checkpoint destination
  // directory ... is not empty"; 0.12+ warns and writes into it).
  Result<std::unique_ptr<StagedSave>> Stage(int64_t iteration, const std::function<Status()>& precheck) override {
    CKPT_RETURN_IF_ERROR(CreateDirs(env_, root()));
    const std::string dir = JoinPath(root(), IterDirName(iteration));
    CKPT_ASSIGN_OR_RETURN(FileInfo existing, env_->Stat(dir));
    if (existing.exists)
      return Status::AlreadyExists("iteration " + std::to_string(iteration) + " already exists ('" + dir + "')");
    if (precheck) CKPT_RETURN_IF_ERROR(precheck());
    CKPT_RETURN_IF_ERROR(env_->CreateDir(dir));
    return std::unique_ptr<StagedSave>(new InPlaceStagedSave(env_, iteration, dir));
  }
  Result<std::vector<int64_t>> ListIterations() override { return posix_->ListIterations(); }
  Result<int64_t> ReadTracker() override { return posix_->ReadTracker(); }
  Status WriteTracker(int64_t iteration, const StepHook& hook) override {
    CKPT_RETURN_IF_ERROR(RunHook(hook, "tracker_update"));
    return WriteInPlace(env_, JoinPath(root(), kTrackerName), std::to_string(iteration) + "\n");
  }
  Status DeleteIteration(int64_t iteration, bool* was_link) override {
    return posix_->DeleteIteration(iteration, was_link);
  }

 private:
  std::unique_ptr<Storage> posix_;
  Env* env_;
};

}  // namespace

std::unique_ptr<Storage> NewInPlaceStorage(Env* env, const std::string& root) {
  return std::make_unique<InPlaceStorage>(env, root);
}

}  // namespace ckpt::faults
