// EmbeddingShard's raw slot reads and the restore protocol (embedding_shard.h): a lost shard's key index
// first, then its blocks in any order, each block an access touches faulted in through the handler first.
#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>

#include "embedding_shard_impl.h"

namespace xdl_ec {

int64_t EmbeddingShard::Impl::FirstMismatch(size_t b, const uint8_t* bytes) const {
  const uint32_t block_slots = store.block_slots();
  for (size_t i = 0; i < block_slots; ++i) {
    const size_t slot = b * block_slots + i;
    const uint8_t* r = bytes + i * record_bytes;
    if (slot < sketch_slots) {  // cells: any bytes; key and flags: zero (never live)
      for (size_t j = 0; j < RecordLayout::kValueOffset; ++j) {
        if (r[j] != 0) return static_cast<int64_t>(slot);
      }
    } else if (slot < restore_live.size() && restore_live[slot]) {
      int64_t key;
      std::memcpy(&key, r + RecordLayout::kKeyOffset, sizeof(key));
      if (key != restore_keys[slot] || !RecordLayout::IsLive(RecordLayout::Flags(r))) {
        return static_cast<int64_t>(slot);
      }
    } else {
      for (size_t j = 0; j < record_bytes; ++j) {
        if (r[j] != 0) return static_cast<int64_t>(slot);
      }
    }
  }
  return -1;
}

void EmbeddingShard::Impl::MarkRestored(size_t b) {
  missing[b] = 0;
  if (--missing_count == 0) {
    std::vector<uint8_t>().swap(missing);
    std::vector<int64_t>().swap(restore_keys);
    std::vector<uint8_t>().swap(restore_live);
    handler = nullptr;
  }
}

void EmbeddingShard::Impl::EnsureBlock(size_t b) {
  if (!BlockMissing(b)) return;
  std::vector<uint8_t> scratch;  // a tiered store takes the block once it is checked
  if (store.tiered()) scratch.assign(store.block_bytes(), 0);
  uint8_t* out = store.tiered() ? scratch.data() : store.Place(b);
  try {
    handler(b, out);
  } catch (...) {
    std::memset(out, 0, store.block_bytes());
    throw;
  }
  const int64_t bad = FirstMismatch(b, out);
  if (bad >= 0) {
    std::memset(out, 0, store.block_bytes());
    throw std::runtime_error("EmbeddingShard: block fault handler returned bytes for block " + Str(b) +
                             " that disagree with the restored key index at slot " + std::to_string(bad));
  }
  if (store.tiered()) store.WriteBlock(b, out);
  MarkRestored(b);
}

void EmbeddingShard::Impl::PrepareBlocks(const int64_t* keys, size_t n, bool may_insert, FetchedRows* fetched,
                                         bool for_write) {
  FaultBlocks(keys, n, may_insert);
  FetchKeys(keys, n, fetched, for_write, nullptr, may_insert);  // after the faults: their blocks are what it reads
}

void EmbeddingShard::Impl::FaultBlocks(const int64_t* keys, size_t n, bool may_insert) {
  if (!Restoring()) return;
  const uint32_t block_slots = store.block_slots();
  size_t misses = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = Lookup(keys[i]);
    if (slot == KeyIndex::kNone) {
      ++misses;
    } else {
      EnsureBlock(slot / block_slots);
    }
  }
  if (!may_insert || misses == 0) return;
  const size_t reused = std::min(misses, free_slots.size());
  std::vector<uint32_t> heap(free_slots);
  for (size_t i = 0; i < reused; ++i) {
    EnsureBlock(heap.front() / block_slots);
    std::pop_heap(heap.begin(), heap.end(), std::greater<uint32_t>());
    heap.pop_back();
  }
  if (misses > reused) EnsureBlock(store.high_water() / block_slots);
}

size_t EmbeddingShard::missing_blocks() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->missing_count;
}

bool EmbeddingShard::block_missing(size_t b) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->BlockMissing(b);
}

