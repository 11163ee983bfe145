#include "reshard/geometry/read_plan.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace ckpt::reshard {
namespace {

// Saved shards of one key, sorted by their offset on `axis` (the axis with the
// most distinct offsets, i.e. the split axis) so that the candidates for a
// requested box are found by binary search rather than by a scan.
struct KeyIndex {
  std::vector<int> shards;  // indices into the saved list
  bool sorted = false;
  size_t axis = 0;
  std::vector<int64_t> begins;    // offset on `axis`, ascending
  std::vector<int64_t> max_ends;  // prefix maximum of offset + extent on `axis`
};

size_t SplitAxis(const std::vector<SavedShard>& saved, const std::vector<int>& shards,
                 size_t rank) {
  size_t best = 0, best_distinct = 0;
  std::vector<int64_t> offs;
  for (size_t d = 0; d < rank; ++d) {
    offs.clear();
    for (int i : shards) offs.push_back(saved[size_t(i)].meta.global_offset[d]);
    std::sort(offs.begin(), offs.end());
    size_t distinct = size_t(std::unique(offs.begin(), offs.end()) - offs.begin());
    if (distinct > best_distinct) best = d, best_distinct = distinct;
  }
  return best;
}

// Validates and sorts lazily: only keys that are requested pay for it.
// Saved metadata comes from a manifest, so a malformed entry is corruption.
Status SortIndex(const std::vector<SavedShard>& saved, KeyIndex* idx) {
  if (idx->sorted) return Status::Ok();
  const size_t rank = saved[size_t(idx->shards.front())].meta.global_shape.size();
  for (int i : idx->shards) {
    const ShardedTensor& m = saved[size_t(i)].meta;
    Status st = m.Validate();
    if (st.ok() && m.global_shape.size() != rank)
      st = Status::InvalidArgument("rank differs from other shards of the tensor");
    if (!st.ok())
      return Status::Corruption("tensor '" + m.key + "': saved shard #" + std::to_string(i) +
                                " is malformed: " + st.message());
  }
  idx->sorted = true;
  if (rank == 0) return Status::Ok();
  idx->axis = SplitAxis(saved, idx->shards, rank);
  const size_t ax = idx->axis;
  std::stable_sort(idx->shards.begin(), idx->shards.end(), [&](int x, int y) {
    return saved[size_t(x)].meta.global_offset[ax] < saved[size_t(y)].meta.global_offset[ax];
  });
  int64_t max_end = std::numeric_limits<int64_t>::min();
  for (int i : idx->shards) {
    const ShardedTensor& m = saved[size_t(i)].meta;
    idx->begins.push_back(m.global_offset[ax]);
    max_end = std::max(max_end, m.global_offset[ax] + m.local_shape[ax]);
    idx->max_ends.push_back(max_end);
  }
  return Status::Ok();
}

// Saved shards whose extent on the index axis meets the request's; callers
// still intersect the full boxes.
std::pair<size_t, size_t> CandidateRange(const KeyIndex& idx, const ShardedTensor& req) {
  if (idx.begins.empty()) return {0, idx.shards.size()};  // rank 0
  const int64_t lo = req.global_offset[idx.axis];
  const int64_t hi = lo + req.local_shape[idx.axis];
  size_t first =
      size_t(std::upper_bound(idx.max_ends.begin(), idx.max_ends.end(), lo) - idx.max_ends.begin());
  size_t last =
      size_t(std::lower_bound(idx.begins.begin(), idx.begins.end(), hi) - idx.begins.begin());
  return {first, std::max(first, last)};
}

Status CheckCompatible(const ShardedTensor& saved, const ShardedTensor& req) {
  if (saved.dtype != req.dtype)
    return Status::InvalidArgument("tensor '" + req.key + "': dtype mismatch: checkpoint has " +
                                   std::string(DTypeName(saved.dtype)) + ", request has " +
                                   std::string(DTypeName(req.dtype)));
  const bool same_rank = saved.global_shape.size() == req.global_shape.size();
  if (saved.global_shape != req.global_shape && (!req.allow_shape_mismatch || !same_rank))
    return Status::InvalidArgument(
        "tensor '" + req.key + "': global shape mismatch: checkpoint has " +
        ShapeToString(saved.global_shape) + ", request has " + ShapeToString(req.global_shape) +
        (same_rank ? "" : " (ranks differ)"));
  return Status::Ok();
}

// Requested elements outside the saved global shape (padded vocab rows).
int64_t ZeroFillElems(const Shape& saved_global, const ShardedTensor& req) {
  if (saved_global == req.global_shape) return 0;
  ShardedTensor bound;
  bound.global_offset.assign(saved_global.size(), 0);
  bound.local_shape = saved_global;
  return req.num_elements() - OverlapCount(req, bound);
}

// Splits runs (sorted by src) at chunk boundaries of saved shard `shard` and
// appends one ChunkRead per chunk touched, src made chunk-relative.
void AppendChunkReads(int shard, int64_t chunk_elems, const std::vector<CopyRun>& runs,
                      std::vector<ChunkRead>* reads) {
  for (CopyRun r : runs) {
    while (r.len > 0) {
      const int64_t chunk = chunk_elems > 0 ? r.src / chunk_elems : 0;
      const int64_t rel = r.src - chunk * chunk_elems;
      const int64_t take = chunk_elems > 0 ? std::min(r.len, chunk_elems - rel) : r.len;
      if (reads->empty() || reads->back().saved_shard != shard || reads->back().chunk != chunk)
        reads->push_back({shard, chunk, {}});
      reads->back().runs.push_back({rel, r.dst, take});
      r.src += take;
      r.dst += take;
      r.len -= take;
    }
  }
}

int64_t ChunkStoredBytes(const SavedShard& s, int64_t chunk) {
  if (chunk < int64_t(s.chunk_stored_bytes.size())) return s.chunk_stored_bytes[size_t(chunk)];
  const int64_t n = s.meta.num_elements();
  const int64_t c = s.chunk_elems > 0 ? s.chunk_elems : n;
  const int64_t elems = std::max<int64_t>(0, std::min(c, n - chunk * c));
  return elems * int64_t(DTypeSize(s.meta.dtype));
}

int64_t NumChunks(const SavedShard& s) {
  const int64_t n = s.meta.num_elements();
  if (s.chunk_elems <= 0) return 1;
  return std::max<int64_t>(1, (n + s.chunk_elems - 1) / s.chunk_elems);
}

// Counts each distinct (saved shard, chunk) once across the whole plan: a
// chunk needed by several requests is read once. One bit per saved chunk.
class ChunkTally {
 public:
  ChunkTally(const std::vector<SavedShard>& saved, ReadPlan* plan) : saved_(saved), plan_(plan) {
    base_.reserve(saved.size() + 1);
    base_.push_back(0);
    for (const SavedShard& s : saved) base_.push_back(base_.back() + NumChunks(s));
    seen_.assign(size_t(base_.back()), false);
  }

