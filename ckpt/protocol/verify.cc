#include "ckpt/protocol/verify.h"

#include <chrono>
#include <map>
#include <set>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/format/chunk_reader.h"
#include "ckpt/format/file_meta_hash.h"
#include "reshard/intersect.h"

namespace ckpt {
namespace {

class Verifier {
 public:
  Verifier(Env* env, std::string dir, const Manifest& m, const VerifyOptions& opts, VerifyReport* report)
      : env_(env), dir_(std::move(dir)), m_(m), opts_(opts), report_(report), reader_(env, dir_, &m, true, opts.direct_io) {}

  void Run() {
    CheckFiles();
    for (const auto& s : m_.shards) {
      if (Done()) return;
      CheckChunks(s.file, s.record, s.meta.key, DTypeSize(s.meta.dtype));
    }
    for (const auto& o : m_.objects) {
      if (Done()) return;
      CheckChunks(o.file, o.record, o.meta.key, 1);
    }
    if (!Done()) CheckCoverage();
    report_->bytes_checked = reader_.bytes_read();
    report_->direct_read_bytes = int64_t(reader_.direct_io().direct_read_bytes);
    report_->files_cached = reader_.files_cached();
  }

 private:
  bool Done() const { return opts_.stop_at_first && !report_->issues.empty(); }
  void Add(VerifyIssue issue) { report_->issues.push_back(std::move(issue)); }

  void CheckFiles() {
    for (int f = 0; f < int(m_.files.size()); ++f) {
      const std::string path = JoinPath(dir_, m_.files[f].name);
      auto info = env_->Stat(path);
      ++report_->files_checked;
      if (!info.ok() || !info->exists) {
        Add({path, "", "", -1, "missing shard file (rank " + std::to_string(m_.files[f].rank) + ")"});
        bad_files_.insert(f);
      } else if (info->kind != FileKind::kFile) {  // a link is not followed (env.h)
        Add({path, "", "", -1, std::string("is ") + FileKindName(info->kind) + ", not a regular file (rank " +
                                   std::to_string(m_.files[f].rank) + "); ckpt does not read through links"});
        bad_files_.insert(f);
      } else if (info->size != m_.files[f].size) {
        Add({path, "", "", -1, "size " + std::to_string(info->size) + " bytes, manifest says " +
                                   std::to_string(m_.files[f].size)});
        bad_files_.insert(f);
      } else if (opts_.check_hdf5) {
        // Open for the chunk reads first: the metadata reads below go through
        // the page cache, and the kernel's read-ahead around them would make
        // an uncached file look cached to DirectRead::kAuto. A failure here is
        // reported by the chunk checks (they name the chunk).
        (void)reader_.OpenFile(f);
        CheckHdf5(f, path);
      }
      if (Done()) return;
    }
  }

  // libhdf5 only parses metadata whose hash matches the manifest's (v2): a
  // damaged heap or B-tree can make HDF5 loop or allocate without bound.
  void CheckHdf5(int f, const std::string& path) {
    if (!m_.files[f].meta_sha256.empty()) {
      auto meta = HashOutsideChunks(env_, path, m_.files[f].size, ChunkRangesOfFile(m_, f));
      if (!meta.ok()) return Add({path, "", "", -1, "reading the HDF5 metadata: " + meta.status().ToString()});
      if (*meta != m_.files[f].meta_sha256)
        return Add({path, "", "", -1, "HDF5 metadata damaged: the bytes outside the chunks hash " + meta->substr(0, 16) +
                                          "..., the manifest says " + m_.files[f].meta_sha256.substr(0, 16) +
                                          "... (not parsed further)"});
    }
    auto reader = ShardFileReader::Open(env_, path);
    if (!reader.ok()) {
      Add({path, "", "", -1, "not a readable HDF5 shard file: " + reader.status().ToString()});
      return;
    }
    auto list = (*reader)->List();
    if (!list.ok()) {
      Add({path, "", "", -1, "cannot list datasets: " + list.status().ToString()});
      return;
    }
    std::map<std::string, const DatasetInfo*> present;
    for (const auto& d : *list) present[d.dataset] = &d;
    auto expect = [&](const DatasetRecord& rec, const std::string& key) {
      auto it = present.find(rec.dataset);
      if (it == present.end()) return Add({path, key, rec.dataset, -1, "dataset missing from the HDF5 file"});
      const auto& chunks = it->second->record.chunks;
      for (size_t c = 0; c < rec.chunks.size(); ++c)
        if (c >= chunks.size() || chunks[c].file_offset != rec.chunks[c].file_offset)
          return Add({path, key, rec.dataset, int64_t(c), "HDF5 chunk index disagrees with the manifest"});
    };
    for (const auto& s : m_.shards)
      if (s.file == f) expect(s.record, s.meta.key);
    for (const auto& o : m_.objects)
      if (o.file == f) expect(o.record, o.meta.key);
  }

