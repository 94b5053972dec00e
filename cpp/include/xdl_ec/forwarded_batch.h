// The delta seqs [first_seq, seq] of a data server as ONE parity holder receives them: the routed
// ParityUpdate of every table those mutations touched for that holder (none when they touched none of
// the holder's stripes: the holder still gets the seqs, so its applied seq stays contiguous), and the
// worker push seqs the sender had applied once mutation `seq` was made (recovery tells workers what to
// replay from it). Usually one mutation (first_seq == seq); the forwarder coalesces the mutations it
// finds queued into one range, a slot touched by several carrying the XOR of their deltas (old of the
// first XOR new of the last), so a hot key costs one parity update per range. A holder applies or
// undoes a range whole, so its applied seq is always a range end. Immutable once made: the sender's
// queue and the holder's undo log share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xdl_ec/parity_update.h"

namespace xdl_ec {

using WorkerSeqs = std::map<int32_t, int64_t>;  // worker -> its push seq to the sender

struct ForwardedBatch {
  int64_t first_seq = 0;                                      // the first delta seq it covers (1 <= first_seq)
  int64_t seq = 0;                                            // the last (first_seq <= seq)
  std::shared_ptr<const WorkerSeqs> stamp;                    // never null; shared by every holder's copy
  std::vector<std::pair<std::string, ParityUpdate>> updates;  // (table, non-empty update for this holder)

  size_t delta_bytes() const;  // sum of the updates' delta bytes
};

using BatchPtr = std::shared_ptr<const ForwardedBatch>;

// Little-endian wire form of a list of batches, for a holder in another process: magic "XFB2", count
// (u64), then per batch first_seq (i64), seq (i64), stamp (u32 count, (i32 worker, i64 seq)...), updates (u32 count,
// (u32 name length, name, u64 update length, ParityUpdate::Serialize bytes)...).
std::vector<uint8_t> SerializeBatches(const std::vector<BatchPtr>& batches);
// Throws std::invalid_argument naming what is wrong (bad magic, truncated, trailing bytes, a bad seq range,
// a bad update).
std::vector<BatchPtr> ParseBatches(const uint8_t* bytes, size_t size);

}  // namespace xdl_ec
