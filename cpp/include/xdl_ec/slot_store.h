// Where one shard's records live: a slot array of fixed-size records (record_layout.h) cut into blocks of
// `block_slots` records, the unit of parity striping and of recovery. A placed block never moves (parity
// over its bytes stays valid while the array grows), is carved zeroed from large huge-page slabs, and may
// have no bytes: a block past the array, one a restore has not filled yet (EmbeddingShard::BeginRestore),
// or one given back to the kernel whole (Release: an eviction pass emptied it; it reads zeros until reused).
//
// What a record means, which slots are free and how keys find them is the shard's: this class holds the
// bytes and their extent only, behind a narrow interface (a record's bytes, growth, blocks), so a lower
// tier can go below it without the shard's operations changing. Not thread safe: the shard's lock guards
// it. The accessors are inline because the pull and push loops call Record once per row.
//
// With a memory budget the records live in a SpillTier (spill_tier.h) instead of blocks: Record gives a
// resident frame, an operation's fetch step (Fetch) makes its batch resident first, and whole blocks are
// read and written through ReadBlock / WriteBlock (what parity and recovery use either way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xdl_ec/mapped_buffer.h"
#include "xdl_ec/spill_tier.h"

namespace xdl_ec {

class SlotStore {
 public:
  SlotStore(size_t record_bytes, uint32_t block_slots);
  // Tiered: records in a spill file under `spill_dir`, at most about `memory_budget` bytes of them in RAM
  // (SpillTier's checks: a budget below its minimum, a dir missing or not writable, throw).
  SlotStore(size_t record_bytes, uint32_t block_slots, size_t memory_budget, const std::string& spill_dir);

  size_t record_bytes() const { return record_bytes_; }
  uint32_t block_slots() const { return block_slots_; }
  size_t block_bytes() const { return block_bytes_; }
  size_t high_water() const { return high_water_; }  // slots ever used: the array's length
  size_t num_blocks() const { return (high_water_ + block_slots_ - 1) / block_slots_; }

  // Slot -> (block, index within the block): a shift and a mask when block_slots is a power of two
  // (the default), since a 64-bit division per access is a visible share of a cached row read.
  size_t BlockOf(size_t slot) const { return block_shift_ >= 0 ? slot >> block_shift_ : slot / block_slots_; }
  size_t WithinBlock(size_t slot) const { return block_shift_ >= 0 ? slot & (block_slots_ - 1) : slot % block_slots_; }

  // The record bytes of `slot`, whose block has bytes (tiered: its frame, read in when it has none).
  uint8_t* Record(size_t slot) const {
    if (__builtin_expect(tier_ != nullptr, 0)) return tier_->Frame(slot);
    return blocks_[BlockOf(slot)] + WithinBlock(slot) * record_bytes_;
  }
  // Block b's bytes, or null when it has none; untiered only (a tiered store has no block in RAM).
  uint8_t* Block(size_t b) const { return b < blocks_.size() ? blocks_[b] : nullptr; }

