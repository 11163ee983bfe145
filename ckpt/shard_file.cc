// Shard files (shard_file.h): HDF5 through the Env driver (hdf5_vfd.h).
//
// Writing a tensor: plan the chunk grid (whole trailing dims per chunk), create
// the dataset with the filter pipeline other readers need, then per chunk:
// pad the edge chunk, encode and hash it outside the HDF5 lock, and store it
// with H5Dwrite_chunk (filter mask 0) under the lock, reading its address back
// with H5Dget_chunk_info_by_coord. Raw datasets are allocated early so their
// chunks are contiguous in chunk order; compressed ones incrementally (stored
// sizes are only known after encoding). Fill values are never written.
//
// Any HDF5/Env failure after the file exists poisons the writer: HDF5's state
// is then unreliable, and the save must abort anyway.
#include "ckpt/shard_file.h"

#include <bit>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "ckpt/hdf5_vfd.h"
#include "ckpt/sha256.h"

namespace ckpt {
static_assert(std::endian::native == std::endian::little,
              "shard files store little-endian element bytes as they are in memory");

namespace {

constexpr char kFormatName[] = "ckpt-shard";
constexpr int64_t kFormatVersion = 1;
constexpr char kTensorGroup[] = "/tensors";
constexpr char kObjectGroup[] = "/objects";
// HDF5 keeps chunk sizes in 32 bits (raw and stored).
constexpr uint64_t kMaxChunkBytes = 0xffffffffull;

std::string EscapeKey(const std::string& key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    if (c == '/') out += "%2F";
    else out += c;
  }
  return out;
}

// The chunk grid of one dataset. An empty `chunk` means a contiguous dataset
// with zero elements (no chunks at all).
struct Layout {
  std::vector<hsize_t> dims;
  std::vector<hsize_t> chunk;
  int64_t chunk_elems = 0;
  int64_t num_chunks = 0;
  size_t elem_size = 1;
};

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

std::vector<hsize_t> ChunkCoord(const std::vector<hsize_t>& chunk, int64_t index) {
  std::vector<hsize_t> at(chunk.size(), 0);
  at[0] = hsize_t(index) * chunk[0];
  return at;
}

// HDF5 file type of a dtype (see shard_file.h for bf16/fp16/bool).
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

// Dataset creation list: chunk grid, the pipeline readers decode with, no fill.
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

// One chunk ready to store: its bytes (a view of the caller's buffer, or the
// padded/encoded copy it owns) and its record (size, hash; offset once stored).
struct PreparedChunk {
  int64_t index = 0;
  std::span<const std::byte> view;
  std::vector<std::byte> owned;
  ChunkRecord record;
  std::span<const std::byte> bytes() const { return owned.empty() ? view : std::span<const std::byte>(owned); }
};

// Pads (edge chunk), encodes (codec non-null: zstd) and hashes chunk i. Pure.
Result<PreparedChunk> PrepareChunk(std::span<const std::byte> data, size_t chunk_bytes, size_t elem_size,
                                   int64_t i, const CodecOptions* codec) {
  PreparedChunk p;
  p.index = i;
  size_t begin = size_t(i) * chunk_bytes;
  p.view = data.subspan(begin, std::min(chunk_bytes, data.size() - begin));
  if (p.view.size() < chunk_bytes) {  // edge chunk: HDF5 stores it full-size, zero-padded
    p.owned.assign(chunk_bytes, std::byte{0});
    if (!p.view.empty()) std::memcpy(p.owned.data(), p.view.data(), p.view.size());
  }
  if (codec) {
    CKPT_ASSIGN_OR_RETURN(p.owned, EncodeChunk(p.bytes(), elem_size, *codec));
  }
  if (p.bytes().size() > kMaxChunkBytes) return Status::InvalidArgument("stored chunk exceeds 4 GiB");
  p.record.stored_size = p.bytes().size();
  p.record.sha256 = Sha256Hex(p.bytes());
  return p;
}

// Runs `store` on queued chunks in order on a helper thread, so that HDF5 and
// Env IO (serialised under the HDF5 lock) overlap with the caller encoding and
// hashing the next chunk. At most kDepth chunks wait, bounding memory. The
// first store error stops the pipeline; Push then returns false.
class ChunkPipeline {
 public:
  explicit ChunkPipeline(std::function<Status(PreparedChunk&)> store)
      : store_(std::move(store)), thread_([this] { Run(); }) {}
  ~ChunkPipeline() { Finish().IgnoreError(); }

