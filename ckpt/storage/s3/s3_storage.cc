#include "ckpt/storage/s3/s3_storage.h"

#include <unistd.h>

#include <chrono>
#include <random>
#include <set>

namespace ckpt::s3 {
namespace {

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";

std::string IterName(int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "iter_%07lld", static_cast<long long>(n));
  return buf;
}

// The lease expiry is compared by writers on other hosts, so it is wall time
// (FORMAT.md 2b: their clocks must agree to well within the lease).
int64_t NowMs() {
  const auto now = std::chrono::system_clock::now();  // wall-clock: object-store lease
  return std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
}

std::string Nonce() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

std::span<const std::byte> Bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// "host pid nonce expiry_ms"
struct Lease {
  std::string host, nonce;
  long pid = 0;
  int64_t expiry_ms = 0;
  std::string Text() const { return host + " " + std::to_string(pid) + " " + nonce + " " + std::to_string(expiry_ms); }
  static Lease Parse(const std::string& t) {
    Lease l;
    char host[256] = {0}, nonce[64] = {0};
    long long exp = 0;
    if (std::sscanf(t.c_str(), "%255s %ld %63s %lld", host, &l.pid, nonce, &exp) == 4) {
      l.host = host;
      l.nonce = nonce;
      l.expiry_ms = exp;
    }
    return l;
  }
};

class S3StorageImpl;

class S3StagedSave : public StagedSave {
 public:
  S3StagedSave(std::shared_ptr<S3Client> c, std::string bucket, std::string prefix, std::string url, int64_t n,
               std::string nonce, int64_t expiry_ms, bool conditional)
      : c_(std::move(c)), bucket_(std::move(bucket)), prefix_(std::move(prefix)), url_(std::move(url)), n_(n),
        nonce_(std::move(nonce)), expiry_ms_(expiry_ms), conditional_(conditional) {
    dir_ = url_ + "/" + IterName(n_) + "." + nonce_;
  }
  ~S3StagedSave() override {
    if (!done_) c_->Delete(bucket_, Key(".lease/" + IterName(n_))).IgnoreError();
  }
  int64_t iteration() const override { return n_; }
  const std::string& dir() const override { return dir_; }

  Status Publish(std::string_view manifest, const StepHook& hook, bool* published) override {
    *published = false;
    for (const char* step : {"manifest_write", "manifest_rename", "dir_rename"})
      if (hook) CKPT_RETURN_IF_ERROR(hook(step, 0));
    const std::string mkey = Key(IterName(n_) + "/manifest.json");
    CKPT_RETURN_IF_ERROR(CheckLease());
    if (!conditional_) {  // the documented limit: check, then put
      auto head = c_->Head(bucket_, mkey);
      if (head.ok()) return Exists();
      if (head.status().code() != Code::kNotFound) return head.status();
    }
    Status st = c_->PutObject(bucket_, mkey, Bytes(manifest), true, {{"ckpt-data", IterName(n_) + "." + nonce_}});
    if (st.code() == Code::kAlreadyExists) return Exists();
    CKPT_RETURN_IF_ERROR(st.WithContext("commit of iteration " + std::to_string(n_)));
    *published = true;
    done_ = true;
    c_->Delete(bucket_, Key(".lease/" + IterName(n_))).IgnoreError();
    if (hook) CKPT_RETURN_IF_ERROR(hook("root_fsync", 0));
    return Status::Ok();
  }

  Status Abandon() override {
    done_ = true;
    Status st = RemovePrefix(*c_, bucket_, Key(IterName(n_) + "." + nonce_ + "/"));
    Status lease = c_->Delete(bucket_, Key(".lease/" + IterName(n_)));
    return st.ok() ? lease : st;
  }

  // A save past its lease may already be cleaned up by another writer: it
  // must not commit (its data prefix may be gone). The lease object must
  // still be ours, and its expiry not passed.
  Status CheckLease() const {
    const std::string where = url_ + "/.lease/" + IterName(n_);
    if (NowMs() >= expiry_ms_)
      return Status::Timeout(where + ": the save outlived its lease; not committing iteration " + std::to_string(n_));
    auto text = c_->GetObject(bucket_, Key(".lease/" + IterName(n_)));
    if (!text.ok() || Lease::Parse(*text).nonce != nonce_)
      return Status::Aborted(where + ": the lease of this save was taken over; not committing iteration " +
                             std::to_string(n_));
    return Status::Ok();
  }

