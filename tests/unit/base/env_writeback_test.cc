// Early writeback of the POSIX Env (env.h PosixWriteback): files written in
// any order across many writeback ranges read back byte for byte, a whole
// checkpoint saved through an Env that kicks writeback every few KiB loads
// exactly, and the environment knob parses as documented.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <random>
#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/protocol/checkpoint.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

std::vector<std::byte> Pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937 g(seed);
  for (auto& b : v) b = std::byte(g() & 0xff);
  return v;
}

Result<std::vector<std::byte>> ReadAll(Env* env, const std::string& path, size_t n) {
  CKPT_ASSIGN_OR_RETURN(auto f, env->OpenFile(path, OpenMode::kRead));
  std::vector<std::byte> got(n + 1);
  CKPT_ASSIGN_OR_RETURN(size_t r, f->PRead(0, got));
  got.resize(r);
  return got;
}

class Writeback : public ::testing::TestWithParam<bool> {};  // bound_dirty

// Pieces of 3 KiB + 1 written back to front, then an overwrite of the
// middle: every write crosses or starts writeback ranges (16 KiB).
TEST_P(Writeback, OutOfOrderWritesReadBackExactly) {
  auto env = NewPosixEnv({16 << 10, GetParam()});
  const std::string path = testing::ScratchDir("wb_order") + "/f";
  const size_t piece = 3073, pieces = 97;
  std::vector<std::byte> want = Pattern(piece * pieces, 1);
  auto f = env->OpenFile(path, OpenMode::kCreate);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (size_t i = pieces; i-- > 0;)
    ASSERT_TRUE((*f)->PWrite(i * piece, std::span(want).subspan(i * piece, piece)).ok());
  const std::vector<std::byte> mid = Pattern(40000, 2);
  std::copy(mid.begin(), mid.end(), want.begin() + 100000);
  ASSERT_TRUE((*f)->PWrite(100000, mid).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
  auto got = ReadAll(env.get(), path, want.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, want);
}

// The HDF5 driver's writes (metadata at the front, chunks in order) through
// an Env that kicks writeback every 8 KiB: the checkpoint loads exactly.
TEST_P(Writeback, CheckpointThroughTheEnvLoadsExactly) {
  auto env = NewPosixEnv({8 << 10, GetParam()});
  const std::string root = testing::ScratchDir("wb_ckpt");
  testing::OwnedState src, dst;
  for (auto* s : {&src, &dst}) {
    s->Add(testing::Desc("w", DType::kBFloat16, {300, 257}, {0, 0}, {300, 257}), s == &src);
    s->Add(testing::Desc("b", DType::kFloat32, {5000}, {0}, {5000}), s == &src);
  }
  SaveOptions o;
  o.root = root;
  o.iteration = 3;
  o.env = env.get();
  o.write.chunk_bytes = 4096;
  o.layout = {{"tp", 1}};
  auto saved = SaveCheckpoint(src.dict(), o);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  LoadOptions lo;
  lo.root = root;
  lo.env = env.get();
  auto loaded = LoadCheckpoint(dst.dict(), lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->iteration, 3);
  EXPECT_EQ(dst.CountMismatches(), 0);
}

INSTANTIATE_TEST_SUITE_P(BoundDirty, Writeback, ::testing::Bool());

TEST(Writeback, EnvironmentKnob) {
  ::unsetenv("CKPT_WRITEBACK_MIB");
  ::unsetenv("CKPT_WRITEBACK_BOUND");
  const PosixWriteback def = PosixWritebackFromEnvironment();
  EXPECT_EQ(def.bytes, 0u);  // off by default
  EXPECT_TRUE(def.bound_dirty);
  ::setenv("CKPT_WRITEBACK_MIB", "64", 1);
  EXPECT_EQ(PosixWritebackFromEnvironment().bytes, PosixWriteback{}.bytes);
  ::setenv("CKPT_WRITEBACK_MIB", "0", 1);
  EXPECT_EQ(PosixWritebackFromEnvironment().bytes, 0u);
  ::setenv("CKPT_WRITEBACK_MIB", "16", 1);
  ::setenv("CKPT_WRITEBACK_BOUND", "0", 1);
  EXPECT_EQ(PosixWritebackFromEnvironment().bytes, uint64_t(16) << 20);
  EXPECT_FALSE(PosixWritebackFromEnvironment().bound_dirty);
  ::setenv("CKPT_WRITEBACK_MIB", "48k", 1);  // KiB: small files in tests
  EXPECT_EQ(PosixWritebackFromEnvironment().bytes, uint64_t(48) << 10);
  ::setenv("CKPT_WRITEBACK_MIB", "16x", 1);  // not a number: the default (off)
  EXPECT_EQ(PosixWritebackFromEnvironment().bytes, 0u);
  ::unsetenv("CKPT_WRITEBACK_MIB");
  ::unsetenv("CKPT_WRITEBACK_BOUND");
}

}  // namespace
}  // namespace ckpt
