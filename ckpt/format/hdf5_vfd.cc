// The "ckpt_env" HDF5 virtual file driver (HDF5 1.10 H5FD_class_t) and the
// HDF5 runtime helpers declared in hdf5_vfd.h.
//
// The driver is modelled on sec2: EOA is what HDF5 says it allocated, EOF is
// the File size at open plus what was written since; reads past EOF are
// zero-filled; truncate sets the file size to EOA. flush does not fsync (the
// caller syncs through Env after H5Fclose). Write errors are latched, not
// returned to HDF5 (see WriteFailed). HDF5 may open the same target
// more than once (H5Fcreate first "tentatively" opens without TRUNC): each
// open creates an independent H5FD_t over the same File, and cmp identifies
// files by File pointer so HDF5 recognises them as the same file.
#include "ckpt/format/hdf5_vfd.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "ckpt/h5plugin/zstd_filter.h"

namespace ckpt {
namespace {

// Largest address sec2 uses for a 64-bit off_t.
constexpr haddr_t kMaxAddr = (haddr_t(1) << 63) - 1;

// Stored in the fapl (copied by HDF5 with memcpy: fapl_copy is NULL).
struct FaplInfo {
  EnvVfdTarget* target;
};

struct EnvFd {
  H5FD_t pub;  // must be first: HDF5 hands us back &pub
  EnvVfdTarget* target;
  haddr_t eoa;
  haddr_t eof;
};
static_assert(std::is_standard_layout_v<EnvFd>);

EnvFd* Cast(H5FD_t* f) { return reinterpret_cast<EnvFd*>(f); }
const EnvFd* Cast(const H5FD_t* f) { return reinterpret_cast<const EnvFd*>(f); }

hid_t g_driver_id = H5I_INVALID_HID;

void PushError(const char* func, hid_t minor, const std::string& msg) {
  H5Epush2(H5E_DEFAULT, __FILE__, func, __LINE__, H5E_ERR_CLS, H5E_VFL, minor, "%s", msg.c_str());
}

// Keeps the first Env error and mirrors it onto the HDF5 error stack; used
// for open and read errors, which fail the HDF5 call (writes: WriteFailed).
void Record(EnvVfdTarget* t, const Status& s, const char* func, hid_t minor) {
  if (t->first_error.ok()) t->first_error = s;
  PushError(func, minor, s.ToString());
}

bool RegionOk(const EnvFd* f, haddr_t addr, size_t size, const char* func) {
  if (addr == HADDR_UNDEF || addr > kMaxAddr || size > kMaxAddr - addr || addr + size > f->eoa) {
    PushError(func, H5E_OVERFLOW,
              "access [" + std::to_string(addr) + ", +" + std::to_string(size) + ") beyond EOA " +
                  std::to_string(f->eoa) + " of '" + f->target->file->path() + "'");
    return false;
  }
  return true;
}

H5FD_t* Open(const char* /*name*/, unsigned flags, hid_t fapl, haddr_t maxaddr) {
  if (maxaddr != 0 && maxaddr != HADDR_UNDEF && maxaddr > kMaxAddr) {
    PushError("ckpt_env_open", H5E_BADRANGE, "maxaddr too large");
    return nullptr;
  }
  const auto* info = static_cast<const FaplInfo*>(H5Pget_driver_info(fapl));
  if (!info || !info->target || !info->target->file) {
    PushError("ckpt_env_open", H5E_BADVALUE, "fapl has no ckpt Env target (use MakeEnvFapl)");
    return nullptr;
  }
  EnvVfdTarget* t = info->target;
  if (flags & H5F_ACC_TRUNC) {
    Status s = t->discard_writes ? Status::Ok() : t->file->Truncate(0);
    if (!s.ok()) {
      Record(t, s, "ckpt_env_open", H5E_CANTOPENFILE);
      return nullptr;
    }
  }
  Result<uint64_t> size = t->file->Size();
  if (!size.ok()) {
    Record(t, size.status(), "ckpt_env_open", H5E_CANTOPENFILE);
    return nullptr;
  }
  auto* f = new (std::nothrow) EnvFd{};
  if (!f) return nullptr;
  f->target = t;
  f->eof = *size;
  return &f->pub;
}

herr_t Close(H5FD_t* file) {
  delete Cast(file);  // the File belongs to the caller
  return 0;
}

int Cmp(const H5FD_t* a, const H5FD_t* b) {
  const File* fa = Cast(a)->target->file;
  const File* fb = Cast(b)->target->file;
  return fa < fb ? -1 : (fa > fb ? 1 : 0);
}

herr_t Query(const H5FD_t*, unsigned long* flags) {
  if (flags)
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
  return 0;
}

haddr_t GetEoa(const H5FD_t* file, H5FD_mem_t) { return Cast(file)->eoa; }

herr_t SetEoa(H5FD_t* file, H5FD_mem_t, haddr_t addr) {
  if (addr > kMaxAddr) {
    PushError("ckpt_env_set_eoa", H5E_OVERFLOW, "address overflow");
    return -1;
  }
  Cast(file)->eoa = addr;
  return 0;
}

haddr_t GetEof(const H5FD_t* file, H5FD_mem_t) { return Cast(file)->eof; }

herr_t GetHandle(H5FD_t* file, hid_t, void** handle) {
  if (!handle) return -1;
  *handle = Cast(file)->target->file;
  return 0;
}

herr_t Read(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buf) {
  EnvFd* f = Cast(file);
  if (!RegionOk(f, addr, size, "ckpt_env_read")) return -1;
  auto* dst = static_cast<std::byte*>(buf);
  Result<size_t> n = f->target->file->PRead(addr, std::span<std::byte>(dst, size));
  if (!n.ok()) {
    Record(f->target, n.status(), "ckpt_env_read", H5E_READERROR);
    return -1;
  }
  if (*n < size) std::memset(dst + *n, 0, size - *n);  // past EOF reads as zeros, as in sec2
  return 0;
}

// A failed write or truncate is recorded, the target switches to discarding,
// and HDF5 is told it succeeded. Reason: HDF5 1.10 cannot survive a failed
// H5Fclose (it frees the file but keeps the id, so any later use of the id
// touches freed memory), and close is where most metadata is written. Callers
// check first_error after every HDF5 call instead.
void WriteFailed(EnvFd* f, const Status& s) {
  if (f->target->first_error.ok()) f->target->first_error = s;
  f->target->discard_writes = true;
}

herr_t Write(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, size_t size, const void* buf) {
  EnvFd* f = Cast(file);
  if (!RegionOk(f, addr, size, "ckpt_env_write")) return -1;
  if (!f->target->discard_writes) {
    Status s = f->target->file->PWrite(addr, std::span(static_cast<const std::byte*>(buf), size));
    if (!s.ok()) WriteFailed(f, s);
  }
  if (addr + size > f->eof) f->eof = addr + size;
  return 0;
}

herr_t Flush(H5FD_t*, hid_t, hbool_t) { return 0; }  // durability is the caller's Sync

herr_t Truncate(H5FD_t* file, hid_t, hbool_t) {
  EnvFd* f = Cast(file);
  if (f->eoa == f->eof || f->target->discard_writes) return 0;
  Status s = f->target->file->Truncate(f->eoa);
  if (!s.ok()) WriteFailed(f, s);
  f->eof = f->eoa;
  return 0;
}

const H5FD_class_t kEnvDriverClass = {
    "ckpt_env",           // name
    kMaxAddr,             // maxaddr
    H5F_CLOSE_WEAK,       // fc_degree (MakeEnvFapl asks for STRONG)
    nullptr,              // terminate
    nullptr,              // sb_size: no driver info in the superblock
    nullptr,              // sb_encode
    nullptr,              // sb_decode
    sizeof(FaplInfo),     // fapl_size
    nullptr,              // fapl_get
    nullptr,              // fapl_copy (memcpy)
    nullptr,              // fapl_free
    0,                    // dxpl_size
    nullptr,              // dxpl_copy
    nullptr,              // dxpl_free
    Open,
    Close,
    Cmp,
    Query,
    nullptr,  // get_type_map
    nullptr,  // alloc
    nullptr,  // free
    GetEoa,
    SetEoa,
    GetEof,
    GetHandle,
    Read,
    Write,
    Flush,
    Truncate,
    nullptr,  // lock: ckpt never shares a file between writers
    nullptr,  // unlock
    H5FD_FLMAP_DICHOTOMY,
};

Status InitOnce() {
  if (H5open() < 0) return Status::Internal("HDF5: H5open failed");
  // Library code reports errors as Status; HDF5 must not print to stderr.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (H5Zregister(ckpt_zstd_filter_class()) < 0)
    return Status::Internal("HDF5: cannot register zstd filter 32015: " + TakeHdf5ErrorStack());
  g_driver_id = H5FDregister(&kEnvDriverClass);
  if (g_driver_id < 0)
    return Status::Internal("HDF5: cannot register the ckpt_env file driver: " + TakeHdf5ErrorStack());
  return Status::Ok();
}

herr_t CollectError(unsigned, const H5E_error2_t* e, void* out) {
  auto* v = static_cast<std::vector<std::string>*>(out);
  std::string s = e->desc && *e->desc ? e->desc : "(no description)";
  if (e->func_name) s += std::string(" [") + e->func_name + "]";
  v->push_back(std::move(s));
  return 0;
}

}  // namespace

std::unique_lock<FairRecursiveMutex> LockHdf5() {
  static FairRecursiveMutex mu;
  return std::unique_lock<FairRecursiveMutex>(mu);
}

Status InitHdf5() {
  static std::once_flag once;
  static Status status;
  // Lock first: a thread that already holds the HDF5 lock may call this, and
  // must not wait in call_once for a thread that waits for that lock.
  auto lock = LockHdf5();
  std::call_once(once, [] { status = InitOnce(); });
  return status;
}

Result<hid_t> MakeEnvFapl(EnvVfdTarget* target) {
  CKPT_RETURN_IF_ERROR(InitHdf5());
  if (!target || !target->file) return Status::InvalidArgument("MakeEnvFapl: no File given");
  auto lock = LockHdf5();
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  FaplInfo info{target};
  if (!fapl.valid() || H5Pset_driver(fapl.get(), g_driver_id, &info) < 0 ||
      H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0 ||
      (target->alignment > 0 && H5Pset_alignment(fapl.get(), kAlignThreshold, target->alignment) < 0))
    return Status::Internal("HDF5: cannot build a file-access list for '" + target->file->path() +
                            "': " + TakeHdf5ErrorStack());
  return fapl.release();
}

std::string TakeHdf5ErrorStack() {
  auto lock = LockHdf5();
  std::vector<std::string> entries;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, CollectError, &entries);
  H5Eclear2(H5E_DEFAULT);
  if (entries.empty()) return "no HDF5 error details";
  std::string s;
  for (size_t i = 0; i < entries.size() && i < 4; ++i) s += (i ? "; " : "") + entries[i];
  return s;
}