  void Touch(int shard, int64_t chunk) {
    const int64_t bit = base_[size_t(shard)] + chunk;
    if (seen_[size_t(bit)]) return;
    seen_[size_t(bit)] = true;
    const SavedShard& s = saved_[size_t(shard)];
    plan_->bytes_read += ChunkStoredBytes(s, chunk);
    plan_->chunks_read += 1;
    plan_->files.insert(s.file_index);
  }

 private:
  const std::vector<SavedShard>& saved_;
  ReadPlan* plan_;
  std::vector<int64_t> base_;  // first bit of each saved shard's chunks
  std::vector<bool> seen_;
};

bool BoxesMeet(const ShardedTensor& a, const ShardedTensor& b) {
  for (size_t d = 0; d < a.global_offset.size(); ++d)
    if (a.global_offset[d] >= b.global_offset[d] + b.local_shape[d] ||
        b.global_offset[d] >= a.global_offset[d] + a.local_shape[d])
      return false;
  return true;
}

Result<RequestPlan> PlanOne(const std::vector<SavedShard>& saved, KeyIndex* idx, int request,
                            const ShardedTensor& req, ChunkTally* tally) {
  CKPT_RETURN_IF_ERROR(req.Validate());
  CKPT_RETURN_IF_ERROR(SortIndex(saved, idx));
  const ShardedTensor& ref = saved[size_t(idx->shards.front())].meta;
  CKPT_RETURN_IF_ERROR(CheckCompatible(ref, req));
  RequestPlan plan;
  plan.request = request;
  plan.zero_fill_elems = ZeroFillElems(ref.global_shape, req);
  auto [first, last] = CandidateRange(*idx, req);
  for (size_t c = first; c < last; ++c) {
    const int s = idx->shards[c];
    const SavedShard& shard = saved[size_t(s)];
    if (!BoxesMeet(shard.meta, req)) continue;
    std::vector<CopyRun> runs = Intersect(shard.meta, req);
    if (runs.empty()) continue;
    CKPT_RETURN_IF_ERROR(CheckCompatible(shard.meta, req));
    const size_t before = plan.reads.size();
    AppendChunkReads(s, shard.chunk_elems, runs, &plan.reads);
    for (const CopyRun& r : runs) plan.covered_elems += r.len;
    for (size_t i = before; i < plan.reads.size(); ++i) tally->Touch(s, plan.reads[i].chunk);
  }
  const int64_t want = req.num_elements();
  const int64_t got = plan.covered_elems + plan.zero_fill_elems;
  if (got < want)
    return Status::InvalidArgument("tensor '" + req.key + "': " + std::to_string(want - got) +
                                   " of " + std::to_string(want) +
                                   " requested elements are not covered by any saved shard "
                                   "(the checkpoint has a gap)");
  if (got > want)
    return Status::Corruption("tensor '" + req.key +
                              "': saved shards overlap: " + std::to_string(got - want) +
                              " requested elements are held by more than one saved shard");
  return plan;
}

}  // namespace

