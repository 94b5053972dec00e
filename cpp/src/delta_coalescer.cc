#include "xdl_ec/delta_coalescer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "xdl_ec/xor_bytes.h"

namespace xdl_ec {

void DeltaCoalescer::Coalesce(const std::vector<DeltaBatch*>& parts, Merged* out) {
  size_t total = 0, record_bytes = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const DeltaBatch* part = parts[p];
    if (part == nullptr) throw std::invalid_argument("DeltaCoalescer: part " + std::to_string(p) + " is null");
    if (part->size() == 0) continue;
    if (record_bytes == 0) record_bytes = part->record_bytes;
    if (part->record_bytes != record_bytes || record_bytes == 0)
      throw std::invalid_argument("DeltaCoalescer: part " + std::to_string(p) +
                                  " has record_bytes=" + std::to_string(part->record_bytes) + ", an earlier one " +
                                  std::to_string(record_bytes));
    if (part->xor_bytes.size() != part->size() * record_bytes)
      throw std::invalid_argument(
          "DeltaCoalescer: part " + std::to_string(p) + " holds " + std::to_string(part->xor_bytes.size()) +
          " bytes for " + std::to_string(part->size()) + " slots of " + std::to_string(record_bytes) + " bytes");
    total += part->size();
  }
  out->record_bytes = record_bytes;
  out->slots.clear();
  out->deltas.clear();
  if (total == 0) return;
  // A table at most half full keeps linear probing short. Entries of earlier calls carry an older
  // generation and count as free, so the table is not cleared per call (only when generations wrap).
  size_t capacity = 16;
  while (capacity < 2 * total) capacity *= 2;
  if (table_.size() < capacity) table_.assign(capacity, Entry{});
  if (++generation_ >= (uint64_t{1} << 31)) {
    std::fill(table_.begin(), table_.end(), Entry{});
    generation_ = 1;
  }
  const uint64_t tag = generation_ << 33;  // above slot + 1, which needs 33 bits
  const size_t mask = capacity - 1;
  const auto home = [tag, mask](uint32_t slot) {
    return static_cast<size_t>(((tag | (uint64_t{slot} + 1)) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
  };
  out->slots.reserve(total);
  out->deltas.reserve(total);
  constexpr size_t kAhead = 8;  // the table is random access: its lines are fetched a few entries ahead
  for (DeltaBatch* part : parts) {
    uint8_t* bytes = part->xor_bytes.data();
    const size_t count = part->size();
    for (size_t e = 0; e < count && e < kAhead; ++e) __builtin_prefetch(&table_[home(part->slots[e])]);
    for (size_t e = 0; e < count; ++e) {
      if (e + kAhead < count) __builtin_prefetch(&table_[home(part->slots[e + kAhead])]);
      const uint64_t key = tag | (uint64_t{part->slots[e]} + 1);
      uint8_t* delta = bytes + e * record_bytes;
      size_t h = home(part->slots[e]);
      while ((table_[h].key >> 33) == generation_ && table_[h].key != key) h = (h + 1) & mask;
      if (table_[h].key != key) {
        table_[h] = Entry{key, delta};
        out->slots.push_back(part->slots[e]);
        out->deltas.push_back(delta);
      } else {
        XorBytes(table_[h].at, delta, record_bytes);
      }
    }
  }
}

}  // namespace xdl_ec
