// Shard files: one HDF5 file per writing rank, written and read through Env.
//
// Layout (docs/FORMAT.md): each tensor shard is a chunked dataset
// "/tensors/<key>@<offsets>[:<flat begin>-<flat end>]" whose shape is the
// local box (or [n] for a flat-range shard, [1] for a rank-0 tensor) and whose
// attributes carry key, dtype, global_shape, global_offset, local_shape,
// replica_id, flat_range, chunk_elems, compression, shuffle. Chunks span whole
// trailing dimensions, so chunk i is the contiguous flat range
// [i * chunk_elems, (i + 1) * chunk_elems); the last one is padded with zeros
// to full size as HDF5 stores edge chunks. Objects are uint8 datasets under
// "/objects/<key>@<cell>". bf16 is stored as uint16 (attribute dtype says bf16),
// fp16 as an IEEE half type, bool as uint8.
//
// ckpt encodes (codec.h) and SHA-256-hashes each chunk itself and writes it
// with an HDF5 direct chunk write; the hash covers the stored bytes.
// ChunkRecord::file_offset is an absolute byte offset in the file (no user
// block), so a chunk can be read back with a plain File::PRead of
// stored_size bytes. Chunks of raw (uncompressed) datasets are allocated
// together and lie back to back in chunk order (direct IO: each chunk of
// >= kAlignThreshold bytes starts on a kDirectIoAlign boundary, so there are
// gaps of < 4 KiB between them).
//
// Failure: any Env error inside HDF5 is captured and returned as that Status
// (not a generic HDF5 error), with the file and dataset as context. After an
// HDF5/Env failure the writer is poisoned (later calls: kFailedPrecondition);
// invalid arguments (codec options included, checked before the dataset is
// created) and kAlreadyExists do not poison it. A failure while preparing a
// chunk on a worker ("preparing chunk i of dataset ... in ...") poisons it as
// a store failure does; either way WriteTensor returns only after every
// worker has stopped touching the caller's buffer. A writer that is
// destroyed without Finish() (or whose Finish failed) leaves an unsynced,
// unusable file and releases all HDF5 state. The reader reports files HDF5
// cannot open (garbage, truncated) or that lack format="ckpt-shard" as
// kCorruption naming the path (a newer format_version: kUnimplemented).
//
// Threads: not thread-safe: one thread per object (HDF5 calls are serialised
// process-wide by LockHdf5(), hdf5_vfd.h). The writer pipelines a
// multi-chunk tensor (ChunkPipeline, chunk_pipeline.h): encode_threads worker
// threads pad, encode and SHA-256 the chunks while the calling thread stores
// them in chunk order (HDF5 direct chunk writes + Env IO), so hashing and
// compression overlap IO. At most 2 * encode_threads chunks are prepared and
// not yet stored (stored bytes of each: <= chunk_bytes raw, <=
// ZSTD_compressBound(chunk_bytes) zstd; raw chunks other than the padded edge
// chunk are views of the caller's buffer and cost nothing, except with direct
// IO: aligned copies from a pool that keeps <= 4 idle). Files are identical
// byte for byte for every encode_threads, 0 (serial) included. The File is
// used from the calling thread only; the workers live as long as the writer
// (Finish or destruction joins them). Implementation: shard_writer.cc,
// shard_reader.cc, shard_layout.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/chunk_hash.h"
#include "ckpt/format/codec.h"
#include "ckpt/base/comm.h"
#include "ckpt/base/env.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt {

struct ChunkRecord {
  uint64_t file_offset = 0;  // byte address of the stored chunk in the file
  uint64_t stored_size = 0;  // stored (encoded) bytes
  std::string sha256;        // hex digest of the stored bytes under the checkpoint's ChunkHash (SHA-256 by default)
};

struct DatasetRecord {
  std::string dataset;      // HDF5 path inside the file
  int64_t chunk_elems = 0;  // elements per chunk; 0 when the shard is empty
  Compression compression = Compression::kNone;
  bool shuffle = false;
  std::vector<ChunkRecord> chunks;
};

