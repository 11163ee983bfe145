// The "s3" entry of the storage scheme registry: config from the
// environment at each open (so a test or a job can set AWS_* before it
// opens a root), spool through the caller's Env.
#include <cstdlib>
#include <mutex>

#include "ckpt/storage/s3/s3_storage.h"

namespace ckpt::s3 {
namespace {

Result<std::unique_ptr<Storage>> OpenFromEnv(const std::string& url, const StorageOptions& opts) {
  Result<S3Config> config = S3Config::FromEnv();
  if (!config.ok()) return config.status().WithContext("opening storage URL '" + url + "'");
  S3StorageOptions o;
  o.spool_env = opts.env ? opts.env : DefaultEnv();
  const char* tmp = std::getenv("TMPDIR");
  o.spool_dir = tmp && *tmp ? tmp : "/tmp";
  return OpenS3Storage(url, *config, o);
}

}  // namespace

Status RegisterS3Scheme() {
  static std::once_flag once;
  static Status result;
  std::call_once(once, [] { result = RegisterStorageScheme("s3", OpenFromEnv); });
  return result;
}

}  // namespace ckpt::s3
