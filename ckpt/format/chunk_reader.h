// ChunkReader: reads stored chunks of one committed checkpoint directory,
// checks their digest (the manifest's chunk_hash: SHA-256 or XXH3-128)
// against the manifest and decodes them.
//
// Reads go straight to the chunk's recorded byte range through the Env (the
// manifest records each chunk's file offset and stored size; the hash makes
// that safe), in blocks of kReadBlockBytes, each hashed as soon as it is read
// (while it is still in the core's cache) rather than after the whole chunk.
// Prefetch() asks the Env to start reading a chunk in the background, so the
// disk works on the next chunk while this thread hashes and decodes.
// With DirectRead::kOn the files are opened with OpenOptions::direct and a chunk
// is read around its page-aligned span, in blocks of kDirectReadBlockBytes, into
// the reader's own aligned buffer: no page-cache copy, and nothing of the file
// left in the page cache (DESIGN "Direct reads"). A file the filesystem will not
// read direct is read buffered (direct_io().fallback says why). kAuto decides
// per file when it opens it: buffered when at least kAutoCachedShare of it is
// in the page cache (File::PageCacheShare), else as kOn.
// Errors are kCorruption / kNotFound naming the file, tensor (or object) and
// chunk index. Files are opened lazily and kept open.
// Not thread-safe: one reader per thread.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/chunk_hash.h"
#include "ckpt/base/env.h"
#include "ckpt/format/aligned_buffers.h"
#include "ckpt/format/manifest.h"
#include "ckpt/base/status.h"

namespace ckpt {

inline constexpr size_t kReadBlockBytes = size_t(256) << 10;
inline constexpr size_t kDirectReadBlockBytes = size_t(4) << 20;
inline constexpr double kAutoCachedShare = 0.5;

class ChunkReader {
 public:
  ChunkReader(Env* env, std::string dir, const Manifest* manifest, bool verify_hashes,
              DirectRead direct_io = DirectRead::kOff);
  ~ChunkReader();

  // Hint that chunk `chunk` of `rec` in `file` is read soon (File::WillNeed),
  // if that file is open already (a hint opens nothing). Never fails.
  void Prefetch(int file, const DatasetRecord& rec, int64_t chunk);

  // Stored bytes of chunk `chunk` of `rec` in manifest file `file`, hash-checked.
  // `what` names the tensor or object in errors. The span lives until the next call.
  Result<std::span<const std::byte>> ReadStored(int file, const DatasetRecord& rec, int64_t chunk,
                                                const std::string& what);
  // Stored -> decoded chunk of chunk_elems * elem_size bytes. Same lifetime rule.
  Result<std::span<const std::byte>> ReadDecoded(int file, const DatasetRecord& rec, int64_t chunk,
                                                 size_t elem_size, const std::string& what);

  // Opens manifest file `file` now unless it is open: kAuto then decides from
  // the page cache as it is at this moment (a caller about to read other parts
  // of the file buffered - ckpt verify's metadata check - opens it first).
  // Errors as the reads report them (missing file, wrong size).
  Status OpenFile(int file) { return Open(file).status(); }

  int64_t bytes_read() const { return bytes_read_; }
  // Where this reader's time went (seconds): reading from the Env, hashing,
  // decoding; the split of a load's time (LoadStats).
  struct Times {
    double read = 0, hash = 0, decode = 0;
  };
  const Times& times() const { return times_; }
  int64_t chunks_read() const { return chunks_read_; }
  int files_opened() const { return int(files_.size()); }
  // kAuto: files opened buffered because they were in the page cache.
  int files_cached() const { return files_cached_; }
  // Direct reads of the files opened so far, summed (requested/active: any
  // file; fallback: the first file's reason).
  DirectIoStats direct_io() const;
  std::string FilePath(int file) const;
  // "file '<path>', <what>, dataset '<d>', chunk <i>": the prefix of chunk errors.
  std::string Where(int file, const DatasetRecord& rec, int64_t chunk, const std::string& what) const;

 private:
  Result<File*> Open(int file);
  // Reads [offset, offset + n) of `f` into stored_ (buffered) or direct_buf_,
  // hashing as it goes; the span of those n bytes. kCorruption when the file
  // ends first (the caller names the chunk).
  Result<std::span<const std::byte>> ReadRange(File* f, uint64_t offset, size_t n);
  Result<std::span<const std::byte>> ReadRangeDirect(File* f, uint64_t offset, size_t n);
  void Hash(std::span<const std::byte> block);  // when verifying; timed

  Env* env_;
  std::string dir_;
  const Manifest* manifest_;
  bool verify_;
  DirectRead direct_;
  std::unique_ptr<ChunkHasher> hasher_;  // of manifest->chunk_hash, when verifying
  std::map<int, std::unique_ptr<File>> files_;
  std::vector<std::byte> stored_, decoded_;
  AlignedBuffer direct_buf_;  // direct reads land here (page-aligned)
  int64_t bytes_read_ = 0, chunks_read_ = 0;
  Times times_;
  int files_cached_ = 0;
};

}  // namespace ckpt
