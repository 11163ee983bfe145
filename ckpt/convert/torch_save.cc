// torch.save's zip format without torch (see torch_save.h).
#include "ckpt/convert/torch_save.h"

#include <zlib.h>

namespace ckpt::convert {
namespace {

constexpr uint64_t kAlign = 64;           // PyTorch's writer aligns record data to 64 bytes
constexpr uint32_t kMax32 = 0xFFFFFFFFu;
constexpr const char* kArchive = "archive/";

// Little-endian field appenders for zip records.
void Put16(std::string* s, uint32_t v) {
  for (int i = 0; i < 2; ++i) s->push_back(char((v >> (8 * i)) & 0xff));
}
void Put32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(char((v >> (8 * i)) & 0xff));
}
void Put64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(char((v >> (8 * i)) & 0xff));
}

// ---- pickle (protocol 2) ----
void PickleInt(std::string* p, int64_t v) {
  if (v >= 0 && v < 256) {
    p->push_back('K');  // BININT1
    p->push_back(char(v));
  } else if (v >= 0 && v < 65536) {
    p->push_back('M');  // BININT2
    Put16(p, uint32_t(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    p->push_back('J');  // BININT
    Put32(p, uint32_t(int32_t(v)));
  } else {
    p->push_back('\x8a');  // LONG1: little-endian two's complement
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes.push_back(char((uint64_t(v) >> (8 * i)) & 0xff));
    while (bytes.size() > 1 && ((bytes.back() == 0 && !(bytes[bytes.size() - 2] & 0x80)) ||
                                (bytes.back() == char(0xff) && (bytes[bytes.size() - 2] & 0x80))))
      bytes.pop_back();
    p->push_back(char(bytes.size()));
    *p += bytes;
  }
}

void PickleStr(std::string* p, const std::string& utf8) {
  p->push_back('X');  // BINUNICODE
  Put32(p, uint32_t(utf8.size()));
  *p += utf8;
}

void PickleGlobal(std::string* p, const char* module, const char* name) {
  *p += std::string("c") + module + "\n" + name + "\n";
}

void PickleTuple(std::string* p, const Shape& v) {
  p->push_back('(');  // MARK
  for (int64_t x : v) PickleInt(p, x);
  p->push_back('t');  // TUPLE
}

const char* StorageClass(DType t) {
  switch (t) {
    case DType::kFloat32: return "FloatStorage";
    case DType::kFloat64: return "DoubleStorage";
    case DType::kBFloat16: return "BFloat16Storage";
    case DType::kFloat16: return "HalfStorage";
    case DType::kInt64: return "LongStorage";
    case DType::kInt32: return "IntStorage";
    case DType::kInt16: return "ShortStorage";
    case DType::kInt8: return "CharStorage";
    case DType::kUInt8: return "ByteStorage";
    case DType::kBool: return "BoolStorage";
  }
  return "ByteStorage";
}

// torch._utils._rebuild_tensor_v2(persistent storage, 0, size, stride, False, OrderedDict())
void PickleTensor(std::string* p, size_t storage, DType t, const Shape& shape) {
  PickleGlobal(p, "torch._utils", "_rebuild_tensor_v2");
  p->push_back('(');
  p->push_back('(');
  PickleStr(p, "storage");
  PickleGlobal(p, "torch", StorageClass(t));
  PickleStr(p, std::to_string(storage));
  PickleStr(p, "cpu");
  PickleInt(p, NumElements(shape));
  p->push_back('t');
  p->push_back('Q');  // BINPERSID
  PickleInt(p, 0);
  PickleTuple(p, shape);
  Shape stride(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) stride[i - 1] = stride[i] * shape[i];
  PickleTuple(p, stride);
  p->push_back('\x89');  // NEWFALSE: requires_grad
  PickleGlobal(p, "collections", "OrderedDict");
  p->push_back(')');  // EMPTY_TUPLE
  p->push_back('R');  // REDUCE: backward hooks
  p->push_back('t');
  p->push_back('R');
}

// ---- zip records ----
std::string LocalHeader(const std::string& name, uint64_t offset, uint64_t size, bool zip64) {
  std::string h;
  Put32(&h, 0x04034b50);
  Put16(&h, zip64 ? 45 : 20);
  Put16(&h, 0);  // flags
  Put16(&h, 0);  // stored
  Put16(&h, 0);  // time
  Put16(&h, 0x21);  // date 1980-01-01
  Put32(&h, 0);  // crc: patched by EndEntry
  Put32(&h, zip64 ? kMax32 : uint32_t(size));
  Put32(&h, zip64 ? kMax32 : uint32_t(size));
  std::string extra;
  if (zip64) {
    Put16(&extra, 0x0001);
    Put16(&extra, 16);
    Put64(&extra, size);
    Put64(&extra, size);
  }
  // Pad with an extra field so the data starts at a multiple of kAlign ("FB", as PyTorch).
  const uint64_t unpadded = offset + 30 + name.size() + extra.size() + 4;
  const uint64_t pad = (kAlign - unpadded % kAlign) % kAlign;
  Put16(&extra, 0x4246);
  Put16(&extra, uint32_t(pad));
  extra.append(size_t(pad), 'Z');
  Put16(&h, uint32_t(name.size()));
  Put16(&h, uint32_t(extra.size()));
  return h + name + extra;
}

std::string CentralEntry(const std::string& name, uint64_t offset, uint64_t size, uint32_t crc, bool zip64) {
  std::string h, extra;
  if (zip64) {
    Put16(&extra, 0x0001);
    Put16(&extra, 24);
    Put64(&extra, size);
    Put64(&extra, size);
    Put64(&extra, offset);
  }
  Put32(&h, 0x02014b50);
  Put16(&h, zip64 ? 45 : 20);  // made by
  Put16(&h, zip64 ? 45 : 20);  // needed
  Put16(&h, 0);
  Put16(&h, 0);
  Put16(&h, 0);
  Put16(&h, 0x21);
  Put32(&h, crc);
  Put32(&h, zip64 ? kMax32 : uint32_t(size));
  Put32(&h, zip64 ? kMax32 : uint32_t(size));
  Put16(&h, uint32_t(name.size()));
  Put16(&h, uint32_t(extra.size()));
  Put16(&h, 0);  // comment
  Put16(&h, 0);  // disk
  Put16(&h, 0);  // internal attributes
  Put32(&h, 0);  // external attributes
  Put32(&h, zip64 ? kMax32 : uint32_t(offset));
  return h + name + extra;
}

std::string EndRecords(uint64_t entries, uint64_t cd_offset, uint64_t cd_size) {
  std::string e;
  const bool zip64 = entries >= 0xFFFF || cd_offset >= kMax32 || cd_size >= kMax32;
  if (zip64) {
    const uint64_t at = cd_offset + cd_size;
    Put32(&e, 0x06064b50);
    Put64(&e, 44);
    Put16(&e, 45);
    Put16(&e, 45);
    Put32(&e, 0);
    Put32(&e, 0);
    Put64(&e, entries);
    Put64(&e, entries);
    Put64(&e, cd_size);
    Put64(&e, cd_offset);
    Put32(&e, 0x07064b50);  // locator
    Put32(&e, 0);
    Put64(&e, at);
    Put32(&e, 1);
  }
  Put32(&e, 0x06054b50);
  Put16(&e, 0);
  Put16(&e, 0);
  Put16(&e, zip64 ? 0xFFFF : uint32_t(entries));
  Put16(&e, zip64 ? 0xFFFF : uint32_t(entries));
  Put32(&e, zip64 ? kMax32 : uint32_t(cd_size));
  Put32(&e, zip64 ? kMax32 : uint32_t(cd_offset));
  Put16(&e, 0);
  return e;
}

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

}  // namespace

Result<std::unique_ptr<TorchSaveWriter>> TorchSaveWriter::Create(Env* env, const std::string& path) {
  std::unique_ptr<TorchSaveWriter> w(new TorchSaveWriter());
  w->env_ = env;
  w->path_ = path;
  w->tmp_ = path + ".tmp";
  CKPT_ASSIGN_OR_RETURN(w->file_, env->OpenFile(w->tmp_, OpenMode::kCreate));
  return w;
}

TorchSaveWriter::~TorchSaveWriter() {
  if (finished_ || !file_) return;
  file_->Close().IgnoreError();
  env_->RemoveFile(tmp_).IgnoreError();
}

void TorchSaveWriter::AddTensor(const std::string& key, DType dtype, const Shape& shape) {
  PickleStr(&pickle_, key);
  PickleTensor(&pickle_, tensors_.size(), dtype, shape);
  tensors_.push_back({dtype, shape, uint64_t(NumElements(shape)) * DTypeSize(dtype)});
}

void TorchSaveWriter::AddNone(const std::string& key) {
  PickleStr(&pickle_, key);
  pickle_.push_back('N');
}

void TorchSaveWriter::AddString(const std::string& key, const std::string& value) {
  PickleStr(&pickle_, key);
  PickleStr(&pickle_, value);
}

Status TorchSaveWriter::BeginEntry(const std::string& name, uint64_t size) {
  if (in_entry_) return Status::InvalidArgument("torch.save writer: entry '" + name + "' begun inside another");
  Entry e{kArchive + name, at_, size, 0, size >= kMax32 || at_ >= kMax32};
  const std::string header = LocalHeader(e.name, at_, size, e.zip64);
  CKPT_RETURN_IF_ERROR(file_->PWrite(at_, Bytes(header)));
  at_ += header.size();
  entries_.push_back(std::move(e));
  entry_written_ = 0;
  in_entry_ = true;
  return Status::Ok();
}

Status TorchSaveWriter::Append(std::span<const std::byte> bytes) {
  if (!in_entry_ || entry_written_ + bytes.size() > entries_.back().size)
    return Status::InvalidArgument("torch.save writer: " + std::to_string(bytes.size()) +
                                   " bytes beyond the current entry");
  CKPT_RETURN_IF_ERROR(file_->PWrite(at_, bytes));
  Entry& e = entries_.back();
  e.crc = uint32_t(crc32_z(e.crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
  at_ += bytes.size();
  entry_written_ += bytes.size();
  return Status::Ok();
}

Status TorchSaveWriter::EndEntry() {
  Entry& e = entries_.back();
  if (!in_entry_ || entry_written_ != e.size)
    return Status::InvalidArgument("torch.save writer: entry '" + e.name + "' got " + std::to_string(entry_written_) +
                                   " of " + std::to_string(e.size) + " bytes");
  std::string crc;
  Put32(&crc, e.crc);
  CKPT_RETURN_IF_ERROR(file_->PWrite(e.header_offset + 14, Bytes(crc)));  // the local header's crc field
  in_entry_ = false;
  return Status::Ok();
}

Status TorchSaveWriter::WriteEntry(const std::string& name, std::span<const std::byte> data) {
  CKPT_RETURN_IF_ERROR(BeginEntry(name, data.size()));
  CKPT_RETURN_IF_ERROR(Append(data));
  return EndEntry();
}

Status TorchSaveWriter::Start() {
  if (started_) return Status::InvalidArgument("torch.save writer: Start called twice");
  started_ = true;
  const std::string pkl = std::string("\x80\x02}(", 4) + pickle_ + "u.";  // PROTO 2, {}, MARK, items, SETITEMS, STOP
  CKPT_RETURN_IF_ERROR(WriteEntry("byteorder", Bytes("little")));
  return WriteEntry("data.pkl", Bytes(pkl));
}

Status TorchSaveWriter::BeginTensor(size_t tensor_index) {
  if (!started_ || tensor_index != next_tensor_ || tensor_index >= tensors_.size())
    return Status::InvalidArgument("torch.save writer: tensor " + std::to_string(tensor_index) +
                                   " out of order (next is " + std::to_string(next_tensor_) + ")");
  ++next_tensor_;
  return BeginEntry("data/" + std::to_string(tensor_index), tensors_[tensor_index].bytes);
}

Status TorchSaveWriter::EndTensor() { return EndEntry(); }

Status TorchSaveWriter::Finish() {
  if (!started_ || next_tensor_ != tensors_.size() || in_entry_)
    return Status::InvalidArgument("torch.save writer: " + std::to_string(tensors_.size() - next_tensor_) +
                                   " tensor(s) not written");
  CKPT_RETURN_IF_ERROR(WriteEntry("version", Bytes("3\n")));
  std::string cd;
  for (const Entry& e : entries_) cd += CentralEntry(e.name, e.header_offset, e.size, e.crc, e.zip64);
  const std::string tail = cd + EndRecords(entries_.size(), at_, cd.size());
  CKPT_RETURN_IF_ERROR(file_->PWrite(at_, Bytes(tail)));
  at_ += tail.size();
  CKPT_RETURN_IF_ERROR(file_->Sync());
  CKPT_RETURN_IF_ERROR(file_->Close());
  CKPT_RETURN_IF_ERROR(env_->Rename(tmp_, path_));
  finished_ = true;
  return Status::Ok();
}

}  // namespace ckpt::convert