std::vector<size_t> EmbeddingShard::MissingBlocksOf(const int64_t* keys, size_t n) const {
  const Impl& s = *impl_;
  std::shared_lock<std::shared_mutex> lock(s.mutex);
  std::vector<size_t> out;
  if (!s.Restoring()) return out;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = s.Lookup(keys[i]);
    if (slot == KeyIndex::kNone) continue;
    const size_t block = slot / s.store.block_slots();
    if (s.BlockMissing(block)) out.push_back(block);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// ---- raw slot access -------------------------------------------------------------------------

void EmbeddingShard::ReadBlock(size_t b, uint8_t* out) const {
  RequirePointer(out, 1, "ReadBlock", "out");
  Impl& s = *impl_;
  {
    ReadLock lock(s);
    if (b >= s.NumBlocks()) {
      std::memset(out, 0, s.store.block_bytes());
      return;
    }
    if (!s.BlockMissing(b)) {
      s.store.ReadSlots(b * s.store.block_slots(), s.store.block_slots(), out);
      return;
    }
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.EnsureBlock(b);
  s.store.ReadSlots(b * s.store.block_slots(), s.store.block_slots(), out);
}

void EmbeddingShard::ReadSlots(size_t slot, size_t count, uint8_t* out) const {
  RequirePointer(out, count, "ReadSlots", "out");
  Impl& s = *impl_;
  const size_t block_slots = s.store.block_slots();
  auto run = [&]() { s.store.ReadSlots(slot, count, out); };
  if (slot + count < slot) throw std::out_of_range("ReadSlots: slot + count overflows");
  {
    ReadLock lock(s);
    if (!s.Restoring()) return run();
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  if (count > 0) {
    const size_t first = slot / block_slots, last = (slot + count - 1) / block_slots;
    for (size_t b = first; b <= last && b < s.NumBlocks(); ++b) s.EnsureBlock(b);
  }
  run();
}

// ---- restore ---------------------------------------------------------------------------------

namespace {

// A lost shard's key index as BeginRestore gets it, checked and built aside, so a bad argument leaves
// the shard untouched.
struct RestoredIndex {
  std::vector<int64_t> keys;  // per slot below high_water
  std::vector<uint8_t> live;  // per slot below high_water
  KeyIndex index;
  std::vector<uint32_t> free_slots;  // ascending: a min-heap
};

// Slots [0, reserved) are a sketch's (row_policy.h): never a key's, never free.
RestoredIndex BuildRestoredIndex(const int64_t* keys, const uint32_t* slots, size_t n, size_t high_water,
                                 size_t reserved) {
  RestoredIndex out;
  out.keys.assign(high_water, 0);
  out.live.assign(high_water, 0);
  out.index.Reserve(n);
  auto key_of = [&out](uint32_t sl) { return out.keys[sl]; };
  for (size_t i = 0; i < n; ++i) {
    if (slots[i] >= high_water) {
      throw std::invalid_argument("BeginRestore: slots[" + Str(i) + "] = " + Str(slots[i]) +
                                  " is not below high_water " + Str(high_water));
    }
    if (out.live[slots[i]]) {
      throw std::invalid_argument("BeginRestore: slot " + Str(slots[i]) + " appears twice");
    }
    if (slots[i] < reserved) {
      throw std::invalid_argument("BeginRestore: slot " + Str(slots[i]) +
                                  " is one of the sketch's reserved slots [0, " + Str(reserved) + ")");
    }
    if (out.index.Find(keys[i], key_of) != KeyIndex::kNone) {
      throw std::invalid_argument("BeginRestore: key " + std::to_string(keys[i]) + " appears twice");
    }
    out.keys[slots[i]] = keys[i];
    out.live[slots[i]] = 1;
    out.index.Insert(keys[i], slots[i]);
  }
  out.free_slots.reserve(high_water - n);
  for (size_t slot = reserved; slot < high_water; ++slot) {
    if (!out.live[slot]) out.free_slots.push_back(static_cast<uint32_t>(slot));
  }
  return out;
}

}  // namespace

void EmbeddingShard::BeginRestore(const int64_t* keys, const uint32_t* slots, size_t n, size_t high_water,
                                  BlockFaultHandler handler) {
  RequirePointer(keys, n, "BeginRestore", "keys");
  RequirePointer(slots, n, "BeginRestore", "slots");
  Impl& s = *impl_;
  if (high_water > static_cast<size_t>(KeyIndex::kMaxSlot) + 1) {
    throw std::invalid_argument("BeginRestore: high_water " + Str(high_water) + " exceeds the slot limit");
  }
  if (n > high_water) {
    throw std::invalid_argument("BeginRestore: " + Str(n) + " keys cannot fit below high_water " + Str(high_water));
  }
  if (high_water > 0 && !handler) throw std::invalid_argument("BeginRestore: handler is empty");
  // A sketch's reserved slots stay reserved (row_policy.h): never a key's, never free, always restored.
  const size_t reserved = s.sketch_slots;
  high_water = std::max(high_water, reserved);
  RestoredIndex restored = BuildRestoredIndex(keys, slots, n, high_water, reserved);

  std::unique_lock<std::shared_mutex> lock(s.mutex);
  if (s.store.high_water() != reserved || s.index.size() != 0 || s.Restoring()) {
    throw std::invalid_argument("BeginRestore: the shard must be new and empty (it holds " + Str(s.index.size()) +
                                " rows, " + Str(s.store.high_water()) + " slots)");
  }
  s.store.Reset(high_water);
  const size_t nb = s.NumBlocks();
  s.index = std::move(restored.index);
  s.free_slots = std::move(restored.free_slots);
  if (nb == 0) return;
  s.missing.assign(nb, 1);
  s.missing_count = nb;
  s.restore_keys = std::move(restored.keys);
  s.restore_live = std::move(restored.live);
  s.handler = std::move(handler);
}

bool EmbeddingShard::RestoreBlock(size_t b, const uint8_t* bytes) {
  RequirePointer(bytes, 1, "RestoreBlock", "bytes");
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  if (b >= s.NumBlocks()) {
    throw std::out_of_range("RestoreBlock: block " + Str(b) + " is out of range (the shard has " + Str(s.NumBlocks()) +
                            " blocks)");
  }
  if (!s.BlockMissing(b)) return false;
  const int64_t bad = s.FirstMismatch(b, bytes);
  if (bad >= 0) {
    throw std::invalid_argument("RestoreBlock: bytes of block " + Str(b) +
                                " disagree with the restored key index at slot " + std::to_string(bad));
  }
  s.store.WriteBlock(b, bytes);
  s.MarkRestored(b);
  return true;
}

}  // namespace xdl_ec
