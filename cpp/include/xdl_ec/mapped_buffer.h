// A zeroed, never-moving byte buffer from its own anonymous mapping. Large ones (>= 2 MiB) are
// 2 MiB aligned and advised for transparent huge pages: the slot blocks and the key index are read
// at random, and with 4 KiB pages nearly every row access of a large shard would also miss the TLB.
// Pages are only backed when first touched, so reserving more than is used costs no memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdl_ec {

class MappedBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  MappedBuffer() = default;
  explicit MappedBuffer(size_t bytes);  // throws std::bad_alloc
  ~MappedBuffer();
  MappedBuffer(MappedBuffer&& other) noexcept;
  MappedBuffer& operator=(MappedBuffer&& other) noexcept;
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Gives the whole pages within [p, p + bytes) of a mapping back to the kernel (they read zeros and are backed
  // again when next touched); returns the bytes given back. For a range of zeros no longer needed soon.
  static size_t ReleasePages(uint8_t* p, size_t bytes);

 private:
  void Release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // the mapping (may start before data_ for alignment)
  size_t map_bytes_ = 0;
};

}  // namespace xdl_ec
