// Shard file writer (shard_file.h): HDF5 through the Env driver (hdf5_vfd.h).
//
// Writing a tensor: plan the chunk grid (whole trailing dims per chunk), create
// the dataset with the filter pipeline other readers need, then run the chunks
// through the writer's ChunkPipeline (chunk_pipeline.h): its workers pad the
// edge chunk, encode and hash chunk i outside the HDF5 lock; this thread
// stores the chunks in index order with H5Dwrite_chunk (filter mask 0) under
// the lock, reading each address back with H5Dget_chunk_info_by_coord. Raw
// datasets are allocated early so their chunks are contiguous in chunk order;
// compressed ones incrementally (stored sizes are only known after encoding).
// Fill values are never written. Direct IO (Create's direct_io): HDF5 aligns
// large chunks to kDirectIoAlign and the workers hand over chunk bytes at
// kDirectIoAlign-aligned addresses, so the Env's O_DIRECT path (env.h
// OpenOptions) takes each chunk's aligned middle; only unaligned tails and
// small objects go through the page cache.
//
// Any HDF5/Env failure after the file exists poisons the writer: HDF5's state
// is then unreliable, and the save must abort anyway.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "ckpt/format/aligned_buffers.h"
#include "ckpt/format/chunk_pipeline.h"
#include "ckpt/base/chunk_hash.h"
#include "ckpt/format/shard_file.h"
#include "ckpt/format/shard_file_internal.h"

namespace ckpt {
static_assert(std::endian::native == std::endian::little,
              "shard files store little-endian element bytes as they are in memory");

using namespace shard_internal;

namespace {

// One chunk ready to store: its bytes (a view of the caller's buffer, or the
// padded/encoded copy it owns, or for direct IO an aligned copy of either
// from the writer's pool) and its record (size, hash; offset once stored).
struct PreparedChunk {
  std::span<const std::byte> view;
  std::vector<std::byte> owned;
  AlignedBuffer aligned;
  size_t aligned_size = 0;
  ChunkRecord record;
  std::span<const std::byte> bytes() const {
    if (aligned) return {aligned.data(), aligned_size};
    return owned.empty() ? view : std::span<const std::byte>(owned);
  }
  uint64_t held() const { return owned.capacity() + aligned.capacity(); }
};

// Direct IO: stored bytes at a misaligned address move to an aligned copy,
// hashed as they are copied. Returns whether it hashed.
bool AlignForDirectIo(PreparedChunk& p, AlignedBufferPool& pool, ChunkHash hash) {
  const std::span<const std::byte> b = p.bytes();
  if (b.empty() || reinterpret_cast<uintptr_t>(b.data()) % kDirectIoAlign == 0) return false;
  ChunkHasher hasher(hash);
  p.aligned = pool.CopyOf(b, &hasher);
  p.aligned_size = b.size();
  p.owned = std::vector<std::byte>();
  p.record.sha256 = hasher.FinishHex();
  return true;
}

// Pads (edge chunk), encodes (codec non-null: zstd), aligns (direct) and
// hashes chunk i with `hash`. Pure.
Result<PreparedChunk> PrepareChunk(std::span<const std::byte> data, size_t chunk_bytes, size_t elem_size,
                                   int64_t i, const CodecOptions* codec, ChunkHash hash,
                                   AlignedBufferPool* direct) {
  PreparedChunk p;
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
  if (!direct || !AlignForDirectIo(p, *direct, hash)) p.record.sha256 = ChunkHashHex(hash, p.bytes());
  p.record.stored_size = p.bytes().size();
  return p;
}

}  // namespace

struct ShardFileWriter::Impl {
  std::string path;
  std::unique_ptr<File> file;
  EnvVfdTarget target;  // referenced by HDF5 while fid is open
  hid_t fid = H5I_INVALID_HID;
  Status failed;  // sticky: set by the first HDF5/Env failure
  bool finished = false;
  bool direct = false;  // Create's direct_io
  AlignedBufferPool aligned_pool{4};  // direct: chunk copies, reused (a window of 2 workers)
  uint64_t size = 0;
  std::unique_ptr<ChunkPipeline> pipeline;  // created by the first tensor, for its thread count
  ShardWriteStats stats;
  ChunkHash hash = ChunkHash::kSha256;  // of the dataset being written (set by WriteTensor/WriteObject)
  std::atomic<uint64_t> buffered{0};  // bytes owned by prepared, unstored chunks
  std::atomic<uint64_t> peak_buffered{0};

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
    StopPipeline();
    target.discard_writes = true;
    CloseHdf5().IgnoreError();
    if (file) file->Close().IgnoreError();
  }

