#include "ckpt/storage/s3/s3_config.h"

#include <cstdlib>

namespace ckpt::s3 {
namespace {

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

std::string Encode(std::string_view s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (Unreserved(c) || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace

Result<S3Config> S3Config::FromEnv() {
  S3Config c;
  c.access_key = Getenv("AWS_ACCESS_KEY_ID");
  c.secret_key = Getenv("AWS_SECRET_ACCESS_KEY");
  if (c.access_key.empty()) return Status::InvalidArgument("s3: AWS_ACCESS_KEY_ID is not set");
  if (c.secret_key.empty()) return Status::InvalidArgument("s3: AWS_SECRET_ACCESS_KEY is not set");
  if (std::string r = Getenv("AWS_REGION"); !r.empty()) c.region = r;
  c.endpoint = Getenv("AWS_ENDPOINT_URL");
  if (c.endpoint.empty()) c.endpoint = "https://s3." + c.region + ".amazonaws.com";
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  const size_t scheme = c.endpoint.find("://");
  if (scheme == std::string::npos || (c.endpoint.compare(0, scheme, "http") != 0 &&
                                      c.endpoint.compare(0, scheme, "https") != 0))
    return Status::InvalidArgument("s3: AWS_ENDPOINT_URL must start with http:// or https://");
  if (c.endpoint.find('@', scheme) != std::string::npos)
    return Status::InvalidArgument("s3: AWS_ENDPOINT_URL must not carry credentials (use AWS_ACCESS_KEY_ID)");
  return c;
}

Result<S3Url> S3Url::Parse(std::string_view url) {
  constexpr std::string_view kScheme = "s3://";
  if (url.substr(0, kScheme.size()) != kScheme)
    return Status::InvalidArgument("not an s3:// URL: " + std::string(url));
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  S3Url u;
  u.bucket = std::string(rest.substr(0, slash));
  if (u.bucket.empty()) return Status::InvalidArgument("s3 URL without a bucket: " + std::string(url));
  std::string_view prefix = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  if (prefix.find("//") != std::string_view::npos)
    return Status::InvalidArgument("s3 URL with an empty path segment: " + std::string(url));
  u.prefix = std::string(prefix);
  return u;
}

std::string S3Url::ToString() const { return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix); }

std::string S3Url::Key(std::string_view name) const {
  return prefix.empty() ? std::string(name) : prefix + "/" + std::string(name);
}

std::string EncodeKey(std::string_view key) { return Encode(key, true); }
std::string EncodeQuery(std::string_view value) { return Encode(value, false); }

}  // namespace ckpt::s3
