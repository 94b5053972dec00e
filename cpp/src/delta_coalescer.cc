#include "xdl_ec/delta_coalescer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace xdl_ec {

void DeltaCoalescer::Coalesce(const std::vector<DeltaBatch*>& parts, Merged* out) {
  size_t total = 0, record_bytes = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const DeltaBatch* part = parts[p];
    if (part == nullptr) throw std::invalid_argument("DeltaCoalescer: part " + std::to_string(p) + " is null");
    if (part->size() == 0) continue;
    if (record_bytes == 0) record_bytes = part->record_bytes;
    if (part->record_bytes != record_bytes || record_bytes == 0)
      throw std::invalid_argument("DeltaCoalescer: part " + std::to_string(p) + " has record_bytes=" +
                                  std::to_string(part->record_bytes) + ", an earlier one " + std::to_string(record_bytes));
    if (part->xor_bytes.size() != part->size() * record_bytes)
      throw std::invalid_argument("DeltaCoalescer: part " + std::to_string(p) + " holds " +
                                  std::to_string(part->xor_bytes.size()) + " bytes for " + std::to_string(part->size()) +
                                  " slots of " + std::to_string(record_bytes) + " bytes");
    total += part->size();
  }
  out->record_bytes = record_bytes;
  out->slots.clear();
  out->deltas.clear();
  if (total == 0) return;
  // A table at most half full keeps linear probing short. Cleared per call: 8 bytes per slot of it, far
  // less than the deltas it merges.
  size_t capacity = 16;
  while (capacity < 2 * total) capacity *= 2;
  if (slot_.size() < capacity) {
    slot_.resize(capacity);
    at_.resize(capacity);
  }
  std::fill(slot_.begin(), slot_.begin() + static_cast<std::ptrdiff_t>(capacity), uint64_t{0});
  const size_t mask = capacity - 1;
  out->slots.reserve(total);
  out->deltas.reserve(total);
  for (DeltaBatch* part : parts) {
    uint8_t* bytes = part->xor_bytes.data();
    for (size_t e = 0; e < part->size(); ++e) {
      const uint64_t key = uint64_t{part->slots[e]} + 1;
      uint8_t* delta = bytes + e * record_bytes;
      size_t h = ((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
      while (slot_[h] != 0 && slot_[h] != key) h = (h + 1) & mask;
      if (slot_[h] == 0) {
        slot_[h] = key;
        at_[h] = delta;
        out->slots.push_back(part->slots[e]);
        out->deltas.push_back(delta);
      } else {
        uint8_t* merged = at_[h];
        for (size_t b = 0; b < record_bytes; ++b) merged[b] ^= delta[b];
      }
    }
  }
}

}  // namespace xdl_ec