Status Hdf5Failure(Code code, const std::string& what, const EnvVfdTarget* target) {
  std::string stack = TakeHdf5ErrorStack();
  if (target && !target->first_error.ok()) return target->first_error.WithContext(what);
  return Status(code, what + ": " + stack);
}

// ---- attributes ----------------------------------------------------------

namespace {

bool PutAttr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const hsize_t* dims,
             const void* data) {
  Hid space(dims ? H5Screate_simple(1, dims, nullptr) : H5Screate(H5S_SCALAR), H5Sclose);
  if (!space.valid()) return false;
  Hid attr(H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  return attr.valid() && H5Awrite(attr.get(), mem_type, data) >= 0 && attr.Close();
}

Status AttrError(const std::string& where, const char* name, const std::string& why) {
  return Status::Corruption(where + ": attribute '" + name + "' " + why);
}

}  // namespace

bool PutStringAttr(hid_t obj, const char* name, std::string_view value) {
  std::string buf(value);
  buf.resize(std::max<size_t>(1, buf.size()), '\0');  // HDF5 strings have size >= 1
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  return type.valid() && H5Tset_size(type.get(), buf.size()) >= 0 &&
         H5Tset_strpad(type.get(), H5T_STR_NULLPAD) >= 0 &&
         PutAttr(obj, name, type.get(), type.get(), nullptr, buf.data());
}

