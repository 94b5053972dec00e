// Turns what a mutation changed on one data server (a DeltaBatch of slot deltas) into one
// ParityUpdate per parity holder, following the StripeLayout: slot x lives in local data block
// b = x / block_slots at byte offset (x % block_slots) * record_bytes; block b is data member j of
// stripe s, whose parity member i sits on server (m + k + i) mod N as its local parity block q*r + i.
// Pure computation: no storage, no transport (DeltaForwarder routes with it, in-process or for the wire).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "xdl_ec/delta_batch.h"
#include "xdl_ec/parity_update.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec {

class ParityRouter {
 public:
  // Throws std::invalid_argument for block_slots == 0 or record_bytes == 0.
  ParityRouter(const StripeLayout& layout, uint32_t block_slots, size_t record_bytes);

  const StripeLayout& layout() const { return layout_; }
  uint32_t block_slots() const { return block_slots_; }
  size_t record_bytes() const { return record_bytes_; }
  size_t block_bytes() const { return block_slots_ * record_bytes_; }

  // Resets (*out) to n() updates, one per holder (empty for servers that get nothing), and appends
  // the parity deltas of `deltas`, made on server `source`, to them. Throws std::invalid_argument when
  // the batch's record_bytes differ from the router's, or std::out_of_range for a bad source.
  void Route(int source, const DeltaBatch& deltas, std::vector<ParityUpdate>* out) const;
  // The same for deltas given as pointers (record_bytes() bytes each, parallel to `slots`), e.g. a
  // coalesced range's deltas left in the buffers of the mutations they came from. Throws
  // std::invalid_argument for sizes that differ or a null pointer, std::out_of_range for a bad source.
  void Route(int source, const std::vector<uint32_t>& slots, const std::vector<const uint8_t*>& deltas,
             std::vector<ParityUpdate>* out) const;
  // The same entries as Route, per holder in the same order, but pointing into `deltas` instead of
  // copying its bytes: for applying in the same process. Resets (*out) to n() lists. Same errors.
  void RouteRefs(int source, const DeltaBatch& deltas, std::vector<std::vector<ParityDeltaRef>>* out) const;

  // The checks of Route alone, naming `what` (for callers that route later).
  void Check(const char* what, int source, const DeltaBatch& deltas) const;

 private:
  template <typename DeltaAt, typename Sink>
  void ForEachEntry(int source, size_t count, const uint32_t* slots, DeltaAt delta_at, Sink sink) const;
  template <typename DeltaAt>
  void RouteInto(int source, size_t count, const uint32_t* slots, DeltaAt delta_at,
                 std::vector<ParityUpdate>* out) const;

  StripeLayout layout_;
  uint32_t block_slots_;
  int block_shift_ = -1;  // log2(block_slots) when a power of two: slot -> block by shift and mask
  size_t record_bytes_;
};

}  // namespace xdl_ec
