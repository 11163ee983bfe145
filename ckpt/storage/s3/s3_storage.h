// The S3 backend of the storage seam (ckpt/storage/storage.h): the
// object-store commit of docs/FORMAT.md section 2b, without rename.
//
//  Stage(N):   removes abandoned saves (leases past their expiry, data
//              prefixes no lease and no manifest names, their unfinished
//              multipart uploads), refuses an existing iteration and a live
//              lease, PUTs the lease ".lease/iter_N" (If-None-Match: *), and
//              stages files under "iter_N.<nonce>/" (env() paths).
//  Publish:    after the caller synced every staged file (each is then a
//              whole object), PUTs "iter_N/manifest.json" with If-None-Match:
//              * and x-amz-meta-ckpt-data = "iter_N.<nonce>": the commit
//              point. 412: kAlreadyExists (another writer committed first).
//              Servers without conditional writes: HEAD-then-PUT (the limit
//              FORMAT.md 2b states).
//  Tracker:    "latest_checkpointed_iteration.txt", a plain PUT after it.
//  Listing:    iterations with a manifest object only.
//  Delete:     the manifest first, then the data prefix.
// The lease is a time lease (an object store cannot see a process die):
// a StagedSave destroyed normally deletes it; a killed process leaves it
// until lease_ttl passes, then the next Stage cleans up after it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ckpt/storage/s3/s3_env.h"
#include "ckpt/storage/storage.h"

namespace ckpt::s3 {

struct S3StorageOptions {
  MultipartOptions upload;
  std::chrono::milliseconds lease_ttl{std::chrono::hours(2)};
  Env* spool_env = nullptr;      // local Env for the write spool (required)
  std::string spool_dir = "/tmp";
};

// `url` is "s3://bucket/prefix". Opening does no IO except the one-time
// probe of conditional writes (a probe object under prefix/.probe/).
Result<std::unique_ptr<Storage>> OpenS3Storage(const std::string& url, const S3Config& config,
                                               const S3StorageOptions& options);

}  // namespace ckpt::s3

namespace ckpt::s3 {

// Registers the "s3" scheme with OpenStorage (ckpt/storage/storage.h), so
// OpenStorage("s3://bucket/prefix") opens this backend. Each open reads the
// endpoint and credentials from the environment (S3Config::FromEnv: a
// missing variable is named, a secret never printed) and spools writes
// through StorageOptions::env (nullptr: DefaultEnv()) under $TMPDIR (or
// /tmp); other options are S3StorageOptions' defaults. Call it at an edge
// (CLI main, the Python binding, a test) - a static registrar in a static
// library would be dropped by the linker. Idempotent; thread-safe.
Status RegisterS3Scheme();

}  // namespace ckpt::s3
