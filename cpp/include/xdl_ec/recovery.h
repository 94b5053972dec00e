// Reconstruction of lost servers' blocks from the survivors, transport-free: fragments are read
// through callbacks (the parameter servers' recovery reads them over RPC, xdl_ec/ft/ec_strategy.py;
// the rebuild tests read shards and parity stores directly).
//
// Two phases:
//  1. RecoverKeyIndex: for every stripe holding a lost server's data, decode only the key + flags
//     bytes (the first 12 bytes of each record) from k survivors -> the lost shard's (key, slot) list
//     and high-water mark, which EmbeddingShard::BeginRestore takes. 12 / record_bytes of the work.
//  2. DecodeStripe: decode whole blocks of chosen stripe positions, for degraded reads (a block
//     fault on the replacement shard) and for the background rebuild of data and parity blocks.
//
// A position of a stripe is available iff its server is not in `unavailable`; with at most r
// unavailable servers every stripe has at least k available positions (an MDS code needs any k).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xdl_ec/erasure_code.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec {

// Reads bytes [offset, offset + width) of every record of one block of a surviving server into out,
// packed (block_slots * width bytes). Whole blocks: offset 0, width record_bytes.
using FragmentReadFn = std::function<void(int server, size_t block, size_t offset, size_t width, uint8_t* out)>;

struct FragmentReader {
  FragmentReadFn read_data;    // the server's local data block
  FragmentReadFn read_parity;  // the server's local parity block
};

// One fragment a decode reads: a surviving server's local data block, or its local parity block.
struct FragmentRef {
  bool parity = false;
  BlockRef ref;
};

struct RecoveredKeyIndex {
  std::vector<int64_t> keys;
  std::vector<uint32_t> slots;  // parallel to keys, ascending
  size_t high_water = 0;        // one past the highest live slot
};

class Recovery {
 public:
  // Throws std::invalid_argument when code and layout disagree on k or r, or sizes are zero.
  Recovery(const StripeLayout& layout, std::shared_ptr<const ErasureCode> code, uint32_t block_slots,
           size_t record_bytes);

  // Throws std::invalid_argument("unrecoverable: lost servers {..}, the code tolerates r=..") when
  // more than layout.r() distinct servers are listed.
  static void CheckRecoverable(const StripeLayout& layout, const std::vector<int>& lost);
  // "{1, 4}": how errors name a set of servers.
  static std::string ServerSet(const std::vector<int>& servers);

  const StripeLayout& layout() const { return layout_; }
  size_t block_bytes() const { return static_cast<size_t>(block_slots_) * record_bytes_; }

  // Phase 1 for `server`'s local data blocks [0, data_blocks). `unavailable` lists every server
  // whose fragments cannot be read (it must contain `server`). Throws std::invalid_argument
  // ("unrecoverable: ...") when more than r servers are unavailable.
  RecoveredKeyIndex RecoverKeyIndex(int server, size_t data_blocks, const std::vector<int>& unavailable,
                                    const FragmentReader& reader) const;

  // The k fragments a decode of `stripe` reads, in read order (the first k available positions), so a
  // caller can fetch them all at once, and at one version, before decoding. Throws like DecodeStripe.
  std::vector<FragmentRef> StripeReads(size_t stripe, const std::vector<int>& unavailable) const;

  // Decodes whole blocks of `stripe` at `wanted` positions (0..k-1 data, k..k+r-1 parity; each must
  // be unavailable) into outputs[w] (block_bytes() each), reading k available positions.
  void DecodeStripe(size_t stripe, const std::vector<int>& wanted, uint8_t* const* outputs,
                    const std::vector<int>& unavailable, const FragmentReader& reader) const;

  // Degraded read of one lost data block: `server`'s local data block `block`.
  void DecodeDataBlock(int server, size_t block, uint8_t* out, const std::vector<int>& unavailable,
                       const FragmentReader& reader) const;

 private:
  // The available positions of `stripe` (k smallest suffice) and a mask of unavailable servers.
  std::vector<int> Present(size_t stripe, const std::vector<uint8_t>& down) const;
  std::vector<uint8_t> DownMask(const std::vector<int>& unavailable) const;
  FragmentRef Fragment(size_t stripe, int pos) const;  // the block at position pos (0..k+r-1) of stripe

  StripeLayout layout_;
  std::shared_ptr<const ErasureCode> code_;
  uint32_t block_slots_;
  size_t record_bytes_;
};

}  // namespace xdl_ec
