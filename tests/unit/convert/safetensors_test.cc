// Safetensors reader/writer (ckpt/convert/safetensors.h): round trips every
// supported dtype bit for bit (bf16 NaN payloads included), streams pieces at
// any offset, and refuses hostile files - huge or truncated headers, offsets
// that overlap, leave gaps or run past the file, duplicate names, unsupported
// dtypes - with errors naming the file and tensor, before any allocation.
// Model directories: a missing shard file of the index is named with a tensor.
#include "ckpt/convert/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "harness/test_util.h"

namespace ckpt::convert {
namespace {

std::vector<std::byte> Pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = std::byte(uint8_t(seed + 31 * i + (i >> 7)));
  return b;
}

// A file of `header` JSON (length prefix as given, or its size) followed by `data_bytes` bytes.
std::string RawFile(const std::string& dir, const std::string& name, const std::string& header, size_t data_bytes,
                    int64_t length_override = -1) {
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = length_override >= 0 ? uint64_t(length_override) : header.size();
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out << header << std::string(data_bytes, '\x5a');
  return path;
}

Status OpenStatus(const std::string& path) { return SafetensorsReader::Open(DefaultEnv(), path).status(); }

TEST(SafetensorsTest, RoundTripsEveryDtypeBitForBitInPieces) {
  const std::string dir = testing::ScratchDir("st_roundtrip");
  std::vector<SafetensorsEntry> entries;
  const DType types[] = {DType::kBFloat16, DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kInt64,
                         DType::kInt32,    DType::kInt16,   DType::kInt8,    DType::kUInt8,   DType::kBool};
  for (DType t : types) entries.push_back({"t_" + std::string(DTypeName(t)), t, {3, 5}, 0, 0});
  entries.push_back({"empty", DType::kFloat32, {0, 4}, 0, 0});
  entries.push_back({"scalar", DType::kFloat32, {}, 0, 0});
  SortLikeReference(&entries);
  EXPECT_EQ(entries.front().dtype, DType::kInt64);  // the reference's order: I64 before F64 before F32 ...
  auto w = SafetensorsWriter::Create(DefaultEnv(), dir + "/a.safetensors", entries, {{"format", "pt"}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::map<std::string, std::vector<std::byte>> data;
  for (size_t i = 0; i < (*w)->tensors().size(); ++i) {
    const auto& e = (*w)->tensors()[i];
    auto bytes = Pattern(e.bytes(), uint8_t(i));
    if (e.dtype == DType::kBFloat16) {  // NaN with a payload and -0 survive
      bytes[0] = std::byte{0x41}, bytes[1] = std::byte{0xff};
      bytes[2] = std::byte{0x00}, bytes[3] = std::byte{0x80};
    }
    if (e.dtype == DType::kBool)
      for (auto& b : bytes) b = std::byte(uint8_t(b) & 1);
    const size_t half = bytes.size() / 2;  // two pieces, second first
    ASSERT_TRUE((*w)->Write(i, half, std::span(bytes).subspan(half)).ok());
    ASSERT_TRUE((*w)->Write(i, 0, std::span(bytes).first(half)).ok());
    data[e.name] = bytes;
  }
  ASSERT_TRUE((*w)->Finish().ok());
  auto r = SafetensorsReader::Open(DefaultEnv(), dir + "/a.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->metadata().at("format"), "pt");
  EXPECT_EQ((*r)->tensors().size(), entries.size());
  for (const auto& [name, bytes] : data) {
    const SafetensorsEntry* e = (*r)->Find(name);
    ASSERT_NE(e, nullptr) << name;
    std::vector<std::byte> got(e->bytes());
    ASSERT_TRUE((*r)->Read(*e, 0, got).ok());
    EXPECT_EQ(got, bytes) << name;
  }
  EXPECT_EQ((*r)->Find("scalar")->shape, Shape{});
  EXPECT_EQ((*r)->Find("empty")->bytes(), 0u);
}

TEST(SafetensorsTest, WriterRefusesIncompleteTensorsAndLeavesNoFile) {
  const std::string dir = testing::ScratchDir("st_incomplete");
  {
    auto w = SafetensorsWriter::Create(DefaultEnv(), dir + "/b.safetensors", {{"x", DType::kFloat32, {4}, 0, 0}}, {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(0, 0, Pattern(8, 1)).ok());
    EXPECT_FALSE((*w)->Write(0, 12, Pattern(8, 1)).ok());  // past the tensor
    Status st = (*w)->Finish();
    EXPECT_EQ(st.code(), Code::kInternal);
    EXPECT_NE(st.message().find("'x'"), std::string::npos) << st.ToString();
  }
  EXPECT_FALSE(DefaultEnv()->Stat(dir + "/b.safetensors")->exists);
  EXPECT_FALSE(DefaultEnv()->Stat(dir + "/b.safetensors.tmp")->exists);
}

struct Hostile {
  const char* name;
  std::string header;
  size_t data_bytes;
  int64_t length;  // -1: the header's size
  Code code;
  const char* says;  // in the message besides the file name
};

TEST(SafetensorsTest, HostileFilesFailNamingFileAndTensor) {
  const std::string dir = testing::ScratchDir("st_hostile");
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const Hostile cases[] = {
      {"huge_header", ok, 8, int64_t(1) << 40, Code::kCorruption, "exceeds the limit"},
      {"truncated_header", ok, 0, int64_t(ok.size()) + 100, Code::kCorruption, "truncated header"},
      {"not_json", "{\"w\":", 0, -1, Code::kCorruption, "not a JSON object"},
      {"not_object", "[1,2]", 0, -1, Code::kCorruption, "does not start with '{'"},
      {"duplicate", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, -1, Code::kCorruption, "'w' appears twice"},
      {"overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, -1, Code::kCorruption, "tensor 'b'"},
      {"gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       12, -1, Code::kCorruption, "gap"},
      {"past_end", ok, 4, -1, Code::kCorruption, "truncated file"},
      {"trailing", ok, 16, -1, Code::kCorruption, "trailing bytes"},
      {"size_mismatch", R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8, -1, Code::kCorruption,
       "tensor 'w': data_offsets [0,8] span 8 bytes"},
      {"huge_shape", R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8, -1,
       Code::kCorruption, "overflows"},
      {"negative", R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, -1, Code::kCorruption, "tensor 'w'"},
      {"fp8", R"({"w":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", 8, -1, Code::kUnimplemented,
       "tensor 'w': dtype 'F8_E4M3' is not supported (supported: F64, F32, BF16"},
      {"metadata", R"({"__metadata__":{"n":1},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8, -1,
       Code::kCorruption, "__metadata__ value of 'n'"},
  };
  for (const Hostile& c : cases) {
    const std::string path = RawFile(dir, std::string(c.name) + ".safetensors", c.header, c.data_bytes, c.length);
    Status st = OpenStatus(path);
    EXPECT_EQ(st.code(), c.code) << c.name << ": " << st.ToString();
    EXPECT_NE(st.message().find(path), std::string::npos) << c.name << ": " << st.ToString();
    EXPECT_NE(st.ToString().find(c.says), std::string::npos) << c.name << ": " << st.ToString();
  }
  const std::string tiny = dir + "/tiny.safetensors";
  std::ofstream(tiny) << "abc";
  EXPECT_NE(OpenStatus(tiny).message().find("shorter than the 8-byte header length"), std::string::npos);
  // Leading/trailing spaces are allowed (writers pad for alignment).
  EXPECT_TRUE(OpenStatus(RawFile(dir, "padded.safetensors", "  " + ok + "      ", 8)).ok());
}

TEST(SafetensorsTest, DirectoryWithIndexNamesMissingShardFileAndTensor) {
  const std::string dir = testing::ScratchDir("st_index");
  auto one = SafetensorsWriter::Create(DefaultEnv(), dir + "/model-00001-of-00002.safetensors",
                                       {{"a", DType::kBFloat16, {2}, 0, 0}}, {});
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE((*one)->Write(0, 0, Pattern(4, 3)).ok());
  ASSERT_TRUE((*one)->Finish().ok());
  ASSERT_TRUE(WriteSafetensorsIndex(DefaultEnv(), dir + "/" + kSafetensorsIndexName,
                                    {{"a", "model-00001-of-00002.safetensors"},
                                     {"b", "model-00002-of-00002.safetensors"}},
                                    8)
                  .ok());
  Status st = SafetensorsDir::Open(DefaultEnv(), dir).status();
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("tensor 'b'"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("model-00002-of-00002.safetensors"), std::string::npos) << st.ToString();
  // The index maps a tensor to a file that does not hold it.
  ASSERT_TRUE(WriteSafetensorsIndex(DefaultEnv(), dir + "/" + kSafetensorsIndexName,
                                    {{"a", "model-00001-of-00002.safetensors"},
                                     {"c", "model-00001-of-00002.safetensors"}},
                                    8)
                  .ok());
  st = SafetensorsDir::Open(DefaultEnv(), dir).status();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("'c'"), std::string::npos) << st.ToString();
  const std::string empty = testing::ScratchDir("st_empty_dir");
  EXPECT_EQ(SafetensorsDir::Open(DefaultEnv(), empty).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace ckpt::convert
