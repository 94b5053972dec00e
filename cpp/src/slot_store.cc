#include "xdl_ec/slot_store.h"

#include <algorithm>

namespace xdl_ec {

SlotStore::SlotStore(size_t record_bytes, uint32_t block_slots)
    : record_bytes_(record_bytes), block_slots_(block_slots), block_bytes_(record_bytes * block_slots) {
  if ((block_slots_ & (block_slots_ - 1)) == 0) {
    block_shift_ = 0;
    while ((1u << block_shift_) < block_slots_) ++block_shift_;
  }
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
  high_water_ = high_water;
  blocks_.clear();
  blocks_.resize(num_blocks());
  released_.clear();
  released_count_ = 0;
}

void SlotStore::Release(size_t b) {
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
  size_t held = 0;
  for (const uint8_t* b : blocks_) held += b ? block_bytes_ : 0;
  return held - released_count_ * block_bytes_;  // emptied by passes and given back (Release)
}

}  // namespace xdl_ec