  bool Push(PreparedChunk c) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < kDepth || !status_.ok(); });
    if (!status_.ok()) return false;
    queue_.push_back(std::move(c));
    cv_.notify_all();
    return true;
  }

  // Waits until every queued chunk is stored; returns the first store error.
  Status Finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  static constexpr size_t kDepth = 2;

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) return;
      PreparedChunk c = std::move(queue_.front());
      queue_.pop_front();
      cv_.notify_all();
      lock.unlock();
      Status s = store_(c);
      lock.lock();
      if (!s.ok()) {
        status_ = s;
        queue_.clear();
        cv_.notify_all();
        return;
      }
    }
  }

  std::function<Status(PreparedChunk&)> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<PreparedChunk> queue_;
  bool closed_ = false;
  Status status_;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace

std::string TensorDatasetName(const ShardedTensor& meta) {
  std::string name = std::string(kTensorGroup) + "/" + EscapeKey(meta.key) + "@";
  for (size_t i = 0; i < meta.global_offset.size(); ++i)
    name += (i ? "_" : "") + std::to_string(meta.global_offset[i]);
  if (meta.flat_range)
    name += ":" + std::to_string(meta.flat_range->begin) + "-" + std::to_string(meta.flat_range->end);
  return name;
}

std::string ObjectDatasetName(const ShardedObject& meta) {
  return std::string(kObjectGroup) + "/" + EscapeKey(meta.key) + "@" + std::to_string(meta.cell());
}

// ---------------------------------------------------------------- writer ----

struct ShardFileWriter::Impl {
  std::string path;
  std::unique_ptr<File> file;
  EnvVfdTarget target;  // referenced by HDF5 while fid is open
  hid_t fid = H5I_INVALID_HID;
  Status failed;  // sticky: set by the first HDF5/Env failure
  bool finished = false;
  uint64_t size = 0;

  ~Impl() {
    if (!finished) Abandon();
  }

  std::string Where(const std::string& dataset) const {
    return "dataset '" + dataset + "' in '" + path + "'";
  }

  Status Fail(const std::string& what) {
    Status s = Hdf5Failure(Code::kIOError, what, &target);
    if (failed.ok()) failed = s;
    return s;
  }

  Status CheckUsable() const {
    if (finished) return Status::FailedPrecondition("shard file '" + path + "' is already finished");
    if (!failed.ok())
      return Status::FailedPrecondition("shard file '" + path + "' failed earlier: " + failed.ToString());
    return Status::Ok();
  }

  // Closes the HDF5 file, once: HDF5 1.10 releases the file even when
  // H5Fclose fails, and touching the id again would use freed memory. The
  // driver never fails writes (hdf5_vfd.h), so close fails only on HDF5 bugs.
  Status CloseHdf5() {
    auto lock = LockHdf5();
    if (fid < 0) return Status::Ok();
    hid_t id = fid;
    fid = H5I_INVALID_HID;
    if (H5Fclose(id) >= 0 && target.first_error.ok()) return Status::Ok();
    return Fail("closing HDF5 file '" + path + "'");
  }

  // Releases everything without making the file durable or even complete.
  void Abandon() {
    target.discard_writes = true;
    CloseHdf5().IgnoreError();
    if (file) file->Close().IgnoreError();
  }

  Status CreateHdf5(int rank);
  Result<DatasetRecord> WriteDataset(const std::string& name, const Layout& l, DType dtype,
                                     const CodecOptions& codec, std::span<const std::byte> data,
                                     const std::function<bool(hid_t)>& put_attrs);
  Status WriteChunk(hid_t dset, const std::string& name, const Layout& l, int64_t index,
                    std::span<const std::byte> stored, ChunkRecord* rec);
};

