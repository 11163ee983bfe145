// HDF5 over Env: a virtual file driver whose bytes go to a ckpt::File, plus
// the small HDF5 runtime helpers ckpt's HDF5 code shares (global lock, init,
// error conversion, RAII handles).
//
// Why a driver: every byte of a shard file must pass through Env so faults/
// can inject errors and simulate power loss under HDF5 as well.
//
// Ownership: the driver never owns, syncs or closes the File. The caller opens
// it with Env::OpenFile, keeps it and the EnvVfdTarget alive until H5Fclose
// has succeeded (or the file id is otherwise gone), then syncs/closes it.
//
// Failure: the first Env error the driver sees is kept in
// EnvVfdTarget::first_error; Hdf5Failure() returns it (with context) in
// preference to HDF5's own, generic, error stack. Read errors fail the HDF5
// call. Write/truncate errors do NOT: the driver latches the error, discards
// every later write, and reports success, because HDF5 1.10 cannot recover
// from a failed H5Fclose (it frees the file but keeps the id, and closing the
// id again crashes). So callers MUST check first_error after each HDF5 call
// that may write, and treat the file as lost once it is set. HDF5's
// automatic error printing is switched off process-wide by InitHdf5().
//
// Thread-safety: HDF5 (serial build) is not thread-safe. Every HDF5 call in
// the process must hold LockHdf5(). The lock is recursive, so helpers here
// and Hid's destructor take it themselves and may be called with it held; it
// is fair (base/fair_mutex.h: waiters in arrival order), so a thread whose
// writes are slow cannot keep it from another thread for more than one hold.
// Driver callbacks run inside HDF5 calls, i.e. under the lock.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/fair_mutex.h"
#include "ckpt/base/status.h"

namespace ckpt {

// The process-wide HDF5 lock (recursive, fair).
std::unique_lock<FairRecursiveMutex> LockHdf5();

// Opens the library, registers the Env driver and filter 32015 (zstd), and
// disables HDF5's automatic error printing. Idempotent, thread-safe; every
// entry point that uses HDF5 calls it first. Fails only if registration fails.
Status InitHdf5();

// What one open HDF5 file talks to. Not owned by HDF5; must outlive the file id.
struct EnvVfdTarget {
  File* file = nullptr;         // the already-open file (not owned)
  Status first_error;           // first Env error seen by the driver
  bool discard_writes = false;  // set by the first write error, or to abandon the file:
                                // writes/truncates then succeed without IO
  // > 0: every HDF5 allocation of >= kAlignThreshold bytes (chunks) starts at a
  // multiple of this (H5Pset_alignment), e.g. kDirectIoAlign for a direct
  // File. 0: HDF5's packing (the default; it fixes the golden files' offsets).
  uint64_t alignment = 0;
};

// Allocations below this stay packed when EnvVfdTarget::alignment is set:
// aligning small objects would waste up to one alignment unit each.
inline constexpr uint64_t kAlignThreshold = uint64_t(64) << 10;

// A new file-access property list (caller closes it with H5Pclose) that makes
// H5Fcreate/H5Fopen use target->file. H5F_ACC_TRUNC truncates that File to 0.
// Close degree is STRONG: H5Fclose closes every object still open in the file,
// so a failed close never leaves HDF5 holding a pointer to target. Applies
// target->alignment (read here, once).
Result<hid_t> MakeEnvFapl(EnvVfdTarget* target);

// Descriptions on HDF5's error stack, innermost first ("a; b; c"), and clears it.
std::string TakeHdf5ErrorStack();

// The Status for a failed HDF5 operation `what` (which should name the file and
// dataset): target->first_error with `what` as context if an Env error was
// seen, else Status(code, "<what>: <HDF5 error stack>"). Clears the stack.
Status Hdf5Failure(Code code, const std::string& what, const EnvVfdTarget* target);

// Attribute helpers; the caller holds LockHdf5(). Writers return false on
// failure, leaving HDF5's error stack for Hdf5Failure(). Strings are
// fixed-length ASCII, NUL-padded (h5py reads them as bytes); integer arrays
// are 1-D (possibly empty) and stored with `file_type`.
bool PutStringAttr(hid_t obj, const char* name, std::string_view value);
bool PutIntAttr(hid_t obj, const char* name, int64_t value, hid_t file_type = H5T_STD_I64LE);
bool PutIntsAttr(hid_t obj, const char* name, const std::vector<int64_t>& values,
                 hid_t file_type = H5T_STD_I64LE);
bool HasAttr(hid_t obj, const char* name);
// Readers fail with kCorruption naming `where` and the attribute. Integer
// attributes of any integer type and size are converted to int64.
Result<std::string> GetStringAttr(hid_t obj, const char* name, const std::string& where);
Result<std::vector<int64_t>> GetIntsAttr(hid_t obj, const char* name, const std::string& where);
Result<int64_t> GetIntAttr(hid_t obj, const char* name, const std::string& where);  // exactly 1 value

// RAII owner of an HDF5 id; closes it (under LockHdf5) with the given closer.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Hid(Hid&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Hid& operator=(Hid&& o) noexcept;
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes the id (errors ignored: used on cleanup paths) and leaves it invalid.
  void reset();
  // Closes the id and reports whether HDF5 accepted the close.
  bool Close();
  // Gives up ownership without closing.
  hid_t release();

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

}  // namespace ckpt
