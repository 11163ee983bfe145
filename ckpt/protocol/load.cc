// LoadCheckpoint: tracker -> manifest -> read plan -> hash-checked chunks.
#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "ckpt/base/agree.h"
#include "ckpt/base/clock.h"
#include "ckpt/base/key_bound.h"
#include "ckpt/base/timeout.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/commit.h"
#include "ckpt/format/chunk_reader.h"
#include "ckpt/protocol/load_internal.h"
#include "ckpt/protocol/load_share.h"
#include "ckpt/format/codec.h"
#include "reshard/geometry/read_plan.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

using load_internal::ChunkKey;
using load_internal::ChunkPlan;

// One load worker's counts (summed into LoadStats).
struct WorkerStats {
  int64_t elements = 0;
  double copy_seconds = 0;
};

// Keeps chunks (ahead, end) of order requested from the Env up to `budget`
// stored bytes beyond chunk `i` (the one about to be read); `ahead` is the
// last one requested so far.
void PrefetchAhead(const Manifest& m, const ChunkPlan& cp, size_t i, size_t end, int64_t budget, ChunkReader& reader,
                   size_t* ahead) {
  if (budget <= 0) return;
  int64_t queued = 0;
  for (size_t j = i + 1; j <= *ahead && j < end; ++j) {
    const ManifestShard& s = m.shards[cp.order[j].first];
    queued += int64_t(s.record.chunks[size_t(cp.order[j].second)].stored_size);
  }
  while (*ahead + 1 < end && queued < budget) {
    const ChunkKey& next = cp.order[++*ahead];
    const ManifestShard& s = m.shards[next.first];
    reader.Prefetch(s.file, s.record, next.second);
    queued += int64_t(s.record.chunks[size_t(next.second)].stored_size);
  }
}

// Reads, checks and scatters chunks order[begin, end) with its own reader,
// reading ahead (opts.prefetch_bytes, when set) while it hashes and decodes.
Status ScatterChunks(ShardedStateDict& state, const Manifest& m, const ChunkPlan& cp, size_t begin, size_t end,
                     int64_t prefetch_bytes, ChunkReader& reader, const std::atomic<bool>& stop, WorkerStats* ws) {
  size_t ahead = begin;  // chunk `begin` is read at once: no hint for it
  for (size_t i = begin; i < end && !stop.load(std::memory_order_relaxed); ++i) {
    PrefetchAhead(m, cp, i, end, prefetch_bytes, reader, &ahead);
    const ChunkKey& key = cp.order[i];
    const ManifestShard& s = m.shards[key.first];
    CKPT_ASSIGN_OR_RETURN(auto chunk, reader.ReadDecoded(s.file, s.record, key.second, DTypeSize(s.meta.dtype),
                                                         "tensor '" + s.meta.key + "'"));
    const auto t0 = Clock::now();
    CKPT_RETURN_IF_ERROR(load_internal::Scatter(state, m, cp, key, chunk, reader.FilePath(s.file), &ws->elements));
    ws->copy_seconds += Since(t0);
  }
  return Status::Ok();
}

