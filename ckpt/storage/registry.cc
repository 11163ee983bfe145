// The scheme registry (OpenStorage) and the built-in backends: "file" (POSIX,
// flock leases) and "mem" (MemEnv, leases in a process-wide table).
#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <set>

#include "ckpt/base/dir_lock.h"
#include "ckpt/storage/fs_storage.h"
#include "ckpt/storage/mem_env.h"
#include "ckpt/storage/storage.h"

namespace ckpt {
namespace {

class PosixLease final : public Lease {
 public:
  explicit PosixLease(std::unique_ptr<DirLock> lock) : lock_(std::move(lock)) {}

 private:
  std::unique_ptr<DirLock> lock_;
};

Result<std::unique_ptr<Lease>> TakePosixLease(const std::string& dir) {
  CKPT_ASSIGN_OR_RETURN(auto lock, DirLock::TryLock(dir));
  return std::unique_ptr<Lease>(new PosixLease(std::move(lock)));
}

// Leases of in-memory staging dirs: one table per process, keyed by Env and
// path, so two Storages over one MemEnv conflict like two flocks do.
class MemLeases {
 public:
  class Held final : public Lease {
   public:
    Held(MemLeases* table, std::pair<Env*, std::string> key) : table_(table), key_(std::move(key)) {}
    ~Held() override { table_->Release(key_); }

   private:
    MemLeases* table_;
    std::pair<Env*, std::string> key_;
  };
  Result<std::unique_ptr<Lease>> Take(Env* env, const std::string& dir) {
    CKPT_ASSIGN_OR_RETURN(FileInfo info, env->Stat(dir));
    if (!info.is_dir) return Status::NotFound("lease of '" + dir + "': no such directory");
    std::lock_guard<std::mutex> lock(mu_);
    if (!held_.insert({env, dir}).second) return Status::AlreadyExists("lease of '" + dir + "' is held");
    return std::unique_ptr<Lease>(new Held(this, {env, dir}));
  }
  void Release(const std::pair<Env*, std::string>& key) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.erase(key);
  }

 private:
  std::mutex mu_;
  std::set<std::pair<Env*, std::string>> held_;
};

MemLeases* SharedMemLeases() {
  static MemLeases* leases = new MemLeases;  // never deleted: Storages may outlive statics
  return leases;
}

struct Registry {
  std::mutex mu;
  std::map<std::string, StorageFactory> factories;
};

Registry* TheRegistry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never deleted (as DefaultEnv)
    reg->factories["file"] = [](const std::string& url, const StorageOptions& o) -> Result<std::unique_ptr<Storage>> {
      std::string path = url;
      if (url.rfind("file://", 0) == 0) {
        path = url.substr(7);
        if (path.rfind("localhost/", 0) == 0) path = path.substr(9);
        if (path.empty() || path[0] != '/')
          return Status::InvalidArgument("storage URL '" + url + "': a file URL names an absolute path "
                                         "(file:///abs/path) on this host");
      }
      if (path.empty()) return Status::InvalidArgument("storage URL is empty: name a checkpoint root");
      return NewPosixStorage(o.env, path);
    };
    reg->factories["mem"] = [](const std::string& url, const StorageOptions& o) -> Result<std::unique_ptr<Storage>> {
      if (url.size() <= 6 || url.find('/', 6) != std::string::npos)
        return Status::InvalidArgument("storage URL '" + url + "': an in-memory root is mem://<name> (no slash)");
      return NewMemStorage(url, o.env);
    };
    return reg;
  }();
  return r;
}

}  // namespace

Status RegisterStorageScheme(const std::string& scheme, StorageFactory factory) {
  Registry* r = TheRegistry();
  std::lock_guard<std::mutex> lock(r->mu);
  if (!r->factories.emplace(scheme, std::move(factory)).second)
    return Status::AlreadyExists("storage scheme '" + scheme + "://' is registered already");
  return Status::Ok();
}

std::string UrlScheme(const std::string& url) {
  const size_t at = url.find("://");
  if (at == std::string::npos || at == 0) return "file";
  std::string scheme = url.substr(0, at);
  const bool valid = std::isalpha(static_cast<unsigned char>(scheme[0])) &&
                     std::all_of(scheme.begin(), scheme.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
                     });
  if (!valid) return "file";  // "a/b://c" is a relative path
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  return scheme;
}

Result<std::unique_ptr<Storage>> OpenStorage(const std::string& url, const StorageOptions& opts) {
  const std::string scheme = UrlScheme(url);
  StorageFactory factory;
  std::string known;
  {
    Registry* r = TheRegistry();
    std::lock_guard<std::mutex> lock(r->mu);
    auto it = r->factories.find(scheme);
    if (it != r->factories.end()) factory = it->second;
    for (const auto& [name, f] : r->factories) known += (known.empty() ? "" : ", ") + name + "://";
  }
  if (!factory)
    return Status::InvalidArgument("storage URL '" + url + "': unknown scheme '" + scheme + "://' (known: " +
                                   known + ", or a plain path)");
  return factory(url, opts);
}

std::unique_ptr<Storage> NewPosixStorage(Env* env, const std::string& root) {
  return NewFsStorage(env ? env : DefaultEnv(), root, root, TakePosixLease);
}

Env* SharedMemEnv() {
  static Env* env = NewMemEnv().release();  // never deleted: mem:// roots live as long as the process
  return env;
}

std::unique_ptr<Storage> NewMemStorage(const std::string& url, Env* env) {
  Env* e = env ? env : SharedMemEnv();
  // "mem://run1" -> "/run1" in the MemEnv.
  const std::string root = "/" + (url.rfind("mem://", 0) == 0 ? url.substr(6) : url);
  return NewFsStorage(e, url, root, [e](const std::string& dir) { return SharedMemLeases()->Take(e, dir); });
}

}  // namespace ckpt
