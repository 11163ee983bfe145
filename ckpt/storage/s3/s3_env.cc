#include "ckpt/storage/s3/s3_env.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <unistd.h>

namespace ckpt::s3 {
namespace {

// The manifest metadata key that names an iteration's data prefix (FORMAT.md 2b).
constexpr const char* kDataMeta = "ckpt-data";

class S3ReadFile : public File {
 public:
  S3ReadFile(S3Client* c, std::string path, std::string bucket, std::string key, uint64_t size)
      : c_(c), path_(std::move(path)), bucket_(std::move(bucket)), key_(std::move(key)), size_(size) {}
  const std::string& path() const override { return path_; }
  Result<size_t> PRead(uint64_t offset, std::span<std::byte> dst) override {
    if (offset >= size_) return size_t{0};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(dst.size(), size_ - offset));
    CKPT_RETURN_IF_ERROR(c_->GetRange(bucket_, key_, offset, dst.first(n)));
    return n;
  }
  Status PWrite(uint64_t, std::span<const std::byte>) override { return ReadOnly(); }
  Status Truncate(uint64_t) override { return ReadOnly(); }
  Result<uint64_t> Size() override { return size_; }
  Status Sync() override { return Status::Ok(); }
  Status Close() override { return Status::Ok(); }

 private:
  Status ReadOnly() const { return Status::InvalidArgument(path_ + ": opened for reading"); }
  S3Client* c_;
  std::string path_, bucket_, key_;
  uint64_t size_;
};

class S3WriteFile : public File {
 public:
  S3WriteFile(S3Client* c, std::string path, std::string bucket, std::string key, std::unique_ptr<File> spool,
              Env* spool_env, MultipartOptions o)
      : c_(c), path_(std::move(path)), bucket_(std::move(bucket)), key_(std::move(key)), spool_(std::move(spool)),
        spool_env_(spool_env), o_(o) {}
  ~S3WriteFile() override {
    if (spool_) Close().IgnoreError();
  }
  const std::string& path() const override { return path_; }
  Result<size_t> PRead(uint64_t off, std::span<std::byte> dst) override { return spool_->PRead(off, dst); }
  Status PWrite(uint64_t off, std::span<const std::byte> src) override {
    dirty_ = true;
    return spool_->PWrite(off, src);
  }
  Status Truncate(uint64_t size) override {
    dirty_ = true;
    return spool_->Truncate(size);
  }
  Result<uint64_t> Size() override { return spool_->Size(); }
  // Uploads the whole spool: the object appears whole, or not at all.
  Status Sync() override {
    if (!dirty_) return Status::Ok();
    CKPT_ASSIGN_OR_RETURN(uint64_t size, spool_->Size());
    S3MultipartWriter w(c_, bucket_, key_, o_);
    std::vector<std::byte> buf(std::min<uint64_t>(o_.part_size, std::max<uint64_t>(size, 1)));
    for (uint64_t off = 0; off < size;) {
      CKPT_ASSIGN_OR_RETURN(size_t n, spool_->PRead(off, std::span(buf).first(std::min<uint64_t>(buf.size(), size - off))));
      if (n == 0) return Status::IOError(path_ + ": spool file shorter than its size");
      CKPT_RETURN_IF_ERROR(w.Append(std::span(buf).first(n)));
      off += n;
    }
    CKPT_RETURN_IF_ERROR(w.Finish().WithContext("upload of " + path_));
    dirty_ = false;
    return Status::Ok();
  }
  Status Close() override {
    if (!spool_) return Status::Ok();
    Status st = Sync();
    const std::string spool_path = spool_->path();
    Status closed = spool_->Close();
    spool_.reset();
    spool_env_->RemoveFile(spool_path).IgnoreError();
    return st.ok() ? closed : st;
  }

 private:
  S3Client* c_;
  std::string path_, bucket_, key_;
  std::unique_ptr<File> spool_;
  Env* spool_env_;
  MultipartOptions o_;
  bool dirty_ = true;  // a created file exists after Sync even when empty
};

}  // namespace

Status SplitS3Path(const std::string& path, std::string* bucket, std::string* key) {
  auto u = S3Url::Parse(path);
  if (!u.ok()) return u.status();
  *bucket = u->bucket;
  *key = u->prefix;
  return Status::Ok();
}

S3Env::S3Env(S3Client* client, Env* spool_env, std::string spool_dir, MultipartOptions upload)
    : client_(client), spool_env_(spool_env), spool_dir_(std::move(spool_dir)), upload_(upload) {}

