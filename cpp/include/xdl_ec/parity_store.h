// The parity blocks one server holds for the stripes it is a parity member of, indexed by its local
// parity block c (see StripeLayout). Blocks are allocated lazily when the first delta for them
// arrives: a free record is all-zero bytes, so the parity of never-written data is zero and a
// missing block reads as zeros.
//
// A tiered store (ParitySpill with a budget) keeps its records in a spill file under the spill dir and a
// bounded set of them in RAM (SpillTier, spill_tier.h, with the table's record size): a holder's parity is
// r/k of the data it covers, so a server whose shards are budgeted would otherwise hold its parity whole.
// Block c's records are the tier's slots [base(c), base(c) + block_bytes / record_bytes), allocated in the
// order blocks are first written. Apply's targets are fetched together before the read-modify-write; a
// failed write-back (a full disk) throws naming the spill dir with no byte changed.
//
// Thread safety: every method may be called from several threads (one mutex); Apply of different
// batches commutes (XOR), so concurrent senders need no ordering among themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xdl_ec/erasure_code.h"
#include "xdl_ec/mapped_buffer.h"
#include "xdl_ec/parity_update.h"
#include "xdl_ec/spill_tier.h"

namespace xdl_ec {

// The disk tier of a ParityStore: budget_bytes == 0 keeps every block in RAM.
struct ParitySpill {
  size_t record_bytes = 0;  // the table's record size: the unit parity is applied in
  size_t budget_bytes = 0;  // RAM for this store's records and its block map
  std::string dir;          // where the spill file is made
};

class ParityStore {
 public:
  // Throws std::invalid_argument for a null code or block_bytes == 0; with a budget, also for record_bytes
  // not dividing block_bytes or a budget below SpillTier::MinimumBudget (naming it), and std::runtime_error
  // naming the dir when it is missing, not writable or full.
  ParityStore(std::shared_ptr<const ErasureCode> code, size_t block_bytes, const ParitySpill& spill = {});
  ParityStore(const ParityStore&) = delete;
  ParityStore& operator=(const ParityStore&) = delete;

  size_t block_bytes() const { return block_bytes_; }
  const ErasureCode& code() const { return *code_; }

  // parity_block[c][offset .. offset + record_bytes) ^= g(i, j) * delta for every entry. Validates the
  // whole batch first (members within the code, records within a block, sizes consistent; a tiered store
  // takes whole records of its record size) and throws std::invalid_argument without changing any byte if
  // anything is wrong; std::runtime_error naming the spill dir when the tier cannot write (nothing changed).
  void Apply(const ParityUpdate& update);
  // The same for entries whose deltas stay in the sender's buffer (ParityRouter::RouteRefs), record_bytes
  // each: the in-process path, with no copy into a ParityUpdate. Same checks, same all-or-nothing.
  void Apply(const ParityDeltaRef* refs, size_t count, size_t record_bytes);
  // Copies block c to out[block_bytes()]; a block never written reads as zeros.
  void ReadBlock(size_t c, uint8_t* out) const;
  // Copies bytes [offset, offset + width) of every record of block c (records of record_bytes) to
  // out, packed: out[block_bytes / record_bytes * width]. For decoding only the key columns.
  void ReadColumns(size_t c, size_t record_bytes, size_t offset, size_t width, uint8_t* out) const;
  // Overwrites block c with bytes[block_bytes()] (allocating it): recomputed parity after a rebuild.
  void WriteBlock(size_t c, const uint8_t* bytes);
  bool HasBlock(size_t c) const;

  size_t num_blocks() const;              // one past the highest allocated block
  size_t allocated_blocks() const;        // blocks holding memory
  size_t bytes() const;                   // allocated_blocks() * block_bytes()
  uint64_t delta_bytes_received() const;  // sum of applied deltas' bytes, for balance and stats
  uint64_t updates_received() const;      // entries applied
  bool tiered() const { return tier_ != nullptr; }
  SpillStats spill_stats() const;  // the tier's counts (all zero when untiered)

 private:
  static constexpr size_t kNoBase = SIZE_MAX;
  uint8_t* BlockLocked(size_t c);  // allocates zeroed on first use
  bool AllocatedLocked(size_t c) const;
  size_t TierBaseLocked(size_t c);      // tiered: the block's first slot, appended (zero) on first use
  size_t TierOtherBytesLocked() const;  // what the budget covers beside the tier's frames
  void TrimLocked();  // the tier back within its budget (no pointer into it held; a full disk leaves it over)
  void ReadBlockLocked(size_t c, uint8_t* out) const;
  void CheckEntry(const ParityUpdate::Entry& entry, size_t e, size_t record_bytes) const;
  template <typename EntryAt, typename DeltaAt>
  void ApplyEntries(size_t count, size_t record_bytes, EntryAt entry_at, DeltaAt delta_at);
  std::shared_ptr<const ErasureCode> code_;
  size_t block_bytes_;
  std::vector<uint8_t> coefficient_is_one_;  // [i * k + j]: g(i, j) == 1, so the update is a plain XOR
  // [i * k + j]: g(i, j) * x for x's low and high nibble (16 + 16 bytes, pshufb tables), then for every
  // byte (256): records are ~100 bytes, where a call into ISA-L per record costs more than the multiply.
  std::vector<uint8_t> multiply_tables_;
  mutable std::mutex mu_;
  // Blocks are carved from huge-page slabs, as the shard's slot blocks are: parity records are
  // updated at random, and with 4 KiB pages nearly every update also missed the TLB.
  std::vector<uint8_t*> blocks_;  // null: never written (reads as zeros)
  std::vector<MappedBuffer> slabs_;
  size_t slab_used_ = 0, slab_total_ = 0;
  size_t allocated_ = 0;
  std::unique_ptr<SpillTier> tier_;  // null: untiered
  size_t tier_record_bytes_ = 0;
  std::vector<size_t> tier_base_;  // tiered: per block, its first slot, or kNoBase (never written)
  uint64_t delta_bytes_received_ = 0;
  uint64_t updates_received_ = 0;
};

}  // namespace xdl_ec
