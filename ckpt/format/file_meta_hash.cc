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

namespace {

using Range = std::pair<uint64_t, uint64_t>;  // [begin, end)

// The gaps between (sorted) chunks, clipped to the file.
std::vector<Range> GapsOutside(uint64_t file_size, const std::vector<std::pair<uint64_t, uint64_t>>& chunks) {
  std::vector<Range> gaps;
  uint64_t at = 0;
  for (const auto& [offset, length] : chunks) {
    if (offset > at) gaps.emplace_back(at, std::min(offset, file_size));
    at = std::max(at, offset + length);
  }
  if (at < file_size) gaps.emplace_back(at, file_size);
  return gaps;
}

// Why spans: HDF5 puts a few hundred bytes of metadata between chunks, so one
// read per gap is hundreds of tiny reads per file (and, in a fault campaign,
// hundreds of crash points that all leave the same disk state). Neighbouring
// gaps are read as one span when the chunk bytes skipped between them are
// small; read amplification is bounded by kMaxSkip per gap.
constexpr uint64_t kMaxSkip = 1 << 20;
constexpr uint64_t kMaxSpan = 8 << 20;

struct Span {
  Range bytes;                 // what one PRead fetches
  std::vector<Range> hashed;   // the gaps inside it
};

std::vector<Span> SpansOver(const std::vector<Range>& gaps) {
  std::vector<Span> spans;
  for (const Range& g : gaps) {
    const bool joins = !spans.empty() && g.first - spans.back().bytes.second <= kMaxSkip &&
                       g.second - spans.back().bytes.first <= kMaxSpan;
    if (!joins) spans.push_back(Span{{g.first, g.first}, {}});
    spans.back().bytes.second = g.second;
    spans.back().hashed.push_back(g);
  }
  return spans;
}

}  // namespace

Result<std::string> HashOutsideChunks(Env* env, const std::string& path, uint64_t file_size,
                                      const std::vector<std::pair<uint64_t, uint64_t>>& chunks) {
  CKPT_ASSIGN_OR_RETURN(auto file, env->OpenFile(path, OpenMode::kRead));
  Sha256 hash;
  std::vector<std::byte> buf;
  for (const Span& span : SpansOver(GapsOutside(file_size, chunks))) {
    // Only a single gap can exceed kMaxSpan: read it in kMaxSpan pieces.
    uint64_t from = span.bytes.first;
    while (from < span.bytes.second) {
      const uint64_t to = std::min(span.bytes.second, from + kMaxSpan);
      buf.resize(size_t(to - from));
      CKPT_ASSIGN_OR_RETURN(size_t got, file->PRead(from, std::span(buf.data(), buf.size())));
      if (got != buf.size())
        return Status::Corruption("'" + path + "': short read at byte " + std::to_string(from + got) + " of " +
                                  std::to_string(file_size) + " (file shorter than the manifest says)");
      for (const Range& g : span.hashed) {
        const uint64_t b = std::max(g.first, from), e = std::min(g.second, to);
        if (b < e) hash.Update(std::span<const std::byte>(buf.data() + (b - from), size_t(e - b)));
      }
      from = to;
    }
  }
  CKPT_RETURN_IF_ERROR(file->Close());
  return hash.FinishHex();
}

Status CheckMetaHash(Env* env, const std::string& path, const Manifest& m, int file) {
  const std::string& want = m.files[size_t(file)].meta_sha256;
  if (want.empty()) return Status::Ok();
  CKPT_ASSIGN_OR_RETURN(std::string got, HashOutsideChunks(env, path, m.files[size_t(file)].size,
                                                           ChunkRangesOfFile(m, file)));
  if (got == want) return Status::Ok();
  return Status::Corruption("'" + path + "': HDF5 metadata damaged: the bytes outside the chunks hash " +
                            got.substr(0, 16) + "..., the manifest says " + want.substr(0, 16) + "...");
}

Status RecordMetaHash(Env* env, const std::string& path, int file, Manifest* m) {
  CKPT_ASSIGN_OR_RETURN(m->files[size_t(file)].meta_sha256,
                        HashOutsideChunks(env, path, m->files[size_t(file)].size, ChunkRangesOfFile(*m, file)));
  return Status::Ok();
}

}  // namespace ckpt