// Fills every requested tensor of `state` from one verified manifest. Distinct
// chunks are read once each; `threads` workers take contiguous runs of the
// (file, offset)-ordered chunk list, so each reads its files front to back and
// hashing/decoding runs in parallel.
Status LoadTensors(ShardedStateDict& state, const Manifest& m, const ChunkPlan& cp, const std::string& dir,
                   const LoadOptions& opts, Env* env, LoadStats* stats) {
  const size_t workers = std::max<size_t>(1, std::min<size_t>(size_t(std::max(opts.threads, 1)), cp.order.size()));
  std::vector<std::unique_ptr<ChunkReader>> readers;
  std::vector<Status> results(workers);
  std::vector<WorkerStats> ws(workers);
  std::atomic<bool> stop{false};
  for (size_t w = 0; w < workers; ++w)
    readers.push_back(std::make_unique<ChunkReader>(env, dir, &m, opts.verify_hashes, opts.direct_io));
  load_internal::RunWorkers(workers, [&](size_t w) {
    const size_t begin = cp.order.size() * w / workers, end = cp.order.size() * (w + 1) / workers;
    results[w] = ScatterChunks(state, m, cp, begin, end, opts.prefetch_bytes, *readers[w], stop, &ws[w]);
    if (!results[w].ok()) stop = true;
  });
  stats->threads = int(workers);
  for (size_t w = 0; w < workers; ++w) {
    CKPT_RETURN_IF_ERROR(results[w]);
    stats->elements += ws[w].elements;
    stats->copy_seconds += ws[w].copy_seconds;
    stats->bytes_read += readers[w]->bytes_read();
    stats->chunks_read += readers[w]->chunks_read();
    load_internal::AddDirectIo(*readers[w], stats);
  }
  return Status::Ok();
}

Status LoadObjects(ShardedStateDict& state, const Manifest& m, ChunkReader& reader) {
  std::map<std::pair<std::string, int64_t>, const ManifestObject*> index;
  for (const auto& o : m.objects) index[{o.meta.key, o.meta.cell()}] = &o;
  for (auto& want : state.objects()) {
    auto it = index.find({want.meta.key, want.meta.cell()});
    if (it == index.end())
      return Status::NotFound("object '" + want.meta.key + "' cell " + std::to_string(want.meta.cell()) +
                              " is not in checkpoint iteration " + std::to_string(m.iteration));
    const ManifestObject& o = *it->second;
    want.bytes.clear();
    for (int64_t c = 0; c < int64_t(o.record.chunks.size()); ++c) {
      CKPT_ASSIGN_OR_RETURN(auto bytes, reader.ReadDecoded(o.file, o.record, c, 1, "object '" + o.meta.key + "'"));
      want.bytes.insert(want.bytes.end(), bytes.begin(), bytes.end());
    }
    want.bytes.resize(o.size);  // drop the padding of the last chunk
  }
  return Status::Ok();
}

bool SharesReads(const LoadOptions& opts) { return opts.share_comm && opts.share_comm->size() > 1; }

// Loads `state` from the manifest `m` (or fails with its error, or `keys`'s).
Result<LoadStats> LoadFromManifest(ShardedStateDict& state, const LoadOptions& opts, Env* env, int64_t iteration,
                                   const Result<Manifest>& m, const Status& keys) {
  LoadStats stats;
  Result<ChunkPlan> cp = !m.ok() ? Result<ChunkPlan>(m.status()) : load_internal::PlanChunks(state, *m, &stats);
  // A wrong layout of a present key says more than the missing keys do.
  if (m.ok() && !keys.ok() && (cp.ok() || cp.status().code() == Code::kNotFound)) cp = keys;
  const std::string dir = IterationDir(opts.storage, m.ok() ? m->iteration : iteration);
  // --fallback promises the newest iteration that verifies: the HDF5
  // metadata of the files read is checked too (chunks alone carry hashes).
  if (opts.fallback && cp.ok())
    if (Status meta = load_internal::CheckMetaOfReadFiles(env, dir, *m, *cp, state); !meta.ok()) cp = meta;
  if (SharesReads(opts)) {
    // Collective over the group even when this rank could not plan: its error
    // reaches the others at once instead of after a deadline.
    CKPT_RETURN_IF_ERROR(SharedLoadTensors(state, m.ok() ? &*m : nullptr, cp, dir, opts, env, &stats));
  } else {
    if (!cp.ok()) return cp.status();
    CKPT_RETURN_IF_ERROR(LoadTensors(state, *m, *cp, dir, opts, env, &stats));
  }
  std::set<int> files;
  for (const auto& key : cp->order) files.insert(m->shards[key.first].file);
  stats.files_touched = int(files.size());
  stats.iteration = m->iteration;
  ChunkReader reader(env, dir, &*m, opts.verify_hashes, opts.direct_io);
  CKPT_RETURN_IF_ERROR(LoadObjects(state, *m, reader));
  stats.bytes_read += reader.bytes_read();
  stats.chunks_read += reader.chunks_read();
  load_internal::AddDirectIo(reader, &stats);
  return stats;
}