bool PutIntAttr(hid_t obj, const char* name, int64_t value, hid_t file_type) {
  return PutAttr(obj, name, file_type, H5T_NATIVE_INT64, nullptr, &value);
}

bool PutIntsAttr(hid_t obj, const char* name, const std::vector<int64_t>& values, hid_t file_type) {
  hsize_t n = values.size();
  int64_t dummy = 0;  // HDF5 rejects a null buffer even for zero elements
  return PutAttr(obj, name, file_type, H5T_NATIVE_INT64, &n, values.empty() ? &dummy : values.data());
}

bool HasAttr(hid_t obj, const char* name) {
  htri_t r = H5Aexists(obj, name);
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

Result<std::string> GetStringAttr(hid_t obj, const char* name, const std::string& where) {
  if (!HasAttr(obj, name)) return AttrError(where, name, "is missing");
  Hid attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  Hid type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID, H5Tclose);
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) != 0)
    return AttrError(where, name, "is not a fixed-length string: " + TakeHdf5ErrorStack());
  std::string buf(H5Tget_size(type.get()), '\0');
  if (H5Aread(attr.get(), type.get(), buf.data()) < 0)
    return AttrError(where, name, "cannot be read: " + TakeHdf5ErrorStack());
  buf.resize(strnlen(buf.data(), buf.size()));
  return buf;
}

