// EmbeddingShard's row rules (row_policy.h): erasing keys, eviction passes and their counters, and the policy
// words and pending ids a save carries back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "embedding_shard_impl.h"

namespace xdl_ec {

void EmbeddingShard::Impl::FreeSlot(uint32_t slot) {
  std::memset(Record(slot), 0, record_bytes);
  free_slots.push_back(slot);
  std::push_heap(free_slots.begin(), free_slots.end(), std::greater<uint32_t>());
}

void EmbeddingShard::Impl::ReleaseBlock(size_t b) {
  if (b * size_t{store.block_slots()} < sketch_slots) return;  // a block of sketch cells is never empty
  store.Release(b);
}

std::vector<uint32_t> EmbeddingShard::Impl::SelectVictims(int64_t now_step, int64_t ttl_before, EvictionResult* counts,
                                                          std::vector<uint32_t>* live_in_block) const {
  const RowPolicyConfig& rules = config.row_policy;
  // Decide on the bytes alone, in slot order, so a restored shard decides the same.
  // Ties are broken by key, not slot: a shard reloaded from a save (other slots) ranks the same.
  struct Kept {
    uint64_t first, second;  // the rank (lfu: uses, last_step; lru: last_step, uses)
    int64_t key;
    uint32_t slot;
  };
  std::vector<uint32_t> victims;
  std::vector<Kept> kept;  // ranked only under a cap: a pass of TTL / L2 alone is one scan, no allocation
  const bool ranked = rules.max_rows.has_value();
  if (ranked) kept.reserve(index.size());
  const size_t dim = static_cast<size_t>(config.dim), block_slots = store.block_slots();
  const size_t high_water = store.high_water();
  live_in_block->assign(NumBlocks(), 0);  // to find the blocks the pass empties whole
  // Walked block by block (the scan is a share of a pass step); a released block is all free and not read
  // (reading would map its pages again).
  std::vector<uint8_t> scratch;  // a tiered store's block, read whole
  for (size_t b = 0, nb = NumBlocks(); b < nb; ++b) {
    if (store.released(b)) continue;
    const uint8_t* r = store.BlockForRead(b, &scratch);
    const size_t end = std::min<size_t>(high_water, (b + 1) * block_slots);
    for (size_t slot = b * block_slots; slot < end; ++slot, r += record_bytes) {
      if (!RecordLayout::IsLive(RecordLayout::Flags(r))) continue;
      ++(*live_in_block)[b];
      const int64_t last = LastStep(r);
      if ((rules.ttl_steps && now_step - last > *rules.ttl_steps) || last < ttl_before) {
        victims.push_back(static_cast<uint32_t>(slot));
        ++counts->ttl;
        continue;
      }
      if (rules.min_l2 && Admitted(r)) {
        const float* v = reinterpret_cast<const float*>(r + RecordLayout::kValueOffset);
        double sq = 0;
        for (size_t j = 0; j < dim; ++j) sq += static_cast<double>(v[j]) * v[j];
        if (std::sqrt(sq) < *rules.min_l2) {
          victims.push_back(static_cast<uint32_t>(slot));
          ++counts->l2;
          continue;
        }
      }
      if (!ranked) continue;
      // last_step may be negative only through a bad load; LoadPolicyWords rejects that.
      const uint64_t uses = Uses(r), step = static_cast<uint64_t>(std::max<int64_t>(last, 0));
      if (rules.policy == EvictPolicy::kLru) {
        kept.push_back({step, uses, KeyAt(static_cast<uint32_t>(slot)), static_cast<uint32_t>(slot)});
      } else {
        kept.push_back({uses, step, KeyAt(static_cast<uint32_t>(slot)), static_cast<uint32_t>(slot)});
      }
    }
  }
  if (rules.max_rows && static_cast<int64_t>(kept.size()) > rules.cap_low_water()) {
    const size_t go = kept.size() - static_cast<size_t>(rules.cap_low_water());
    auto lower = [](const Kept& a, const Kept& b) {
      if (a.first != b.first) return a.first < b.first;
      if (a.second != b.second) return a.second < b.second;
      return a.key < b.key;
    };
    std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(go), kept.end(), lower);
    for (size_t i = 0; i < go; ++i) victims.push_back(kept[i].slot);
    counts->cap = go;
  }
  std::sort(victims.begin(), victims.end());
  return victims;
}

