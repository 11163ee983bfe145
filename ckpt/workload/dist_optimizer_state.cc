// DistOptimizerState: a rank's owned optimizer slices, their model-space
// fragments and bucket-space slices, expected contents, layout descriptors.
#include "ckpt/workload/dist_optimizer_state.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "ckpt/workload/expected_values.h"

namespace ckpt::workload {
using namespace ckpt::reshard;  // the layout rules this state follows
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// The box and replica of the param's tensor, narrowed to [lo, hi) of it. MCore
// keeps the (pp, tp) replica slots and zeroes the DP slot: DP ranks hold
// different fragments, not copies.
ShardedTensor FragmentOf(const ShardedTensor& model, int64_t lo, int64_t hi) {
  ShardedTensor t = model;
  t.dtype = DType::kFloat32;
  t.flat_range = FlatRange{lo, hi};
  if (!t.replica_id.empty()) t.replica_id.back() = 0;
  return t;
}

std::string BucketKey(const RankBuffer& rb, int bucket, const char* state) {
  return "optimizer.distributed." + rb.dp_domain + ".gbuf_idx_" + Str(rb.gbuf_index) + ".dtype_" +
         std::string(DTypeName(rb.dtype)) + ".bucket_idx_" + Str(bucket) + "." + state;
}

// MCore's dp_reshardable prefix: "[chained_<i>.]optimizer.distributed.dp_group_idx_<mp>.".
std::string McorePrefix(const RankBuffer& rb) {
  return (rb.chained >= 0 ? "chained_" + Str(rb.chained) + "." : std::string()) +
         "optimizer.distributed.dp_group_idx_" + Str(rb.mp_rank) + ".";
}

std::string McoreBucketKey(const RankBuffer& rb, int bucket, const char* state) {
  return McorePrefix(rb) + "gbuf_idx_" + Str(rb.gbuf_index) + ".dtype_" + McoreBufferDtypeName(rb.dtype) +
         ".bucket_idx_" + Str(bucket) + "." + state;
}

std::string McoreParamLayoutKey(const RankBuffer& rb) { return DpReshardableLayoutKey(rb); }

std::string LayoutKey(const RankBuffer& rb) {
  return "optimizer.distributed." + rb.dp_domain + ".gbuf_idx_" + Str(rb.gbuf_index) +
         ".bucket_layout";
}

// Everything a raw slice's meaning depends on, identical on every DP rank of
// the buffer: DP size, bucket boundaries, and which global tensor boxes sit
// where (so an uneven-PP change with equal local names is caught too).
std::string Descriptor(const RankBuffer& rb,
                       const std::map<std::string, std::vector<const GptShard*>>& by_param) {
  nlohmann::json buckets = nlohmann::json::array(), params = nlohmann::json::array();
  for (const Bucket& b : rb.layout.buckets) buckets.push_back({b.start, b.end, b.numel_unpadded});
  for (size_t i = 0; i < rb.layout.params.size(); ++i) {
    nlohmann::json boxes = nlohmann::json::array();
    for (const GptShard* g : by_param.at(rb.layout.params[i].name))
      boxes.push_back({g->tensor.key, g->tensor.global_offset, g->tensor.local_shape});
    params.push_back({rb.layout.starts[i], rb.layout.params[i].numel, boxes});
  }
  return nlohmann::json{{"dp", rb.layout.dp_size},   {"dtype", std::string(DTypeName(rb.dtype))},
                        {"bucket_elems", rb.bucket_elems}, {"buckets", buckets},
                        {"params", params}}
      .dump();
}

// dp_reshardable: what a bucket's contents mean, independent of the DP size:
// each bucket's unpadded size and each param's position inside its bucket and boxes.
std::string McoreParamLayout(const RankBuffer& rb,
                             const std::map<std::string, std::vector<const GptShard*>>& by_param) {
  nlohmann::json buckets = nlohmann::json::array(), params = nlohmann::json::array();
  for (const Bucket& b : rb.layout.buckets) buckets.push_back(b.numel_unpadded);
  for (int bi = 0; bi < int(rb.layout.buckets.size()); ++bi) {
    const Bucket& b = rb.layout.buckets[size_t(bi)];
    for (int i = b.first_param; i < b.first_param + b.num_params; ++i) {
      nlohmann::json boxes = nlohmann::json::array();
      for (const GptShard* g : by_param.at(rb.layout.params[size_t(i)].name))
        boxes.push_back({g->tensor.key, g->tensor.global_offset, g->tensor.local_shape});
      params.push_back({bi, rb.layout.starts[size_t(i)] - b.start, rb.layout.params[size_t(i)].numel, boxes});
    }
  }
  return nlohmann::json{{"dtype", McoreBufferDtypeName(rb.dtype)}, {"numel_unpadded", buckets},
                        {"params", params}}
      .dump();
}

// MCore's per_bucket_numel[_unpadded] of one optimizer: per buffer {dtype: [numels]}.
std::string PerBucketNumel(const std::vector<RankBuffer>& buffers, int chained, bool unpadded) {
  nlohmann::json all = nlohmann::json::array();
  for (const RankBuffer& rb : buffers) {
    if (rb.chained != chained) continue;
    nlohmann::json sizes = nlohmann::json::array();
    for (const Bucket& b : rb.layout.buckets) sizes.push_back(unpadded ? b.numel_unpadded : b.end - b.start);
    all.push_back({{McoreBufferDtypeName(rb.dtype), sizes}});
  }
  return all.dump();
}

std::vector<std::byte> Blob(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return std::vector<std::byte>(p, p + s.size());
}

std::string Text(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

constexpr const char* kDpReshardableRule =
    "; dp_reshardable optimizer state holds the DDP buckets of one TP/PP/EP split and loads at "
    "another DP size only when the buckets' unpadded sizes and parameter order are unchanged (as "
    "MCore asserts); save it as fully_reshardable (--optimizer fully_reshardable) to load it "
    "across TP, PP, EP or bucket-size changes";

// What differs between a saved descriptor and ours, in words.
std::string Difference(const nlohmann::json& saved, const nlohmann::json& mine) {
  if (saved.value("dp", -1) != mine.value("dp", -1))
    return "its data-parallel size is " + saved["dp"].dump() + ", this job's is " + mine["dp"].dump();
  if (saved.value("buckets", nlohmann::json()) != mine["buckets"])
    return "its buckets differ (" + Str(int64_t(saved.value("buckets", nlohmann::json()).size())) +
           " bucket(s) with bucket_elems " + saved.value("bucket_elems", nlohmann::json()).dump() +
           ", this job " + Str(int64_t(mine["buckets"].size())) + " with bucket_elems " +
           mine["bucket_elems"].dump() + ")";
  return "the parameters laid out in it differ (another TP/PP/EP split or model)";
}

// What a raw slice's meaning depends on ("bucket_elems" is informative only).
constexpr const char* kLayoutFields[] = {"dp", "dtype", "buckets", "params"};

constexpr const char* kOnlyIdentical =
    "; bucket-space optimizer state holds raw per-rank slices of the DDP buckets and loads only "
    "into an identical bucket layout (same DP size, TP/PP/EP split, model and bucket size); save "
    "it in model space (--optimizer model) to load it across DP, TP, PP, EP or bucket-size "
    "changes";

}  // namespace

std::string DpReshardableLayoutKey(const RankBuffer& rb) {
  return McorePrefix(rb) + "gbuf_idx_" + Str(rb.gbuf_index) + std::string(kDpLayoutSuffix);
}

Result<DistOptimizerState> DistOptimizerState::Create(const GptConfig& cfg,
                                                      const ParallelConfig& pc,
                                                      const RankCoords& coords,
                                                      const std::vector<GptShard>& model_shards,
                                                      const DistOptOptions& opts) {
  DistOptimizerState s;
  s.pc_ = pc;
  s.coords_ = coords;
  CKPT_ASSIGN_OR_RETURN(s.buffers_, GptRankBuffers(cfg, pc, coords, model_shards, opts));
  CKPT_RETURN_IF_ERROR(s.Build(model_shards));
  return s;
}

Status DistOptimizerState::Build(const std::vector<GptShard>& model_shards) {
  std::map<std::string, std::vector<const GptShard*>> by_param;
  for (const GptShard& g : model_shards) {
    if (g.tensor.flat_range)  // as MCore: optimizer fragments of flattened tensors are undefined
      return Status::InvalidArgument("tensor '" + g.tensor.key + "' already has a flat range");
    by_param[g.param].push_back(&g);
  }
  for (const auto& [name, shards] : by_param) {
    int64_t n = 0;
    for (const GptShard* g : shards) n += g->tensor.num_elements();
    if (n != NumElements(shards.front()->param_shape))
      return Status::InvalidArgument("parameter '" + name + "': its shards hold " + Str(n) + " of " +
                                     Str(NumElements(shards.front()->param_shape)) + " elements");
  }
  for (int bi = 0; bi < int(buffers_.size()); ++bi) {
    const RankBuffer& rb = buffers_[size_t(bi)];
    int64_t total = 0;
    for (int b = 0; b < int(rb.layout.buckets.size()); ++b) total += rb.layout.SliceElems(b);
    states_.emplace_back();
    for (auto& st : states_.back()) st.assign(size_t(total), 0.0f);
    std::vector<std::pair<int64_t, int64_t>> used;
    for (const OwnedRange& r : OwnedRanges(rb.layout, rb.dp_rank)) {
      used.push_back({r.local_pos, r.local_pos + r.param_end - r.param_begin});
      for (const GptShard* g : by_param.at(rb.layout.params[size_t(r.param)].name)) {
        const int64_t off = g->param_offset, n = g->tensor.num_elements();
        const int64_t lo = std::max(r.param_begin, off), hi = std::min(r.param_end, off + n);
        if (lo < hi)
          fragments_.push_back({FragmentOf(g->tensor, lo - off, hi - off), bi,
                                r.local_pos + (lo - r.param_begin)});
      }
    }
    std::sort(used.begin(), used.end());
    padding_.emplace_back();
    int64_t at = 0;
    for (const auto& [b, e] : used) {
      if (b > at) padding_.back().push_back({at, b});
      at = std::max(at, e);
    }
    if (at < total) padding_.back().push_back({at, total});
    descriptors_.push_back(Descriptor(rb, by_param));
    mcore_layouts_.push_back(McoreParamLayout(rb, by_param));
  }
  return Status::Ok();
}

std::span<const std::byte> DistOptimizerState::View(int buffer, int state, int64_t pos,
                                                    int64_t n) const {
  const std::vector<float>& v = states_.at(size_t(buffer))[size_t(state)];
  return std::as_bytes(std::span<const float>(v).subspan(size_t(pos), size_t(n)));
}

std::span<std::byte> DistOptimizerState::Span(int buffer, int state, int64_t pos, int64_t n) {
  std::vector<float>& v = states_.at(size_t(buffer))[size_t(state)];
  return std::as_writable_bytes(std::span<float>(v).subspan(size_t(pos), size_t(n)));
}

ShardedTensor DistOptimizerState::StepTensor() const {
  ShardedTensor t;
  t.key = kStepKey;
  t.dtype = DType::kInt64;
  t.global_shape = {1};
  t.global_offset = {0};
  t.local_shape = {1};
  t.replica_id = {coords_.pp, coords_.tp, DpCpRank(pc_, coords_)};  // main on rank 0 only
  return t;
}

ShardedStateDict DistOptimizerState::StateDict(OptimizerFormat format) {
  ShardedStateDict sd;
  if (IsModelSpace(format)) AddModelSpace(format, &sd);
  else if (format == OptimizerFormat::kBucketSpace) AddBucketSpace(&sd);
  else AddDpReshardable(&sd);
  sd.AddTensor(StepTensor(), std::as_writable_bytes(std::span<int64_t>(step_)));
  return sd;
}

void DistOptimizerState::AddModelSpace(OptimizerFormat format, ShardedStateDict* sd) {
  const auto& names = AdamStateNames(format);
  for (const Fragment& f : fragments_)
    for (int s = 0; s < 3; ++s) {
      ShardedTensor t = f.tensor;
      t.key = "optimizer.state." + std::string(names[size_t(s)]) + "." + f.tensor.key;
      sd->AddTensor(std::move(t), Span(f.buffer, s, f.pos, f.tensor.num_elements()));
    }
}

void DistOptimizerState::AddBucketSpace(ShardedStateDict* sd) {
  for (int bi = 0; bi < int(buffers_.size()); ++bi) {
    const RankBuffer& rb = buffers_[size_t(bi)];
    int64_t pos = 0;
    for (int b = 0; b < int(rb.layout.buckets.size()); ++b) {
      const Bucket& bk = rb.layout.buckets[size_t(b)];
      const int64_t slice = rb.layout.SliceElems(b);
      for (int s = 0; s < 3; ++s) {
        ShardedTensor t;
        t.key = BucketKey(rb, b, kAdamStates[size_t(s)]);
        t.dtype = DType::kFloat32;
        t.global_shape = {bk.end - bk.start};
        t.global_offset = {rb.dp_rank * slice};
        t.local_shape = {slice};
        sd->AddTensor(std::move(t), Span(bi, s, pos, slice));
      }
      pos += slice;
    }
    sd->AddObject({LayoutKey(rb), {1}, {0}, {0, 0, rb.dp_rank}}, Blob(descriptors_[size_t(bi)]));
  }
}

// MCore sharded_param_state_dp_reshardable: the rank's slice of each bucket,
// cut at the unpadded end (the DP padding is not state and changes with DP).
void DistOptimizerState::AddDpReshardable(ShardedStateDict* sd) {
  if (remapped_) return AddRemapped(sd);
  std::set<int> optimizers;
  for (int bi = 0; bi < int(buffers_.size()); ++bi) {
    const RankBuffer& rb = buffers_[size_t(bi)];
    int64_t pos = 0;
    for (int b = 0; b < int(rb.layout.buckets.size()); ++b) {
      const Bucket& bk = rb.layout.buckets[size_t(b)];
      const int64_t slice = rb.layout.SliceElems(b);
      const int64_t lo = rb.dp_rank * slice, hi = std::min(lo + slice, bk.numel_unpadded);
      for (int s = 0; s < 3 && hi > lo; ++s) {
        ShardedTensor t;
        t.key = McoreBucketKey(rb, b, kMcoreAdamStates[size_t(s)]);
        t.dtype = DType::kFloat32;
        t.global_shape = {bk.numel_unpadded};
        t.global_offset = {lo};
        t.local_shape = {hi - lo};
        sd->AddTensor(std::move(t), Span(bi, s, pos, hi - lo));
      }
      pos += slice;
    }
    sd->AddObject({McoreParamLayoutKey(rb), {1}, {0}, {0, 0, rb.dp_rank}}, Blob(mcore_layouts_[size_t(bi)]));
    if (!optimizers.insert(rb.chained).second) continue;
    for (bool unpadded : {false, true})
      sd->AddObject({McorePrefix(rb) + (unpadded ? "per_bucket_numel_unpadded" : "per_bucket_numel"), {1}, {0},
                     {0, 0, rb.dp_rank}},
                    Blob(PerBucketNumel(buffers_, rb.chained, unpadded)));
  }
}

ShardedStateDict DistOptimizerState::BucketLayoutRequest() const {
  return LayoutRequest(OptimizerFormat::kBucketSpace);
}

ShardedStateDict DistOptimizerState::LayoutRequest(OptimizerFormat format) const {
  ShardedStateDict sd;
  for (const RankBuffer& rb : buffers_) {
    if (format == OptimizerFormat::kBucketSpace) sd.AddObject({LayoutKey(rb), {1}, {0}, {0, 0, rb.dp_rank}});
    if (format == OptimizerFormat::kDpReshardable)
      sd.AddObject({McoreParamLayoutKey(rb), {1}, {0}, {0, 0, rb.dp_rank}});
  }
  return sd;
}

Status DistOptimizerState::CheckLayout(OptimizerFormat format, const ShardedStateDict& loaded) const {
  if (format == OptimizerFormat::kBucketSpace) return CheckBucketLayout(loaded);
  if (format != OptimizerFormat::kDpReshardable) return Status::Ok();
  std::map<std::string, const ObjectEntry*> got;
  for (const ObjectEntry& o : loaded.objects()) got[o.meta.key] = &o;
  for (size_t bi = 0; bi < buffers_.size(); ++bi) {
    const std::string key = McoreParamLayoutKey(buffers_[bi]);
    auto it = got.find(key);
    if (it == got.end() || it->second->bytes.empty())
      return Status::FailedPrecondition("the checkpoint has no optimizer buffer '" + key +
                                        "' for this rank (its TP/PP/EP split differs)" + kDpReshardableRule);
    const nlohmann::json saved = nlohmann::json::parse(Text(it->second->bytes), nullptr, false);
    const nlohmann::json mine = nlohmann::json::parse(mcore_layouts_[bi]);
    if (saved == mine) continue;
    const std::string what = saved.is_object() && saved.value("numel_unpadded", nlohmann::json()) !=
                                                      mine["numel_unpadded"]
                                 ? "per-bucket unpadded sizes " + saved.value("numel_unpadded", nlohmann::json()).dump() +
                                       " in the checkpoint, " + mine["numel_unpadded"].dump() + " in this job"
                                 : std::string("the parameters laid out in it differ");
    return Status::FailedPrecondition("dp_reshardable optimizer state does not match this job: in '" + key +
                                      "' " + what + kDpReshardableRule);
  }
  return Status::Ok();
}

Status DistOptimizerState::CheckBucketLayout(const ShardedStateDict& loaded) const {
  std::map<std::string, const ObjectEntry*> got;
  for (const ObjectEntry& o : loaded.objects()) got[o.meta.key] = &o;
  for (size_t bi = 0; bi < buffers_.size(); ++bi) {
    const std::string key = LayoutKey(buffers_[bi]);
    auto it = got.find(key);
    if (it == got.end() || it->second->bytes.empty())
      return Status::FailedPrecondition("the checkpoint has no bucket layout '" + key +
                                        "' for this rank's buffer (its model split differs)" +
                                        kOnlyIdentical);
    const auto& b = it->second->bytes;
    const std::string saved_text(reinterpret_cast<const char*>(b.data()), b.size());
    nlohmann::json saved = nlohmann::json::parse(saved_text, nullptr, /*allow_exceptions=*/false);
    if (saved.is_discarded() || !saved.is_object())
      return Status::Corruption("bucket layout '" + key + "' in the checkpoint is not JSON");
    const nlohmann::json mine = nlohmann::json::parse(descriptors_[bi]);
    // The bucket size itself may differ as long as it cuts the same buckets.
    if (std::all_of(std::begin(kLayoutFields), std::end(kLayoutFields),
                    [&](const char* f) { return saved.value(f, nlohmann::json()) == mine[f]; }))
      continue;
    return Status::FailedPrecondition("bucket-space optimizer state does not match this job: in '" +
                                      key + "' " + Difference(saved, mine) + kOnlyIdentical);
  }
  return Status::Ok();
}

Status DistOptimizerState::FillExpected(int64_t vocab_size) {
  for (const Fragment& f : fragments_)
    for (int s = 0; s < 3; ++s) {
      ShardedTensor t = f.tensor;
      t.key += "/" + std::string(kAdamStates[size_t(s)]);
      CKPT_RETURN_IF_ERROR(
          workload::FillExpected(t, Span(f.buffer, s, f.pos, t.num_elements()), vocab_size));
    }
  for (size_t bi = 0; bi < padding_.size(); ++bi)
    for (auto& st : states_[bi])
      for (const auto& [b, e] : padding_[bi]) std::fill(st.begin() + b, st.begin() + e, 0.0f);
  return workload::FillExpected(StepTensor(), std::as_writable_bytes(std::span<int64_t>(step_)));
}

Result<int64_t> DistOptimizerState::CountMismatches(int64_t vocab_size,
                                                    std::string* first_bad) const {
  int64_t total = 0;
  auto note = [&](int64_t bad, const std::string& key, int64_t at) {
    if (bad > 0 && total == 0 && first_bad) *first_bad = key + " element " + Str(at);
    total += bad;
  };
  for (const Fragment& f : fragments_)
    for (int s = 0; s < 3; ++s) {
      ShardedTensor t = f.tensor;
      t.key += "/" + std::string(kAdamStates[size_t(s)]);
      int64_t first = -1;
      CKPT_ASSIGN_OR_RETURN(int64_t bad, workload::CountMismatches(t, View(f.buffer, s, f.pos, t.num_elements()),
                                                                   &first, vocab_size));
      note(bad, "optimizer.state." + std::string(kAdamStates[size_t(s)]) + "." + f.tensor.key, first);
    }
  for (size_t bi = 0; bi < padding_.size(); ++bi)
    for (int s = 0; s < 3; ++s)
      for (const auto& [b, e] : padding_[bi]) {
        const auto& st = states_[bi][size_t(s)];
        auto nz = [](float v) { return v != 0.0f; };
        const int64_t bad = std::count_if(st.begin() + b, st.begin() + e, nz);
        if (bad > 0) note(bad, LayoutKey(buffers_[bi]) + " padding", std::find_if(st.begin() + b, st.begin() + e, nz) - st.begin());
      }
  int64_t first = -1;
  CKPT_ASSIGN_OR_RETURN(int64_t bad, workload::CountMismatches(StepTensor(), std::as_bytes(std::span<const int64_t>(step_)), &first));
  note(bad, kStepKey, first);
  return total;
}

int64_t DistOptimizerState::StateElements() const {
  int64_t n = int64_t(step_.size());
  for (const auto& st : states_) n += 3 * int64_t(st[0].size());
  return n;
}

int64_t DistOptimizerState::TotalBytes() const {
  int64_t n = int64_t(step_.size() * sizeof(int64_t));
  for (const auto& st : states_) n += 3 * int64_t(st[0].size() * sizeof(float));
  return n;
}

}  // namespace ckpt::workload
