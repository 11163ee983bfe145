// SnapshotMemory: where AsyncSaver keeps its snapshot of the state and how it
// copies the state into it.
//
// HostSnapshotMemory() (the default): pageable anonymous mappings, advised as
// huge pages and faulted in by Allocate (so a copy into them never stalls on
// page faults); CopyAll merges copies contiguous in source and destination
// into one block and copies with streaming stores (ckpt/base/stream_copy.h).
// The source tensors must be host memory. The GPU path (ckpt/gpu/gpu.h,
// MakePinnedSnapshotMemory) allocates page-locked (pinned) host memory with
// cudaHostAlloc and copies with cudaMemcpyAsync(cudaMemcpyDefault) on its own
// stream, so a source may be device memory (a GPU-resident training state:
// the snapshot is the D2H copy) or host memory.
//
// Contract: Allocate returns n bytes (n may be 0) or an error naming the size;
// the memory is ready to be written at full speed (no first-touch cost left);
// Free takes exactly what Allocate returned. CopyAll returns once every copy
// has completed (the caller may then reuse or overwrite the sources) or with
// the first error. Ownership: the memory object must outlive every buffer it
// handed out. Thread-safety: one thread at a time (AsyncSaver's caller).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "ckpt/base/status.h"

namespace ckpt {

struct SnapshotCopy {
  std::byte* dst;
  const std::byte* src;
  size_t bytes;
};

class SnapshotMemory {
 public:
  virtual ~SnapshotMemory() = default;
  virtual std::string_view name() const = 0;  // "host" or "pinned"
  virtual Result<std::byte*> Allocate(size_t bytes) = 0;
  virtual void Free(std::byte* p, size_t bytes) = 0;
  virtual Status CopyAll(std::span<const SnapshotCopy> copies) = 0;
};

// Process-wide heap + memcpy memory (stateless, never destroyed).
SnapshotMemory* HostSnapshotMemory();

}  // namespace ckpt
