// Merges the DeltaBatches of consecutive mutations of one shard into one set of deltas: a slot touched
// by several carries the XOR of their deltas, which is (old record before the first) XOR (record after
// the last), so parity maintenance pays once per slot per range instead of once per mutation. With
// Zipf-skewed keys the hot rows are in nearly every push: 4 pushes of a Criteo-shaped batch keep ~73% of
// their deltas, 8 keep ~62%, 16 ~53%.
//
// The merge copies nothing: a repeated slot's delta is XOR-ed into its first occurrence, in that part's
// own buffer, and the result points into the parts (which the caller owns and keeps alive while it uses
// the result).
//
// Not thread-safe: one per forwarder (it keeps its slot table between calls, so steady-state merging
// allocates nothing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "xdl_ec/delta_batch.h"

namespace xdl_ec {

class DeltaCoalescer {
 public:
  // The merged deltas: each slot once, in the order of its first appearance, with a pointer to its
  // record_bytes merged bytes (inside one of the parts).
  struct Merged {
    size_t record_bytes = 0;
    std::vector<uint32_t> slots;
    std::vector<const uint8_t*> deltas;
    size_t size() const { return slots.size(); }
  };

  // Merges `parts` (all of one record size, each with every slot at most once) into (*out), modifying
  // the parts' bytes: after it, a part's bytes of a slot an earlier part also had are meaningless. Throws
  // std::invalid_argument naming the part when record sizes differ, a part's bytes do not match its
  // slots, or a part is null; then nothing was modified.
  void Coalesce(const std::vector<DeltaBatch*>& parts, Merged* out);

 private:
  struct Entry {
    uint64_t key = 0;       // generation << 33 | (slot + 1); an older generation is a free entry
    uint8_t* at = nullptr;  // the slot's merged bytes
  };
  std::vector<Entry> table_;  // open addressing, linear probing
  uint64_t generation_ = 0;   // of the current call
};

}  // namespace xdl_ec
