// Internals shared by the shard file writer (shard_writer.cc), reader
// (shard_reader.cc) and their layout helpers (shard_layout.cc); not part of
// ckpt's API. The format they implement is docs/FORMAT.md / shard_file.h.
//
// Pure helpers unless noted; the ones taking or returning HDF5 ids must be
// called with LockHdf5() held (hdf5_vfd.h). Failure: PlanLayout returns
// kInvalidArgument for a row over HDF5's 4 GiB chunk limit; the HDF5 builders
// return an invalid Hid (the HDF5 error stack says why).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/format/codec.h"
#include "ckpt/base/dtype.h"
#include "ckpt/format/hdf5_vfd.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt::shard_internal {

inline constexpr char kFormatName[] = "ckpt-shard";
inline constexpr int64_t kFormatVersion = 1;
inline constexpr char kTensorGroup[] = "/tensors";
inline constexpr char kObjectGroup[] = "/objects";
// HDF5 keeps chunk sizes in 32 bits (raw and stored).
inline constexpr uint64_t kMaxChunkBytes = 0xffffffffull;

// The chunk grid of one dataset. An empty `chunk` means a contiguous dataset
// with zero elements (no chunks at all).
struct Layout {
  std::vector<hsize_t> dims;
  std::vector<hsize_t> chunk;
  int64_t chunk_elems = 0;
  int64_t num_chunks = 0;
  size_t elem_size = 1;
};

// Chunks of whole trailing dims, at most chunk_bytes each, rows spread evenly.
// `what` names the dataset in errors.
Result<Layout> PlanLayout(std::vector<hsize_t> dims, size_t elem_size, int64_t chunk_bytes,
                          const std::string& what);

// Dataset dims of a tensor shard: local box, [n] for a flat range, [1] for rank 0.
std::vector<hsize_t> TensorDims(const ShardedTensor& m);

// Coordinates of chunk `index` (chunks split dimension 0 only).
inline std::vector<hsize_t> ChunkCoord(const std::vector<hsize_t>& chunk, int64_t index) {
  std::vector<hsize_t> at(chunk.size(), 0);
  at[0] = hsize_t(index) * chunk[0];
  return at;
}

// HDF5 file type of a dtype (bf16 as uint16, fp16 as IEEE half, bool as uint8).
Hid FileType(DType t);
// Dataset creation list: chunk grid, the filter pipeline readers decode with,
// no fill values, no timestamps.
Hid MakeDcpl(const Layout& l, const CodecOptions& codec);

}  // namespace ckpt::shard_internal