  // ---- the tier ----------------------------------------------------------------------------------
  bool tiered() const { return tier_ != nullptr; }
  // Tiered: the key bytes of `slot` without reading the file (SpillTier::KeyOf).
  int64_t KeyOf(size_t slot) const { return tier_->KeyOf(slot); }
  // Tiered: the fetch step (SpillTier::Fetch, FetchRange); `other_bytes`: the rest of the budget's charge.
  void Fetch(const uint32_t* slots, size_t n, size_t other_bytes) const { tier_->Fetch(slots, n, other_bytes); }
  // ... handing back each slot's resident record (SpillTier::Fetch with records), dirty when `for_write`.
  void Fetch(const uint32_t* slots, size_t n, size_t other_bytes, uint8_t** records, bool for_write) const {
    tier_->Fetch(slots, n, other_bytes, records, for_write);
  }
  // Tiered: the fetch step in three calls, for an owner resolving its keys over several threads
  // (SpillTier::BeginFetch, Touch, FetchMissing, Resident).
  void BeginFetch() const { tier_->BeginFetch(); }
  bool cold() const { return tier_ && tier_->cold(); }
  void WillNeed(size_t slot) const { tier_->WillNeed(slot); }
  uint8_t* Touch(size_t slot, bool for_write) const { return tier_->Touch(slot, for_write); }
  void FetchMissing(std::vector<uint32_t> slots, size_t hits, size_t other_bytes, bool for_write,
                    size_t appends = 0) const {
    tier_->FetchMissing(std::move(slots), hits, other_bytes, for_write, appends);
  }
  uint8_t* Resident(size_t slot) const { return tier_->Resident(slot); }
  // Tiered: prefetch hints for resolving a key at `slot` (SpillTier::PrefetchSlot, PrefetchKey).
  void PrefetchSlot(size_t slot) const { tier_->PrefetchSlot(slot); }
  void PrefetchKey(size_t slot) const { tier_->PrefetchKey(slot); }
  void FetchRange(size_t first, size_t count, size_t other_bytes) const {
    tier_->FetchRange(first, count, other_bytes);
  }
  SpillStats spill_stats() const { return tier_ ? tier_->stats() : SpillStats{}; }

  // ---- whole blocks and runs of records, tiered or not -----------------------------------------------
  // Copies records [slot, slot + count) to out; slots without bytes (past the end, a block not placed)
  // read as zeros.
  void ReadSlots(size_t slot, size_t count, uint8_t* out) const;
  // Block b (below num_blocks()) becomes `bytes` (block_bytes() of them; past the end: dropped).
  void WriteBlock(size_t b, const uint8_t* bytes);
  // Block b's bytes for reading: its own when untiered (null when it has none), else read into `scratch`.
  const uint8_t* BlockForRead(size_t b, std::vector<uint8_t>* scratch) const;

  // ---- growth ------------------------------------------------------------------------------------
  // Block b's bytes (b below num_blocks()), placed zeroed first when it has none.
  uint8_t* Place(size_t b);
  // Appends one slot to the array, placing its block when it has none; returns the slot.
  size_t Grow();
  // Makes the array `high_water` slots long with no block placed (a restore fills them); forgets the
  // blocks held before (their slab bytes are not reused).
  void Reset(size_t high_water);

  // ---- blocks given back ----------------------------------------------------------------------------
  // (A tiered store gives nothing back: its free records are zeros in the file, frames for others.)
  bool released(size_t b) const { return released_count_ != 0 && b < released_.size() && released_[b]; }
  // Block b holds no live record: its pages go back to the kernel (the bytes stay zero). A block without
  // bytes, or within one page (nothing to give back), stays as it is.
  void Release(size_t b);
  // A slot of block b is taken again: the block counts as held (its pages come back as they are touched).
  void Reuse(size_t b);

  size_t bytes() const;  // bytes of the placed blocks, released ones excepted (tiered: of the frames)

 private:
  uint8_t* AllocateBlock();

  size_t record_bytes_;
  uint32_t block_slots_;
  size_t block_bytes_;
  int block_shift_ = -1;  // log2(block_slots) when it is a power of two
  size_t high_water_ = 0;
  std::vector<uint8_t*> blocks_;     // blocks_[b] holds slots [b * block_slots, (b + 1) * block_slots)
  std::vector<MappedBuffer> slabs_;  // where blocks live: large huge-page mappings, never moved
  size_t slab_used_ = 0;             // bytes of slabs_.back() handed out
  size_t slab_total_ = 0;            // bytes of all slabs
  std::vector<uint8_t> released_;    // per block: given back by Release until Reuse
  size_t released_count_ = 0;
  std::unique_ptr<SpillTier> tier_;  // set: the records live in the tier, blocks_ stays empty
};

}  // namespace xdl_ec