Result<std::vector<int64_t>> GetIntsAttr(hid_t obj, const char* name, const std::string& where) {
  if (!HasAttr(obj, name)) return AttrError(where, name, "is missing");
  Hid attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  Hid type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID, H5Tclose);
  Hid space(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID, H5Sclose);
  if (!type.valid() || !space.valid() || H5Tget_class(type.get()) != H5T_INTEGER)
    return AttrError(where, name, "is not an integer: " + TakeHdf5ErrorStack());
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) return AttrError(where, name, "has a bad dataspace: " + TakeHdf5ErrorStack());
  std::vector<int64_t> v(size_t(n) + 1);  // +1: never hand HDF5 a null buffer
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, v.data()) < 0)
    return AttrError(where, name, "cannot be read: " + TakeHdf5ErrorStack());
  v.pop_back();
  return v;
}

Result<int64_t> GetIntAttr(hid_t obj, const char* name, const std::string& where) {
  CKPT_ASSIGN_OR_RETURN(std::vector<int64_t> v, GetIntsAttr(obj, name, where));
  if (v.size() != 1) return AttrError(where, name, "has " + std::to_string(v.size()) + " values, expected 1");
  return v[0];
}

// ---- Hid ------------------------------------------------------------------

Hid& Hid::operator=(Hid&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Hid::reset() { (void)Close(); }

hid_t Hid::release() {
  hid_t id = id_;
  id_ = H5I_INVALID_HID;
  return id;
}

bool Hid::Close() {
  if (id_ < 0) return true;
  auto lock = LockHdf5();
  hid_t id = id_;
  id_ = H5I_INVALID_HID;
  return closer_(id) >= 0;
}

}  // namespace ckpt
