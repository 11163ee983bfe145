#include "ckpt/storage/s3/s3_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "ckpt/storage/s3/s3_xml.h"

namespace ckpt::s3 {
namespace {

using Clock = std::chrono::steady_clock;

void GlobalInitOnce() {
  static const bool done = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)done;
}

// Per-attempt transfer state handed to the callbacks.
struct Transfer {
  const HttpRequest* req;
  HttpResponse* resp;
  size_t sent = 0;
  long status_line = 0;
  bool overflow = false;
};

size_t ReadBody(char* dst, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t left = t->req->body.size() - t->sent;
  const size_t k = std::min(left, size * n);
  std::memcpy(dst, t->req->body.data() + t->sent, k);
  t->sent += k;
  return k;
}

int SeekBody(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > t->req->body.size())
    return CURL_SEEKFUNC_CANTSEEK;
  t->sent = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

size_t WriteBody(char* src, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t k = size * n;
  const bool to_sink = !t->req->sink.empty() && t->status_line >= 200 && t->status_line < 300;
  if (!to_sink) {
    if (t->resp->body.size() + k > (64u << 20)) return 0;  // bounded: listings and errors only
    t->resp->body.append(src, k);
    return k;
  }
  if (t->resp->sink_bytes + k > t->req->sink.size()) {
    t->overflow = true;
    return 0;
  }
  std::memcpy(t->req->sink.data() + t->resp->sink_bytes, src, k);
  t->resp->sink_bytes += k;
  return k;
}

size_t OnHeader(char* src, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(src, size * n);
  if (line.substr(0, 5) == "HTTP/") {
    const size_t sp = line.find(' ');
    if (sp != std::string_view::npos) t->status_line = std::atol(std::string(line.substr(sp + 1, 3)).c_str());
    t->resp->etag.clear();
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
    value.remove_suffix(1);
  if (name == "etag") t->resp->etag = std::string(value);
  if (name.rfind("x-amz-meta-", 0) == 0) t->resp->meta[name.substr(11)] = std::string(value);
  if (name == "content-length") t->resp->content_length = std::atoll(std::string(value).c_str());
  return size * n;
}

bool RetryableCurl(int code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT: case CURLE_SEND_ERROR: case CURLE_RECV_ERROR: case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE: case CURLE_OPERATION_TIMEDOUT: case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SSL_CONNECT_ERROR: case CURLE_HTTP2: case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

// 501 (not implemented) and other 5xx that a retry cannot fix are final.
bool RetryableStatus(long s) { return s == 429 || s == 500 || s == 502 || s == 503 || s == 504; }

// Method, body source, range and content type of one attempt; returns the
// header list with the content type added. `range` must outlive the transfer.
curl_slist* SetMethod(CURL* h, const HttpRequest& req, Transfer* t, curl_slist* headers, std::string* range) {
  if (req.has_range) {
    *range = std::to_string(req.range_begin) + "-" + std::to_string(req.range_begin + req.range_len - 1);
    curl_easy_setopt(h, CURLOPT_RANGE, range->c_str());
  }
  if (req.method == "PUT") {
    headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(h, CURLOPT_READDATA, t);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, SeekBody);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, t);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  } else if (req.method == "POST") {
    headers = curl_slist_append(headers, "Content-Type: application/xml");
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    // Never null: curl would then read the body from stdin.
    const char* fields = req.body.empty() ? "" : reinterpret_cast<const char*>(req.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, fields);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  } else if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (req.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  return headers;
}

}  // namespace

struct HttpClient::Pool {
  std::mutex mu;
  std::vector<CURL*> idle;
  ~Pool() {
    for (CURL* h : idle) curl_easy_cleanup(h);
  }
  CURL* Take() {
    std::lock_guard<std::mutex> lock(mu);
    if (idle.empty()) return curl_easy_init();
    CURL* h = idle.back();
    idle.pop_back();
    return h;
  }
  void Give(CURL* h) {
    std::lock_guard<std::mutex> lock(mu);
    idle.push_back(h);
  }
};

HttpClient::HttpClient(S3Config config) : config_(std::move(config)), pool_(std::make_unique<Pool>()) {
  GlobalInitOnce();
}
HttpClient::~HttpClient() = default;

std::string HttpClient::UrlFor(const std::string& path) const {
  return config_.endpoint + path.substr(0, path.find('?'));
}

HttpStats HttpClient::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

Result<HttpResponse> HttpClient::Attempt(void* handle, const HttpRequest& req, int* curl_code) {
  CURL* h = static_cast<CURL*>(handle);
  curl_easy_reset(h);
  HttpResponse resp;
  Transfer t{&req, &resp};
  const std::string url = config_.endpoint + req.path;
  const std::string sigv4 = "aws:amz:" + config_.region + ":s3";
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(h, CURLOPT_USERNAME, config_.access_key.c_str());
  curl_easy_setopt(h, CURLOPT_PASSWORD, config_.secret_key.c_str());
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(config_.connect_timeout.count()));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(config_.attempt_timeout.count()));
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_slist* headers = nullptr;
  // The payload is not hashed into the signature (curl takes this header's
  // value as the payload hash); chunk SHA-256s in the manifest cover it.
  headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  // No "Expect:" override here: curl signs every header in this list, even
  // one that only removes a header, and the server then sees a different set
  // (SignatureDoesNotMatch on servers that check).
  for (const auto& line : req.headers) headers = curl_slist_append(headers, line.c_str());
  std::string range;
  headers = SetMethod(h, req, &t, headers, &range);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = curl_easy_perform(h);
  curl_slist_free_all(headers);
  *curl_code = rc;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.requests++;
    stats_.bytes_sent += t.sent;
    stats_.bytes_received += resp.sink_bytes + resp.body.size();
  }
  if (t.overflow)
    return Status::Corruption("s3 " + req.method + " " + UrlFor(req.path) + ": answer longer than the " +
                              std::to_string(req.sink.size()) + " bytes asked for");
  if (rc != CURLE_OK)
    return Status::IOError("s3 " + req.method + " " + UrlFor(req.path) + ": " + curl_easy_strerror(rc));
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  return resp;
}