  static Status RemovePrefix(S3Client& c, const std::string& bucket, const std::string& prefix) {
    auto uploads = c.ListMultipart(bucket, prefix);
    if (uploads.ok()) {
      for (const auto& u : *uploads) CKPT_RETURN_IF_ERROR(c.AbortMultipart(bucket, u.key, u.upload_id));
    } else if (uploads.status().code() != Code::kUnimplemented) {
      return uploads.status();
    }
    CKPT_ASSIGN_OR_RETURN(auto objects, c.List(bucket, prefix));
    for (const auto& o : objects) CKPT_RETURN_IF_ERROR(c.Delete(bucket, o.key));
    return Status::Ok();
  }

 private:
  std::string Key(const std::string& name) const { return prefix_.empty() ? name : prefix_ + "/" + name; }
  Status Exists() const {
    return Status::AlreadyExists(url_ + "/" + IterName(n_) + ": iteration " + std::to_string(n_) +
                                 " was committed by another writer first");
  }
  std::shared_ptr<S3Client> c_;
  std::string bucket_, prefix_, url_, dir_;
  int64_t n_;
  std::string nonce_;
  int64_t expiry_ms_;
  bool conditional_;
  bool done_ = false;
};

class S3StorageImpl : public Storage {
 public:
  S3StorageImpl(std::string url, S3Url u, std::shared_ptr<S3Client> c, S3StorageOptions o, bool conditional)
      : url_(std::move(url)), u_(std::move(u)), c_(std::move(c)), o_(o), conditional_(conditional),
        env_(c_.get(), o.spool_env, o.spool_dir, o.upload) {
    root_ = u_.ToString();
  }
  const std::string& url() const override { return url_; }
  const std::string& root() const override { return root_; }
  Env* env() override { return &env_; }

  Result<std::unique_ptr<StagedSave>> Stage(int64_t n, const std::function<Status()>& precheck) override {
    CKPT_RETURN_IF_ERROR(CleanAbandoned().WithContext(url_ + ": removing abandoned saves"));
    const std::string iter = IterName(n);
    auto head = c_->Head(u_.bucket, u_.Key(iter + "/manifest.json"));
    if (head.ok()) return Status::AlreadyExists(url_ + "/" + iter + ": iteration " + std::to_string(n) + " exists");
    if (head.status().code() != Code::kNotFound) return head.status();
    const std::string lkey = u_.Key(".lease/" + iter);
    if (!conditional_) {
      auto lease = c_->Head(u_.bucket, lkey);
      if (lease.ok()) return Busy(n);
    }
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    Lease lease{host, Nonce(), static_cast<long>(getpid()), NowMs() + o_.lease_ttl.count()};
    Status st = c_->PutObject(u_.bucket, lkey, Bytes(lease.Text()), true);
    if (st.code() == Code::kAlreadyExists) return Busy(n);
    CKPT_RETURN_IF_ERROR(st);
    auto staged = std::make_unique<S3StagedSave>(c_, u_.bucket, u_.prefix, root_, n, lease.nonce, lease.expiry_ms,
                                                 conditional_);
    if (precheck) CKPT_RETURN_IF_ERROR(precheck());  // staged's destructor drops the lease
    return std::unique_ptr<StagedSave>(std::move(staged));
  }

  Result<std::vector<int64_t>> ListIterations() override {
    CKPT_ASSIGN_OR_RETURN(auto objects, c_->List(u_.bucket, u_.Key("iter_")));
    std::vector<int64_t> out;
    const size_t skip = u_.prefix.empty() ? 0 : u_.prefix.size() + 1;
    for (const auto& o : objects) {
      long long n = 0;
      char tail[32] = {0};
      if (std::sscanf(o.key.c_str() + skip, "iter_%lld/%31s", &n, tail) == 2 && std::string(tail) == "manifest.json")
        out.push_back(n);
    }
    return out;
  }

  Result<int64_t> ReadTracker() override {
    CKPT_ASSIGN_OR_RETURN(std::string text, c_->GetObject(u_.bucket, u_.Key(kTracker)));
    char* end = nullptr;
    const long long n = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() || (*end != '\n' && *end != 0) || n < 0)
      return Status::Corruption(url_ + "/" + kTracker + ": not an iteration number");
    return static_cast<int64_t>(n);
  }

  Status WriteTracker(int64_t n, const StepHook& hook) override {
    if (hook) CKPT_RETURN_IF_ERROR(hook("tracker_update", 0));
    return c_->PutObject(u_.bucket, u_.Key(kTracker), Bytes(std::to_string(n) + "\n"));
  }

