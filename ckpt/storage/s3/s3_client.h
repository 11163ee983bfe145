// The S3 operations ckpt uses, over HttpClient (s3_http.h).
//
// Contract: keys are full object keys (S3Url::Key builds them); every call
// names bucket/key in its error (via HttpClient::ErrorFor). Writes are whole
// objects (PutObject, or the multipart calls that S3MultipartWriter in
// s3_multipart.h drives). PutObject with if_none_match sends
// "If-None-Match: *": a server that implements conditional writes answers
// 412 when the key exists (kAlreadyExists); one that does not (s3rver)
// overwrites silently - callers that need the guarantee probe it with
// SupportsConditionalPut. GetRange reads exactly dst.size() bytes at
// `offset` (kCorruption when the object is shorter). List returns every key
// under a prefix (ListObjectsV2, all pages). Delete of a missing key is OK
// (S3 semantics). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/status.h"
#include "ckpt/storage/s3/s3_http.h"

namespace ckpt::s3 {

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;
  std::map<std::string, std::string> meta;  // user metadata (x-amz-meta-*), Head only
};

struct UploadInfo {
  std::string key;
  std::string upload_id;
};

struct CompletedPart {
  int number = 0;  // 1-based
  std::string etag;
};

class S3Client {
 public:
  explicit S3Client(S3Config config) : http_(std::move(config)) {}

  Status CreateBucket(const std::string& bucket);  // OK when it exists and is ours
  Status PutObject(const std::string& bucket, const std::string& key, std::span<const std::byte> data,
                   bool if_none_match = false, const std::map<std::string, std::string>& meta = {});
  Result<std::string> GetObject(const std::string& bucket, const std::string& key);
  Status GetRange(const std::string& bucket, const std::string& key, uint64_t offset, std::span<std::byte> dst);
  Result<ObjectInfo> Head(const std::string& bucket, const std::string& key);
  Result<std::vector<ObjectInfo>> List(const std::string& bucket, const std::string& prefix);
  Status Delete(const std::string& bucket, const std::string& key);

  Result<std::string> CreateMultipart(const std::string& bucket, const std::string& key);
  Result<std::string> UploadPart(const std::string& bucket, const std::string& key, const std::string& upload_id,
                                 int part_number, std::span<const std::byte> data);
  Status CompleteMultipart(const std::string& bucket, const std::string& key, const std::string& upload_id,
                           const std::vector<CompletedPart>& parts);
  Status AbortMultipart(const std::string& bucket, const std::string& key, const std::string& upload_id);
  Result<std::vector<UploadInfo>> ListMultipart(const std::string& bucket, const std::string& prefix);

  // Writes a probe object twice with If-None-Match: * under `probe_key`
  // and reports whether the second write was refused (then deletes it).
  Result<bool> SupportsConditionalPut(const std::string& bucket, const std::string& probe_key);

  HttpClient& http() { return http_; }

 private:
  Result<HttpResponse> Call(HttpRequest req);  // non-2xx -> Status

  HttpClient http_;
};

}  // namespace ckpt::s3