Result<HttpResponse> HttpClient::Do(const HttpRequest& req) {
  const auto deadline = Clock::now() + config_.request_deadline;
  std::mt19937 rng(std::random_device{}());
  CURL* h = pool_->Take();
  if (!h) return Status::Internal("s3: curl_easy_init failed");
  Result<HttpResponse> last = Status::Internal("s3: no attempt made");
  bool transport_timeout = false;
  for (int attempt = 1; attempt <= config_.max_attempts; ++attempt) {
    int curl_code = 0;
    last = Attempt(h, req, &curl_code);
    transport_timeout = curl_code == CURLE_OPERATION_TIMEDOUT;
    bool retry = last.ok() ? RetryableStatus(last->status) : RetryableCurl(curl_code);
    if (last.ok()) last->attempts = attempt;
    if (!retry || attempt == config_.max_attempts) break;
    const auto cap = std::min<int64_t>(config_.backoff_max.count(), config_.backoff_base.count() << (attempt - 1));
    const auto sleep = std::chrono::milliseconds(cap / 2 + std::uniform_int_distribution<int64_t>(0, cap / 2)(rng));
    if (Clock::now() + sleep >= deadline) break;
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.retries++;
    }
    std::this_thread::sleep_for(sleep);
  }
  pool_->Give(h);
  if (!last.ok() && transport_timeout)
    return Status::Timeout(last.status().message() + " (deadline " +
                           std::to_string(config_.attempt_timeout.count()) + " ms per attempt)");
  return last;
}

Status HttpClient::ErrorFor(const HttpRequest& req, const HttpResponse& resp) const {
  std::string code = XmlFirst(resp.body, "Code");
  std::string msg = "s3 " + req.method + " " + UrlFor(req.path) + ": HTTP " + std::to_string(resp.status) +
                    (code.empty() ? "" : " " + code);
  if (std::string m = XmlFirst(resp.body, "Message"); !m.empty()) msg += " (" + m + ")";
  if (resp.attempts > 1) msg += " after " + std::to_string(resp.attempts) + " attempts";
  const long s = resp.status;
  if (s == 404) return Status::NotFound(msg);
  if (s == 412) return Status::AlreadyExists(msg);
  if (s == 409) return Status::Aborted(msg);
  if (s == 401 || s == 403) return Status::FailedPrecondition(msg + " - check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY");
  if (s >= 400 && s < 500) return Status::InvalidArgument(msg);
  if (s == 501) return Status::Unimplemented(msg);
  return Status::IOError(msg);
}

}  // namespace ckpt::s3