Result<std::string> S3Env::DataPrefixOf(const std::string& bucket, const std::string& iter_key) {
  auto head = client_->Head(bucket, iter_key + "/manifest.json");
  if (!head.ok()) return head.status().code() == Code::kNotFound ? Result<std::string>(std::string()) : head.status();
  auto it = head->meta.find(kDataMeta);
  return it == head->meta.end() ? std::string() : it->second;
}

Result<std::unique_ptr<File>> S3Env::OpenFile(const std::string& path, OpenMode mode, const OpenOptions&) {
  std::string bucket, key;
  CKPT_RETURN_IF_ERROR(SplitS3Path(path, &bucket, &key));
  if (mode == OpenMode::kCreate) {
    static std::atomic<uint64_t> seq{0};
    const std::string spool = spool_dir_ + "/s3spool-" + std::to_string(getpid()) + "-" + std::to_string(seq++);
    CKPT_ASSIGN_OR_RETURN(auto f, spool_env_->OpenFile(spool, OpenMode::kCreate));
    return std::unique_ptr<File>(new S3WriteFile(client_, path, bucket, key, std::move(f), spool_env_, upload_));
  }
  if (mode != OpenMode::kRead) return Status::Unimplemented(path + ": object stores have no read-write files");
  CKPT_ASSIGN_OR_RETURN(ObjectInfo head, HeadFollowing(bucket, &key));
  return std::unique_ptr<File>(new S3ReadFile(client_, path, bucket, key, head.size));
}

Result<ObjectInfo> S3Env::HeadFollowing(const std::string& bucket, std::string* key) {
  auto head = client_->Head(bucket, *key);
  if (!head.ok() && head.status().code() == Code::kNotFound) {
    // iter_N/<name> of a committed iteration lives under its data prefix.
    const size_t slash = key->rfind('/');
    if (slash != std::string::npos && key->substr(slash + 1) != "manifest.json") {
      const std::string iter_key = key->substr(0, slash);
      CKPT_ASSIGN_OR_RETURN(std::string data, DataPrefixOf(bucket, iter_key));
      const size_t parent = iter_key.rfind('/');
      if (!data.empty()) {
        *key = (parent == std::string::npos ? "" : iter_key.substr(0, parent + 1)) + data + key->substr(slash);
        head = client_->Head(bucket, *key);
      }
    }
  }
  return head;
}

Status S3Env::RemoveFile(const std::string& path) {
  std::string bucket, key;
  CKPT_RETURN_IF_ERROR(SplitS3Path(path, &bucket, &key));
  return client_->Delete(bucket, key);
}

Status S3Env::Rename(const std::string& from, const std::string&) {
  return Status::Unimplemented(from + ": object stores have no rename (FORMAT.md 2b)");
}
Status S3Env::RenameNoReplace(const std::string& from, const std::string&) {
  return Status::Unimplemented(from + ": object stores have no rename (FORMAT.md 2b)");
}

Result<std::vector<std::string>> S3Env::ListDir(const std::string& path) {
  std::string bucket, key;
  CKPT_RETURN_IF_ERROR(SplitS3Path(path, &bucket, &key));
  const std::string prefix = key.empty() ? "" : key + "/";
  CKPT_ASSIGN_OR_RETURN(auto objects, client_->List(bucket, prefix));
  std::set<std::string> names;
  for (const auto& o : objects) {
    std::string rest = o.key.substr(prefix.size());
    names.insert(rest.substr(0, rest.find('/')));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

Result<FileInfo> S3Env::Stat(const std::string& path) {
  std::string bucket, key;
  CKPT_RETURN_IF_ERROR(SplitS3Path(path, &bucket, &key));
  FileInfo info;
  // Files of a committed iteration are seen at iter_N/<name> as reads find them.
  auto head = key.empty() ? Result<ObjectInfo>(Status::NotFound("")) : HeadFollowing(bucket, &key);
  if (head.ok()) {
    info.exists = true;
    info.kind = FileKind::kFile;
    info.size = head->size;
    return info;
  }
  if (head.status().code() != Code::kNotFound) return head.status();
  CKPT_ASSIGN_OR_RETURN(auto under, client_->List(bucket, key.empty() ? "" : key + "/"));
  if (!under.empty()) {
    info.exists = info.is_dir = true;
    info.kind = FileKind::kDir;
  }
  return info;
}

}  // namespace ckpt::s3
