// ShardedTensor / ShardedObject descriptors and the sharded state dict.
//
// A ShardedTensor says which part of a global tensor a rank holds:
//   the box [global_offset, global_offset + local_shape) of a tensor of
//   global_shape, optionally narrowed to the flat range [begin, end) of that
//   box in row-major order (used by distributed-optimizer fragments).
// replica_id follows Megatron-Core: all zeros is the main replica; only main
// replicas are written. allow_shape_mismatch marks tensors (padded vocab)
// whose global shape may differ between save and load: the overlap is read,
// the rest of the requested box is zero-filled.
//
// A ShardedObject is a small opaque blob (RNG, iterator state) with its own
// sharding: a key plus a position in a grid of blobs.
//
// ShardedStateDict entries do not own tensor memory: the caller keeps the
// buffers alive for the duration of a save or load. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/dtype.h"
#include "ckpt/base/status.h"

namespace ckpt {

using Shape = std::vector<int64_t>;
using ReplicaId = std::vector<int32_t>;

int64_t NumElements(const Shape& shape);  // 1 for rank 0
std::string ShapeToString(const Shape& shape);

struct FlatRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
  int64_t size() const { return end - begin; }
  bool operator==(const FlatRange&) const = default;
};

struct ShardedTensor {
  std::string key;
  DType dtype = DType::kFloat32;
  Shape global_shape;
  Shape global_offset;
  Shape local_shape;
  ReplicaId replica_id;  // empty == main replica
  std::optional<FlatRange> flat_range;
  bool allow_shape_mismatch = false;

  // Elements this shard holds (flat range length if set, else box size).
  int64_t num_elements() const;
  int64_t num_bytes() const { return num_elements() * int64_t(DTypeSize(dtype)); }
  bool is_main_replica() const;
  // Checks ranks agree, box inside the global shape, flat range inside the box.
  Status Validate() const;
  std::string DebugString() const;
};

// Global coordinates of the element at flat position `pos` of shard `t`.
Shape GlobalIndexOf(const ShardedTensor& t, int64_t pos);

struct ShardedObject {
  std::string key;
  Shape global_shape;   // grid of blobs, e.g. {tp, pp} for per-rank RNG state
  Shape global_offset;  // this blob's cell in the grid
  ReplicaId replica_id;
  bool is_main_replica() const;
  // Cell index in row-major order of the grid.
  int64_t cell() const;
};

struct TensorEntry {
  ShardedTensor meta;
  std::span<std::byte> data;  // num_bytes() long; read on save, written on load
};

struct ObjectEntry {
  ShardedObject meta;
  std::vector<std::byte> bytes;  // written on save; filled on load
};

class ShardedStateDict {
 public:
  void AddTensor(ShardedTensor meta, std::span<std::byte> data);
  void AddObject(ShardedObject meta, std::vector<std::byte> bytes = {});

  std::vector<TensorEntry>& tensors() { return tensors_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  std::vector<ObjectEntry>& objects() { return objects_; }
  const std::vector<ObjectEntry>& objects() const { return objects_; }

  // Validates every descriptor and that buffer sizes match.
  Status Validate() const;
  int64_t TotalBytes() const;

 private:
  std::vector<TensorEntry> tensors_;
  std::vector<ObjectEntry> objects_;
};

}  // namespace ckpt
