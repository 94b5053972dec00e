// The key -> slot index of a shard: open addressing with linear probing over 8-byte entries.
//
// An entry holds (tag << 32) | (slot + 1), 0 meaning empty. The tag is the high 32 bits of a strong
// 64-bit mix of the key; the home bucket is taken from the tag's top bits, so growing the table and
// backward-shift deletion never need the key itself. The key is only compared (through the caller's
// `key_of(slot)`) when tags match, which keeps the index at 8 bytes per entry: at the 0.75 load limit
// and after doubling (0.375) that is 10.7..21.3 bytes per row. No tombstones: deletion shifts the
// following cluster back, so lookups never slow down with churn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "xdl_ec/mapped_buffer.h"

namespace xdl_ec {

class KeyIndex {
 public:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  static constexpr uint32_t kMaxSlot = 0xFFFFFFFEu;  // slot + 1 must fit 32 bits

  KeyIndex() = default;
  KeyIndex(KeyIndex&& other) noexcept { *this = std::move(other); }
  KeyIndex& operator=(KeyIndex&& other) noexcept {
    buffer_ = std::move(other.buffer_);
    entries_ = std::exchange(other.entries_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    size_ = std::exchange(other.size_, 0);
    mask_ = std::exchange(other.mask_, 0);
    shift_ = std::exchange(other.shift_, 32);
    return *this;
  }

  // The splitmix64 finaliser: sequential keys spread over the whole table.
  static uint64_t Mix(int64_t key) {
    uint64_t x = static_cast<uint64_t>(key) + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  static uint32_t Tag(int64_t key) { return static_cast<uint32_t>(Mix(key) >> 32); }

  // Returns the slot of `key`, or kNone. key_of(slot) must return the key stored in that slot.
  template <class KeyOf>
  uint32_t Find(int64_t key, const KeyOf& key_of) const {
    const size_t i = Locate(key, key_of);
    return i == kNowhere ? kNone : static_cast<uint32_t>(entries_[i]) - 1;
  }

  // Hints the cache about the bucket `key` will probe first (batch lookups overlap their misses).
  void Prefetch(int64_t key) const {
    if (capacity_ != 0) __builtin_prefetch(&entries_[Home(Tag(key))]);
  }

  // The slot of the first entry whose tag matches `key`'s, without touching any record; kNone when
  // no tag matches (then the key is certainly absent). Lets a batch prefetch the record before
  // confirming the key: the caller checks key_of(slot) == key and falls back to Find otherwise.
  uint32_t Candidate(int64_t key) const {
    return Find(key, [key](uint32_t) { return key; });  // every tag match counts as the key
  }

  // Adds key -> slot. The key must not be present (callers Find first); grows at 0.75 load.
  void Insert(int64_t key, uint32_t slot);

  // Removes `key`; returns its slot, or kNone when absent.
  template <class KeyOf>
  uint32_t Erase(int64_t key, const KeyOf& key_of) {
    const size_t i = Locate(key, key_of);
    if (i == kNowhere) return kNone;
    const uint32_t slot = static_cast<uint32_t>(entries_[i]) - 1;
    RemoveAt(i);
    return slot;
  }

  void Reserve(size_t rows);  // capacity for `rows` entries without growing
  void Clear();
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  size_t bytes() const { return capacity_ * sizeof(uint64_t); }

 private:
  static constexpr size_t kNowhere = ~size_t{0};

  size_t Home(uint32_t tag) const { return static_cast<size_t>(tag) >> shift_; }

  // The bucket holding `key`, or kNowhere.
  template <class KeyOf>
  size_t Locate(int64_t key, const KeyOf& key_of) const {
    if (capacity_ == 0) return kNowhere;
    const uint32_t tag = Tag(key);
    size_t i = Home(tag);
    for (;;) {
      const uint64_t e = entries_[i];
      if (e == 0) return kNowhere;
      if (static_cast<uint32_t>(e >> 32) == tag && key_of(static_cast<uint32_t>(e) - 1) == key) return i;
      i = (i + 1) & mask_;
    }
  }
  void RemoveAt(size_t i);
  void Rehash(size_t capacity);
  void Place(uint64_t entry);

  MappedBuffer buffer_;          // capacity_ entries, huge-page backed when large
  uint64_t* entries_ = nullptr;  // buffer_.data()
  size_t capacity_ = 0;
  size_t size_ = 0;
  size_t mask_ = 0;
  int shift_ = 32;
};

}  // namespace xdl_ec
