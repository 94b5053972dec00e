#include "xdl_ec/key_index.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace xdl_ec {
namespace {

constexpr size_t kMinCapacity = 16;
constexpr size_t kMaxCapacity = size_t{1} << 32;  // the home bucket comes from a 32-bit tag

bool OverLoad(size_t rows, size_t capacity) { return rows * 4 > capacity * 3; }

}  // namespace

void KeyIndex::Insert(int64_t key, uint32_t slot) {
  if (slot > kMaxSlot) {
    throw std::out_of_range("KeyIndex::Insert: slot " + std::to_string(slot) + " exceeds the maximum " +
                            std::to_string(kMaxSlot));
  }
  if (capacity_ == 0 || OverLoad(size_ + 1, capacity_)) Rehash(capacity_ == 0 ? kMinCapacity : capacity_ * 2);
  Place((static_cast<uint64_t>(Tag(key)) << 32) | (static_cast<uint64_t>(slot) + 1));
  ++size_;
}

void KeyIndex::Place(uint64_t entry) {
  size_t i = Home(static_cast<uint32_t>(entry >> 32));
  while (entries_[i] != 0) i = (i + 1) & mask_;
  entries_[i] = entry;
}

void KeyIndex::RemoveAt(size_t i) {
  // Backward-shift deletion: move later members of the cluster into the hole unless their home lies
  // cyclically in (hole, j], where they would become unreachable.
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    const uint64_t e = entries_[j];
    if (e == 0) break;
    const size_t k = Home(static_cast<uint32_t>(e >> 32));
    const bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    entries_[i] = e;
    i = j;
  }
  entries_[i] = 0;
  --size_;
}

void KeyIndex::Rehash(size_t capacity) {
  if (capacity > kMaxCapacity) throw std::length_error("KeyIndex: more than 2^32 buckets needed");
  MappedBuffer fresh(capacity * sizeof(uint64_t));  // zeroed: all empty
  MappedBuffer old = std::move(buffer_);
  const uint64_t* old_entries = entries_;
  const size_t old_capacity = capacity_;
  buffer_ = std::move(fresh);
  entries_ = reinterpret_cast<uint64_t*>(buffer_.data());
  capacity_ = capacity;
  mask_ = capacity - 1;
  shift_ = 32;
  for (size_t c = capacity; c > 1; c >>= 1) --shift_;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (old_entries[i] != 0) Place(old_entries[i]);
  }
}

void KeyIndex::Reserve(size_t rows) {
  size_t capacity = capacity_ == 0 ? kMinCapacity : capacity_;
  while (OverLoad(rows, capacity)) capacity *= 2;
  if (capacity != capacity_) Rehash(capacity);
}

void KeyIndex::Clear() {
  buffer_ = MappedBuffer();
  entries_ = nullptr;
  capacity_ = 0;
  size_ = 0;
  mask_ = 0;
  shift_ = 32;
}

}  // namespace xdl_ec
