// Where a shard's mutation reports what it changed (a DeltaBatch), so parity maintenance attaches
// without the shard knowing about parity. The shard asks Begin for a batch before it changes a byte,
// fills it under its write lock and hands it to Record before releasing that lock: a sink sees a
// shard's mutations in the order they changed its bytes. Every Begin is followed by one Record,
// unless the mutation throws in between (then the batch is dropped).
//
// On the training path the sink is DeltaForwarder::Mutation (delta_forwarder.h): shard bytes ->
// EmbeddingShard::Push / Pull -> DeltaSink::Record -> DeltaForwarder -> ParityRouter ->
// ForwardedBatch -> ParityHolder -> ParityStore.
#pragma once

#include <cstddef>

#include "xdl_ec/delta_batch.h"

namespace xdl_ec {

class DeltaSink {
 public:
  virtual ~DeltaSink() = default;
  // An empty batch to record a mutation of `record_bytes`-byte records into (it may carry the capacity
  // of an earlier one). Throws std::invalid_argument when the sink cannot take such records: called
  // before the shard changes anything, so a refused mutation changes nothing.
  virtual DeltaBatch Begin(size_t record_bytes) = 0;
  // The mutation's deltas (possibly none), under the shard's write lock.
  virtual void Record(DeltaBatch deltas) = 0;
};

}  // namespace xdl_ec
