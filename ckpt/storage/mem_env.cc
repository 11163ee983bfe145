#include "ckpt/storage/mem_env.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

namespace ckpt {
namespace {

struct Node {
  bool dir = false;
  std::shared_ptr<std::string> data;  // a file's bytes (shared with open Files)
};

// Without trailing slashes ("/" stays "/").
std::string Norm(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

Status Missing(const char* op, const std::string& p) {
  return Status::NotFound(std::string(op) + " '" + p + "': no such file or directory");
}

class MemEnv;

class MemFile final : public File {
 public:
  MemFile(std::mutex* mu, std::string path, std::shared_ptr<std::string> data, bool writable)
      : mu_(mu), path_(std::move(path)), data_(std::move(data)), writable_(writable) {}
  const std::string& path() const override { return path_; }
  Result<size_t> PRead(uint64_t offset, std::span<std::byte> dst) override {
    std::lock_guard<std::mutex> lock(*mu_);
    if (offset >= data_->size()) return size_t(0);
    const size_t n = std::min<uint64_t>(dst.size(), data_->size() - offset);
    std::memcpy(dst.data(), data_->data() + offset, n);
    return n;
  }
  Status PWrite(uint64_t offset, std::span<const std::byte> src) override {
    if (!writable_) return Status::IOError("write '" + path_ + "': opened read-only");
    std::lock_guard<std::mutex> lock(*mu_);
    if (data_->size() < offset + src.size()) data_->resize(offset + src.size());
    std::memcpy(data_->data() + offset, src.data(), src.size());
    return Status::Ok();
  }
  Status Truncate(uint64_t size) override {
    if (!writable_) return Status::IOError("truncate '" + path_ + "': opened read-only");
    std::lock_guard<std::mutex> lock(*mu_);
    data_->resize(size);
    return Status::Ok();
  }
  Result<uint64_t> Size() override {
    std::lock_guard<std::mutex> lock(*mu_);
    return uint64_t(data_->size());
  }
  Status Sync() override { return Status::Ok(); }
  Status Close() override { return Status::Ok(); }

 private:
  std::mutex* mu_;
  std::string path_;
  std::shared_ptr<std::string> data_;
  bool writable_;
};

class MemEnv final : public Env {
 public:
  MemEnv() { nodes_["/"] = Node{true, nullptr}; nodes_["."] = Node{true, nullptr}; }

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode, const OpenOptions&) override {
    const std::string p = Norm(path);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(p);
    if (it != nodes_.end() && it->second.dir) return Status::IOError("open '" + p + "': is a directory");
    if (mode == OpenMode::kCreate) {
      CKPT_RETURN_IF_ERROR(ParentIsDir("open", p));
      if (it == nodes_.end()) it = nodes_.emplace(p, Node{false, std::make_shared<std::string>()}).first;
      it->second.data->clear();
    } else if (it == nodes_.end()) {
      return Missing("open", p);
    }
    return std::unique_ptr<File>(new MemFile(&mu_, p, it->second.data, mode != OpenMode::kRead));
  }
  Status CreateDir(const std::string& path) override {
    const std::string p = Norm(path);
    std::lock_guard<std::mutex> lock(mu_);
    if (nodes_.count(p)) return Status::AlreadyExists("mkdir '" + p + "': exists");
    CKPT_RETURN_IF_ERROR(ParentIsDir("mkdir", p));
    nodes_[p] = Node{true, nullptr};
    return Status::Ok();
  }
  Status RemoveFile(const std::string& path) override {
    const std::string p = Norm(path);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(p);
    if (it == nodes_.end()) return Missing("unlink", p);
    if (it->second.dir) return Status::IOError("unlink '" + p + "': is a directory");
    nodes_.erase(it);
    return Status::Ok();
  }
  Status RemoveDir(const std::string& path) override {
    const std::string p = Norm(path);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(p);
    if (it == nodes_.end()) return Missing("rmdir", p);
    if (!it->second.dir) return Status::IOError("rmdir '" + p + "': not a directory");
    if (!Children(p).empty()) return Status::IOError("rmdir '" + p + "': directory not empty");
    nodes_.erase(it);
    return Status::Ok();
  }
  Status Rename(const std::string& from, const std::string& to) override { return Move(from, to, true); }
  Status RenameNoReplace(const std::string& from, const std::string& to) override { return Move(from, to, false); }
  Status SyncDir(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(Norm(path));
    if (it == nodes_.end()) return Missing("fsync", Norm(path));
    return Status::Ok();
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    const std::string p = Norm(path);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(p);
    if (it == nodes_.end()) return Missing("opendir", p);
    if (!it->second.dir) return Status::IOError("opendir '" + p + "': not a directory");
    return Children(p);
  }
  Result<FileInfo> Stat(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    FileInfo info;
    auto it = nodes_.find(Norm(path));
    if (it == nodes_.end()) return info;
    info.exists = true;
    info.is_dir = it->second.dir;
    info.kind = it->second.dir ? FileKind::kDir : FileKind::kFile;
    info.size = it->second.dir ? 0 : it->second.data->size();
    return info;
  }

 private:
  static std::string Prefix(const std::string& dir) { return dir == "/" ? "/" : dir + "/"; }
  // Names directly in `dir` (locked), sorted (the map is).
  std::vector<std::string> Children(const std::string& dir) const {
    std::vector<std::string> out;
    const std::string pre = Prefix(dir);
    for (auto it = nodes_.lower_bound(pre); it != nodes_.end() && it->first.compare(0, pre.size(), pre) == 0; ++it)
      if (it->first.size() > pre.size() && it->first.find('/', pre.size()) == std::string::npos)
        out.push_back(it->first.substr(pre.size()));
    return out;
  }
  Status ParentIsDir(const char* op, const std::string& p) const {
    auto it = nodes_.find(DirName(p));
    if (it == nodes_.end()) return Missing(op, p);
    if (!it->second.dir) return Status::IOError(std::string(op) + " '" + p + "': a parent is not a directory");
    return Status::Ok();
  }
  Status Move(const std::string& from_in, const std::string& to_in, bool replace) {
    const std::string from = Norm(from_in), to = Norm(to_in);
    std::lock_guard<std::mutex> lock(mu_);
    auto src = nodes_.find(from);
    if (src == nodes_.end()) return Missing("rename", from);
    CKPT_RETURN_IF_ERROR(ParentIsDir("rename", to));
    if (to.compare(0, Prefix(from).size(), Prefix(from)) == 0)
      return Status::InvalidArgument("rename '" + from + "' into itself ('" + to + "')");
    auto dst = nodes_.find(to);
    if (dst != nodes_.end()) {
      if (!replace) return Status::AlreadyExists("rename '" + from + "' -> '" + to + "': target exists");
      if (dst->second.dir != src->second.dir || (dst->second.dir && !Children(to).empty()))
        return Status::IOError("rename '" + from + "' -> '" + to + "': target is in the way");
      nodes_.erase(dst);
    }
    std::map<std::string, Node> moved;
    const std::string pre = Prefix(from);
    for (auto it = nodes_.lower_bound(pre); it != nodes_.end() && it->first.compare(0, pre.size(), pre) == 0;) {
      moved[Prefix(to) + it->first.substr(pre.size())] = it->second;
      it = nodes_.erase(it);
    }
    moved[to] = nodes_[from];
    nodes_.erase(from);
    nodes_.merge(moved);
    return Status::Ok();
  }

  std::mutex mu_;
  std::map<std::string, Node> nodes_;  // normalised path -> entry
};

}  // namespace

std::unique_ptr<Env> NewMemEnv() { return std::make_unique<MemEnv>(); }

}  // namespace ckpt
