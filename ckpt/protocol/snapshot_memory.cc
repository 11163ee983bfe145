#include "ckpt/protocol/snapshot_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "ckpt/base/stream_copy.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and we touch the pages
#endif

namespace ckpt {

namespace {

constexpr size_t kHuge = size_t(2) << 20;

// Faults every page of [p, p+n) in, writable: huge pages where THP gave them.
void Populate(std::byte* p, size_t n) {
  if (madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  for (size_t off = 0; off < n; off += page) reinterpret_cast<volatile std::byte*>(p)[off] = std::byte{0};
}

class Host final : public SnapshotMemory {
 public:
  std::string_view name() const override { return "host"; }

  // An anonymous mapping advised as huge pages (THP in madvise mode: fewer
  // TLB misses in the copy the training thread waits for), faulted in here
  // so that the copy into it never stalls on page faults.
  Result<std::byte*> Allocate(size_t bytes) override {
    const size_t n = MappedBytes(bytes);
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return Status::NoSpace("snapshot: out of host memory mapping " + std::to_string(bytes) + " bytes");
    auto* b = static_cast<std::byte*>(p);
    if (n >= kHuge) madvise(p, n, MADV_HUGEPAGE);  // advisory: a kernel without THP ignores it
    Populate(b, n);
    return b;
  }

  void Free(std::byte* p, size_t bytes) override {
    if (p) munmap(p, MappedBytes(bytes));
  }

  // Copies that continue one another in both source and destination are
  // merged into one block, and every block is copied with streaming stores.
  Status CopyAll(std::span<const SnapshotCopy> copies) override {
    size_t i = 0;
    while (i < copies.size()) {
      SnapshotCopy block = copies[i++];
      while (i < copies.size() && copies[i].dst == block.dst + block.bytes && copies[i].src == block.src + block.bytes)
        block.bytes += copies[i++].bytes;
      if (block.bytes > 0) StreamCopy(block.dst, block.src, block.bytes);
    }
    return Status::Ok();
  }

 private:
  static size_t MappedBytes(size_t bytes) {
    const size_t unit = bytes >= kHuge ? kHuge : size_t(sysconf(_SC_PAGESIZE));
    return (std::max<size_t>(bytes, 1) + unit - 1) / unit * unit;
  }
};

}  // namespace

SnapshotMemory* HostSnapshotMemory() {
  static Host* host = new Host;  // stateless; never destroyed (outlives every saver)
  return host;
}

}  // namespace ckpt
