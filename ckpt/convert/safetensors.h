// Safetensors files (huggingface/safetensors) read and written through the Env.
//
// Format (the reference README and safetensors/src/tensor.rs): an unsigned
// 64-bit little-endian header length N; N bytes of UTF-8 JSON, an object that
// maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// plus an optional "__metadata__" object of string values (the header may be
// padded with spaces); then the data buffer: every tensor's elements,
// row-major and little-endian, at file bytes [8 + N + begin, 8 + N + end).
//
// The reader validates every field before it allocates or reads tensor data,
// so a hostile file fails with a message instead of a huge allocation or an
// out-of-range read: N <= 100,000,000 (the reference's limit) and inside the
// file; a JSON object without duplicate names; known dtypes; shapes of
// non-negative integers whose byte size (overflow-checked) equals end - begin;
// and the data ranges, sorted, tiling the data buffer exactly from 0 to the
// end of the file (no gap, no overlap, nothing after - the reference refuses
// holes so that files cannot be polyglots). Errors name the file and tensor:
// kCorruption for malformed files (truncated header, bad offsets),
// kUnimplemented for dtypes ckpt has no type for (F8_*, U16, ...), kNotFound
// for missing files, kIOError from the Env.
//
// The writer lays tensors out in the order given (SortLikeReference gives the
// reference's order: descending dtype size, then name), pads the header with
// spaces to a multiple of 8 (as the reference does) and takes each tensor's
// bytes in pieces at any offset, so a converter can stream without holding a
// tensor. It writes "<path>.tmp", and Finish() checks that every byte was
// written, syncs and renames it to <path>; a writer destroyed unfinished
// removes the tmp file. bf16 and every other dtype are copied bit for bit.
//
// Not thread-safe (one thread per reader/writer); distinct objects may be used
// on distinct threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/dtype.h"
#include "ckpt/base/env.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt::convert {

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// "BF16" <-> DType::kBFloat16 etc. Unsupported names: kUnimplemented listing the supported ones.
Result<DType> SafetensorsDType(std::string_view name);
std::string_view SafetensorsDTypeName(DType t);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data buffer
  uint64_t bytes() const { return end - begin; }
};

class SafetensorsReader {
 public:
  static Result<std::unique_ptr<SafetensorsReader>> Open(Env* env, const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }  // data order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsEntry* Find(std::string_view name) const;
  uint64_t file_size() const { return file_size_; }
  // Bytes [offset, offset + dst.size()) of tensor `t` (an entry of this file).
  Status Read(const SafetensorsEntry& t, uint64_t offset, std::span<std::byte> dst);
  int64_t bytes_read() const { return bytes_read_; }

 private:
  SafetensorsReader() = default;
  std::string path_;
  std::unique_ptr<File> file_;
  uint64_t data_start_ = 0, file_size_ = 0;
  std::vector<SafetensorsEntry> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  int64_t bytes_read_ = 0;
};

// Sorts entries as the reference serializer lays them out: dtype size
// descending (its alignment order), then name.
void SortLikeReference(std::vector<SafetensorsEntry>* entries);

class SafetensorsWriter {
 public:
  // `tensors`: names, dtypes and shapes (begin/end are assigned here, in order).
  static Result<std::unique_ptr<SafetensorsWriter>> Create(Env* env, const std::string& path,
                                                           std::vector<SafetensorsEntry> tensors,
                                                           const std::map<std::string, std::string>& metadata);
  ~SafetensorsWriter();

  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }
  // Writes src at byte `offset` of tensor `index`'s data.
  Status Write(size_t index, uint64_t offset, std::span<const std::byte> src);
  // Every tensor byte written? Then sync, close, rename over the final path.
  Status Finish();
  uint64_t file_size() const { return file_size_; }

 private:
  SafetensorsWriter() = default;
  Env* env_ = nullptr;
  std::string path_, tmp_;
  std::unique_ptr<File> file_;
  uint64_t data_start_ = 0, file_size_ = 0;
  std::vector<SafetensorsEntry> tensors_;
  std::vector<uint64_t> written_;
  bool finished_ = false;
};

// A Hugging Face model directory: model.safetensors, or the shards named by
// model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map":
// {tensor: file}}). Open checks that every indexed file exists and holds the
// tensors the index maps to it (errors name the index, the file and a tensor).
class SafetensorsDir {
 public:
  static Result<std::unique_ptr<SafetensorsDir>> Open(Env* env, const std::string& dir);

  struct Located {
    SafetensorsReader* file = nullptr;
    const SafetensorsEntry* entry = nullptr;
  };
  // kNotFound naming the tensor and where it was looked for.
  Result<Located> Find(const std::string& name) const;
  std::vector<std::string> TensorNames() const;
  const std::string& dir() const { return dir_; }
  std::string source() const;  // "index <path>" or the single file's path
  int64_t bytes_read() const;
  uint64_t total_bytes() const;  // tensor bytes of all files

 private:
  SafetensorsDir() = default;
  std::string dir_, index_path_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, size_t> where_;  // tensor -> files_ index
};

inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr const char* kSafetensorsSingleName = "model.safetensors";

// Writes the index JSON (sorted weight_map, metadata.total_size) atomically.
Status WriteSafetensorsIndex(Env* env, const std::string& path, const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size);

}  // namespace ckpt::convert