// One iteration with strict key handling: a missing key fails the load (as
// a plan error, so a read-sharing group still meets) or is skipped.
Result<LoadStats> LoadIteration(ShardedStateDict& state, const LoadOptions& opts, Env* env, int64_t iteration) {
  Result<Manifest> m = ReadManifest(opts.storage, iteration);
  // Over-long keys fail before any planning or message quotes them (as a
  // manifest failure would: a read-sharing group still meets).
  if (Status bounded = ValidateKeyLengths(state); !bounded.ok())
    return LoadFromManifest(state, opts, env, iteration, Result<Manifest>(bounded), bounded);
  load_internal::KeyCheck kc;
  if (m.ok()) kc = load_internal::CheckKeys(state, *m);
  const Status keys = load_internal::MissingKeysStatus(kc, opts.strict);
  Result<LoadStats> r = Status::Internal("unreachable");
  if (kc.missing.empty() || !keys.ok()) {
    r = LoadFromManifest(state, opts, env, iteration, m, keys);
  } else {
    std::vector<size_t> kept;
    ShardedStateDict present = load_internal::Without(state, kc.missing, &kept);
    r = LoadFromManifest(present, opts, env, iteration, m, keys);
    for (size_t i = 0; r.ok() && i < kept.size(); ++i)
      state.objects()[kept[i]].bytes = std::move(present.objects()[i].bytes);
  }
  if (r.ok()) {
    r->missing_keys = std::move(kc.missing);
    r->unexpected_keys = std::move(kc.unrequested);
  }
  return r;
}

// Any failure of one iteration may be that iteration's damage (a gap, shape
// or dtype a damaged manifest describes is kInvalidArgument from the planner),
// so fallback tries the older one; only a rank that does not answer (the job
// cannot agree any more) ends it.
bool WorthFallingBack(const Status& s) { return s.code() != Code::kTimeout; }

// Committed-looking iterations newer than `loaded` that "latest" passed over
// because their manifest does not read: each with why, for LoadStats::skipped.
void NoteNewerSkipped(Storage* storage, int64_t loaded, const std::vector<int64_t>& iters,
                      std::vector<std::string>* skipped) {
  for (int64_t it : iters) {
    if (it <= loaded) continue;
    Result<Manifest> m = ReadManifest(storage, it);
    skipped->push_back("newer " + IterDirName(it) + " (not loaded): " +
                       (m.ok() ? std::string("reads, but was not the latest") : m.status().ToString()));
  }
}

// Every rank's outcome of one load attempt, agreed over opts.comm
// (AgreeOutcomes): OK with every rank's iteration loaded (index = rank), or
// on every rank the failure whose origin came first.
Result<std::vector<std::string>> AgreeOnLoad(const Result<LoadStats>& r, const LoadOptions& opts) {
  const Result<std::string> mine = r.ok() ? Result<std::string>(std::to_string(r->iteration)) : r.status();
  return AgreeOutcomes(opts.comm, mine, Phase::kLoad, opts.timeout);
}

// One fallback attempt, agreed: *failure is OK when every rank succeeded,
// else the agreed failure; *worth_fallback says whether it was damage or
// absence (an older iteration may still load), the same on every rank.
void AgreeOnAttempt(const Result<LoadStats>& r, const LoadOptions& opts, Status* failure, bool* worth_fallback) {
  *failure = AgreeOnLoad(r, opts).status();
  *worth_fallback = WorthFallingBack(*failure);
}

