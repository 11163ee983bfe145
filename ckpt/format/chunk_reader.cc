#include "ckpt/format/chunk_reader.h"

#include <algorithm>

#include "ckpt/base/chunk_hash.h"
#include "ckpt/base/clock.h"
#include "ckpt/format/codec.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

ChunkReader::ChunkReader(Env* env, std::string dir, const Manifest* manifest, bool verify_hashes,
                         DirectRead direct_io)
    : env_(env), dir_(std::move(dir)), manifest_(manifest), verify_(verify_hashes), direct_(direct_io) {
  if (verify_) hasher_ = std::make_unique<ChunkHasher>(manifest_->chunk_hash);
}

ChunkReader::~ChunkReader() = default;

void ChunkReader::Prefetch(int file, const DatasetRecord& rec, int64_t chunk) {
  auto it = files_.find(file);  // only files already open: a hint never changes which files open when
  if (it == files_.end() || chunk < 0 || size_t(chunk) >= rec.chunks.size()) return;
  it->second->WillNeed(rec.chunks[size_t(chunk)].file_offset, rec.chunks[size_t(chunk)].stored_size);
}

std::string ChunkReader::FilePath(int file) const { return JoinPath(dir_, manifest_->files.at(file).name); }

std::string ChunkReader::Where(int file, const DatasetRecord& rec, int64_t chunk, const std::string& what) const {
  return "file '" + FilePath(file) + "', " + what + ", dataset '" + rec.dataset + "', chunk " + std::to_string(chunk);
}

Result<File*> ChunkReader::Open(int file) {
  auto it = files_.find(file);
  if (it != files_.end()) return it->second.get();
  if (file < 0 || size_t(file) >= manifest_->files.size())
    return Status::Corruption("manifest names file index " + std::to_string(file));
  const std::string path = FilePath(file);
  auto f = env_->OpenFile(path, OpenMode::kRead, OpenOptions{.direct = direct_ == DirectRead::kOn});
  if (f.ok() && direct_ == DirectRead::kAuto) {
    // Opened buffered first; a file mostly outside the page cache (or of
    // unknown residency) is opened again, direct.
    if ((*f)->PageCacheShare() >= kAutoCachedShare) {
      ++files_cached_;
    } else {
      CKPT_RETURN_IF_ERROR((*f)->Close());
      f = env_->OpenFile(path, OpenMode::kRead, OpenOptions{.direct = true});
    }
  }
  if (!f.ok()) {
    if (f.status().code() == Code::kNotFound)
      return Status::NotFound("shard file '" + path + "' (rank " + std::to_string(manifest_->files[file].rank) +
                              ") is missing");
    return f.status();
  }
  CKPT_ASSIGN_OR_RETURN(uint64_t size, (*f)->Size());
  if (size != manifest_->files[file].size)
    return Status::Corruption("shard file '" + path + "' has " + std::to_string(size) + " bytes, manifest says " +
                              std::to_string(manifest_->files[file].size) + " (truncated or replaced)");
  File* raw = f->get();
  files_[file] = std::move(f).value();
  return raw;
}

Result<std::span<const std::byte>> ChunkReader::ReadStored(int file, const DatasetRecord& rec, int64_t chunk,
                                                           const std::string& what) {
  CKPT_ASSIGN_OR_RETURN(File* f, Open(file));
  auto where = [&]() { return Where(file, rec, chunk, what); };
  if (chunk < 0 || size_t(chunk) >= rec.chunks.size()) return Status::Internal(where() + ": chunk index out of range");
  const ChunkRecord& c = rec.chunks[chunk];
  if (verify_) hasher_->Reset();
  auto bytes = f->direct_io().active ? ReadRangeDirect(f, c.file_offset, c.stored_size)
                                     : ReadRange(f, c.file_offset, c.stored_size);
  if (!bytes.ok()) {
    if (bytes.status().code() == Code::kCorruption) return Status::Corruption(where() + ": " + bytes.status().message());
    return bytes.status();
  }
  bytes_read_ += int64_t(bytes->size());
  ++chunks_read_;
  if (verify_) {
    const auto t0 = Clock::now();
    std::string got = hasher_->FinishHex();
    times_.hash += Since(t0);
    if (got != c.sha256)
      return Status::Corruption(where() + ": " + std::string(ChunkHashName(manifest_->chunk_hash)) +
                                " mismatch (manifest " + c.sha256 + ", data " + got + ")");
  }
  return bytes;
}

