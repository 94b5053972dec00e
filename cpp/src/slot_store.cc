#include "xdl_ec/slot_store.h"

#include <algorithm>
#include <cstring>

namespace xdl_ec {

SlotStore::SlotStore(size_t record_bytes, uint32_t block_slots)
    : record_bytes_(record_bytes), block_slots_(block_slots), block_bytes_(record_bytes * block_slots) {
  if ((block_slots_ & (block_slots_ - 1)) == 0) {
    block_shift_ = 0;
    while ((1u << block_shift_) < block_slots_) ++block_shift_;
  }
}

SlotStore::SlotStore(size_t record_bytes, uint32_t block_slots, size_t memory_budget, const std::string& spill_dir)
    : SlotStore(record_bytes, block_slots) {
  tier_ = std::make_unique<SpillTier>(record_bytes, memory_budget, spill_dir);
}

// A zeroed block carved from the current slab; a new slab (a quarter of what is held, 2 MiB to
// 64 MiB, whole huge pages) when it is full. Untouched slab pages cost no memory.
uint8_t* SlotStore::AllocateBlock() {
  if (slabs_.empty() || slab_used_ + block_bytes_ > slabs_.back().size()) {
    constexpr size_t kMinSlab = MappedBuffer::kHugePage, kMaxSlab = size_t{64} << 20;
    size_t bytes = std::min(kMaxSlab, std::max(kMinSlab, slab_total_ / 4));
    bytes = std::max(bytes, block_bytes_);
    bytes = (bytes + MappedBuffer::kHugePage - 1) / MappedBuffer::kHugePage * MappedBuffer::kHugePage;
    slabs_.emplace_back(bytes);
    slab_used_ = 0;
    slab_total_ += bytes;
  }
  uint8_t* block = slabs_.back().data() + slab_used_;
  slab_used_ += block_bytes_;
  return block;
}

uint8_t* SlotStore::Place(size_t b) {
  if (!blocks_[b]) blocks_[b] = AllocateBlock();
  return blocks_[b];
}

size_t SlotStore::Grow() {
  if (tier_) {
    tier_->Append();
    return high_water_++;
  }
  const size_t slot = high_water_;
  const size_t b = slot / block_slots_;
  if (b >= blocks_.size()) {
    blocks_.push_back(AllocateBlock());
  } else {
    Place(b);
  }
  ++high_water_;
  return slot;
}

void SlotStore::Reset(size_t high_water) {
  if (tier_) tier_->Reset(high_water);
  high_water_ = high_water;
  blocks_.clear();
  if (!tier_) blocks_.resize(num_blocks());
  released_.clear();
  released_count_ = 0;
}

void SlotStore::Release(size_t b) {
  if (tier_) return;
  if (released_.size() < blocks_.size()) released_.resize(blocks_.size(), 0);
  if (released_[b] || !blocks_[b]) return;
  if (MappedBuffer::ReleasePages(blocks_[b], block_bytes_) == 0) return;  // a block within one page: kept
  released_[b] = 1;
  ++released_count_;
}

void SlotStore::Reuse(size_t b) {
  if (!released(b)) return;
  released_[b] = 0;
  --released_count_;
}

size_t SlotStore::bytes() const {
  if (tier_) return tier_->frame_bytes();
  size_t held = 0;
  for (const uint8_t* b : blocks_) held += b ? block_bytes_ : 0;
  return held - released_count_ * block_bytes_;  // emptied by passes and given back (Release)
}

void SlotStore::ReadSlots(size_t slot, size_t count, uint8_t* out) const {
  if (tier_) {  // the tier's slots are [0, high_water): the rest reads zeros
    const size_t have = slot < high_water_ ? std::min(count, high_water_ - slot) : 0;
    if (have) tier_->Read(slot, have, out);
    std::memset(out + have * record_bytes_, 0, (count - have) * record_bytes_);
    return;
  }
  size_t done = 0;
  while (done < count) {
    const size_t at = slot + done;
    const size_t b = at / block_slots_, within = at % block_slots_;
    const size_t take = std::min(count - done, block_slots_ - within);
    uint8_t* dst = out + done * record_bytes_;
    const uint8_t* block = b < num_blocks() ? Block(b) : nullptr;
    if (block) {
      std::memcpy(dst, block + within * record_bytes_, take * record_bytes_);
    } else {
      std::memset(dst, 0, take * record_bytes_);
    }
    done += take;
  }
}

void SlotStore::WriteBlock(size_t b, const uint8_t* bytes) {
  if (!tier_) {
    std::memcpy(Place(b), bytes, block_bytes_);
    return;
  }
  const size_t first = b * block_slots_;
  if (first < high_water_) tier_->Write(first, std::min<size_t>(block_slots_, high_water_ - first), bytes);
}

const uint8_t* SlotStore::BlockForRead(size_t b, std::vector<uint8_t>* scratch) const {
  if (!tier_) return Block(b);
  scratch->resize(block_bytes_);
  ReadSlots(b * block_slots_, block_slots_, scratch->data());
  return scratch->data();
}

}  // namespace xdl_ec
