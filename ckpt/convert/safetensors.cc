// Safetensors reader/writer over the Env (see safetensors.h for the format
// and the validation rules).
#include "ckpt/convert/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

namespace ckpt::convert {
namespace {

using nlohmann::json;

std::string Str(uint64_t v) { return std::to_string(v); }

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {{"F64", DType::kFloat64}, {"F32", DType::kFloat32}, {"BF16", DType::kBFloat16},
                                 {"F16", DType::kFloat16}, {"I64", DType::kInt64},   {"I32", DType::kInt32},
                                 {"I16", DType::kInt16},   {"I8", DType::kInt8},     {"U8", DType::kUInt8},
                                 {"BOOL", DType::kBool}};

uint64_t LoadLe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint64_t(p[i]);
  return v;
}

void StoreLe64(uint64_t v, std::byte* p) {
  for (int i = 0; i < 8; ++i) p[i] = std::byte((v >> (8 * i)) & 0xff);
}

// Parses the header text; duplicate top-level names are an error (the
// reference disallows them; nlohmann would silently keep the last one).
Result<json> ParseHeader(const std::string& text, const std::string& path) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{')
    return Status::Corruption("safetensors file '" + path + "': the header does not start with '{'");
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json j = json::parse(text, on_event, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::Corruption("safetensors file '" + path + "': the header is not a JSON object");
  if (!duplicate.empty())
    return Status::Corruption("safetensors file '" + path + "': tensor '" + duplicate + "' appears twice in the header");
  return j;
}

bool AsU64(const json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

// One tensor's header entry, checked in itself (offsets checked together later).
Result<SafetensorsEntry> ParseEntry(const std::string& name, const json& v, const std::string& path) {
  const std::string where = "safetensors file '" + path + "', tensor '" + name + "'";
  if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
      !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
      v["data_offsets"].size() != 2)
    return Status::Corruption(where + ": entry needs \"dtype\" (string), \"shape\" (array) and \"data_offsets\" ([begin, end])");
  SafetensorsEntry e;
  e.name = name;
  auto dt = SafetensorsDType(v["dtype"].get<std::string>());
  if (!dt.ok()) return dt.status().WithContext(where);
  e.dtype = *dt;
  uint64_t bytes = DTypeSize(e.dtype);
  for (const json& d : v["shape"]) {
    uint64_t n = 0;
    if (!AsU64(d, &n) || n > uint64_t(INT64_MAX) || (n != 0 && bytes > UINT64_MAX / n))
      return Status::Corruption(where + ": shape " + v["shape"].dump() + " is not a list of sizes, or overflows");
    bytes *= n;
    e.shape.push_back(int64_t(n));
  }
  if (!AsU64(v["data_offsets"][0], &e.begin) || !AsU64(v["data_offsets"][1], &e.end) || e.begin > e.end)
    return Status::Corruption(where + ": data_offsets " + v["data_offsets"].dump() + " are not [begin, end] with begin <= end");
  if (e.end - e.begin != bytes)
    return Status::Corruption(where + ": data_offsets " + v["data_offsets"].dump() + " span " + Str(e.end - e.begin) +
                              " bytes, but dtype " + v["dtype"].get<std::string>() + " and shape " +
                              v["shape"].dump() + " need " + Str(bytes));
  return e;
}

// Entries sorted by begin must tile [0, data_bytes) exactly.
Status CheckTiling(const std::vector<SafetensorsEntry>& sorted, uint64_t data_bytes, const std::string& path) {
  uint64_t at = 0;
  for (const SafetensorsEntry& e : sorted) {
    if (e.begin != at)
      return Status::Corruption("safetensors file '" + path + "', tensor '" + e.name + "': data_offsets start at " +
                                Str(e.begin) + " but the previous tensor ends at " + Str(at) +
                                (e.begin < at ? " (overlap)" : " (gap: the data buffer must be fully indexed)"));
    at = e.end;
  }
  if (at != data_bytes)
    return Status::Corruption("safetensors file '" + path + "': the tensors' data ends at byte " + Str(at) +
                              " of the data buffer, but the file holds " + Str(data_bytes) +
                              (at > data_bytes ? " (truncated file)" : " (trailing bytes)"));
  return Status::Ok();
}

Result<std::map<std::string, std::string>> ParseMetadata(const json& v, const std::string& path) {
  std::map<std::string, std::string> out;
  if (!v.is_object()) return Status::Corruption("safetensors file '" + path + "': __metadata__ is not an object");
  for (const auto& [k, val] : v.items()) {
    if (!val.is_string())
      return Status::Corruption("safetensors file '" + path + "': __metadata__ value of '" + k + "' is not a string");
    out[k] = val.get<std::string>();
  }
  return out;
}

// Reads exactly dst.size() bytes at offset or fails naming the file.
Status ReadExact(File* f, uint64_t offset, std::span<std::byte> dst, const std::string& what) {
  CKPT_ASSIGN_OR_RETURN(size_t got, f->PRead(offset, dst));
  if (got != dst.size())
    return Status::Corruption(what + ": file ended after " + Str(offset + got) + " bytes (truncated)");
  return Status::Ok();
}

}  // namespace

Result<DType> SafetensorsDType(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  std::string known;
  for (const auto& d : kDTypes) known += std::string(known.empty() ? "" : ", ") + d.name;
  return Status::Unimplemented("dtype '" + std::string(name) + "' is not supported (supported: " + known + ")");
}

std::string_view SafetensorsDTypeName(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  return "?";
}

Result<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(Env* env, const std::string& path) {
  std::unique_ptr<SafetensorsReader> r(new SafetensorsReader());
  r->path_ = path;
  // An input named by the user (a Hugging Face cache links its files): follow.
  CKPT_ASSIGN_OR_RETURN(r->file_, env->OpenFile(path, OpenMode::kRead, OpenOptions{.follow_links = true}));
  CKPT_ASSIGN_OR_RETURN(r->file_size_, r->file_->Size());
  const std::string where = "safetensors file '" + path + "'";
  std::byte len[8];
  if (r->file_size_ < 8)
    return Status::Corruption(where + ": " + Str(r->file_size_) + " bytes, shorter than the 8-byte header length");
  CKPT_RETURN_IF_ERROR(ReadExact(r->file_.get(), 0, len, where));
  const uint64_t n = LoadLe64(len);
  if (n > kSafetensorsMaxHeader)
    return Status::Corruption(where + ": header length " + Str(n) + " exceeds the limit of " + Str(kSafetensorsMaxHeader));
  if (n > r->file_size_ - 8)
    return Status::Corruption(where + ": header length " + Str(n) + " runs past the end of the " + Str(r->file_size_) +
                              "-byte file (truncated header)");
  std::string text(size_t(n), '\0');
  CKPT_RETURN_IF_ERROR(ReadExact(r->file_.get(), 8, std::as_writable_bytes(std::span(text.data(), text.size())), where));
  CKPT_ASSIGN_OR_RETURN(json header, ParseHeader(text, path));
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      CKPT_ASSIGN_OR_RETURN(r->metadata_, ParseMetadata(v, path));
      continue;
    }
    CKPT_ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(name, v, path));
    r->tensors_.push_back(std::move(e));
  }
  std::sort(r->tensors_.begin(), r->tensors_.end(),
            [](const auto& a, const auto& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  r->data_start_ = 8 + n;
  CKPT_RETURN_IF_ERROR(CheckTiling(r->tensors_, r->file_size_ - r->data_start_, path));
  for (size_t i = 0; i < r->tensors_.size(); ++i) r->index_[r->tensors_[i].name] = i;
  return r;
}

const SafetensorsEntry* SafetensorsReader::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsReader::Read(const SafetensorsEntry& t, uint64_t offset, std::span<std::byte> dst) {
  if (offset > t.bytes() || dst.size() > t.bytes() - offset)
    return Status::InvalidArgument("safetensors file '" + path_ + "', tensor '" + t.name + "': read of " +
                                   Str(dst.size()) + " bytes at " + Str(offset) + " outside its " + Str(t.bytes()));
  bytes_read_ += int64_t(dst.size());
  return ReadExact(file_.get(), data_start_ + t.begin + offset, dst,
                   "safetensors file '" + path_ + "', tensor '" + t.name + "'");
}

void SortLikeReference(std::vector<SafetensorsEntry>* entries) {
  // Position in the reference's Dtype enum ("increasing alignment order").
  auto rank = [](DType t) {
    switch (t) {
      case DType::kBool: return 0;
      case DType::kUInt8: return 4;
      case DType::kInt8: return 5;
      case DType::kInt16: return 11;
      case DType::kFloat16: return 13;
      case DType::kBFloat16: return 14;
      case DType::kInt32: return 15;
      case DType::kFloat32: return 17;
      case DType::kFloat64: return 19;
      case DType::kInt64: return 20;
    }
    return 0;
  };
  std::stable_sort(entries->begin(), entries->end(), [&](const auto& a, const auto& b) {
    if (rank(a.dtype) != rank(b.dtype)) return rank(a.dtype) > rank(b.dtype);
    return a.name < b.name;
  });
}

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(Env* env, const std::string& path,
                                                                     std::vector<SafetensorsEntry> tensors,
                                                                     const std::map<std::string, std::string>& metadata) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->env_ = env;
  w->path_ = path;
  w->tmp_ = path + ".tmp";
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (SafetensorsEntry& e : tensors) {
    if (header.contains(e.name) || e.name == "__metadata__")
      return Status::InvalidArgument("safetensors file '" + path + "': tensor name '" + e.name + "' used twice or reserved");
    e.begin = at;
    e.end = at + uint64_t(NumElements(e.shape)) * DTypeSize(e.dtype);
    at = e.end;
    header[e.name] = {{"dtype", SafetensorsDTypeName(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // data 8-byte aligned, as the reference pads
  w->data_start_ = 8 + text.size();
  w->file_size_ = w->data_start_ + at;
  w->tensors_ = std::move(tensors);
  w->written_.assign(w->tensors_.size(), 0);
  CKPT_ASSIGN_OR_RETURN(w->file_, env->OpenFile(w->tmp_, OpenMode::kCreate));
  std::vector<std::byte> head(8 + text.size());
  StoreLe64(text.size(), head.data());
  std::memcpy(head.data() + 8, text.data(), text.size());
  CKPT_RETURN_IF_ERROR(w->file_->PWrite(0, head));
  CKPT_RETURN_IF_ERROR(w->file_->Truncate(w->file_size_));  // empty tensors included: the size is final
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (finished_ || !file_) return;
  file_->Close().IgnoreError();
  env_->RemoveFile(tmp_).IgnoreError();  // never leave a partial file behind
}

Status SafetensorsWriter::Write(size_t index, uint64_t offset, std::span<const std::byte> src) {
  if (index >= tensors_.size()) return Status::InvalidArgument("safetensors writer: no tensor #" + Str(index));
  const SafetensorsEntry& t = tensors_[index];
  if (offset > t.bytes() || src.size() > t.bytes() - offset)
    return Status::InvalidArgument("safetensors file '" + path_ + "', tensor '" + t.name + "': write of " +
                                   Str(src.size()) + " bytes at " + Str(offset) + " outside its " + Str(t.bytes()));
  CKPT_RETURN_IF_ERROR(file_->PWrite(data_start_ + t.begin + offset, src));
  written_[index] += src.size();
  return Status::Ok();
}

Status SafetensorsWriter::Finish() {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (written_[i] != tensors_[i].bytes())
      return Status::Internal("safetensors file '" + path_ + "', tensor '" + tensors_[i].name + "': " +
                              Str(written_[i]) + " of " + Str(tensors_[i].bytes()) + " bytes written");
  CKPT_RETURN_IF_ERROR(file_->Sync());
  CKPT_RETURN_IF_ERROR(file_->Close());
  CKPT_RETURN_IF_ERROR(env_->Rename(tmp_, path_));
  finished_ = true;
  return Status::Ok();
}

Result<std::unique_ptr<SafetensorsDir>> SafetensorsDir::Open(Env* env, const std::string& dir) {
  std::unique_ptr<SafetensorsDir> d(new SafetensorsDir());
  d->dir_ = dir;
  const std::string index = JoinPath(dir, kSafetensorsIndexName);
  CKPT_ASSIGN_OR_RETURN(FileInfo info, env->Stat(index));
  if (!info.exists) {
    const std::string single = JoinPath(dir, kSafetensorsSingleName);
    CKPT_ASSIGN_OR_RETURN(FileInfo one, env->Stat(single));
    if (!one.exists)
      return Status::NotFound("'" + dir + "' holds neither " + kSafetensorsSingleName + " nor " + kSafetensorsIndexName);
    CKPT_ASSIGN_OR_RETURN(auto r, SafetensorsReader::Open(env, single));
    for (const auto& e : r->tensors()) d->where_[e.name] = 0;
    d->files_.push_back(std::move(r));
    return d;
  }
  d->index_path_ = index;
  CKPT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, index, OpenOptions{.follow_links = true}));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return Status::Corruption("index '" + index + "': not JSON with a \"weight_map\" object");
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      return Status::Corruption("index '" + index + "': tensor '" + tensor + "' maps to " + file.dump() +
                                ", not a file name in the directory");
    by_file[file.get<std::string>()].push_back(tensor);
  }
  for (const auto& [file, tensors] : by_file) {
    const std::string path = JoinPath(dir, file);
    CKPT_ASSIGN_OR_RETURN(FileInfo fi, env->Stat(path));
    if (!fi.exists)
      return Status::NotFound("index '" + index + "' maps tensor '" + tensors.front() + "' (and " +
                              std::to_string(tensors.size() - 1) + " more) to shard file '" + path +
                              "', which does not exist");
    CKPT_ASSIGN_OR_RETURN(auto r, SafetensorsReader::Open(env, path));
    for (const std::string& t : tensors) {
      if (!r->Find(t))
        return Status::Corruption("index '" + index + "' maps tensor '" + t + "' to '" + path + "', which does not hold it");
      d->where_[t] = d->files_.size();
    }
    d->files_.push_back(std::move(r));
  }
  return d;
}

Result<SafetensorsDir::Located> SafetensorsDir::Find(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return Status::NotFound("tensor '" + name + "' is not in " + source());
  SafetensorsReader* f = files_[it->second].get();
  return Located{f, f->Find(name)};
}

std::vector<std::string> SafetensorsDir::TensorNames() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

std::string SafetensorsDir::source() const {
  return index_path_.empty() ? "'" + JoinPath(dir_, kSafetensorsSingleName) + "'" : "index '" + index_path_ + "'";
}

int64_t SafetensorsDir::bytes_read() const {
  int64_t n = 0;
  for (const auto& f : files_) n += f->bytes_read();
  return n;
}

uint64_t SafetensorsDir::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files_)
    for (const auto& e : f->tensors()) n += e.bytes();
  return n;
}

Status WriteSafetensorsIndex(Env* env, const std::string& path, const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size) {
  json j = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  return WriteFileAtomic(env, path, j.dump(2) + "\n");
}

}  // namespace ckpt::convert