Result<ReadPlan> PlanReads(const std::vector<SavedShard>& saved,
                           const std::vector<ShardedTensor>& requests) {
  std::unordered_map<std::string_view, KeyIndex> index;
  index.reserve(saved.size());
  for (size_t i = 0; i < saved.size(); ++i)
    if (saved[i].meta.is_main_replica()) index[saved[i].meta.key].shards.push_back(int(i));

  ReadPlan plan;
  plan.requests.reserve(requests.size());
  ChunkTally tally(saved, &plan);
  for (size_t r = 0; r < requests.size(); ++r) {
    auto it = index.find(requests[r].key);
    if (it == index.end())
      return Status::NotFound("tensor '" + requests[r].key + "' is not in the checkpoint");
    CKPT_ASSIGN_OR_RETURN(RequestPlan rp, PlanOne(saved, &it->second, int(r), requests[r], &tally));
    plan.requests.push_back(std::move(rp));
  }
  return plan;
}

int64_t UnionStoredBytes(const std::set<const ReadPlan*>& plans, const std::vector<SavedShard>& saved) {
  std::set<std::pair<int, int64_t>> chunks;
  for (const auto* p : plans)
    for (const auto& rp : p->requests)
      for (const auto& cr : rp.reads) chunks.insert({cr.saved_shard, cr.chunk});
  int64_t n = 0;
  for (const auto& [s, c] : chunks) {
    const auto& stored = saved[size_t(s)].chunk_stored_bytes;
    n += size_t(c) < stored.size() ? stored[size_t(c)] : 0;
  }
  return n;
}

}  // namespace ckpt::reshard
