#include "ckpt/base/page_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace ckpt {

double SampledPageCacheShare(int fd, uint64_t size) {
  if (fd < 0) return -1;
  if (size == 0) return 0;
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t pages = (size + page - 1) / page;
  // One mapping of the whole file (address space only: nothing is read or
  // faulted in), then mincore over the sampled windows of it.
  void* map = ::mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return -1;
  const uint64_t windows = pages <= kPageCacheWindows * kPageCacheWindowPages ? 1 : kPageCacheWindows;
  const uint64_t window_pages = windows == 1 ? pages : kPageCacheWindowPages;
  std::vector<unsigned char> vec(static_cast<size_t>(window_pages));
  uint64_t sampled = 0, resident = 0;
  for (uint64_t w = 0; w < windows; ++w) {
    // Window w starts at page w * (pages - window_pages) / (windows - 1): first and last page included.
    const uint64_t first = windows == 1 ? 0 : w * (pages - window_pages) / (windows - 1);
    if (::mincore(static_cast<char*>(map) + first * page, size_t(window_pages * page), vec.data()) != 0) {
      ::munmap(map, size_t(size));
      return -1;
    }
    sampled += window_pages;
    resident += uint64_t(std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return (v & 1) != 0; }));
  }
  ::munmap(map, size_t(size));
  return double(resident) / double(sampled);
}

}  // namespace ckpt