// Fallback found nothing loadable: kCorruption if some attempt failed on
// damage (a flipped bit is damaged data however many iterations it took),
// else kNotFound.
Status NothingLoadable(const std::string& root, const std::vector<Status>& skipped) {
  std::string why = "no loadable checkpoint under '" + root + "'";
  Code code = Code::kNotFound;
  for (const auto& s : skipped) {
    why += "; " + s.message();
    if (s.code() == Code::kCorruption) code = Code::kCorruption;
  }
  return Status(code, why);
}

// A rank that loads alone may resolve "latest" again when the iteration it
// tried is gone by then: retention removed it after a newer commit, so the
// root moved on and nothing was damaged. Ranks that load together keep one
// order (each would re-list the changing root on its own).
constexpr int kLoadAttempts = 5;
bool MayResolveAgain(const LoadOptions& opts) {
  return opts.iteration < 0 && (!opts.comm || opts.comm->size() == 1) && !SharesReads(opts);
}
bool RemovedMeanwhile(const LoadOptions& opts, int64_t it, int attempt, std::vector<std::string>* notes) {
  if (!MayResolveAgain(opts) || attempt + 1 >= kLoadAttempts || IterationPresent(opts.storage, it)) return false;
  notes->push_back(IterDirName(it) + " was removed while it was loaded (retention after a newer commit; not damage)");
  return true;
}

Result<LoadStats> LoadWithoutFallback(ShardedStateDict& state, const LoadOptions& opts, Env* env) {
  std::vector<std::string> removed;
  for (int attempt = 0;; ++attempt) {
    Result<int64_t> tracked = opts.iteration >= 0 ? Result<int64_t>(opts.iteration) : LatestIteration(opts.storage);
    if (!tracked.ok()) return tracked.status();
    Result<LoadStats> r = LoadIteration(state, opts, env, *tracked);
    if (!r.ok() && RemovedMeanwhile(opts, *tracked, attempt, &removed)) continue;
    if (r.ok() && opts.iteration < 0)
      if (auto iters = ListIterations(opts.storage); iters.ok())
        NoteNewerSkipped(opts.storage, r->iteration, *iters, &r->skipped);
    if (r.ok()) r->skipped.insert(r->skipped.end(), removed.begin(), removed.end());
    return r;
  }
}

// Fallback: newest committed iteration (at or below the requested one) that
// loads and verifies on every rank; the ranks decide each attempt together,
// so one rank's damaged file moves all of them to the same older iteration.
// A pass ends early (and the root is listed again) when the iteration that
// failed was removed meanwhile (MayResolveAgain).
Result<LoadStats> LoadFallback(ShardedStateDict& state, const LoadOptions& opts, Env* env) {
  std::vector<std::string> removed;
  for (int attempt = 0;; ++attempt) {
    Result<int64_t> tracked = opts.iteration >= 0 ? Result<int64_t>(opts.iteration) : LatestIteration(opts.storage);
    CKPT_ASSIGN_OR_RETURN(auto iters, ListIterations(opts.storage));
    std::vector<Status> skipped;
    if (!tracked.ok()) skipped.push_back(Status(tracked.status().code(), "tracker: " + tracked.status().ToString()));
    if (tracked.ok() && !std::binary_search(iters.begin(), iters.end(), *tracked))
      skipped.push_back(Status::NotFound(IterDirName(*tracked) + ": " +
                                         (opts.iteration >= 0 ? "requested" : "named by the tracker") +
                                         " but not present"));
    bool again = false;
    for (auto it = iters.rbegin(); it != iters.rend() && !again; ++it) {
      if (tracked.ok() && *it > *tracked) continue;
      auto r = LoadIteration(state, opts, env, *it);
      bool worth = true;
      Status failure;
      AgreeOnAttempt(r, opts, &failure, &worth);
      if (failure.ok()) {
        if (opts.iteration < 0 && tracked.ok())  // those at or below it failed in this loop
          NoteNewerSkipped(opts.storage, *tracked, iters, &r->skipped);
        for (const auto& s : skipped) r->skipped.push_back(s.message());
        r->skipped.insert(r->skipped.end(), removed.begin(), removed.end());
        return r;
      }
      if (!worth)
        return Status(Code::kAborted, "load of " + IterDirName(*it) + " failed on " + failure.message(),
                      failure.origin_rank(), failure.phase())
            .WithCause(failure.cause())
            .WithMissing(failure.missing());
      again = RemovedMeanwhile(opts, *it, attempt, &removed);
      if (!again) skipped.push_back(failure.WithContext(IterDirName(*it)));
    }
    if (!again) return NothingLoadable(opts.root, skipped);
  }
}

