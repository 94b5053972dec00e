// A batch of parity deltas bound for one parity holder: what a data server sends (in one process, or
// later over the wire) so the holder can apply parity_block[c][offset .. offset + record_bytes) ^=
// g(parity_member, data_member) * delta for every entry. A plain value type with a byte
// serialisation; routing (DeltaBatch -> per-holder batches) lives in ParityRouter, applying in
// ParityStore.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xdl_ec {

struct ParityUpdate {
  struct Entry {
    uint64_t parity_block = 0;  // the holder's local parity block c
    uint32_t offset = 0;        // byte offset of the record within the block
    uint8_t parity_member = 0;  // i: parity row of the code (0..r-1)
    uint8_t data_member = 0;    // j: the source block's data position in its stripe (0..k-1)
  };

  int32_t source = -1;        // data server whose records changed
  int32_t holder = -1;        // server holding the parity blocks
  uint32_t record_bytes = 0;  // bytes of each delta
  std::vector<Entry> entries;
  std::vector<uint8_t> deltas;  // entries.size() * record_bytes, old XOR new, in entry order

  size_t size() const { return entries.size(); }
  bool empty() const { return entries.empty(); }
  const uint8_t* delta(size_t e) const { return deltas.data() + e * record_bytes; }
  size_t delta_bytes() const { return deltas.size(); }
  void clear() {
    entries.clear();
    deltas.clear();
  }

  // Little-endian wire form: magic "XPU1", source, holder, record_bytes, count, entries, deltas.
  std::vector<uint8_t> Serialize() const;
  void SerializeTo(std::vector<uint8_t>* out) const;  // appends the same bytes to *out
  // Throws std::invalid_argument naming what is wrong (bad magic, truncated, sizes inconsistent).
  static ParityUpdate Parse(const uint8_t* bytes, size_t size);
};

// One parity entry whose delta bytes stay where the shard wrote them (a DeltaBatch): the in-process
// apply path uses these instead of copying every delta into a per-holder ParityUpdate. Valid only
// while the batch it points into is alive and unchanged.
struct ParityDeltaRef {
  ParityUpdate::Entry entry;
  const uint8_t* delta = nullptr;  // record_bytes bytes, old XOR new
};

}  // namespace xdl_ec