Status ShardFileWriter::Impl::CreateHdf5(int rank) {
  CKPT_ASSIGN_OR_RETURN(hid_t fapl_id, MakeEnvFapl(&target));
  auto lock = LockHdf5();
  Hid fapl(fapl_id, H5Pclose);
  fid = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (fid < 0) return Fail("creating HDF5 file '" + path + "'");
  Hid root(H5Gopen2(fid, "/", H5P_DEFAULT), H5Gclose);
  bool ok = root.valid() && PutStringAttr(root.get(), "format", kFormatName) &&
            PutIntAttr(root.get(), "format_version", kFormatVersion) &&
            PutIntAttr(root.get(), "rank", rank);
  for (const char* g : {kTensorGroup, kObjectGroup}) {
    Hid group(ok ? H5Gcreate2(fid, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : H5I_INVALID_HID,
              H5Gclose);
    ok = ok && group.valid();
  }
  if (!ok || !target.first_error.ok()) return Fail("initialising HDF5 file '" + path + "'");
  return Status::Ok();
}

Status ShardFileWriter::Impl::WriteChunk(hid_t dset, const std::string& name, const Layout& l,
                                         int64_t index, std::span<const std::byte> stored,
                                         ChunkRecord* rec) {
  auto lock = LockHdf5();
  std::vector<hsize_t> at = ChunkCoord(l.chunk, index);
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  std::string what = "writing chunk " + std::to_string(index) + " of " + Where(name);
  if (H5Dwrite_chunk(dset, H5P_DEFAULT, 0, at.data(), stored.size(), stored.data()) < 0 ||
      !target.first_error.ok())
    return Fail(what);
  if (H5Dget_chunk_info_by_coord(dset, at.data(), &mask, &addr, &size) < 0)
    return Fail("locating chunk " + std::to_string(index) + " of " + Where(name));
  if (addr == HADDR_UNDEF || size != stored.size() || mask != 0)
    return Fail(what + ": HDF5 reports address " + std::to_string(addr) + ", size " +
                std::to_string(size) + ", mask " + std::to_string(mask));
  rec->file_offset = addr;
  return Status::Ok();
}

Result<DatasetRecord> ShardFileWriter::Impl::WriteDataset(
    const std::string& name, const Layout& l, DType dtype, const CodecOptions& codec,
    std::span<const std::byte> data, const std::function<bool(hid_t)>& put_attrs) {
  CKPT_RETURN_IF_ERROR(CheckUsable());
  const bool zstd = codec.compression == Compression::kZstd && !l.chunk.empty();
  Hid dset;
  {
    auto lock = LockHdf5();
    if (H5Lexists(fid, name.c_str(), H5P_DEFAULT) > 0)
      return Status::AlreadyExists(Where(name) + " already exists");
    H5Eclear2(H5E_DEFAULT);
    Hid type = FileType(dtype);
    Hid space(H5Screate_simple(int(l.dims.size()), l.dims.data(), nullptr), H5Sclose);
    Hid dcpl = MakeDcpl(l, codec);
    if (!type.valid() || !space.valid() || !dcpl.valid())
      return Fail("preparing type/space/layout of " + Where(name));
    dset = Hid(H5Dcreate2(fid, name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
               H5Dclose);
    if (!dset.valid()) return Fail("creating " + Where(name));
    if (!put_attrs(dset.get())) return Fail("writing attributes of " + Where(name));
  }
  DatasetRecord rec;
  rec.dataset = name;
  rec.chunk_elems = l.chunk_elems;
  rec.compression = zstd ? Compression::kZstd : Compression::kNone;
  rec.shuffle = zstd && codec.shuffle;
  const size_t chunk_bytes = size_t(l.chunk_elems) * l.elem_size;
  const CodecOptions* encode = zstd ? &codec : nullptr;
  auto store = [&](PreparedChunk& c) -> Status {  // on the pipeline thread when pipelined
    CKPT_RETURN_IF_ERROR(WriteChunk(dset.get(), name, l, c.index, c.bytes(), &c.record));
    rec.chunks.push_back(std::move(c.record));
    return Status::Ok();
  };
  Status prepare_error;
  if (l.num_chunks > 1) {
    ChunkPipeline pipe(store);  // stores chunk i while chunk i+1 is encoded and hashed
    for (int64_t i = 0; i < l.num_chunks; ++i) {
      Result<PreparedChunk> p = PrepareChunk(data, chunk_bytes, l.elem_size, i, encode);
      if (!p.ok()) prepare_error = p.status();
      if (!p.ok() || !pipe.Push(std::move(p).value())) break;
    }
    CKPT_RETURN_IF_ERROR(pipe.Finish());  // a store error is already in `failed`
  } else if (l.num_chunks == 1) {
    Result<PreparedChunk> p = PrepareChunk(data, chunk_bytes, l.elem_size, 0, encode);
    if (p.ok()) CKPT_RETURN_IF_ERROR(store(*p));
    else prepare_error = p.status();
  }
  if (!prepare_error.ok()) return failed = prepare_error.WithContext("preparing a chunk of " + Where(name));
  auto lock = LockHdf5();
  if (!dset.Close() || !target.first_error.ok()) return Fail("closing " + Where(name));
  return rec;
}

ShardFileWriter::ShardFileWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardFileWriter::~ShardFileWriter() = default;

Result<std::unique_ptr<ShardFileWriter>> ShardFileWriter::Create(Env* env, const std::string& path,
                                                                 int rank) {
  CKPT_RETURN_IF_ERROR(InitHdf5());
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  CKPT_ASSIGN_OR_RETURN(impl->file, env->OpenFile(path, OpenMode::kCreate));
  impl->target.file = impl->file.get();
  CKPT_RETURN_IF_ERROR(impl->CreateHdf5(rank));  // on error ~Impl abandons the file
  return std::unique_ptr<ShardFileWriter>(new ShardFileWriter(std::move(impl)));
}

Result<DatasetRecord> ShardFileWriter::WriteTensor(const ShardedTensor& meta,
                                                   std::span<const std::byte> data,
                                                   const ShardWriteOptions& opts) {
  CKPT_RETURN_IF_ERROR(meta.Validate());
  const std::string name = TensorDatasetName(meta);
  if (int64_t(data.size()) != meta.num_bytes())
    return Status::InvalidArgument(impl_->Where(name) + ": buffer has " + std::to_string(data.size()) +
                                   " bytes, descriptor needs " + std::to_string(meta.num_bytes()));
  if (opts.chunk_bytes <= 0)
    return Status::InvalidArgument(impl_->Where(name) + ": chunk_bytes must be positive");
  CKPT_ASSIGN_OR_RETURN(Layout l, PlanLayout(TensorDims(meta), DTypeSize(meta.dtype), opts.chunk_bytes,
                                             impl_->Where(name)));
  const bool zstd = opts.codec.compression == Compression::kZstd && !l.chunk.empty();
  auto put_attrs = [&](hid_t d) {
    return PutStringAttr(d, "key", meta.key) && PutStringAttr(d, "dtype", DTypeName(meta.dtype)) &&
           PutIntsAttr(d, "global_shape", meta.global_shape) &&
           PutIntsAttr(d, "global_offset", meta.global_offset) &&
           PutIntsAttr(d, "local_shape", meta.local_shape) &&
           PutIntsAttr(d, "replica_id", std::vector<int64_t>(meta.replica_id.begin(), meta.replica_id.end()),
                       H5T_STD_I32LE) &&
           (!meta.flat_range ||
            PutIntsAttr(d, "flat_range", std::vector<int64_t>{meta.flat_range->begin, meta.flat_range->end})) &&
           PutIntAttr(d, "chunk_elems", l.chunk_elems) &&
           PutStringAttr(d, "compression", CompressionName(zstd ? Compression::kZstd : Compression::kNone)) &&
           PutIntAttr(d, "shuffle", zstd && opts.codec.shuffle, H5T_STD_U8LE) &&
           PutIntAttr(d, "allow_shape_mismatch", meta.allow_shape_mismatch, H5T_STD_U8LE);
  };
  return impl_->WriteDataset(name, l, meta.dtype, opts.codec, data, put_attrs);
}

Result<DatasetRecord> ShardFileWriter::WriteObject(const ShardedObject& meta,
                                                   std::span<const std::byte> bytes) {
  const std::string name = ObjectDatasetName(meta);
  if (meta.key.empty()) return Status::InvalidArgument("object with empty key");
  if (meta.global_offset.size() != meta.global_shape.size())
    return Status::InvalidArgument(impl_->Where(name) + ": offset/shape rank differ");
  // One chunk holding the whole blob.
  CKPT_ASSIGN_OR_RETURN(Layout l, PlanLayout({hsize_t(bytes.size())}, 1, std::max<int64_t>(1, bytes.size()),
                                             impl_->Where(name)));
  auto put_attrs = [&](hid_t d) {
    return PutStringAttr(d, "key", meta.key) && PutIntsAttr(d, "global_shape", meta.global_shape) &&
           PutIntsAttr(d, "global_offset", meta.global_offset) &&
           PutIntsAttr(d, "replica_id", std::vector<int64_t>(meta.replica_id.begin(), meta.replica_id.end()),
                       H5T_STD_I32LE) &&
           PutIntAttr(d, "chunk_elems", l.chunk_elems) && PutStringAttr(d, "compression", "none") &&
           PutIntAttr(d, "shuffle", 0, H5T_STD_U8LE);
  };
  return impl_->WriteDataset(name, l, DType::kUInt8, CodecOptions{}, bytes, put_attrs);
}

Status ShardFileWriter::Finish() {
  Impl& w = *impl_;
  CKPT_RETURN_IF_ERROR(w.CheckUsable());
  Status s = w.CloseHdf5();
  Result<uint64_t> size = s.ok() ? w.file->Size() : Result<uint64_t>(s);
  if (size.ok()) s = w.file->Sync();
  else s = size.status();
  if (s.ok()) s = w.file->Close();
  if (!s.ok()) {
    if (w.failed.ok()) w.failed = s;
    w.Abandon();
    return s;
  }
  w.size = *size;
  w.finished = true;
  return Status::Ok();
}

uint64_t ShardFileWriter::file_size() const { return impl_->size; }

// ---------------------------------------------------------------- reader ----

namespace {

// Shape and chunk grid of an open dataset (chunk empty: not chunked).
struct DatasetShape {
  std::vector<hsize_t> dims;
  std::vector<hsize_t> chunk;
  int64_t num_chunks() const {
    return chunk.empty() || dims.empty() ? 0 : int64_t((dims[0] + chunk[0] - 1) / chunk[0]);
  }
};

bool GetShape(hid_t dset, DatasetShape* out) {
  Hid space(H5Dget_space(dset), H5Sclose);
  Hid dcpl(H5Dget_create_plist(dset), H5Pclose);
  if (!space.valid() || !dcpl.valid()) return false;
  int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) return false;
  out->dims.assign(size_t(rank), 0);
  if (H5Sget_simple_extent_dims(space.get(), out->dims.data(), nullptr) < 0) return false;
  out->chunk.clear();
  if (H5Pget_layout(dcpl.get()) == H5D_CHUNKED && rank > 0) {
    out->chunk.assign(size_t(rank), 0);
    if (H5Pget_chunk(dcpl.get(), rank, out->chunk.data()) != rank) return false;
  }
  return true;
}

herr_t CollectName(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

int64_t Product(const std::vector<hsize_t>& v) {
  int64_t n = 1;
  for (hsize_t d : v) n *= int64_t(d);
  return n;
}

}  // namespace

struct ShardFileReader::Impl {
  struct OpenDataset {
    Hid id;
    DatasetShape shape;
  };

  std::string path;
  std::unique_ptr<File> file;
  EnvVfdTarget target;
  Hid fid;
  std::map<std::string, OpenDataset> cache;  // datasets opened by ReadChunk

  ~Impl() {
    auto lock = LockHdf5();
    cache.clear();
    fid.reset();
    if (file) file->Close().IgnoreError();
  }

  std::string Where(const std::string& dataset) const {
    return "dataset '" + dataset + "' in '" + path + "'";
  }

  // True if every component of the absolute path `name` exists.
  bool Exists(const std::string& name) const {
    if (name.size() < 2 || name[0] != '/') return false;
    for (size_t pos = name.find('/', 1);; pos = name.find('/', pos + 1)) {
      std::string prefix = name.substr(0, pos);
      htri_t r = H5Lexists(fid.get(), prefix.c_str(), H5P_DEFAULT);
      if (r <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
      if (pos == std::string::npos) return true;
    }
  }

  Status Open();
  Result<OpenDataset*> Dataset(const std::string& name);
  Result<DatasetInfo> Describe(const std::string& name, bool is_object);
  Status ReadAttrs(hid_t d, const std::string& name, bool is_object, DatasetInfo* info) const;
};

Status ShardFileReader::Impl::Open() {
  CKPT_ASSIGN_OR_RETURN(hid_t fapl_id, MakeEnvFapl(&target));
  auto lock = LockHdf5();
  Hid fapl(fapl_id, H5Pclose);
  fid = Hid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!fid.valid())
    return Hdf5Failure(Code::kCorruption, "'" + path + "' is not a readable HDF5 file", &target);
  Hid root(H5Gopen2(fid.get(), "/", H5P_DEFAULT), H5Gclose);
  if (!root.valid()) return Hdf5Failure(Code::kCorruption, "'" + path + "': no root group", &target);
  const std::string where = "'" + path + "' (not a ckpt shard file?)";
  CKPT_ASSIGN_OR_RETURN(std::string format, GetStringAttr(root.get(), "format", where));
  CKPT_ASSIGN_OR_RETURN(int64_t version, GetIntAttr(root.get(), "format_version", where));
  if (format != kFormatName)
    return Status::Corruption("'" + path + "' has format '" + format + "', expected '" + kFormatName + "'");
  if (version != kFormatVersion)
    return Status::Unimplemented("'" + path + "' has format_version " + std::to_string(version) +
                                 "; this build reads version " + std::to_string(kFormatVersion));
  return Status::Ok();
}

Result<ShardFileReader::Impl::OpenDataset*> ShardFileReader::Impl::Dataset(const std::string& name) {
  auto it = cache.find(name);
  if (it != cache.end()) return &it->second;
  if (!Exists(name)) return Status::NotFound(Where(name) + " does not exist");
  if (cache.size() >= 64) cache.clear();  // bound the handles kept open
  OpenDataset d;
  d.id = Hid(H5Dopen2(fid.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.id.valid() || !GetShape(d.id.get(), &d.shape))
    return Hdf5Failure(Code::kCorruption, "opening " + Where(name), &target);
  return &cache.emplace(name, std::move(d)).first->second;
}

Status ShardFileReader::Impl::ReadAttrs(hid_t d, const std::string& name, bool is_object,
                                        DatasetInfo* info) const {
  const std::string where = Where(name);
  auto bad = [&](const Status& s) { return Status::Corruption(where + ": " + s.message()); };
  CKPT_ASSIGN_OR_RETURN(std::string key, GetStringAttr(d, "key", where));
  CKPT_ASSIGN_OR_RETURN(Shape global_shape, GetIntsAttr(d, "global_shape", where));
  CKPT_ASSIGN_OR_RETURN(Shape global_offset, GetIntsAttr(d, "global_offset", where));
  CKPT_ASSIGN_OR_RETURN(std::vector<int64_t> replica, GetIntsAttr(d, "replica_id", where));
  CKPT_ASSIGN_OR_RETURN(info->record.chunk_elems, GetIntAttr(d, "chunk_elems", where));
  CKPT_ASSIGN_OR_RETURN(std::string compression, GetStringAttr(d, "compression", where));
  CKPT_ASSIGN_OR_RETURN(int64_t shuffle, GetIntAttr(d, "shuffle", where));
  Result<Compression> comp = ParseCompression(compression);
  if (!comp.ok()) return bad(comp.status());
  info->record.compression = *comp;
  info->record.shuffle = shuffle != 0;
  ReplicaId replica_id(replica.begin(), replica.end());
  if (is_object) {
    info->object = ShardedObject{key, std::move(global_shape), std::move(global_offset), std::move(replica_id)};
    return Status::Ok();
  }
  ShardedTensor& m = info->meta;
  m.key = std::move(key);
  m.global_shape = std::move(global_shape);
  m.global_offset = std::move(global_offset);
  m.replica_id = std::move(replica_id);
  CKPT_ASSIGN_OR_RETURN(std::string dtype, GetStringAttr(d, "dtype", where));
  Result<DType> t = ParseDType(dtype);
  if (!t.ok()) return bad(t.status());
  m.dtype = *t;
  CKPT_ASSIGN_OR_RETURN(m.local_shape, GetIntsAttr(d, "local_shape", where));
  CKPT_ASSIGN_OR_RETURN(int64_t mismatch, GetIntAttr(d, "allow_shape_mismatch", where));
  m.allow_shape_mismatch = mismatch != 0;
  if (HasAttr(d, "flat_range")) {
    CKPT_ASSIGN_OR_RETURN(std::vector<int64_t> fr, GetIntsAttr(d, "flat_range", where));
    if (fr.size() != 2) return Status::Corruption(where + ": attribute 'flat_range' needs 2 values");
    m.flat_range = FlatRange{fr[0], fr[1]};
  }
  Status v = m.Validate();
  return v.ok() ? Status::Ok() : bad(v);
}

Result<DatasetInfo> ShardFileReader::Impl::Describe(const std::string& name, bool is_object) {
  Hid d(H5Dopen2(fid.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  DatasetShape shape;
  if (!d.valid() || !GetShape(d.get(), &shape))
    return Hdf5Failure(Code::kCorruption, "opening " + Where(name), &target);
  DatasetInfo info;
  info.dataset = name;
  info.is_object = is_object;
  info.record.dataset = name;
  CKPT_RETURN_IF_ERROR(ReadAttrs(d.get(), name, is_object, &info));
  int64_t expect_elems = is_object ? Product(shape.dims) : info.meta.num_elements();
  int64_t chunk_elems = shape.chunk.empty() ? 0 : Product(shape.chunk);
  if (Product(shape.dims) != expect_elems || chunk_elems != info.record.chunk_elems)
    return Status::Corruption(Where(name) + ": dataset shape/chunking disagrees with its attributes");
  for (int64_t i = 0; i < shape.num_chunks(); ++i) {
    std::vector<hsize_t> at = ChunkCoord(shape.chunk, i);
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(d.get(), at.data(), &mask, &addr, &size) < 0)
      return Hdf5Failure(Code::kCorruption, "locating chunk " + std::to_string(i) + " of " + Where(name),
                         &target);
    ChunkRecord c;
    c.file_offset = addr == HADDR_UNDEF ? kChunkNotStored : uint64_t(addr);
    c.stored_size = addr == HADDR_UNDEF ? 0 : uint64_t(size);
    info.record.chunks.push_back(std::move(c));
  }
  return info;
}

ShardFileReader::ShardFileReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardFileReader::~ShardFileReader() = default;

Result<std::unique_ptr<ShardFileReader>> ShardFileReader::Open(Env* env, const std::string& path) {
  CKPT_RETURN_IF_ERROR(InitHdf5());
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  CKPT_ASSIGN_OR_RETURN(impl->file, env->OpenFile(path, OpenMode::kRead));
  impl->target.file = impl->file.get();
  CKPT_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<ShardFileReader>(new ShardFileReader(std::move(impl)));
}

Result<std::vector<std::byte>> ShardFileReader::ReadChunk(const std::string& dataset, int64_t index) {
  Impl& r = *impl_;
  auto lock = LockHdf5();
  CKPT_ASSIGN_OR_RETURN(Impl::OpenDataset * d, r.Dataset(dataset));
  const std::string what = "chunk " + std::to_string(index) + " of " + r.Where(dataset);
  if (index < 0 || index >= d->shape.num_chunks())
    return Status::NotFound(what + " does not exist (the dataset has " +
                            std::to_string(d->shape.num_chunks()) + " chunks)");
  std::vector<hsize_t> at = ChunkCoord(d->shape.chunk, index);
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  if (H5Dget_chunk_info_by_coord(d->id.get(), at.data(), &mask, &addr, &size) < 0)
    return Hdf5Failure(Code::kCorruption, "locating " + what, &r.target);
  if (addr == HADDR_UNDEF) return Status::NotFound(what + " was never written");
  std::vector<std::byte> buf(size);
  uint32_t filters = 0;
  if (H5Dread_chunk(d->id.get(), H5P_DEFAULT, at.data(), &filters, buf.data()) < 0)
    return Hdf5Failure(Code::kCorruption, "reading " + what, &r.target);
  if (filters != 0)
    return Status::Corruption(what + " was stored with filter mask " + std::to_string(filters) +
                              " (some filters skipped)");
  return buf;
}

Result<std::vector<DatasetInfo>> ShardFileReader::List() {
  Impl& r = *impl_;
  auto lock = LockHdf5();
  std::vector<DatasetInfo> out;
  for (const char* group : {kTensorGroup, kObjectGroup}) {
    if (!r.Exists(group)) continue;
    std::vector<std::string> names;
    Hid g(H5Gopen2(r.fid.get(), group, H5P_DEFAULT), H5Gclose);
    if (!g.valid() || H5Literate(g.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, CollectName, &names) < 0)
      return Hdf5Failure(Code::kCorruption, "listing group '" + std::string(group) + "' in '" + r.path + "'",
                         &r.target);
    for (const std::string& n : names) {
      const bool is_object = std::string_view(group) == kObjectGroup;
      CKPT_ASSIGN_OR_RETURN(DatasetInfo info, r.Describe(std::string(group) + "/" + n, is_object));
      out.push_back(std::move(info));
    }
  }
  return out;
}

}  // namespace ckpt
