// dp_reshardable optimizer state loaded under another bucket layout: each
// owned fragment is read from the saved bucket that holds its parameter box,
// found through the checkpoint's param_layout objects. MCore's own loader
// asserts equal buckets (distrib_optimizer.py, load_parameter_state_from_dp_
// reshardable), so an EP change - which moves the experts between the dense
// and the expert buffers - or a bucket-size change cannot load there.
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/base/agree.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/dist_optimizer_state.h"
#include "ckpt/workload/gpt_job.h"
#include "ckpt/workload/job_setup.h"

namespace ckpt::workload {
using namespace ckpt::reshard;
namespace {

using nlohmann::json;

// A parameter box (one GptShard's box of its global tensor) in a saved bucket.
struct SavedBox {
  std::string bucket_key;  // without the state name
  int64_t unpadded = 0;    // the bucket tensor's size
  int64_t pos = 0;         // the box's first element in it
};

std::string BoxId(const std::string& key, const Shape& offset, const Shape& shape) {
  return json::array({key, offset, shape}).dump();
}

// Adds the boxes of one saved buffer's param layout to `boxes`. A box's
// position is its param's offset in the bucket plus the boxes before it (the
// layout lists them in the param's flat order). Throws json errors on wrong types.
Status IndexLayout(const std::string& key, const json& layout, std::map<std::string, SavedBox>* boxes) {
  const std::string prefix = key.substr(0, key.size() - kDpLayoutSuffix.size());
  const json& unpadded = layout.at("numel_unpadded");
  const std::string dtype = layout.at("dtype").get<std::string>();
  for (const json& p : layout.at("params")) {
    const int64_t bucket = p.at(0).get<int64_t>(), offset = p.at(1).get<int64_t>(), numel = p.at(2).get<int64_t>();
    if (bucket < 0 || bucket >= int64_t(unpadded.size()) || offset < 0 ||
        offset + numel > unpadded.at(size_t(bucket)).get<int64_t>())
      return Status::Corruption("dp_reshardable param layout '" + key + "': a parameter lies outside its bucket");
    int64_t at = 0;
    for (const json& b : p.at(3)) {
      const Shape shape = b.at(2).get<Shape>();
      SavedBox box{prefix + ".dtype_" + dtype + ".bucket_idx_" + std::to_string(bucket) + ".",
                   unpadded.at(size_t(bucket)).get<int64_t>(), offset + at};
      boxes->emplace(BoxId(b.at(0).get<std::string>(), b.at(1).get<Shape>(), shape), std::move(box));
      at += NumElements(shape);
    }
    if (at != numel)
      return Status::Corruption("dp_reshardable param layout '" + key + "': a parameter's boxes hold " +
                                std::to_string(at) + " of its " + std::to_string(numel) + " elements");
  }
  return Status::Ok();
}

}  // namespace

Status DistOptimizerState::UseSavedDpLayouts(const std::map<std::string, std::string>& saved,
                                             std::vector<ShardedObject> consumed) {
  remap_.clear();
  remapped_ = false;
  bool same = true;
  for (size_t bi = 0; bi < buffers_.size() && same; ++bi) {
    auto it = saved.find(DpReshardableLayoutKey(buffers_[bi]));
    same = it != saved.end() && json::parse(it->second, nullptr, false) == json::parse(mcore_layouts_[bi]);
  }
  if (same) return Status::Ok();  // MCore's case: this rank's buckets as saved
  std::map<std::string, SavedBox> boxes;
  for (const auto& [key, text] : saved) {
    const json layout = json::parse(text, nullptr, false);
    if (!layout.is_object()) return Status::Corruption("dp_reshardable param layout '" + key + "' is not JSON");
    try {
      CKPT_RETURN_IF_ERROR(IndexLayout(key, layout, &boxes));
    } catch (const json::exception& e) {
      return Status::Corruption("dp_reshardable param layout '" + key + "' is malformed: " + e.what());
    }
  }
  for (size_t i = 0; i < fragments_.size(); ++i) {
    const ShardedTensor& t = fragments_[i].tensor;
    auto it = boxes.find(BoxId(t.key, t.global_offset, t.local_shape));
    if (it == boxes.end())
      return Status::FailedPrecondition(
          "dp_reshardable optimizer state: no saved bucket holds parameter '" + t.key + "' box offset " +
          json(t.global_offset).dump() + " shape " + json(t.local_shape).dump() + " of this rank's buffer '" +
          DpReshardableLayoutKey(buffers_[size_t(fragments_[i].buffer)]) +
          "' (its parameters are split differently: another TP split, or another PP split with stacked "
          "layer keys; ckpt maps dp_reshardable buckets across EP, DP, bucket-size and per-layer PP "
          "changes); save it as fully_reshardable (--optimizer fully_reshardable) to load "
          "it across TP or PP changes");
    remap_.push_back({it->second.bucket_key, it->second.unpadded, it->second.pos + t.flat_range->begin, i});
  }
  consumed_ = std::move(consumed);
  remapped_ = true;
  return Status::Ok();
}

void DistOptimizerState::AddRemapped(ShardedStateDict* sd) {
  for (const ShardedObject& o : consumed_) sd->AddObject(o);
  for (const Remap& r : remap_) {
    const Fragment& f = fragments_[r.fragment];
    const int64_t n = f.tensor.num_elements();
    for (int s = 0; s < 3; ++s) {
      ShardedTensor t;
      t.key = r.bucket_key + kMcoreAdamStates[size_t(s)];
      t.dtype = DType::kFloat32;
      t.global_shape = {r.unpadded};
      t.global_offset = {r.offset};
      t.local_shape = {n};
      sd->AddTensor(std::move(t), Span(f.buffer, s, f.pos, n));
    }
  }
}

Status PrepareDpReshardableLoad(GptJob& job, const std::string& root, int64_t iteration) {
  auto layouts = [&]() -> Status {
    CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifestOrOlder(root, iteration));
    ShardedStateDict want;
    std::vector<ShardedObject> consumed;
    std::map<std::string, bool> seen;
    for (const ManifestObject& o : m.objects) {
      const std::string& k = o.meta.key;
      if (k.find("optimizer.distributed.dp_group_idx_") == std::string::npos || seen[k]) continue;
      seen[k] = true;
      consumed.push_back(o.meta);
      if (k.ends_with(kDpLayoutSuffix)) want.AddObject(o.meta);
    }
    LoadOptions o;
    o.root = root;
    o.iteration = m.iteration;
    o.timeout = job.timeout;
    CKPT_RETURN_IF_ERROR(LoadCheckpoint(want, o).status());
    std::map<std::string, std::string> saved;
    for (const ObjectEntry& e : want.objects())
      saved[e.meta.key] = std::string(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
    return job.optimizer->UseSavedDpLayouts(saved, std::move(consumed));
  };
  return AgreeStatus(job.comm.get(), layouts(), Phase::kOptimizerLayout, job.timeout);
}

}  // namespace ckpt::workload
