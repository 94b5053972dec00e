// What a mutation of a shard changed, slot by slot: the hook through which parity maintenance
// attaches without the optimizer or the store knowing about parity. For each touched slot it holds
// old_record XOR new_record; an insert is a delta from the zero record, a delete a delta to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xdl_ec {

struct DeltaBatch {
  size_t record_bytes = 0;
  std::vector<uint32_t> slots;     // one entry per touched slot, each slot at most once per batch
  std::vector<uint8_t> xor_bytes;  // slots.size() * record_bytes, in the order of `slots`

  size_t size() const { return slots.size(); }
  const uint8_t* delta(size_t i) const { return xor_bytes.data() + i * record_bytes; }
  void clear() {
    slots.clear();
    xor_bytes.clear();
  }
};

}  // namespace xdl_ec