Result<std::span<const std::byte>> ChunkReader::ReadRange(File* f, uint64_t offset, size_t n) {
  stored_.resize(n);
  for (size_t off = 0; off < n; off += kReadBlockBytes) {
    const std::span<std::byte> block = std::span<std::byte>(stored_).subspan(off, std::min(kReadBlockBytes, n - off));
    const auto t0 = Clock::now();
    CKPT_ASSIGN_OR_RETURN(size_t got, f->PRead(offset + off, block));
    times_.read += Since(t0);
    if (got != block.size()) return Status::Corruption("short read (file truncated)");
    Hash(block);  // now, while the block is in cache
  }
  return std::span<const std::byte>(stored_);
}

void ChunkReader::Hash(std::span<const std::byte> block) {
  if (!verify_ || block.empty()) return;
  const auto t0 = Clock::now();
  hasher_->Update(block);
  times_.hash += Since(t0);
}

// The page-aligned span around the chunk, read whole blocks at a time (the
// Env sends aligned reads into an aligned buffer through O_DIRECT); only the
// chunk's own bytes are hashed and returned. The last block may pass EOF.
Result<std::span<const std::byte>> ChunkReader::ReadRangeDirect(File* f, uint64_t offset, size_t n) {
  constexpr uint64_t a = kDirectIoAlign;
  const uint64_t lo = offset / a * a, hi = (offset + n + a - 1) / a * a;
  const size_t head = size_t(offset - lo), span = size_t(hi - lo);
  if (direct_buf_.capacity() < span) direct_buf_ = AlignedBuffer(span);
  std::byte* buf = direct_buf_.data();
  for (size_t off = 0; off < span; off += kDirectReadBlockBytes) {
    const size_t want = std::min(kDirectReadBlockBytes, span - off);
    const auto t0 = Clock::now();
    CKPT_ASSIGN_OR_RETURN(size_t got, f->PRead(lo + off, std::span<std::byte>(buf + off, want)));
    times_.read += Since(t0);
    const size_t from = std::max(off, head), to = std::min(off + got, head + n);
    if (to > from) Hash(std::span<const std::byte>(buf + from, to - from));
    if (got < want) {
      if (off + got < head + n) return Status::Corruption("short read (file truncated)");
      break;
    }
  }
  return std::span<const std::byte>(buf + head, n);
}

DirectIoStats ChunkReader::direct_io() const {
  DirectIoStats sum;
  for (const auto& [index, f] : files_) {
    const DirectIoStats d = f->direct_io();
    sum.requested |= d.requested;
    sum.active |= d.active;
    if (sum.fallback.empty()) sum.fallback = d.fallback;
    sum.direct_read_bytes += d.direct_read_bytes;
    sum.direct_reads += d.direct_reads;
  }
  return sum;
}

Result<std::span<const std::byte>> ChunkReader::ReadDecoded(int file, const DatasetRecord& rec, int64_t chunk,
                                                            size_t elem_size, const std::string& what) {
  CKPT_ASSIGN_OR_RETURN(auto stored, ReadStored(file, rec, chunk, what));
  if (rec.compression == Compression::kNone) {
    if (stored.size() != size_t(rec.chunk_elems) * elem_size)
      return Status::Corruption(Where(file, rec, chunk, what) + ": stored size " + std::to_string(stored.size()) +
                                " is not the chunk size");
    return stored;
  }
  Status size_ok = CheckZstdFrameSize(stored, uint64_t(rec.chunk_elems) * elem_size);
  if (!size_ok.ok()) return size_ok.WithContext(Where(file, rec, chunk, what));
  decoded_.resize(size_t(rec.chunk_elems) * elem_size);
  const auto t0 = Clock::now();
  Status st = DecodeChunk(stored, elem_size, rec.compression, rec.shuffle, decoded_);
  times_.decode += Since(t0);
  if (!st.ok()) return st.WithContext(Where(file, rec, chunk, what));
  return std::span<const std::byte>(decoded_);
}

}  // namespace ckpt