EmbeddingShard::Eviction EmbeddingShard::Impl::EvictPass(int64_t now_step, DeltaBatch* deltas, bool merge,
                                                         int64_t ttl_before) {
  EmbeddingShard::Eviction out;
  if (!policy_on) return out;
  EnsureAllBlocks();
  std::vector<uint32_t> live_in_block;
  const std::vector<uint32_t> victims = SelectVictims(now_step, ttl_before, &out.counts, &live_in_block);
  if (store.tiered()) store.Fetch(victims.data(), victims.size(), OtherBytes());  // their reads together
  out.keys.reserve(victims.size());
  // merge: a slot the same batch touched already keeps its one entry, its delta taken on to the zero record.
  std::unordered_map<uint32_t, size_t> entry;
  if (merge && deltas) {
    entry.reserve(deltas->slots.size());
    for (size_t i = 0; i < deltas->slots.size(); ++i) entry.emplace(deltas->slots[i], i);
  }
  for (const uint32_t slot : victims) {
    const int64_t key = KeyAt(slot);
    index.Erase(key, [this](uint32_t sl) { return KeyAt(sl); });
    const auto found = entry.find(slot);
    if (found != entry.end()) {
      uint8_t* x = deltas->xor_bytes.data() + found->second * record_bytes;
      const uint8_t* r = Record(slot);
      for (size_t j = 0; j < record_bytes; ++j) x[j] ^= r[j];  // old ^ mid ^ mid ^ zero
      FreeSlot(slot);
    } else {
      const size_t d = DeltaBegin(deltas, slot);
      FreeSlot(slot);
      DeltaEnd(deltas, d, slot);
    }
    out.keys.push_back(key);
    const size_t b = store.BlockOf(slot);
    if (--live_in_block[b] == 0) ReleaseBlock(b);
  }
  evicted_ttl.fetch_add(out.counts.ttl, std::memory_order_relaxed);
  evicted_l2.fetch_add(out.counts.l2, std::memory_order_relaxed);
  evicted_cap.fetch_add(out.counts.cap, std::memory_order_relaxed);
  if (!victims.empty()) generation.fetch_add(1, std::memory_order_release);
  return out;
}

size_t EmbeddingShard::Erase(const int64_t* keys, size_t n, DeltaSink* sink) {
  RequirePointer(keys, n, "Erase", "keys");
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.PrepareBlocks(keys, n, /*may_insert=*/false);
  SinkBatch batch(sink, s.record_bytes);
  DeltaBatch* deltas = batch.deltas();
  s.DeltaStart(deltas, 0);
  size_t erased = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = s.index.Erase(keys[i], [&s](uint32_t sl) { return s.KeyAt(sl); });
    if (slot == KeyIndex::kNone) continue;
    const size_t d = s.DeltaBegin(deltas, slot);
    s.FreeSlot(slot);
    s.DeltaEnd(deltas, d, slot);
    ++erased;
  }
  batch.Record();
  return erased;
}

EmbeddingShard::Eviction EmbeddingShard::Evict(int64_t now_step, DeltaSink* sink) {
  if (now_step < 1) {
    throw std::invalid_argument("Evict: now_step must be >= 1 (the 1-based global step), got " +
                                std::to_string(now_step));
  }
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  SinkBatch batch(sink, s.record_bytes);
  DeltaBatch* deltas = batch.deltas();
  s.DeltaStart(deltas, 0);
  Eviction out = s.EvictPass(now_step, deltas, /*merge=*/false);
  batch.Record();
  return out;
}

uint64_t EmbeddingShard::eviction_generation() const { return impl_->generation.load(std::memory_order_acquire); }

EmbeddingShard::PolicyStats EmbeddingShard::policy_stats() const {
  Impl& s = *impl_;
  PolicyStats out;
  out.counters.admitted = s.admitted.load(std::memory_order_relaxed);
  out.counters.not_admitted_lookups = s.not_admitted.load(std::memory_order_relaxed);
  out.counters.evicted_ttl = s.evicted_ttl.load(std::memory_order_relaxed);
  out.counters.evicted_l2 = s.evicted_l2.load(std::memory_order_relaxed);
  out.counters.evicted_cap = s.evicted_cap.load(std::memory_order_relaxed);
  ReadLock lock(s);
  if (!s.policy_on || s.Restoring()) {  // under restore the words are not all here: count records as rows
    out.rows = s.index.size();
    return out;
  }
  for (size_t slot = 0; slot < s.store.high_water(); ++slot) {
    s.ScanAt(slot);
    const uint8_t* r = s.Record(slot);
    if (!RecordLayout::IsLive(RecordLayout::Flags(r))) continue;
    if (s.Admitted(r)) {
      ++out.rows;
    } else {
      ++out.pending;
    }
  }
  return out;
}