  // The pipeline for `threads` workers (re-created when the count changes).
  ChunkPipeline& Pipeline(int threads) {
    if (!pipeline || pipeline->requested_threads() != std::max(0, threads)) {
      StopPipeline();
      pipeline = std::make_unique<ChunkPipeline>(threads);
      stats.encode_threads = pipeline->threads();
    }
    return *pipeline;
  }

  // Joins the workers, keeping their statistics.
  void StopPipeline() {
    if (!pipeline) return;
    stats.peak_chunks_in_flight = std::max(stats.peak_chunks_in_flight, pipeline->peak_in_flight());
    pipeline.reset();
  }

  void Hold(uint64_t bytes) {
    const uint64_t now = buffered.fetch_add(bytes) + bytes;
    uint64_t peak = peak_buffered.load();
    while (now > peak && !peak_buffered.compare_exchange_weak(peak, now)) {
    }
  }
  void Release(PreparedChunk& c) {
    buffered.fetch_sub(c.held());
    aligned_pool.Release(std::move(c.aligned));
    c = PreparedChunk{};
  }

  Status CreateHdf5(int rank);
  Result<Hid> CreateDataset(const std::string& name, const Layout& l, DType dtype, const CodecOptions& codec,
                            const std::function<bool(hid_t)>& put_attrs);
  Result<DatasetRecord> WriteDataset(const std::string& name, const Layout& l, DType dtype,
                                     const CodecOptions& codec, int threads, std::span<const std::byte> data,
                                     const std::function<bool(hid_t)>& put_attrs);
  Status WriteChunks(hid_t dset, const std::string& name, const Layout& l, const CodecOptions* encode,
                     int threads, std::span<const std::byte> data, DatasetRecord* rec);
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

// Creates the dataset and its attributes (kAlreadyExists does not poison).
Result<Hid> ShardFileWriter::Impl::CreateDataset(const std::string& name, const Layout& l, DType dtype,
                                                 const CodecOptions& codec,
                                                 const std::function<bool(hid_t)>& put_attrs) {
  auto lock = LockHdf5();
  if (H5Lexists(fid, name.c_str(), H5P_DEFAULT) > 0) return Status::AlreadyExists(Where(name) + " already exists");
  H5Eclear2(H5E_DEFAULT);
  Hid type = FileType(dtype);
  Hid space(H5Screate_simple(int(l.dims.size()), l.dims.data(), nullptr), H5Sclose);
  Hid dcpl = MakeDcpl(l, codec);
  if (!type.valid() || !space.valid() || !dcpl.valid()) return Fail("preparing type/space/layout of " + Where(name));
  Hid dset(H5Dcreate2(fid, name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
           H5Dclose);
  if (!dset.valid()) return Fail("creating " + Where(name));
  if (!put_attrs(dset.get())) return Fail("writing attributes of " + Where(name));
  return dset;
}

// Prepares the chunks on the pipeline's workers into `window` slots and
// stores them here in order; a failure of either poisons the writer.
Status ShardFileWriter::Impl::WriteChunks(hid_t dset, const std::string& name, const Layout& l,
                                          const CodecOptions* encode, int threads,
                                          std::span<const std::byte> data, DatasetRecord* rec) {
  ChunkPipeline serial(0);  // one chunk: no hand-off, and no workers started for it
  ChunkPipeline& pipe = l.num_chunks > 1 ? Pipeline(threads) : serial;
  const int64_t window = pipe.window();
  const size_t chunk_bytes = size_t(l.chunk_elems) * l.elem_size;
  std::vector<PreparedChunk> slots(static_cast<size_t>(window));
  rec->chunks.reserve(size_t(l.num_chunks));
  auto prepare = [&](int64_t i) -> Status {  // on a worker (or here when serial)
    Result<PreparedChunk> p = PrepareChunk(data, chunk_bytes, l.elem_size, i, encode, hash,
                                           direct ? &aligned_pool : nullptr);
    if (!p.ok()) return p.status().WithContext("preparing chunk " + std::to_string(i) + " of " + Where(name));
    Hold(p->held());
    slots[size_t(i % window)] = std::move(p).value();
    return Status::Ok();
  };
  auto consume = [&](int64_t i) -> Status {  // on this thread, in index order
    PreparedChunk& c = slots[size_t(i % window)];
    CKPT_RETURN_IF_ERROR(WriteChunk(dset, name, l, i, c.bytes(), &c.record));
    rec->chunks.push_back(std::move(c.record));
    Release(c);  // its buffer goes now: memory stays within the window
    return Status::Ok();
  };
  Status s = pipe.Run(l.num_chunks, prepare, consume);
  stats.peak_chunks_in_flight = std::max(stats.peak_chunks_in_flight, serial.peak_in_flight());
  for (PreparedChunk& c : slots) Release(c);  // left over by a failed run
  if (!s.ok() && failed.ok()) failed = s;     // a store failure is there already
  return s;
}

Result<DatasetRecord> ShardFileWriter::Impl::WriteDataset(const std::string& name, const Layout& l,
                                                          DType dtype, const CodecOptions& codec, int threads,
                                                          std::span<const std::byte> data,
                                                          const std::function<bool(hid_t)>& put_attrs) {
  CKPT_RETURN_IF_ERROR(CheckUsable());
  const bool zstd = codec.compression == Compression::kZstd && !l.chunk.empty();
  CKPT_ASSIGN_OR_RETURN(Hid dset, CreateDataset(name, l, dtype, codec, put_attrs));
  DatasetRecord rec;
  rec.dataset = name;
  rec.chunk_elems = l.chunk_elems;
  rec.compression = zstd ? Compression::kZstd : Compression::kNone;
  rec.shuffle = zstd && codec.shuffle;
  CKPT_RETURN_IF_ERROR(WriteChunks(dset.get(), name, l, zstd ? &codec : nullptr, threads, data, &rec));
  auto lock = LockHdf5();
  if (!dset.Close() || !target.first_error.ok()) return Fail("closing " + Where(name));
  return rec;
}

ShardFileWriter::ShardFileWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardFileWriter::~ShardFileWriter() = default;

Result<std::unique_ptr<ShardFileWriter>> ShardFileWriter::Create(Env* env, const std::string& path,
                                                                 int rank, bool direct_io) {
  CKPT_RETURN_IF_ERROR(InitHdf5());
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->direct = direct_io;
  CKPT_ASSIGN_OR_RETURN(impl->file, env->OpenFile(path, OpenMode::kCreate, OpenOptions{.direct = direct_io}));
  impl->target.file = impl->file.get();
  impl->target.alignment = direct_io ? kDirectIoAlign : 0;
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
  if (Status s = CheckCodecOptions(opts.codec); !s.ok()) return s.WithContext(impl_->Where(name));
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
  const int threads = opts.encode_threads == kAutoThreads ? DefaultWorkerThreads(nullptr) : opts.encode_threads;
  impl_->hash = opts.hash;
  return impl_->WriteDataset(name, l, meta.dtype, opts.codec, threads, data, put_attrs);
}

Result<DatasetRecord> ShardFileWriter::WriteObject(const ShardedObject& meta,
                                                   std::span<const std::byte> bytes, ChunkHash hash) {
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
  impl_->hash = hash;
  return impl_->WriteDataset(name, l, DType::kUInt8, CodecOptions{}, 0, bytes, put_attrs);
}

Status ShardFileWriter::Finish() {
  Impl& w = *impl_;
  CKPT_RETURN_IF_ERROR(w.CheckUsable());
  w.StopPipeline();
  Status s = w.CloseHdf5();
  Result<uint64_t> size = s.ok() ? w.file->Size() : Result<uint64_t>(s);
  if (size.ok()) s = w.file->Sync();
  else s = size.status();
  w.stats.direct_io = w.file->direct_io();
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

ShardWriteStats ShardFileWriter::stats() const {
  ShardWriteStats s = impl_->stats;
  if (impl_->pipeline) s.peak_chunks_in_flight = std::max(s.peak_chunks_in_flight, impl_->pipeline->peak_in_flight());
  s.peak_buffered_bytes = impl_->peak_buffered.load();
  return s;
}

}  // namespace ckpt
