#include "ckpt/base/sharded_tensor.h"

#include "ckpt/base/key_bound.h"

#include <algorithm>

namespace ckpt {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t ShardedTensor::num_elements() const {
  return flat_range ? flat_range->size() : NumElements(local_shape);
}

Shape GlobalIndexOf(const ShardedTensor& t, int64_t pos) {
  int64_t lin = pos + (t.flat_range ? t.flat_range->begin : 0);
  Shape idx(t.local_shape.size());
  for (size_t d = idx.size(); d-- > 0;) {
    idx[d] = t.global_offset[d] + (t.local_shape[d] ? lin % t.local_shape[d] : 0);
    if (t.local_shape[d]) lin /= t.local_shape[d];
  }
  return idx;
}

bool ShardedTensor::is_main_replica() const {
  return std::all_of(replica_id.begin(), replica_id.end(), [](int32_t r) { return r == 0; });
}

bool ShardedObject::is_main_replica() const {
  return std::all_of(replica_id.begin(), replica_id.end(), [](int32_t r) { return r == 0; });
}

int64_t ShardedObject::cell() const {
  int64_t c = 0;
  for (size_t i = 0; i < global_shape.size(); ++i)
    c = c * global_shape[i] + (i < global_offset.size() ? global_offset[i] : 0);
  return c;
}

std::string QuoteKey(std::string_view key) {
  constexpr size_t kShown = 200;
  if (key.size() <= kShown) return std::string(key);
  return std::string(key.substr(0, kShown)) + "... (" + std::to_string(key.size()) + " bytes)";
}

namespace {

// A key longer than kMaxKeyBytes, as "<what> key of <n> bytes ...".
Status KeyTooLong(std::string_view what, std::string_view key) {
  return Status::InvalidArgument(std::string(what) + " key of " + std::to_string(key.size()) +
                                 " bytes exceeds the maximum of " + std::to_string(kMaxKeyBytes) + ": '" +
                                 QuoteKey(key) + "'");
}

}  // namespace

Status ValidateKeyLengths(const ShardedStateDict& state) {
  for (const auto& t : state.tensors())
    if (t.meta.key.size() > kMaxKeyBytes) return KeyTooLong("tensor", t.meta.key);
  for (const auto& o : state.objects())
    if (o.meta.key.size() > kMaxKeyBytes) return KeyTooLong("object", o.meta.key);
  return Status::Ok();
}

std::string ShardedTensor::DebugString() const {
  std::string s = QuoteKey(key) + " " + std::string(DTypeName(dtype)) + " global=" +
                  ShapeToString(global_shape) + " offset=" + ShapeToString(global_offset) +
                  " local=" + ShapeToString(local_shape);
  if (flat_range)
    s += " flat=[" + std::to_string(flat_range->begin) + "," + std::to_string(flat_range->end) + ")";
  return s;
}

Status ShardedTensor::Validate() const {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("tensor '" + QuoteKey(key) + "': " + why + " (" + DebugString() + ")");
  };
  if (key.empty()) return Status::InvalidArgument("tensor with empty key");
  if (key.size() > kMaxKeyBytes) return KeyTooLong("tensor", key);
  if (global_offset.size() != global_shape.size() || local_shape.size() != global_shape.size())
    return bad("global_shape, global_offset and local_shape must have the same rank");
  for (size_t i = 0; i < global_shape.size(); ++i) {
    if (global_shape[i] < 0 || local_shape[i] < 0 || global_offset[i] < 0)
      return bad("negative extent on axis " + std::to_string(i));
    if (global_offset[i] + local_shape[i] > global_shape[i])
      return bad("box exceeds the global shape on axis " + std::to_string(i));
  }
  if (flat_range) {
    if (flat_range->begin < 0 || flat_range->end < flat_range->begin ||
        flat_range->end > NumElements(local_shape))
      return bad("flat range outside the local box");
  }
  return Status::Ok();
}

void ShardedStateDict::AddTensor(ShardedTensor meta, std::span<std::byte> data) {
  tensors_.push_back({std::move(meta), data});
}

void ShardedStateDict::AddObject(ShardedObject meta, std::vector<std::byte> bytes) {
  objects_.push_back({std::move(meta), std::move(bytes)});
}

Status ShardedStateDict::Validate() const {
  for (const auto& t : tensors_) {
    CKPT_RETURN_IF_ERROR(t.meta.Validate());
    if (int64_t(t.data.size()) != t.meta.num_bytes())
      return Status::InvalidArgument("tensor '" + QuoteKey(t.meta.key) + "': buffer has " +
                                     std::to_string(t.data.size()) + " bytes, descriptor needs " +
                                     std::to_string(t.meta.num_bytes()));
  }
  for (const auto& o : objects_) {
    if (o.meta.key.empty()) return Status::InvalidArgument("object with empty key");
    if (o.meta.key.size() > kMaxKeyBytes) return KeyTooLong("object", o.meta.key);
    if (o.meta.global_offset.size() != o.meta.global_shape.size())
      return Status::InvalidArgument("object '" + QuoteKey(o.meta.key) + "': offset/shape rank differ");
  }
  return Status::Ok();
}

int64_t ShardedStateDict::TotalBytes() const {
  int64_t n = 0;
  for (const auto& t : tensors_) n += t.meta.num_bytes();
  for (const auto& o : objects_) n += int64_t(o.bytes.size());
  return n;
}

}  // namespace ckpt
