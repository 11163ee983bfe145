#include "ckpt/protocol/verify.h"

#include "ckpt/base/clock.h"
#include "ckpt/protocol/commit.h"

#include <chrono>
#include <map>
#include <set>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/format/chunk_reader.h"
#include "ckpt/format/file_meta_hash.h"
#include "reshard/geometry/intersect.h"

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

namespace {

std::string Iter(int64_t it) { return "iteration " + std::to_string(it); }

// One iteration's check: its manifest (an error if it cannot be trusted),
// then every file and chunk.
Result<VerifyReport> VerifyIteration(Storage* root, int64_t iteration, const VerifyOptions& opts) {
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(root, iteration));
  VerifyReport report;
  report.iteration = m.iteration;
  Verifier(root->env(), IterationDir(root, m.iteration), m, opts, &report).Run();
  return report;
}

// The report of an iteration removed while it was checked: not damage.
VerifyReport Removed(int64_t iteration, const Result<VerifyReport>& seen, std::vector<std::string> notes) {
  VerifyReport report = seen.ok() ? *seen : VerifyReport{};
  report.iteration = iteration;
  report.removed = true;
  report.issues.clear();
  report.notes = std::move(notes);
  return report;
}

std::string RemovedNote(int64_t it, const Result<VerifyReport>& seen) {
  std::string what = !seen.ok()         ? seen.status().ToString()
                     : seen->ok()       ? std::string("it read as healthy")
                                        : std::to_string(seen->issues.size()) + " problem(s), e.g. " +
                                              seen->issues[0].ToString();
  return Iter(it) + " was removed (retention or another process) while it was verified; not damage (seen: " +
         what + ")";
}

// Latest mode, after `verified` was checked: every iteration listed above it
// now. One whose manifest reads was committed after "latest" was resolved (a
// note); one that does not read is an issue unless it is gone by then.
void CheckNewer(Storage* root, int64_t verified, VerifyReport* report) {
  auto iters = ListIterations(root);
  for (int64_t it : iters.ok() ? *iters : std::vector<int64_t>{}) {
    if (it <= verified) continue;
    Result<Manifest> newer = ReadManifest(root, it);
    if (newer.ok()) {
      report->notes.push_back(Iter(it) + " was committed while " + Iter(verified) + " was verified (not checked)");
    } else if (!IterationPresent(root, it)) {
      report->notes.push_back(Iter(it) + " was removed while the root was read");
    } else {
      report->issues.push_back({IterationDir(root, it), "", "", -1,
                                Iter(it) + " is newer than the verified " + Iter(verified) +
                                    " but not a readable checkpoint: " + newer.status().ToString()});
    }
  }
}

}  // namespace

Result<VerifyReport> VerifyCheckpoint(Env* env, const std::string& root, const VerifyOptions& opts) {
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(env, root));
  return VerifyCheckpoint(storage.get(), opts);
}

Result<VerifyReport> VerifyCheckpoint(Storage* root, const VerifyOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  const bool latest = opts.iteration < 0;
  std::vector<std::string> notes;
  Result<VerifyReport> r = Status::Internal("not verified");
  for (int attempt = 0; attempt < kVerifyAttempts; ++attempt) {
    Result<int64_t> it_or = latest ? LatestIteration(root) : Result<int64_t>(opts.iteration);
    if (!it_or.ok()) return it_or.status();
    const int64_t it = *it_or;
    // A given iteration absent from the start is the caller's error (kNotFound).
    if (!latest && !IterationPresent(root, it))
      return Status::NotFound("checkpoint directory '" + IterationDir(root, it) + "' does not exist");
    r = VerifyIteration(root, it, opts);
    if ((r.ok() && r->ok()) || IterationPresent(root, it)) break;
    // Gone after the check: what failed was the removal, not damage.
    notes.push_back(RemovedNote(it, r));
    if (!latest || attempt + 1 == kVerifyAttempts) {
      r = Removed(it, r, std::move(notes));
      break;
    }
  }
  if (!r.ok()) return r.status();
  VerifyReport report = std::move(r).value();
  if (!report.removed) {
    report.notes.insert(report.notes.begin(), notes.begin(), notes.end());
    // "latest" passed over every newer committed-looking iteration whose
    // manifest does not read: a lagging tracker must not hide that damage.
    if (latest) CheckNewer(root, report.iteration, &report);
  }
  report.seconds = Since(start);
  return report;
}

bool VerifyAllReport::ok() const {
  if (!latest.ok()) return false;
  for (const auto& i : iterations)
    if (!i.error.ok() || !i.report.ok()) return false;
  return true;
}

namespace {

// What a load or verify of "latest" fails on before any chunk is read: the
// tracker, or the manifest it leads to. Resolved again when the iteration it
// named is removed meanwhile (a commit and retention ran in between).
Status CheckLatest(Storage* root) {
  Status st;
  for (int attempt = 0; attempt < kVerifyAttempts; ++attempt) {
    Result<int64_t> latest = LatestIteration(root);
    if (!latest.ok()) return latest.status();
    st = ReadManifest(root, *latest).status();
    if (st.ok() || IterationPresent(root, *latest)) return st;
  }
  return st;
}

}  // namespace

Result<VerifyAllReport> VerifyAllIterations(Env* env, const std::string& root, const VerifyOptions& opts) {
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(env, root));
  return VerifyAllIterations(storage.get(), opts);
}

Result<VerifyAllReport> VerifyAllIterations(Storage* root, const VerifyOptions& opts) {
  CKPT_ASSIGN_OR_RETURN(auto iters, ListIterations(root));
  if (iters.empty()) return Status::NotFound("no iterations under '" + root->url() + "'");
  VerifyAllReport all;
  for (int64_t it : iters) {
    VerifyOptions o = opts;
    o.iteration = it;
    Result<VerifyReport> r = VerifyCheckpoint(root, o);
    IterationVerify v;
    v.iteration = it;
    if (r.ok()) {
      v.report = std::move(r).value();
    } else if (!IterationPresent(root, it)) {  // listed, then removed before its turn
      v.report = Removed(it, r, {RemovedNote(it, r)});
    } else {
      v.error = r.status();
    }
    all.iterations.push_back(std::move(v));
  }
  all.latest = CheckLatest(root);
  return all;
}

}  // namespace ckpt
