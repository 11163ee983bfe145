// Shard files written with direct IO (shard_file.h Create's direct_io): HDF5
// aligns every chunk of >= kAlignThreshold bytes to kDirectIoAlign, the
// writer hands the Env aligned buffers (the caller's are not), so nearly all
// chunk bytes go through O_DIRECT; the stored bytes and hashes equal a
// buffered file's and read back exactly; a checkpoint saved direct through
// the fault Env commits, reports direct IO and loads bit for bit.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/format/hdf5_vfd.h"
#include "ckpt/format/manifest.h"
#include "ckpt/format/shard_file.h"
#include "ckpt/protocol/checkpoint.h"
#include "faults/fault_env.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

struct Tensor {
  ShardedTensor meta;
  std::vector<std::byte> bytes;
};

Tensor Make(const std::string& key, DType dt, std::vector<int64_t> shape, uint32_t seed) {
  Tensor t;
  t.meta = testing::Desc(key, dt, shape, std::vector<int64_t>(shape.size(), 0), shape);
  t.bytes.resize(size_t(t.meta.num_bytes()));
  std::mt19937 g(seed);
  for (auto& b : t.bytes) b = std::byte(g() & 0xff);
  return t;
}

// bf16 with 131-row chunks of 262,000 bytes (unaligned size), fp32 with
// 64 KiB chunks, a small tensor below the alignment threshold, an object.
std::vector<Tensor> Tensors() {
  return {Make("big", DType::kBFloat16, {600, 1000}, 1), Make("f32", DType::kFloat32, {512, 128}, 2),
          Make("small", DType::kFloat32, {100}, 3)};
}

struct Written {
  std::vector<DatasetRecord> recs;
  ShardWriteStats stats;
};

Written WriteFile(const std::string& path, const std::vector<Tensor>& ts, bool direct, Compression c) {
  Written w;
  auto writer = ShardFileWriter::Create(DefaultEnv(), path, 0, direct);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  if (!writer.ok()) return w;
  ShardWriteOptions o;
  o.chunk_bytes = 256 << 10;
  o.encode_threads = 2;
  o.codec.compression = c;
  for (const Tensor& t : ts) {
    auto rec = (*writer)->WriteTensor(t.meta, t.bytes, o);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    if (rec.ok()) w.recs.push_back(*rec);
  }
  const std::string blob = "rng-state";
  auto obj = (*writer)->WriteObject({"rng", {1}, {0}, {}}, std::as_bytes(std::span(blob.data(), blob.size())));
  EXPECT_TRUE(obj.ok()) << obj.status().ToString();
  EXPECT_TRUE((*writer)->Finish().ok());
  w.stats = (*writer)->stats();
  return w;
}

TEST(ShardDirectIo, ChunksAreAlignedGoDirectAndReadBackAsBuffered) {
  const std::string dir = testing::ScratchDir("shard_direct");
  const std::vector<Tensor> ts = Tensors();
  ASSERT_NE(reinterpret_cast<uintptr_t>(ts[0].bytes.data()) % kDirectIoAlign, 0u)
      << "the caller's buffer should be misaligned here, so the writer's aligned copy is exercised";
  Written d = WriteFile(dir + "/direct.h5", ts, true, Compression::kNone);
  Written b = WriteFile(dir + "/buffered.h5", ts, false, Compression::kNone);
  ASSERT_EQ(d.recs.size(), 3u);
  ASSERT_EQ(b.recs.size(), 3u);
  EXPECT_TRUE(d.stats.direct_io.active) << d.stats.direct_io.fallback;
  EXPECT_FALSE(b.stats.direct_io.requested);
  uint64_t big = 0, unaligned_buffered = 0;
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(d.recs[i].chunks.size(), b.recs[i].chunks.size());
    for (size_t k = 0; k < d.recs[i].chunks.size(); ++k) {
      const ChunkRecord &cd = d.recs[i].chunks[k], &cb = b.recs[i].chunks[k];
      EXPECT_EQ(cd.sha256, cb.sha256);  // the same stored bytes, elsewhere in the file
      EXPECT_EQ(cd.stored_size, cb.stored_size);
      if (cd.stored_size < kAlignThreshold) continue;
      EXPECT_EQ(cd.file_offset % kDirectIoAlign, 0u) << d.recs[i].dataset << " chunk " << k;
      big += cd.stored_size;
      unaligned_buffered += cb.file_offset % kDirectIoAlign != 0;
    }
  }
  EXPECT_GT(unaligned_buffered, 0u) << "without alignment HDF5 packs chunks at unaligned offsets";
  // Every large chunk's aligned middle went direct: at most a page per chunk did not.
  EXPECT_GE(d.stats.direct_io.direct_bytes, big - 4096 * (d.recs[0].chunks.size() + d.recs[1].chunks.size()));
  auto reader = ShardFileReader::Open(DefaultEnv(), dir + "/direct.h5");
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  for (size_t i = 0; i < 3; ++i) {
    const size_t chunk = size_t(d.recs[i].chunk_elems) * DTypeSize(ts[i].meta.dtype);
    for (size_t k = 0; k < d.recs[i].chunks.size(); ++k) {
      auto got = (*reader)->ReadChunk(d.recs[i].dataset, int64_t(k));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      const size_t n = std::min(chunk, ts[i].bytes.size() - k * chunk);
      ASSERT_TRUE(std::equal(ts[i].bytes.begin() + k * chunk, ts[i].bytes.begin() + k * chunk + n, got->begin()))
          << d.recs[i].dataset << " chunk " << k;
    }
  }
}

