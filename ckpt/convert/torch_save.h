// TorchSaveWriter: writes a file torch.load reads (PyTorch's zip-based
// torch.save format, the one since 1.6), without torch, streaming tensor data.
//
// The file is a zip archive whose entries are stored (not compressed), each
// entry's data 64-byte aligned through padding in the local header's extra
// field (as PyTorch's writer does), with zip64 records where an entry, an
// offset or the entry count outgrows the 32/16-bit fields:
//   archive/data.pkl   the object: a pickle (protocol 2) of a dict whose
//                      tensor values are torch._utils._rebuild_tensor_v2(
//                      storage, 0, size, stride, False, OrderedDict()) and
//                      whose storages are persistent ids ("storage",
//                      torch.<T>Storage, "<i>", "cpu", numel), as torch.save
//                      pickles them;
//   archive/data/<i>   storage i's raw little-endian bytes;
//   archive/byteorder  "little";   archive/version  "3".
// Values: tensors (any ckpt dtype, contiguous), None, str: only what torch's
// weights_only unpickler allows (torch 1.13 refuses bytes, _codecs.encode), so
// torch.load(path, weights_only=True) reads every file written.
//
// Use: Add* every entry (the pickle is written by Start), then for each
// tensor in Add order BeginTensor / Append (its bytes in order) / EndTensor,
// then Finish (writes version, the central directory; syncs and renames
// "<path>.tmp" over <path>). An unfinished writer removes its tmp file.
// Errors: kInvalidArgument for misuse (wrong order, byte counts), the Env's.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/dtype.h"
#include "ckpt/base/env.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt::convert {

class TorchSaveWriter {
 public:
  static Result<std::unique_ptr<TorchSaveWriter>> Create(Env* env, const std::string& path);
  ~TorchSaveWriter();

  void AddTensor(const std::string& key, DType dtype, const Shape& shape);
  void AddNone(const std::string& key);
  void AddString(const std::string& key, const std::string& value);

  Status Start();                                // writes data.pkl
  Status BeginTensor(size_t tensor_index);       // tensors in Add order: 0, 1, ...
  Status Append(std::span<const std::byte> bytes);
  Status EndTensor();
  Status Finish();
  uint64_t file_size() const { return at_; }

 private:
  struct Tensor {
    DType dtype;
    Shape shape;
    uint64_t bytes;
  };
  struct Entry {  // a zip member as the central directory records it
    std::string name;
    uint64_t header_offset = 0, size = 0;
    uint32_t crc = 0;
    bool zip64 = false;
  };
  TorchSaveWriter() = default;
  Status BeginEntry(const std::string& name, uint64_t size);
  Status EndEntry();
  Status WriteEntry(const std::string& name, std::span<const std::byte> data);

  Env* env_ = nullptr;
  std::string path_, tmp_;
  std::unique_ptr<File> file_;
  std::string pickle_;            // the dict's items, built by Add*
  std::vector<Tensor> tensors_;
  std::vector<Entry> entries_;
  uint64_t at_ = 0;               // bytes written so far
  uint64_t entry_written_ = 0;
  bool in_entry_ = false, started_ = false, finished_ = false;
  size_t next_tensor_ = 0;
};

}  // namespace ckpt::convert
