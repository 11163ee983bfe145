#include "ckpt/format/file_meta_hash.h"

#include <algorithm>

#include "ckpt/base/sha256.h"

namespace ckpt {

std::vector<std::pair<uint64_t, uint64_t>> ChunkRangesOfFile(const Manifest& m, int file) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  auto add = [&](const DatasetRecord& r) {
    for (const auto& c : r.chunks) out.emplace_back(c.file_offset, c.stored_size);
  };
  for (const auto& s : m.shards)
    if (s.file == file) add(s.record);
  for (const auto& o : m.objects)
    if (o.file == file) add(o.record);
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> HashOutsideChunks(Env* env, const std::string& path, uint64_t file_size,
                                      const std::vector<std::pair<uint64_t, uint64_t>>& chunks) {
  CKPT_ASSIGN_OR_RETURN(auto file, env->OpenFile(path, OpenMode::kRead));
  Sha256 hash;
  std::vector<std::byte> buf(1 << 20);
  auto hash_range = [&](uint64_t from, uint64_t to) -> Status {
    while (from < to) {
      const size_t want = size_t(std::min<uint64_t>(buf.size(), to - from));
      CKPT_ASSIGN_OR_RETURN(size_t got, file->PRead(from, std::span(buf.data(), want)));
      if (got != want)
        return Status::Corruption("'" + path + "': short read at byte " + std::to_string(from) + " of " +
                                  std::to_string(file_size) + " (file shorter than the manifest says)");
      hash.Update(std::span<const std::byte>(buf.data(), got));
      from += got;
    }
    return Status::Ok();
  };
  uint64_t at = 0;
  for (const auto& [offset, length] : chunks) {
    if (offset > at) CKPT_RETURN_IF_ERROR(hash_range(at, std::min(offset, file_size)));
    at = std::max(at, offset + length);
  }
  if (at < file_size) CKPT_RETURN_IF_ERROR(hash_range(at, file_size));
  CKPT_RETURN_IF_ERROR(file->Close());
  return hash.FinishHex();
}

Status RecordMetaHash(Env* env, const std::string& path, int file, Manifest* m) {
  CKPT_ASSIGN_OR_RETURN(m->files[size_t(file)].meta_sha256,
                        HashOutsideChunks(env, path, m->files[size_t(file)].size, ChunkRangesOfFile(*m, file)));
  return Status::Ok();
}

}  // namespace ckpt
