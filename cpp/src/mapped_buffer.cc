#include "xdl_ec/mapped_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <new>
#include <utility>

namespace xdl_ec {
namespace {

constexpr size_t kSmall = size_t{64} << 10;  // below this, calloc: a mapping per small buffer is waste

}  // namespace

MappedBuffer::MappedBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  if (bytes < kSmall) {
    data_ = static_cast<uint8_t*>(std::calloc(bytes, 1));
    if (!data_) throw std::bad_alloc();
    return;
  }
  const bool huge = bytes >= kHugePage;
  map_bytes_ = huge ? bytes + kHugePage : bytes;
  void* map = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) throw std::bad_alloc();
  map_ = map;
  data_ = static_cast<uint8_t*>(map);
  if (huge) {
    // the first huge-page boundary in the mapping, reached by pointer arithmetic (no integer-to-pointer cast)
    const uintptr_t start = reinterpret_cast<uintptr_t>(map);
    data_ += ((start + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1)) - start;
#ifdef MADV_HUGEPAGE
    madvise(data_, bytes, MADV_HUGEPAGE);  // advice only: fine if refused
#endif
  }
}

MappedBuffer::~MappedBuffer() { Release(); }

MappedBuffer::MappedBuffer(MappedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)) {}

MappedBuffer& MappedBuffer::operator=(MappedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
  }
  return *this;
}

size_t MappedBuffer::ReleasePages(uint8_t* p, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(p), end = start + bytes;
  const uintptr_t first = (start + page - 1) & ~(page - 1), last = end & ~(page - 1);
  if (last <= first) return 0;
  // MADV_DONTNEED on private anonymous memory: the pages read as zeros afterwards, the memory goes back at once.
  if (madvise(p + (first - start), last - first, MADV_DONTNEED) != 0) return 0;
  return last - first;
}

void MappedBuffer::Release() {
  if (map_) {
    munmap(map_, map_bytes_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  size_ = 0;
  map_ = nullptr;
  map_bytes_ = 0;
}

}  // namespace xdl_ec