Result<LoadStats> LoadLocal(ShardedStateDict& state, const LoadOptions& opts, Env* env) {
  return opts.fallback ? LoadFallback(state, opts, env) : LoadWithoutFallback(state, opts, env);
}

}  // namespace

namespace load_internal {

Result<ChunkPlan> PlanChunks(ShardedStateDict& state, const Manifest& m, LoadStats* stats) {
  std::vector<ShardedTensor> requests;
  for (const auto& t : state.tensors()) requests.push_back(t.meta);
  ChunkPlan cp;
  CKPT_ASSIGN_OR_RETURN(cp.plan, reshard::PlanReads(SavedShardsOf(m), requests));
  for (const auto& rp : cp.plan.requests) {
    if (rp.zero_fill_elems > 0) {
      auto& buf = state.tensors()[rp.request].data;
      std::memset(buf.data(), 0, buf.size());
    }
    stats->zero_filled += rp.zero_fill_elems;
    for (const auto& cr : rp.reads) cp.targets[{cr.saved_shard, cr.chunk}].push_back({rp.request, &cr.runs});
  }
  for (const auto& [k, v] : cp.targets) cp.order.push_back(k);
  std::sort(cp.order.begin(), cp.order.end(), [&](const ChunkKey& a, const ChunkKey& b) {
    const ManifestShard &sa = m.shards[a.first], &sb = m.shards[b.first];
    if (sa.file != sb.file) return sa.file < sb.file;
    return sa.record.chunks[a.second].file_offset < sb.record.chunks[b.second].file_offset;
  });
  return cp;
}

Status Scatter(ShardedStateDict& state, const Manifest& m, const ChunkPlan& cp, const ChunkKey& key,
               std::span<const std::byte> chunk, const std::string& file_path, int64_t* elements) {
  const ManifestShard& s = m.shards[key.first];
  const size_t es = DTypeSize(s.meta.dtype);
  for (const Target& t : cp.targets.at(key)) {
    std::byte* dst = state.tensors()[t.request].data.data();
    for (const auto& run : *t.runs) {
      if (size_t(run.src + run.len) * es > chunk.size())
        return Status::Corruption("tensor '" + s.meta.key + "': chunk " + std::to_string(key.second) + " of " +
                                  file_path + " is shorter than its layout");
      std::memcpy(dst + run.dst * es, chunk.data() + run.src * es, size_t(run.len) * es);
      *elements += run.len;
    }
  }
  return Status::Ok();
}

Result<std::span<const std::byte>> DecodeStored(const DatasetRecord& rec, int64_t chunk, size_t elem_size,
                                                std::span<const std::byte> stored, std::vector<std::byte>* buf,
                                                const std::string& where) {
  const size_t raw = size_t(rec.chunk_elems) * elem_size;
  if (rec.compression == Compression::kNone) {
    if (stored.size() != raw)
      return Status::Corruption(where + ": stored size " + std::to_string(stored.size()) + " is not the chunk size");
    return stored;
  }
  Status size_ok = CheckZstdFrameSize(stored, raw);
  if (!size_ok.ok()) return size_ok.WithContext(where + ", chunk " + std::to_string(chunk));
  buf->resize(raw);
  Status st = DecodeChunk(stored, elem_size, rec.compression, rec.shuffle, *buf);
  if (!st.ok()) return st.WithContext(where + ", chunk " + std::to_string(chunk));
  return std::span<const std::byte>(*buf);
}

void AddDirectIo(const ChunkReader& reader, LoadStats* stats) {
  stats->read_seconds += reader.times().read;
  stats->hash_seconds += reader.times().hash;
  stats->decode_seconds += reader.times().decode;
  const DirectIoStats d = reader.direct_io();
  stats->direct_read_bytes += int64_t(d.direct_read_bytes);
  if (stats->direct_io_fallback.empty() && d.requested && !d.active) stats->direct_io_fallback = d.fallback;
  stats->files_cached += reader.files_cached();
}

void RunWorkers(size_t n, const std::function<void(size_t)>& fn) {
  std::vector<std::thread> pool;
  for (size_t w = 1; w < n; ++w) pool.emplace_back(fn, w);
  if (n > 0) fn(0);
  for (auto& t : pool) t.join();
}

}  // namespace load_internal

