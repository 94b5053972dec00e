// EmbeddingShard's slots: the slots of a batch's keys looked up over a pool's parts, a slot for a new
// record (the lowest free one first, else the array grows), and what a new row, a pending id or an admitted
// id writes into it (record_layout.h).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "embedding_shard_impl.h"
#include "xdl_ec/initializer.h"
#include "xdl_ec/task_pool.h"

namespace xdl_ec {

void EmbeddingShard::Impl::ResolveParts(const int64_t* keys, size_t n, TaskPool& pool, size_t parts,
                                        uint32_t* slots) const {
  pool.ForEachPart(parts, [&](size_t p) {
    const size_t lo = TaskPool::PartBegin(n, parts, p), hi = TaskPool::PartBegin(n, parts, p + 1);
    Resolve(keys + lo, hi - lo, 0, sizeof(int64_t), [&](size_t j, uint32_t slot) {
      slots[lo + j] = slot;
      return true;
    });
  });
}

// The keys resolved over the pool's parts, each hit marked the batch's own where its key was confirmed (its
// frame just read), the rows on disk gathered per part and read in together afterwards.
void EmbeddingShard::Impl::FetchKeys(const int64_t* keys, size_t n, FetchedRows* fetched, bool for_write,
                                     float* hit_values, bool may_insert) const {
  if (!store.tiered()) return;
  TaskPool& pool = TaskPool::Shared();
  FetchedRows local;
  FetchedRows& rows = fetched ? *fetched : local;
  rows.slots.resize(n);
  rows.records.resize(n);
  uint32_t* slots = rows.slots.data();
  uint8_t** records = rows.records.data();
  const size_t dim = static_cast<size_t>(config.dim), value_bytes = sizeof(float) * dim;
  store.BeginFetch();
  const size_t parts = pool.PartsFor(n, config.split_min_keys);
  if (store.cold()) {  // the rows on disk are not in the page cache: their pages asked for together first
    pool.ForEachPart(parts, [&](size_t p) {
      const size_t lo = TaskPool::PartBegin(n, parts, p), hi = TaskPool::PartBegin(n, parts, p + 1);
      for (size_t i = lo; i < hi; ++i) {
        const uint32_t slot = index.Candidate(keys[i]);
        if (slot != KeyIndex::kNone) store.WillNeed(slot);
      }
    });
  }
  std::vector<std::vector<uint32_t>> on_disk(parts);  // per part: positions whose row is on disk
  std::atomic<size_t> hits{0}, absent{0};
  pool.ForEachPart(parts, [&](size_t p) {
    const size_t lo = TaskPool::PartBegin(n, parts, p), hi = TaskPool::PartBegin(n, parts, p + 1);
    size_t part_hits = 0, part_absent = 0;
    Resolve(keys + lo, hi - lo, 0, sizeof(int64_t), [&](size_t j, uint32_t slot) {
      const size_t i = lo + j;
      slots[i] = slot;
      records[i] = slot == KeyIndex::kNone ? nullptr : store.Touch(slot, for_write);
      if (records[i]) {
        ++part_hits;
        if (hit_values) std::memcpy(hit_values + i * dim, records[i] + RecordLayout::kValueOffset, value_bytes);
      } else if (slot != KeyIndex::kNone) {
        on_disk[p].push_back(static_cast<uint32_t>(i));
      } else {
        ++part_absent;
      }
      return true;
    });
    hits.fetch_add(part_hits, std::memory_order_relaxed);
    absent.fetch_add(part_absent, std::memory_order_relaxed);
  });
  std::vector<uint32_t> missing;
  for (const std::vector<uint32_t>& part : on_disk) {
    for (const uint32_t i : part) missing.push_back(slots[i]);
  }
  size_t hit_count = hits.load(std::memory_order_relaxed);
  for (size_t slot = 0; slot < sketch_slots; ++slot) {  // a push counts in them: resident with the batch
    if (store.Touch(slot, for_write)) {
      ++hit_count;
    } else {
      missing.push_back(static_cast<uint32_t>(slot));
    }
  }
  // A repeated absent key counts twice: at most a batch's worth of frames freed early.
  const size_t appends = may_insert ? absent.load(std::memory_order_relaxed) : 0;
  store.FetchMissing(std::move(missing), hit_count, OtherBytes(), for_write, appends);
  rows.read_in.clear();
  for (const std::vector<uint32_t>& part : on_disk) {
    for (const uint32_t i : part) records[i] = store.Resident(slots[i]);
    rows.read_in.insert(rows.read_in.end(), part.begin(), part.end());
  }
  rows.hits_copied = hit_values != nullptr;
}

uint32_t EmbeddingShard::Impl::AllocateSlot() {
  if (!free_slots.empty()) {
    const uint32_t slot = free_slots.front();
    EnsureBlock(slot / store.block_slots());
    store.Reuse(store.BlockOf(slot));  // a block given back: its pages come back as they are touched
    std::pop_heap(free_slots.begin(), free_slots.end(), std::greater<uint32_t>());
    free_slots.pop_back();
    return slot;
  }
  if (store.high_water() > KeyIndex::kMaxSlot) {
    throw std::out_of_range("EmbeddingShard: shard is full (" + Str(store.high_water()) + " slots)");
  }
  EnsureBlock(store.high_water() / store.block_slots());
  return static_cast<uint32_t>(store.Grow());
}

void EmbeddingShard::Impl::WriteNew(uint32_t slot, int64_t key, const float* values, const float* state) {
  WriteNewKey(slot, key);
  WriteNewRow(slot, key, values, state);
}

void EmbeddingShard::Impl::WriteNewKey(uint32_t slot, int64_t key) {
  MarkDirty(slot);
  uint8_t* r = Record(slot);
  std::memcpy(r + RecordLayout::kKeyOffset, &key, sizeof(key));
  RecordLayout::SetFlags(r, RecordLayout::LiveFlags(RecordLayout::kInitialClock));
  if (policy_on) SetWord<uint32_t>(r, RecordLayout::kAdmittedOffset, 1);
  index.Insert(key, slot);
}

void EmbeddingShard::Impl::WriteNewRow(uint32_t slot, int64_t key, const float* values, const float* state) const {
  uint8_t* r = Record(slot);
  if (values) {
    std::memcpy(Value(r), values, sizeof(float) * config.dim);
  } else {
    InitializeRow(config.initializer, config.seed, key, Value(r), config.dim);
  }
  if (state) {
    std::memcpy(State(r), state, sizeof(float) * layout.state_floats);
  } else {
    optimizer->InitState(State(r), config.dim);
  }
}

void EmbeddingShard::Impl::WritePending(uint32_t slot, int64_t key, uint32_t uses, int64_t step) {
  uint8_t* r = Record(slot);
  std::memcpy(r + RecordLayout::kKeyOffset, &key, sizeof(key));
  RecordLayout::SetFlags(r, RecordLayout::LiveFlags(RecordLayout::kInitialClock));
  CountUse(r, uses, step);
  index.Insert(key, slot);
}

void EmbeddingShard::Impl::Admit(uint32_t slot, int64_t key) {
  uint8_t* r = Record(slot);
  InitializeRow(config.initializer, config.seed, key, Value(r), config.dim);
  optimizer->InitState(State(r), config.dim);
  SetWord<uint32_t>(r, RecordLayout::kAdmittedOffset, 1);
  admitted.fetch_add(1, std::memory_order_relaxed);
}

uint32_t EmbeddingShard::Impl::Insert(int64_t key, DeltaBatch* deltas) {
  const uint32_t slot = AllocateSlot();
  const size_t d = DeltaBegin(deltas, slot);
  WriteNew(slot, key, nullptr, nullptr);
  DeltaEnd(deltas, d, slot);
  return slot;
}

void EmbeddingShard::Impl::AppendRow(uint8_t* r, EmbeddingShard::Rows* rows) const {
  int64_t key;
  std::memcpy(&key, r, sizeof(key));
  rows->keys.push_back(key);
  const float* v = Value(r);
  rows->values.insert(rows->values.end(), v, v + config.dim);
  const float* st = State(r);
  rows->state.insert(rows->state.end(), st, st + layout.state_floats);
  if (policy_on) {
    rows->uses.push_back(Uses(r));
    rows->last_step.push_back(LastStep(r));
  }
}

}  // namespace xdl_ec
