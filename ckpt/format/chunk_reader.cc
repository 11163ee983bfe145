#include "ckpt/format/chunk_reader.h"

#include <algorithm>

#include "ckpt/base/chunk_hash.h"
#include "ckpt/format/codec.h"

namespace ckpt {

ChunkReader::ChunkReader(Env* env, std::string dir, const Manifest* manifest, bool verify_hashes)
    : env_(env), dir_(std::move(dir)), manifest_(manifest), verify_(verify_hashes) {
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
  auto f = env_->OpenFile(path, OpenMode::kRead);
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
  stored_.resize(c.stored_size);
  if (verify_) hasher_->Reset();
  for (size_t off = 0; off < stored_.size(); off += kReadBlockBytes) {
    const std::span<std::byte> block = std::span<std::byte>(stored_).subspan(off, std::min(kReadBlockBytes, stored_.size() - off));
    CKPT_ASSIGN_OR_RETURN(size_t n, f->PRead(c.file_offset + off, block));
    if (n != block.size()) return Status::Corruption(where() + ": short read (file truncated)");
    if (verify_) hasher_->Update(block);  // now, while the block is in cache
  }
  bytes_read_ += int64_t(stored_.size());
  ++chunks_read_;
  if (verify_) {
    std::string got = hasher_->FinishHex();
    if (got != c.sha256)
      return Status::Corruption(where() + ": " + std::string(ChunkHashName(manifest_->chunk_hash)) +
                                " mismatch (manifest " + c.sha256 + ", data " + got + ")");
  }
  return std::span<const std::byte>(stored_);
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
  Status st = DecodeChunk(stored, elem_size, rec.compression, rec.shuffle, decoded_);
  if (!st.ok()) return st.WithContext(Where(file, rec, chunk, what));
  return std::span<const std::byte>(decoded_);
}

}  // namespace ckpt