std::vector<reshard::SavedShard> SavedShardsOf(const Manifest& m) {
  std::vector<reshard::SavedShard> saved;
  saved.reserve(m.shards.size());
  for (const auto& s : m.shards) {
    reshard::SavedShard ss{s.meta, s.file, s.record.chunk_elems, {}};
    for (const auto& c : s.record.chunks) ss.chunk_stored_bytes.push_back(int64_t(c.stored_size));
    saved.push_back(std::move(ss));
  }
  return saved;
}

namespace {

// RootHint of the root at Env path `path`, named `shown` (its URL).
std::string HintAt(Env* env, const std::string& path, const std::string& shown) {
  std::string r = path;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  if (auto it = ParseIterDirName(BaseName(r)); it.ok())
    return "; '" + shown + "' is an iteration directory: pass its parent '" + DirName(r) +
           "' as the root (and iteration " + std::to_string(*it) + ")";
  auto info = env->Stat(r);
  if (!info.ok() || !info->exists) return "; root '" + shown + "' does not exist";
  if (!info->IsDirOrLinkToDir())
    return "; root '" + shown + "' is a file: the root is the directory holding the iter_N directories";
  return "";
}

}  // namespace

std::string RootHint(Storage* storage) { return HintAt(storage->env(), storage->root(), storage->url()); }

std::string RootHint(Env* env, const std::string& root) {
  auto storage = OpenRoot(env, root);
  return storage.ok() ? RootHint(storage->get()) : "";  // no backend for it: its open error says why
}

Result<int64_t> ReadTracker(Storage* storage) {
  Result<int64_t> tracked = storage->ReadTracker();
  if (tracked.status().code() == Code::kNotFound)
    return Status::NotFound(tracked.status().message() + RootHint(storage));
  return tracked;
}

Result<int64_t> ReadTracker(Env* env, const std::string& root) {
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(env, root));
  return ReadTracker(storage.get());
}

Result<std::vector<int64_t>> ListIterations(Storage* storage) { return storage->ListIterations(); }

Result<std::vector<int64_t>> ListIterations(Env* env, const std::string& root) {
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(env, root));
  return ListIterations(storage.get());
}

Result<Manifest> ReadManifest(Env* env, const std::string& root, int64_t iteration) {
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(env, root));
  return ReadManifest(storage.get(), iteration);
}