TEST(ShardDirectIo, CompressedChunksRoundTripWithTheBufferedHashes) {
  const std::string dir = testing::ScratchDir("shard_direct_zstd");
  std::vector<Tensor> ts = Tensors();
  for (size_t i = 0; i < ts[0].bytes.size(); i += 2) ts[0].bytes[i] = std::byte{0};  // compressible
  Written d = WriteFile(dir + "/direct.h5", ts, true, Compression::kZstd);
  Written b = WriteFile(dir + "/buffered.h5", ts, false, Compression::kZstd);
  ASSERT_EQ(d.recs.size(), b.recs.size());
  for (size_t i = 0; i < d.recs.size(); ++i)
    for (size_t k = 0; k < d.recs[i].chunks.size(); ++k) EXPECT_EQ(d.recs[i].chunks[k].sha256, b.recs[i].chunks[k].sha256);
  EXPECT_GT(d.stats.direct_io.direct_bytes, 0u);
}

TEST(ShardDirectIo, CheckpointSavedDirectThroughTheFaultEnvLoadsExactly) {
  const std::string root = testing::ScratchDir("ckpt_direct");
  testing::OwnedState src, dst;
  for (auto* s : {&src, &dst}) {
    s->Add(testing::Desc("w", DType::kBFloat16, {700, 513}, {0, 0}, {700, 513}), s == &src);
    s->Add(testing::Desc("b", DType::kFloat32, {5000}, {0}, {5000}), s == &src);
    s->AddObject({"rng", {1}, {0}, {}}, "rng");
  }
  faults::FaultEnv::Options fo;
  fo.plan = *faults::ParseFaultPlan("");
  fo.record_trace = true;
  faults::FaultEnv env(DefaultEnv(), fo);
  SaveOptions o;
  o.root = root;
  o.iteration = 1;
  o.env = &env;
  o.write.chunk_bytes = 128 << 10;
  o.write.direct_io = true;
  o.layout = {{"tp", 1}};
  auto saved = SaveCheckpoint(src.dict(), o);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(saved->direct_io.active) << saved->direct_io.fallback;
  EXPECT_GT(saved->direct_io.direct_bytes, uint64_t(700 * 513 * 2) * 9 / 10);
  int64_t fsyncs = 0;
  for (const auto& t : env.Trace()) fsyncs += t.point == "env.fsync" && t.path.find(ShardFileName(0)) != std::string::npos;
  EXPECT_EQ(fsyncs, 1);  // the direct file is still fdatasynced before the commit
  ASSERT_GT(dst.CountMismatches(), 0);  // control: dst starts as zeros
  LoadOptions lo;
  lo.root = root;
  auto loaded = LoadCheckpoint(dst.dict(), lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(dst.CountMismatches(), 0);
}

}  // namespace
}  // namespace ckpt