  Status DeleteIteration(int64_t n, bool* was_link) override {
    if (was_link) *was_link = false;
    const std::string iter = IterName(n);
    CKPT_ASSIGN_OR_RETURN(std::string data, env_.DataPrefixOf(u_.bucket, u_.Key(iter)));
    CKPT_RETURN_IF_ERROR(c_->Delete(u_.bucket, u_.Key(iter + "/manifest.json")));  // unlisted from here
    if (!data.empty()) CKPT_RETURN_IF_ERROR(S3StagedSave::RemovePrefix(*c_, u_.bucket, u_.Key(data + "/")));
    return S3StagedSave::RemovePrefix(*c_, u_.bucket, u_.Key(iter + "/"));
  }

 private:
  Status Busy(int64_t n) {
    auto text = c_->GetObject(u_.bucket, u_.Key(".lease/" + IterName(n)));
    Lease l = Lease::Parse(text.ok() ? *text : "");
    return Status::AlreadyExists(url_ + ": iteration " + std::to_string(n) + " is being saved by host " + l.host +
                                 " pid " + std::to_string(l.pid));
  }

  // Expired leases go with their data; data prefixes that no live lease and
  // no manifest name are abandoned (a writer killed after its lease expired
  // or lost a commit race).
  Status CleanAbandoned() {
    CKPT_ASSIGN_OR_RETURN(auto leases, c_->List(u_.bucket, u_.Key(".lease/")));
    std::set<std::string> live;
    for (const auto& o : leases) {
      auto text = c_->GetObject(u_.bucket, o.key);
      if (!text.ok()) continue;  // removed meanwhile
      Lease l = Lease::Parse(*text);
      if (l.expiry_ms > NowMs()) {
        live.insert(l.nonce);
      } else {
        CKPT_RETURN_IF_ERROR(c_->Delete(u_.bucket, o.key));
      }
    }
    // Data prefixes: of finished objects and of unfinished multipart uploads
    // (a rank killed mid-upload leaves only the latter).
    CKPT_ASSIGN_OR_RETURN(auto objects, c_->List(u_.bucket, u_.Key("iter_")));
    std::vector<std::string> keys;
    for (const auto& o : objects) keys.push_back(o.key);
    auto uploads = c_->ListMultipart(u_.bucket, u_.Key("iter_"));
    if (uploads.ok()) {
      for (const auto& up : *uploads) keys.push_back(up.key);
    } else if (uploads.status().code() != Code::kUnimplemented) {
      return uploads.status();
    }
    std::set<std::string> prefixes;
    const size_t skip = u_.prefix.empty() ? 0 : u_.prefix.size() + 1;
    for (const auto& key : keys) {
      std::string rel = key.substr(skip);
      const std::string top = rel.substr(0, rel.find('/'));
      if (top.find('.') != std::string::npos) prefixes.insert(top);
    }
    for (const auto& p : prefixes) {
      const std::string iter = p.substr(0, p.find('.'));
      if (live.count(p.substr(p.find('.') + 1))) continue;
      CKPT_ASSIGN_OR_RETURN(std::string committed, env_.DataPrefixOf(u_.bucket, u_.Key(iter)));
      if (committed == p) continue;
      CKPT_RETURN_IF_ERROR(S3StagedSave::RemovePrefix(*c_, u_.bucket, u_.Key(p + "/")));
    }
    return Status::Ok();
  }

  std::string url_, root_;
  S3Url u_;
  std::shared_ptr<S3Client> c_;
  S3StorageOptions o_;
  bool conditional_;
  S3Env env_;
};

}  // namespace

Result<std::unique_ptr<Storage>> OpenS3Storage(const std::string& url, const S3Config& config,
                                               const S3StorageOptions& options) {
  CKPT_ASSIGN_OR_RETURN(S3Url u, S3Url::Parse(url));
  if (!options.spool_env) return Status::InvalidArgument(url + ": S3 storage needs a local spool Env");
  auto client = std::make_shared<S3Client>(config);
  CKPT_ASSIGN_OR_RETURN(bool conditional,
                        client->SupportsConditionalPut(u.bucket, u.Key(".probe/" + Nonce())));
  return std::unique_ptr<Storage>(new S3StorageImpl(url, u, std::move(client), options, conditional));
}

}  // namespace ckpt::s3
