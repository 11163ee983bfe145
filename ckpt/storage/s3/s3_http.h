// One signed HTTP exchange with an S3-compatible server, with retries.
//
// Contract: HttpClient::Do sends `req` to config.endpoint + req.path (path
// and query already encoded and canonical: query parameters sorted, each
// "name=value"), signed by libcurl's built-in AWS SigV4
// (CURLOPT_AWS_SIGV4 "aws:amz:<region>:s3"; the payload is sent as
// UNSIGNED-PAYLOAD, the data's integrity is the manifest's chunk hashes).
// It retries with exponential backoff and jitter on connection failures,
// resets, timeouts, 429, 500, 502, 503 and 504, at most config.max_attempts times and never
// past config.request_deadline; each attempt has config.attempt_timeout.
// A request body is sent from req.body (not copied; it must outlive Do); a
// response body goes to req.sink when set (ranged GET into caller memory,
// over-long answers are kCorruption), else into HttpResponse::body.
// Status mapping (ErrorFor): 404 kNotFound, 412 kAlreadyExists (a conditional
// write lost), 409 kAborted, 403/401 kFailedPrecondition (credentials or
// permissions), other 4xx kInvalidArgument, 501 kUnimplemented, other 5xx/transport kIOError, deadline
// kTimeout. Messages name the method and URL (endpoint/bucket/key, never the
// credentials) and the server's error code.
// Thread-safe: handles come from an internal pool, one per concurrent call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/status.h"
#include "ckpt/storage/s3/s3_config.h"

namespace ckpt::s3 {

struct HttpRequest {
  std::string method = "GET";  // GET, PUT, POST, HEAD, DELETE
  std::string path;            // "/bucket/key?query", encoded
  std::vector<std::string> headers;  // extra "Name: value" lines (signed)
  std::span<const std::byte> body;   // PUT/POST payload
  bool has_range = false;
  uint64_t range_begin = 0, range_len = 0;  // Range: bytes=begin-(begin+len-1)
  std::span<std::byte> sink;                // GET into caller memory when non-empty
};

struct HttpResponse {
  long status = 0;
  std::string body;   // error bodies always land here
  std::string etag;   // ETag header, quotes kept
  int64_t content_length = -1;
  std::map<std::string, std::string> meta;  // x-amz-meta-<name> headers, name lower case
  size_t sink_bytes = 0;
  int attempts = 0;
};

// Counters for tests and the bench (all attempts, all calls).
struct HttpStats {
  uint64_t requests = 0, retries = 0, bytes_sent = 0, bytes_received = 0;
};

class HttpClient {
 public:
  explicit HttpClient(S3Config config);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Transport failures and retryable answers are retried; the final answer
  // (any status) is returned, or a transport Status once attempts run out.
  Result<HttpResponse> Do(const HttpRequest& req);
  // The Status for a non-2xx answer (see the mapping above).
  Status ErrorFor(const HttpRequest& req, const HttpResponse& resp) const;
  // "<endpoint><path without query>": safe to print.
  std::string UrlFor(const std::string& path) const;

  const S3Config& config() const { return config_; }
  HttpStats stats() const;

 private:
  struct Pool;
  Result<HttpResponse> Attempt(void* handle, const HttpRequest& req, int* curl_code);

  S3Config config_;
  std::unique_ptr<Pool> pool_;
  mutable std::mutex stats_mu_;
  HttpStats stats_;
};

}  // namespace ckpt::s3
