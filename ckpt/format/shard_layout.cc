// Shard file layout (shard_file_internal.h): dataset names, chunk grids,
// HDF5 types and dataset creation lists. Moved unchanged out of the former
// shard_file.cc; the writer and reader share them.
#include <algorithm>

#include "ckpt/format/chunk_layout.h"
#include "ckpt/format/shard_file.h"
#include "ckpt/format/shard_file_internal.h"

namespace ckpt {
namespace shard_internal {

Result<Layout> PlanLayout(std::vector<hsize_t> dims, size_t elem_size, int64_t chunk_bytes,
                          const std::string& what) {
  Layout l;
  l.dims = std::move(dims);
  l.elem_size = elem_size;
  int64_t row_elems = 1;
  for (size_t i = 1; i < l.dims.size(); ++i) row_elems *= int64_t(l.dims[i]);
  if (row_elems == 0 || l.dims[0] == 0) return l;
  int64_t row_bytes = row_elems * int64_t(elem_size);
  // At most chunk_bytes per chunk, rows spread evenly over the chunks so the
  // zero padding of the edge chunk stays below one row per chunk.
  const int64_t max_rows = std::clamp<int64_t>(chunk_bytes / row_bytes, 1, int64_t(l.dims[0]));
  const int64_t chunks = (int64_t(l.dims[0]) + max_rows - 1) / max_rows;
  int64_t c0 = (int64_t(l.dims[0]) + chunks - 1) / chunks;
  if (uint64_t(c0) * uint64_t(row_bytes) > kMaxChunkBytes)
    return Status::InvalidArgument(what + ": one row of " + std::to_string(row_bytes) +
                                   " bytes exceeds HDF5's 4 GiB chunk limit");
  l.chunk = l.dims;
  l.chunk[0] = hsize_t(c0);
  l.chunk_elems = c0 * row_elems;
  l.num_chunks = (int64_t(l.dims[0]) + c0 - 1) / c0;
  return l;
}

std::vector<hsize_t> TensorDims(const ShardedTensor& m) {
  if (m.flat_range) return {hsize_t(m.flat_range->size())};
  if (m.local_shape.empty()) return {1};
  return std::vector<hsize_t>(m.local_shape.begin(), m.local_shape.end());
}

Hid FileType(DType t) {
  switch (t) {
    case DType::kFloat32: return Hid(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
    case DType::kFloat64: return Hid(H5Tcopy(H5T_IEEE_F64LE), H5Tclose);
    case DType::kBFloat16: return Hid(H5Tcopy(H5T_STD_U16LE), H5Tclose);
    case DType::kFloat16: {
      // IEEE binary16, built the way h5py does so h5py maps it to float16.
      Hid h(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
      if (!h.valid() || H5Tset_fields(h.get(), 15, 10, 5, 0, 10) < 0 || H5Tset_size(h.get(), 2) < 0 ||
          H5Tset_ebias(h.get(), 15) < 0)
        h.reset();
      return h;
    }
    case DType::kInt64: return Hid(H5Tcopy(H5T_STD_I64LE), H5Tclose);
    case DType::kInt32: return Hid(H5Tcopy(H5T_STD_I32LE), H5Tclose);
    case DType::kInt16: return Hid(H5Tcopy(H5T_STD_I16LE), H5Tclose);
    case DType::kInt8: return Hid(H5Tcopy(H5T_STD_I8LE), H5Tclose);
    case DType::kUInt8:
    case DType::kBool: return Hid(H5Tcopy(H5T_STD_U8LE), H5Tclose);
  }
  return Hid();
}

Hid MakeDcpl(const Layout& l, const CodecOptions& codec) {
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  hid_t p = dcpl.get();
  // No timestamps: identical inputs give identical files.
  bool ok = dcpl.valid() && H5Pset_fill_time(p, H5D_FILL_TIME_NEVER) >= 0 &&
            H5Pset_obj_track_times(p, false) >= 0;
  if (ok && l.chunk.empty()) {
    ok = H5Pset_layout(p, H5D_CONTIGUOUS) >= 0;
  } else if (ok) {
    bool zstd = codec.compression == Compression::kZstd;
    unsigned level = unsigned(codec.zstd_level);
    ok = H5Pset_chunk(p, int(l.chunk.size()), l.chunk.data()) >= 0 &&
         H5Pset_alloc_time(p, zstd ? H5D_ALLOC_TIME_INCR : H5D_ALLOC_TIME_EARLY) >= 0 &&
         (!zstd || !codec.shuffle || H5Pset_shuffle(p) >= 0) &&
         (!zstd || H5Pset_filter(p, kZstdFilterId, H5Z_FLAG_MANDATORY, 1, &level) >= 0);
  }
  if (!ok) dcpl.reset();
  return dcpl;
}

namespace {

// Injective: '%' itself is escaped, so keys "a/b" and "a%2Fb" get distinct
// names ("a%2Fb", "a%252Fb"). Files written before 2026-12-05 escaped only '/';
// readers take dataset names from the manifest, so those files
// still read.
std::string EscapeKey(const std::string& key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    if (c == '/') out += "%2F";
    else if (c == '%') out += "%25";
    else out += c;
  }
  return out;
}

}  // namespace
}  // namespace shard_internal

std::string TensorDatasetName(const ShardedTensor& meta) {
  std::string name = std::string(shard_internal::kTensorGroup) + "/" + shard_internal::EscapeKey(meta.key) + "@";
  for (size_t i = 0; i < meta.global_offset.size(); ++i)
    name += (i ? "_" : "") + std::to_string(meta.global_offset[i]);
  if (meta.flat_range)
    name += ":" + std::to_string(meta.flat_range->begin) + "-" + std::to_string(meta.flat_range->end);
  return name;
}

std::string ObjectDatasetName(const ShardedObject& meta) {
  return std::string(shard_internal::kObjectGroup) + "/" + shard_internal::EscapeKey(meta.key) + "@" +
         std::to_string(meta.cell());
}

Result<int64_t> ShardChunkElems(const ShardedTensor& t, int64_t chunk_bytes) {
  if (t.num_elements() == 0) return int64_t{0};
  CKPT_ASSIGN_OR_RETURN(shard_internal::Layout l, shard_internal::PlanLayout(shard_internal::TensorDims(t), DTypeSize(t.dtype), chunk_bytes, "tensor '" + t.key + "'"));
  return l.chunk_elems;
}

}  // namespace ckpt
