// Where an S3-compatible store is and how to sign for it.
//
// Contract: S3Config::FromEnv reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_ENDPOINT_URL (default https://s3.<region>.amazonaws.com) and AWS_REGION
// (default us-east-1); a missing key is kInvalidArgument naming the variable,
// never its value. The secret is kept only in this struct and handed to
// libcurl; no message, log or ToString of ckpt ever contains it (the URLs in
// messages are endpoint + bucket + key, which carry no credentials; userinfo
// in AWS_ENDPOINT_URL is refused for that reason).
// S3Url::Parse splits "s3://bucket/prefix" (prefix may be empty; no trailing
// slash kept). Requests are path-style (endpoint/bucket/key), which every
// S3-compatible server accepts. Pure value types; thread-compatible.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "ckpt/base/status.h"

namespace ckpt::s3 {

struct S3Config {
  std::string endpoint;  // scheme://host[:port], no trailing slash
  std::string region = "us-east-1";
  std::string access_key;
  std::string secret_key;
  // Per attempt: a request (connect + transfer) that takes longer fails and
  // is retried; the whole request, retries and backoff included, stops at
  // `request_deadline` (every wait has a timeout).
  std::chrono::milliseconds attempt_timeout{30000};
  std::chrono::milliseconds request_deadline{120000};
  std::chrono::milliseconds connect_timeout{5000};
  int max_attempts = 6;  // 1 + retries on 5xx, 429, resets, timeouts
  std::chrono::milliseconds backoff_base{50};
  std::chrono::milliseconds backoff_max{2000};

  static Result<S3Config> FromEnv();
};

struct S3Url {
  std::string bucket;
  std::string prefix;  // "" or "a/b" (no leading or trailing '/')

  static Result<S3Url> Parse(std::string_view url);
  // "s3://bucket/prefix"
  std::string ToString() const;
  // prefix + "/" + name, or name when the prefix is empty.
  std::string Key(std::string_view name) const;
};

// The object key percent-encoded for the path (RFC 3986 unreserved and '/'
// kept), which is also SigV4's canonical URI for S3.
std::string EncodeKey(std::string_view key);
// Query-string value encoding (unreserved kept, everything else %XX).
std::string EncodeQuery(std::string_view value);

}  // namespace ckpt::s3
