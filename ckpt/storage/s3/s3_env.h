// An Env over an S3-compatible store: paths are "s3://bucket/key".
//
// Contract (what differs from POSIX, because an object store has no rename,
// no directories and only whole-object writes):
//  - kRead files: PRead is a range GET (short only at the end of the object);
//    Size is the object's size from HEAD at open. A read of
//    "<root>/iter_N/<name>" whose object is absent follows the committed
//    manifest's data prefix (FORMAT.md 2b: x-amz-meta-ckpt-data on
//    iter_N/manifest.json names "iter_N.<nonce>"), so readers use the same
//    paths on every backend; Stat follows it the same way.
//  - kCreate files are spooled to a local file (through `spool_env` under
//    `spool_dir`) so that HDF5 may write anywhere in them; Sync uploads the
//    spool as one object (multipart, parts in parallel, memory bounded by
//    part_size x (parts in flight + 1)); the object appears whole at Sync,
//    never partly. Close syncs an unsynced file, then removes the spool.
//    kReadWrite: kUnimplemented.
//  - CreateDir/SyncDir/RemoveDir: OK without IO (no directories);
//    Rename/RenameNoReplace: kUnimplemented (the S3 storage never renames).
//  - ListDir: the names directly under "<path>/" (objects and "folders").
//    Stat: an object (kFile), or a prefix with objects under it (kDir).
// Thread-safe (the client is); one File per thread.
#pragma once

#include <memory>
#include <string>

#include "ckpt/base/env.h"
#include "ckpt/storage/s3/s3_client.h"
#include "ckpt/storage/s3/s3_multipart.h"

namespace ckpt::s3 {

class S3Env : public Env {
 public:
  S3Env(S3Client* client, Env* spool_env, std::string spool_dir, MultipartOptions upload);

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode,
                                         const OpenOptions& opts = {}) override;
  Status CreateDir(const std::string&) override { return Status::Ok(); }
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string&) override { return Status::Ok(); }
  Status Rename(const std::string& from, const std::string& to) override;
  Status RenameNoReplace(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string&) override { return Status::Ok(); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<FileInfo> Stat(const std::string& path) override;

  S3Client* client() { return client_; }
  // The data prefix a committed iteration's manifest names ("" when none).
  Result<std::string> DataPrefixOf(const std::string& bucket, const std::string& iter_key);

 private:
  // HEAD of *key, or of the same name under the committed data prefix when
  // *key is iter_N/<name> and absent (then *key is changed to it).
  Result<ObjectInfo> HeadFollowing(const std::string& bucket, std::string* key);

  S3Client* client_;
  Env* spool_env_;
  std::string spool_dir_;
  MultipartOptions upload_;
};

// Splits "s3://bucket/key" (kInvalidArgument otherwise).
Status SplitS3Path(const std::string& path, std::string* bucket, std::string* key);

}  // namespace ckpt::s3
