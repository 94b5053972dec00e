// Scrub: every stripe's stored parity checked against the encoding of its data blocks, over fragments
// read through callbacks (recovery.h's FragmentReader), as Recovery decodes. The same code serves a test
// holding every shard in one process and the parameter servers reading each other's blocks over RPC
// (ErasureCoded.verify in xdl_ec/ft/ec_strategy.py). It finds silent corruption (a flipped bit in data
// or parity) and parity that missed a mutation; it reads a consistent view only if nothing mutates the
// stripes while it runs (the caller drains parity first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "xdl_ec/erasure_code.h"
#include "xdl_ec/recovery.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec {

// A parity block that disagrees with the encoding of its stripe's data blocks.
struct ScrubMismatch {
  size_t stripe = 0;
  int parity_member = 0;  // i: which parity block of the stripe
  int server = 0;         // its holder
  size_t block = 0;       // the holder's local parity block
};

class Scrubber {
 public:
  // Throws std::invalid_argument when code and layout disagree on k or r, or a size is zero.
  Scrubber(const StripeLayout& layout, std::shared_ptr<const ErasureCode> code, uint32_t block_slots,
           size_t record_bytes);

  const StripeLayout& layout() const { return layout_; }
  uint32_t block_slots() const { return block_slots_; }
  size_t record_bytes() const { return record_bytes_; }
  size_t block_bytes() const { return static_cast<size_t>(block_slots_) * record_bytes_; }

  // Stripes [0, stripes): reads each one's k data blocks and r parity blocks whole (offset 0, width
  // record_bytes) and lists the parity blocks that differ from the data's encoding, in stripe order
  // (empty: consistent). A block past the end of a server's data reads as zeros (the reader's contract).
  // Errors of the reader propagate.
  std::vector<ScrubMismatch> Scrub(size_t stripes, const FragmentReader& reader) const;

 private:
  StripeLayout layout_;
  std::shared_ptr<const ErasureCode> code_;
  uint32_t block_slots_;
  size_t record_bytes_;
};

}  // namespace xdl_ec