struct ShardWriteOptions {
  CodecOptions codec;
  int64_t chunk_bytes = 4 << 20;  // target raw bytes per chunk
  // Pad/encode/hash workers per writer; 0: serial on the calling thread;
  // kAutoThreads: DefaultWorkerThreads of the saving job's Comm
  // (SaveCheckpoint), or of one rank for a writer used alone.
  int encode_threads = kAutoThreads;
  // Digest of every stored chunk (ChunkRecord::sha256). One per checkpoint:
  // the manifest records it (Manifest::chunk_hash); SHA-256 unless chosen.
  ChunkHash hash = ChunkHash::kSha256;
  // Shard files written with direct IO (ShardFileWriter::Create's direct_io):
  // on unless CKPT_DIRECT_IO=0 (DirectIoFromEnvironment; DESIGN "Direct IO").
  bool direct_io = DirectIoFromEnvironment();
};

// What a writer's pipeline did (for tests and benchmarks).
struct ShardWriteStats {
  int encode_threads = 0;             // workers actually started (0: serial)
  int64_t peak_chunks_in_flight = 0;  // most chunks prepared and not yet stored
  uint64_t peak_buffered_bytes = 0;   // most bytes those chunks owned (padded/encoded/aligned copies)
  DirectIoStats direct_io;            // the file's (File::direct_io), as of Finish
};

// Dataset name for a tensor shard / object: keys escaped injectively ('%' as
// "%25", '/' as "%2F"), so distinct keys never share a name.
std::string TensorDatasetName(const ShardedTensor& meta);
std::string ObjectDatasetName(const ShardedObject& meta);

class ShardFileWriter {
 public:
  // Creates (truncates) `path` through env. `rank` is stored as a file attribute.
  // direct_io: the file is opened with OpenOptions::direct, HDF5 aligns every
  // chunk of >= kAlignThreshold bytes to kDirectIoAlign (other offsets than
  // without it: the bytes of each chunk and every value are the same), and
  // chunks are stored from kDirectIoAlign-aligned buffers (a worker copies a
  // misaligned one), so a chunk's whole aligned middle bypasses the page cache.
  // Durability is unchanged (Finish fdatasyncs). Where the filesystem has no
  // O_DIRECT the file is written buffered (stats().direct_io.fallback says why).
  static Result<std::unique_ptr<ShardFileWriter>> Create(Env* env, const std::string& path, int rank,
                                                         bool direct_io = false);
  ~ShardFileWriter();

  Result<DatasetRecord> WriteTensor(const ShardedTensor& meta, std::span<const std::byte> data,
                                    const ShardWriteOptions& opts);
  Result<DatasetRecord> WriteObject(const ShardedObject& meta, std::span<const std::byte> bytes,
                                    ChunkHash hash = ChunkHash::kSha256);

  // Closes HDF5, fsyncs and closes the file. Any error: the save must abort.
  Status Finish();
  // Total size of the file after Finish().
  uint64_t file_size() const;
  ShardWriteStats stats() const;

  struct Impl;

 private:
  explicit ShardFileWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ChunkRecord::file_offset that List() reports for a chunk HDF5 has no
// storage for (never written: the writer died before writing it).
inline constexpr uint64_t kChunkNotStored = ~uint64_t(0);

// Attributes of one dataset, as read back from the file (inspect, salvage).
struct DatasetInfo {
  std::string dataset;
  bool is_object = false;
  ShardedTensor meta;     // for tensors
  ShardedObject object;   // for objects
  DatasetRecord record;   // chunk layout (offsets/sizes from HDF5; sha256 empty)
};

class ShardFileReader {
 public:
  static Result<std::unique_ptr<ShardFileReader>> Open(Env* env, const std::string& path);
  ~ShardFileReader();

  // Stored bytes of chunk `index` of `dataset` (read through HDF5).
  Result<std::vector<std::byte>> ReadChunk(const std::string& dataset, int64_t index);
  // All datasets with their attributes and chunk layout.
  Result<std::vector<DatasetInfo>> List();

  struct Impl;

 private:
  explicit ShardFileReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ckpt