Result<Manifest> ReadManifest(Storage* storage, int64_t iteration) {
  if (iteration < 0) {
    CKPT_ASSIGN_OR_RETURN(iteration, LatestIteration(storage));
  }
  Env* env = storage->env();
  const std::string dir = IterationDir(storage, iteration);
  CKPT_ASSIGN_OR_RETURN(FileInfo d, env->Stat(dir));
  if (!d.IsDirOrLinkToDir())
    return Status::NotFound("checkpoint directory '" + dir + "' does not exist" + RootHint(storage));
  const std::string path = JoinPath(dir, kManifestName);
  // A dir gone by the time its manifest is read was removed (retention after
  // a newer commit), not damaged: kNotFound, as if it had not been listed.
  const auto removed = [&] {
    return Status::NotFound("checkpoint directory '" + dir + "' was removed while it was read");
  };
  CKPT_ASSIGN_OR_RETURN(FileInfo f, env->Stat(path));
  if (!f.exists) {
    if (!IterationPresent(storage, iteration)) return removed();
    return Status::Corruption("checkpoint directory '" + dir + "' has no manifest: not a committed checkpoint");
  }
  if (f.size > kMaxManifestBytes)  // refused by its size, before a byte is read
    return Status::Corruption("manifest '" + path + "': " + std::to_string(f.size) + " bytes, more than the limit of " +
                              std::to_string(kMaxManifestBytes) + " (docs/FORMAT.md, limits)");
  Result<std::string> read = ReadFileToString(env, path);
  if (!read.ok() && read.status().code() == Code::kNotFound && !IterationPresent(storage, iteration))
    return removed();
  CKPT_ASSIGN_OR_RETURN(std::string bytes, std::move(read));
  CKPT_ASSIGN_OR_RETURN(Manifest m, ParseManifest(bytes, path));
  // A committed manifest must also tile every tensor exactly once (a partial,
  // per-rank one need not): checked here, so load checks coverage as verify does.
  Status covered = ValidateManifest(m);
  if (!covered.ok()) return Status::Corruption("manifest '" + path + "': " + covered.message());
  if (m.iteration != iteration)
    return Status::Corruption("manifest '" + path + "' is for iteration " + std::to_string(m.iteration));
  return m;
}

Result<LoadStats> LoadCheckpoint(ShardedStateDict& state, const LoadOptions& options) {
  CKPT_RETURN_IF_ERROR(CheckTimeout(options.timeout, "LoadOptions::timeout"));
  const auto start = Clock::now();
  LoadOptions opts = options;
  if (opts.threads == kAutoThreads) opts.threads = DefaultWorkerThreads(opts.comm ? opts.comm : opts.share_comm);
  // The root opened once (any URL); everything below reads through it and
  // names it by its URL. A rank that cannot open it fails like a failed read.
  std::unique_ptr<Storage> owned;
  Result<LoadStats> r = Status::Internal("not loaded");
  if (!opts.storage) {
    auto opened = OpenRoot(opts.env, opts.root);
    if (opened.ok()) owned = std::move(opened).value();
    opts.storage = owned.get();
    if (!opened.ok()) r = opened.status();
  }
  if (opts.storage) {
    opts.root = opts.storage->url();
    opts.env = opts.storage->env();
    r = LoadLocal(state, opts, opts.env);
  }
  if (opts.comm && opts.comm->size() > 1 && !opts.fallback) {  // fallback agrees per attempt
    // Agree: a rank that failed makes every rank fail the same way, naming
    // the rank that hit the error first (not one relaying it for its
    // read-sharing group); all succeeded: all loaded the same iteration.
    Result<std::vector<std::string>> all = AgreeOnLoad(r, opts);
    if (!all.ok()) return all.status().WithContext("load from '" + opts.root + "'");
    const int me = opts.comm->rank();
    for (int i = 0; i < int(all->size()); ++i)
      if ((*all)[i] != (*all)[me])
        return Status::Aborted("ranks loaded different iterations (rank " + std::to_string(i) + ": " + (*all)[i] +
                               ")");
  }
  if (!r.ok()) return r.status().WithContext("load from '" + opts.root + "'");
  CKPT_RETURN_IF_ERROR(load_internal::AgreeUnexpected(opts, &*r).WithContext("load from '" + opts.root + "'"));
  r->seconds = Since(start);
  return r;
}

}  // namespace ckpt