void EmbeddingShard::LoadPolicyWords(const int64_t* keys, const uint32_t* uses, const int64_t* last_step, size_t n,
                                     DeltaSink* sink) {
  RequirePointer(keys, n, "LoadPolicyWords", "keys");
  RequirePointer(uses, n, "LoadPolicyWords", "uses");
  RequirePointer(last_step, n, "LoadPolicyWords", "last_step");
  RequireBatch(n, "LoadPolicyWords");
  Impl& s = *impl_;
  if (!s.policy_on && n != 0) {
    throw std::invalid_argument("LoadPolicyWords: the table has no row rules (row_policy), so no policy words");
  }
  for (size_t i = 0; i < n; ++i) {
    if (last_step[i] < 0) {
      throw std::invalid_argument("LoadPolicyWords: last_step[" + Str(i) + "] is " + std::to_string(last_step[i]) +
                                  ", must be >= 0");
    }
  }
  RequireUniqueKeys(keys, n, "LoadPolicyWords");
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.PrepareBlocks(keys, n, /*may_insert=*/false);
  std::vector<uint32_t> slots(n);
  for (size_t i = 0; i < n; ++i) {
    slots[i] = s.Lookup(keys[i]);
    if (slots[i] == KeyIndex::kNone || !s.Admitted(s.Record(slots[i]))) {
      throw std::invalid_argument("LoadPolicyWords: key " + std::to_string(keys[i]) +
                                  " has no row (Load the rows first); nothing was changed");
    }
  }
  SinkBatch batch(sink, s.record_bytes);
  DeltaBatch* deltas = batch.deltas();
  s.DeltaStart(deltas, n);
  for (size_t i = 0; i < n; ++i) {
    const size_t d = s.DeltaBegin(deltas, slots[i]);
    uint8_t* r = s.Record(slots[i]);
    s.SetWord<uint32_t>(r, RecordLayout::kUsesOffset, uses[i]);
    s.SetWord<int64_t>(r, RecordLayout::kLastStepOffset, last_step[i]);
    s.Tick(slots[i]);
    s.MarkDirty(slots[i]);
    s.DeltaEnd(deltas, d, slots[i]);
  }
  batch.Record();
}

EmbeddingShard::Rows EmbeddingShard::ExportPending() const {
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);  // exclusive: under restore blocks are faulted in
  s.EnsureAllBlocks();
  Rows rows;
  if (!s.policy_on) return rows;
  for (size_t slot = 0; slot < s.store.high_water(); ++slot) {
    s.ScanAt(slot);
    const uint8_t* r = s.Record(slot);
    if (!RecordLayout::IsLive(RecordLayout::Flags(r)) || s.Admitted(r)) continue;
    int64_t key;
    std::memcpy(&key, r, sizeof(key));
    rows.keys.push_back(key);
    rows.uses.push_back(s.Uses(r));
    rows.last_step.push_back(s.LastStep(r));
  }
  return rows;
}

void EmbeddingShard::LoadPending(const int64_t* keys, const uint32_t* uses, const int64_t* last_step, size_t n,
                                 DeltaSink* sink) {
  RequirePointer(keys, n, "LoadPending", "keys");
  RequirePointer(uses, n, "LoadPending", "uses");
  RequirePointer(last_step, n, "LoadPending", "last_step");
  RequireBatch(n, "LoadPending");
  Impl& s = *impl_;
  if (n != 0 && s.min_count <= 1) {
    throw std::invalid_argument(
        "LoadPending: the table has no admission (row_policy.admit_min_count <= 1), so no "
        "pending ids");
  }
  if (n != 0 && s.sketch) {
    throw std::invalid_argument(
        "LoadPending: the table counts with a sketch (row_policy.admit_counter), so no "
        "pending ids; load its cells with LoadSketch");
  }
  for (size_t i = 0; i < n; ++i) {
    if (uses[i] < 1 || static_cast<int64_t>(uses[i]) >= s.min_count) {
      throw std::invalid_argument("LoadPending: uses[" + Str(i) + "] is " + std::to_string(uses[i]) +
                                  ": a pending id has counted 1 to admit_min_count - 1 = " +
                                  std::to_string(s.min_count - 1) + " occurrences; nothing was changed");
    }
    if (last_step[i] < 0) {
      throw std::invalid_argument("LoadPending: last_step[" + Str(i) + "] is " + std::to_string(last_step[i]) +
                                  ", must be >= 0; nothing was changed");
    }
  }
  RequireUniqueKeys(keys, n, "LoadPending");
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  for (size_t i = 0; i < n; ++i) {
    if (s.Lookup(keys[i]) != KeyIndex::kNone) {
      throw std::invalid_argument("LoadPending: key " + std::to_string(keys[i]) +
                                  " already has a record; nothing was changed");
    }
  }
  s.PrepareBlocks(keys, n, /*may_insert=*/true);
  SinkBatch batch(sink, s.record_bytes);
  DeltaBatch* deltas = batch.deltas();
  s.DeltaStart(deltas, n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = s.AllocateSlot();
    const size_t d = s.DeltaBegin(deltas, slot);
    s.WritePending(slot, keys[i], uses[i], last_step[i]);
    s.DeltaEnd(deltas, d, slot);
  }
  batch.Record();
}

}  // namespace xdl_ec
