// Shard files must be plain HDF5 that stock tools read: h5py (Debian's
// /usr/bin/python3 with python3-h5py) decodes raw and zstd shards to the
// values ckpt wrote, and h5dump reads them with the build's filter plugin.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ckpt/format/shard_file.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using json = nlohmann::json;

const char kPython[] = "/usr/bin/python3";
const char kH5dump[] = "/usr/bin/h5dump";

std::string PluginDir() { return std::string(CKPT_BINARY_DIR) + "/h5plugin"; }

// Runs a shell command with the plugin path set and a clean Python env;
// returns the exit status and fills *output with stdout+stderr.
int RunTool(const std::string& cmd, std::string* output) {
  std::string log = ::testing::TempDir() + "/h5py_compat." + std::to_string(getpid()) + ".log";
  std::string full = "env -u PYTHONPATH -u PYTHONHOME HDF5_PLUGIN_PATH='" + PluginDir() + "' " + cmd +
                     " > '" + log + "' 2>&1";
  int rc = std::system(full.c_str());
  std::ifstream in(log);
  output->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(log.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

struct Spec {
  ShardedTensor meta;
  std::vector<std::byte> data;
  const char* numpy_dtype;
};

ShardedTensor Box(std::string key, DType t, Shape global, Shape offset, Shape local) {
  ShardedTensor m;
  m.key = std::move(key);
  m.dtype = t;
  m.global_shape = std::move(global);
  m.global_offset = std::move(offset);
  m.local_shape = std::move(local);
  return m;
}

template <typename T>
std::vector<std::byte> Bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<Spec> Tensors() {
  std::vector<float> f32(6 * 5);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = float(i) * 0.25f - 3.0f;
  std::vector<uint16_t> bf16(7 * 3), fp16(9);
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = FloatToBf16(float(i) * 0.5f - 5.0f);
  for (size_t i = 0; i < fp16.size(); ++i) fp16[i] = FloatToFp16(float(i) * 0.125f - 0.5f);
  std::vector<int64_t> i64(4 * 4);
  for (size_t i = 0; i < i64.size(); ++i) i64[i] = int64_t(i) * 1000003 - (int64_t(1) << 40);

  std::vector<Spec> s;
  s.push_back({Box("embedding/word", DType::kFloat32, {12, 5}, {6, 0}, {6, 5}), Bytes(f32), "float32"});
  s.push_back({Box("layers.0.qkv", DType::kBFloat16, {7, 6}, {0, 3}, {7, 3}), Bytes(bf16), "uint16"});
  Spec half{Box("optim.exp_avg", DType::kFloat16, {4, 5}, {0, 0}, {4, 5}), Bytes(fp16), "float16"};
  half.meta.flat_range = FlatRange{3, 12};
  s.push_back(std::move(half));
  s.push_back({Box("step_counts", DType::kInt64, {4, 4}, {0, 0}, {4, 4}), Bytes(i64), "int64"});
  return s;
}

// Bit patterns and (for numeric dtypes) values h5py must return.
json Expectation(const Spec& s) {
  size_t es = DTypeSize(s.meta.dtype);
  json bits = json::array(), values = json::array();
  for (int64_t i = 0; i < s.meta.num_elements(); ++i) {
    uint64_t b = 0;
    std::memcpy(&b, s.data.data() + size_t(i) * es, es);
    bits.push_back(b);
    values.push_back(s.meta.dtype == DType::kBFloat16 ? double(b) : ElementAsDouble(s.meta.dtype, s.data.data(), i));
  }
  json shape = json::array();
  if (s.meta.flat_range) shape.push_back(s.meta.flat_range->size());
  else for (int64_t d : s.meta.local_shape) shape.push_back(d);
  return {{"name", TensorDatasetName(s.meta)},
          {"numpy_dtype", s.numpy_dtype},
          {"shape", shape},
          {"bits", bits},
          {"values", values},
          {"attrs",
           {{"key", s.meta.key},
            {"dtype", std::string(DTypeName(s.meta.dtype))},
            {"global_shape", s.meta.global_shape},
            {"global_offset", s.meta.global_offset},
            {"local_shape", s.meta.local_shape}}}};
}

// Writes one shard file with every tensor; returns its expectation entry.
json WriteShard(const std::string& path, Compression c, int rank) {
  auto w = ShardFileWriter::Create(DefaultEnv(), path, rank);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return {};
  ShardWriteOptions opts;
  opts.codec.compression = c;
  opts.chunk_bytes = 16;  // several chunks per tensor, partial last ones
  json datasets = json::array();
  for (const Spec& s : Tensors()) {
    auto rec = (*w)->WriteTensor(s.meta, s.data, opts);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    EXPECT_GT(rec->chunks.size(), 1u);
    datasets.push_back(Expectation(s));
  }
  Status st = (*w)->Finish();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return {{"path", path}, {"rank", rank}, {"compressed", c == Compression::kZstd}, {"datasets", datasets}};
}

bool HavePythonH5py() {
  if (access(kPython, X_OK) != 0) return false;
  std::string out;
  return RunTool(std::string(kPython) + " -c 'import h5py, numpy'", &out) == 0;
}

TEST(H5pyCompatTest, H5pyReadsRawAndZstdShards) {
  if (!HavePythonH5py()) GTEST_SKIP() << kPython << " with h5py and numpy is not installed";
  ASSERT_EQ(access((PluginDir() + "/libckpt_h5zstd.so").c_str(), R_OK), 0) << "plugin not built";
  std::string dir = testing::ScratchDir("h5py_compat");
  json expect = {{"files", {WriteShard(dir + "/raw.h5", Compression::kNone, 0),
                            WriteShard(dir + "/zstd.h5", Compression::kZstd, 5)}}};
  ASSERT_FALSE(::testing::Test::HasFailure());
  std::string json_path = dir + "/expect.json";
  std::ofstream(json_path) << expect.dump(1);
  std::string out;
  int rc = RunTool(std::string(kPython) + " '" + CKPT_SOURCE_DIR + "/tests/scripts/h5py_read.py' '" + json_path + "'",
               &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("checked 8 datasets, 0 mismatches"), std::string::npos) << out;
}

TEST(H5pyCompatTest, H5dumpReadsZstdShard) {
  if (access(kH5dump, X_OK) != 0) GTEST_SKIP() << kH5dump << " is not installed";
  std::string dir = testing::ScratchDir("h5dump_compat");
  std::string path = dir + "/zstd.h5";
  WriteShard(path, Compression::kZstd, 1);
  ASSERT_FALSE(::testing::Test::HasFailure());
  std::string out;
  EXPECT_EQ(RunTool(std::string(kH5dump) + " -H -p '" + path + "'", &out), 0) << out;
  EXPECT_NE(out.find("USER_DEFINED_FILTER"), std::string::npos) << out;
  // Full dump decodes every chunk through the plugin.
  const std::string ds = TensorDatasetName(Tensors()[0].meta);
  EXPECT_EQ(RunTool(std::string(kH5dump) + " -d '" + ds + "' '" + path + "'", &out), 0) << out;
  EXPECT_NE(out.find("-2.75"), std::string::npos) << out;
  EXPECT_EQ(out.find("rror"), std::string::npos) << out;
}

}  // namespace
}  // namespace ckpt