  void CheckChunks(int file, const DatasetRecord& rec, const std::string& key, size_t elem_size) {
    if (bad_files_.count(file)) return;
    for (int64_t c = 0; c < int64_t(rec.chunks.size()); ++c) {
      ++report_->chunks_checked;
      const std::string what = "tensor '" + key + "'";
      auto r = reader_.ReadDecoded(file, rec, c, elem_size, what);
      if (!r.ok()) {
        std::string problem = r.status().message();
        const std::string prefix = reader_.Where(file, rec, c, what) + ": ";
        if (problem.rfind(prefix, 0) == 0) problem = problem.substr(prefix.size());
        Add({reader_.FilePath(file), key, rec.dataset, c, problem});
        if (Done()) return;
      }
    }
  }

  void CheckCoverage() {
    std::map<std::string, std::vector<ShardedTensor>> by_key;
    for (const auto& s : m_.shards) by_key[s.meta.key].push_back(s.meta);
    for (const auto& [key, shards] : by_key) {
      Status st = reshard::CheckCoverage(key, shards[0].global_shape, shards);
      if (!st.ok()) Add({"", key, "", -1, st.message()});
      if (Done()) return;
    }
  }

  Env* env_;
  std::string dir_;
  const Manifest& m_;
  const VerifyOptions& opts_;
  VerifyReport* report_;
  ChunkReader reader_;
  std::set<int> bad_files_;
};

}  // namespace

std::string VerifyIssue::ToString() const {
  std::string s;
  if (!file.empty()) s += "file '" + file + "'";
  if (!tensor.empty()) s += (s.empty() ? "" : ", ") + std::string("tensor '") + tensor + "'";
  if (!dataset.empty()) s += ", dataset '" + dataset + "'";
  if (chunk >= 0) s += ", chunk " + std::to_string(chunk);
  return s + (s.empty() ? "" : ": ") + problem;
}

Result<VerifyReport> VerifyCheckpoint(Env* env, const std::string& root, const VerifyOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(env, root, opts.iteration));
  VerifyReport report;
  report.iteration = m.iteration;
  Verifier(env, JoinPath(root, IterDirName(m.iteration)), m, opts, &report).Run();
  if (opts.iteration < 0) {
    // "latest" passed over every newer committed-looking iteration whose
    // manifest does not read: a lagging tracker must not hide that damage.
    auto iters = ListIterations(env, root);
    for (int64_t it : iters.ok() ? *iters : std::vector<int64_t>{}) {
      if (it <= m.iteration) continue;
      Result<Manifest> newer = ReadManifest(env, root, it);
      const std::string why = newer.ok() ? "reads, but is not the latest" : newer.status().ToString();
      report.issues.push_back({JoinPath(root, IterDirName(it)), "", "", -1,
                               "iteration " + std::to_string(it) + " is newer than the verified iteration " +
                                   std::to_string(m.iteration) + " but not a readable checkpoint: " + why});
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace ckpt
