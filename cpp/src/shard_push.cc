// EmbeddingShard::Push in its steps: the arguments checked and the gradients summed per unique key outside the
// lock (dedup), then under it each key's record found or inserted (admission, with row rules), the optimizer
// applied in chunks of rows, each touched slot's delta emitted, and the sketch's aging and an eviction pass
// at their step cadence.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "embedding_shard_impl.h"

namespace xdl_ec {
namespace {

using Impl = EmbeddingShard::Impl;

void RequirePushable(const int64_t* keys, const float* grads, size_t n, int64_t step, const uint32_t* repeats,
                     int64_t ttl_before) {
  RequirePointer(keys, n, "Push", "keys");
  RequirePointer(grads, n, "Push", "grads");
  RequireBatch(n, "Push");
  if (step < 1)
    throw std::invalid_argument("Push: step must be >= 1 (the 1-based global step), got " + std::to_string(step));
  if (ttl_before < 0 || ttl_before > step)
    throw std::invalid_argument("Push: ttl_before must be in [0, step = " + std::to_string(step) +
                                "] (records last updated before it go at the pass), got " + std::to_string(ttl_before) +
                                "; nothing was applied");
  if (!repeats) return;
  for (size_t i = 0; i < n; ++i) {
    if (repeats[i] < 1 || repeats[i] > EmbeddingShard::kMaxRepeats)
      throw std::invalid_argument("Push: repeats[" + Str(i) + "] is " + std::to_string(repeats[i]) +
                                  ": each must be in [1, " + std::to_string(EmbeddingShard::kMaxRepeats) +
                                  "] (how many gradients grads[i] sums); nothing was applied");
  }
}

// A push's gradients made ready outside the lock, so nothing of the shard is touched before the whole batch
// is known to be valid.
struct SummedGradients {
  std::vector<int64_t> unique_keys;  // in order of first appearance
  std::unique_ptr<float[]> sums;     // per unique key, unique_keys.size() * dim
  std::vector<uint32_t> counts;      // with repeats: optimizer steps per unique key; else empty
};

// Fills unique_keys in order of first appearance; returns each key's unique index.
std::vector<uint32_t> Deduplicate(const int64_t* keys, size_t n, std::vector<int64_t>* unique_keys) {
  std::vector<uint32_t> position(n);
  bool ascending = true;  // a worker's batch keys come sorted and unique: nothing to find
  for (size_t i = 1; i < n && ascending; ++i) ascending = keys[i] > keys[i - 1];
  if (ascending) {
    unique_keys->assign(keys, keys + n);
    std::iota(position.begin(), position.end(), 0u);
    return position;
  }
  BatchDedup dedup(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t u = dedup.FindOrAdd(unique_keys->data(), keys[i], static_cast<int64_t>(unique_keys->size()));
    if (static_cast<size_t>(u) == unique_keys->size()) unique_keys->push_back(keys[i]);
    position[i] = static_cast<uint32_t>(u);
  }
  return position;
}

// Sums duplicates in order of appearance into sums, from 0 as TF's unsorted_segment_sum does, checking
// finiteness in the same pass over the gradients: returns whether any is NaN or infinite.
bool SumDuplicates(const float* grads, size_t n, size_t dim, const std::vector<uint32_t>& position, float* sums) {
  uint32_t non_finite = 0;
  uint32_t next_new = 0;  // positions of first appearances come in increasing order
  for (size_t i = 0; i < n; ++i) {
    float* sum = sums + static_cast<size_t>(position[i]) * dim;
    const float* g = grads + i * dim;
    if (position[i] == next_new) {
      ++next_new;
      for (size_t j = 0; j < dim; ++j) sum[j] = 0.0f + g[j];  // 0 + g: -0 becomes +0, as in TF
    } else {
      for (size_t j = 0; j < dim; ++j) sum[j] += g[j];
    }
    for (size_t j = 0; j < dim; ++j) {
      uint32_t bits;
      std::memcpy(&bits, g + j, sizeof(bits));
      non_finite |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
  }
  return non_finite != 0;
}

// With repeats: each unique key's optimizer steps, c = the sum of its repeats, its sum made the mean of them.
void CountRepeats(const uint32_t* repeats, size_t n, size_t dim, const std::vector<uint32_t>& position,
                  SummedGradients* g) {
  std::vector<uint32_t>& counts = g->counts;
  counts.assign(g->unique_keys.size(), 0);
  for (size_t i = 0; i < n; ++i) counts[position[i]] += repeats[i];
  for (size_t u = 0; u < counts.size(); ++u) {
    if (counts[u] > EmbeddingShard::kMaxRepeats)
      throw std::invalid_argument("Push: key " + std::to_string(g->unique_keys[u]) + " repeats " +
                                  std::to_string(counts[u]) + " times in all, more than " +
                                  std::to_string(EmbeddingShard::kMaxRepeats) + "; nothing was applied");
    if (counts[u] > 1) {  // c steps of the mean: the sum scaled once, before any step
      const float inv = 1.0f / static_cast<float>(counts[u]);
      float* sum = g->sums.get() + u * dim;
      for (size_t j = 0; j < dim; ++j) sum[j] *= inv;
    }
  }
}

void RequireFinite(const float* grads, size_t n, size_t dim) {
  for (size_t i = 0; i < n * dim; ++i) {
    if (!std::isfinite(grads[i])) {
      throw std::invalid_argument("Push: grads[" + Str(i / dim) + ", " + Str(i % dim) + "] is " +
                                  (std::isnan(grads[i]) ? "NaN" : "infinite") +
                                  ": gradients must be finite; nothing was applied");
    }
  }
}

SummedGradients SumGradients(const int64_t* keys, const float* grads, size_t n, size_t dim, const uint32_t* repeats) {
  SummedGradients g;
  g.unique_keys.reserve(n);
  const std::vector<uint32_t> position = Deduplicate(keys, n, &g.unique_keys);
  g.sums.reset(new float[g.unique_keys.size() * dim]);
  const bool non_finite = SumDuplicates(grads, n, dim, position, g.sums.get());
  if (repeats) CountRepeats(repeats, n, dim, position, &g);
  if (non_finite) RequireFinite(grads, n, dim);
  return g;
}

// Push's steps split over a pool's parts (a table without row rules, one step per key, no block under
// restore): the lookups over the parts; the inserts and the delta entries here, in order of first
// appearance as the one-thread pass makes them; each part then steps its rows and closes their
// entries (rows and entries are disjoint); the dirty marks last, here.
// A tiered shard's fetch step (`fetched`, not empty) gave the keys' slots and records: they are not resolved
// again, and the rows are reached through its records (an inserted key's record is looked up once).
void PushSplit(Impl& s, const int64_t* unique_keys, const float* sums, size_t m, int64_t step, DeltaBatch* deltas,
               TaskPool& pool, size_t parts, FetchedRows* fetched) {
  std::vector<uint32_t> resolved;
  std::vector<size_t> entry(deltas ? m : 0);
  std::vector<uint8_t> inserted(m, 0);
  uint8_t** records = fetched->empty() ? nullptr : fetched->records.data();
  if (records) {
    resolved.swap(fetched->slots);
  } else {
    resolved.resize(m);
    s.ResolveParts(unique_keys, m, pool, parts, resolved.data());
  }
  uint32_t* slots = resolved.data();
  for (size_t u = 0; u < m; ++u) {
    if (slots[u] == KeyIndex::kNone) {
      slots[u] = s.AllocateSlot();
      if (deltas) entry[u] = s.DeltaBegin(deltas, slots[u]);  // from the all-zero free record
      s.WriteNew(slots[u], unique_keys[u], nullptr, nullptr);
      if (records) records[u] = s.Record(slots[u]);
      inserted[u] = 1;
    } else if (deltas) {
      entry[u] = s.DeltaReserve(deltas, slots[u]);
    }
  }
  const size_t dim = static_cast<size_t>(s.config.dim);
  pool.ForEachPart(parts, [&](size_t p) {
    const size_t lo = TaskPool::PartBegin(m, parts, p), hi = TaskPool::PartBegin(m, parts, p + 1);
    constexpr size_t kChunk = 16, kAhead = 8;
    float* values[kChunk];
    float* states[kChunk];
    uint8_t* recs[kChunk];
    for (size_t first = lo; first < hi; first += kChunk) {
      const size_t rows = std::min(kChunk, hi - first);
      for (size_t r = 0; r < rows; ++r) {
        const size_t u = first + r;
        if (u + kAhead < hi) {
          if (records) {
            for (size_t o = 0; o < s.record_bytes; o += 64) __builtin_prefetch(records[u + kAhead] + o);
            __builtin_prefetch(records[u + kAhead] + s.record_bytes - 1);
          } else {
            s.PrefetchRecord(slots[u + kAhead], 0, s.record_bytes);
          }
        }
        uint8_t* rec = records ? records[u] : s.Record(slots[u]);
        if (deltas && !inserted[u]) s.DeltaCopy(deltas, entry[u], rec);
        recs[r] = rec;
        values[r] = s.Value(rec);
        states[r] = s.State(rec);
      }
      s.optimizer->ApplyRows(values, states, sums + first * dim, rows, s.config.dim, step);
      for (size_t r = 0; r < rows; ++r) {
        RecordLayout::SetFlags(recs[r], RecordLayout::Ticked(RecordLayout::Flags(recs[r])));  // Tick
        if (deltas) s.DeltaEnd(deltas, entry[first + r], recs[r]);
      }
    }
  });
  if (s.track_dirty) {
    for (size_t u = 0; u < m; ++u) s.MarkDirty(slots[u]);
  }
}

// Push's one pass on this thread: each unique key's record (prefetched whole by Resolve) is found or inserted,
// in order of first appearance, then stepped in chunks of kChunk rows while still in cache; a chunk lets
// step-wide constants (Adam's bias correction) be computed once per chunk, not per row. With row rules
// (row_policy.h) each key's occurrence is counted first, and a key without a row after it is not stepped.
class PushPass {
 public:
  PushPass(Impl& s, const SummedGradients& g, int64_t step, DeltaBatch* deltas)
      : s_(s),
        g_(g),
        step_(step),
        deltas_(deltas),
        dim_(static_cast<size_t>(s.config.dim)),
        round_grads_(g.counts.empty() ? nullptr : new float[kChunk * dim_]),
        chunk_grads_(s.policy_on ? new float[kChunk * dim_] : nullptr) {}

  // Returns the number of keys whose gradient the rules dropped.
  uint64_t Run() {
    constexpr size_t kCellsAhead = 8;
    const size_t m = g_.unique_keys.size();
    s_.Resolve(g_.unique_keys.data(), m, 0, s_.record_bytes, [&](size_t u, uint32_t slot) {
      if (s_.sketch && u + kCellsAhead < m) s_.PrefetchCells(g_.unique_keys[u + kCellsAhead]);
      if (s_.policy_on) {
        VisitRuled(u, slot);
      } else {
        Visit(u, slot);
      }
      return true;
    });
    if (rows_) StepChunk();
    return dropped_;
  }

 private:
  static constexpr size_t kChunk = 16;

  // A table without row rules: every key is stepped, a missing one inserted first.
  void Visit(size_t u, uint32_t slot) {
    if (slot == KeyIndex::kNone) {
      slot = s_.AllocateSlot();
      const size_t d = s_.DeltaBegin(deltas_, slot);  // from the all-zero free record
      s_.WriteNew(slot, g_.unique_keys[u], nullptr, nullptr);
      Add(u, slot, d, /*copy=*/false, 0);
    } else {
      Add(u, slot, deltas_ ? s_.DeltaReserve(deltas_, slot) : 0, /*copy=*/true, 0);
    }
  }

  // Row rules: the occurrence counted; a key that has (or now gets) a row is stepped, else dropped.
  void VisitRuled(size_t u, uint32_t slot) {
    const uint32_t c = g_.counts.empty() ? 1u : g_.counts[u];
    size_t d = 0;
    if (slot == KeyIndex::kNone) {
      if (!InsertRuled(u, c, &slot, &d)) {
        ++dropped_;
        return;
      }
      Add(u, slot, d, /*copy=*/false, 0);
    } else if (s_.Admitted(s_.Record(slot))) {
      // A row (the common case): its old record is copied and its use counted in the chunk, as an
      // unruled row's copy is (copying at once stalls on the record's prefetch).
      if (deltas_) d = s_.DeltaReserve(deltas_, slot);
      Add(u, slot, d, /*copy=*/true, c);
    } else if (CountPending(u, c, slot, &d)) {
      Add(u, slot, d, /*copy=*/false, 0);
    } else {
      ++dropped_;
    }
  }

  // A missing key under row rules gets a record (its delta entry opened in *d) when admitted: with the sketch
  // counter once its estimate reaches min_count (else only its cells count it, and it costs no record), else
  // at once or as a pending id counting toward admission. False: no row to step.
  bool InsertRuled(size_t u, uint32_t c, uint32_t* slot, size_t* d) {
    const int64_t key = g_.unique_keys[u];
    if (s_.sketch) {
      size_t cells[Impl::kMaxDepth];
      s_.CellsOf(key, cells);
      const uint32_t estimate = std::min<uint32_t>(s_.Estimate(cells) + c, RowPolicyConfig::kSketchMaxCount);
      if (estimate < s_.min_count || s_.Full()) {
        s_.RaiseCells(deltas_, cells, estimate);
        return false;
      }
      *slot = s_.AllocateSlot();
      *d = s_.DeltaBegin(deltas_, *slot);
      s_.WriteNew(*slot, key, nullptr, nullptr);
      s_.admitted.fetch_add(1, std::memory_order_relaxed);
      s_.CountUse(s_.Record(*slot), estimate, step_);
      return true;
    }
    if (s_.Full()) return false;
    *slot = s_.AllocateSlot();
    *d = s_.DeltaBegin(deltas_, *slot);
    if (s_.min_count <= 1) {
      s_.WriteNew(*slot, key, nullptr, nullptr);
      s_.admitted.fetch_add(1, std::memory_order_relaxed);
      s_.CountUse(s_.Record(*slot), c, step_);
      return true;
    }
    s_.WritePending(*slot, key, c, step_);
    if (s_.Uses(s_.Record(*slot)) >= s_.min_count) {
      s_.Admit(*slot, key);
      return true;
    }
    s_.DeltaEnd(deltas_, *d, *slot);
    return false;
  }

  // A pending id counts the occurrence (its delta entry opened in *d); true when that admits it.
  bool CountPending(size_t u, uint32_t c, uint32_t slot, size_t* d) {
    uint8_t* rec = s_.Record(slot);
    *d = s_.DeltaBegin(deltas_, slot);
    s_.CountUse(rec, c, step_);
    if (s_.Uses(rec) >= s_.min_count) {
      s_.Admit(slot, g_.unique_keys[u]);
      return true;
    }
    s_.Tick(slot);  // its count changed: a new version
    s_.DeltaEnd(deltas_, *d, slot);
    return false;
  }

  // Adds the row of unique key u at `slot` to the chunk: its delta entry d, whether its old record is still
  // to be copied into it, and (row rules) the occurrences to count once it is.
  void Add(size_t u, uint32_t slot, size_t d, bool copy, uint32_t uses_later) {
    uint8_t* rec = s_.Record(slot);
    chunk_deltas_[rows_] = d;
    chunk_copy_[rows_] = copy;
    chunk_uses_[rows_] = uses_later;
    chunk_u_[rows_] = u;
    chunk_slots_[rows_] = slot;
    values_[rows_] = s_.Value(rec);
    states_[rows_] = s_.State(rec);
    if (++rows_ == kChunk) StepChunk();
  }

  void StepChunk() {
    if (deltas_) {
      for (size_t r = 0; r < rows_; ++r)
        if (chunk_copy_[r]) s_.DeltaCopy(deltas_, chunk_deltas_[r], chunk_slots_[r]);
    }
    const float* sums = g_.sums.get();
    const float* grads_of_chunk = sums + first_ * dim_;
    if (s_.policy_on) {
      if (chunk_u_[rows_ - 1] - chunk_u_[0] == rows_ - 1) {  // no key skipped: the sums are in place
        grads_of_chunk = sums + chunk_u_[0] * dim_;
      } else {  // a chunk's rows need not be consecutive unique keys: their gradients are gathered
        for (size_t r = 0; r < rows_; ++r) {
          std::memcpy(chunk_grads_.get() + r * dim_, sums + chunk_u_[r] * dim_, dim_ * sizeof(float));
        }
        grads_of_chunk = chunk_grads_.get();
      }
    }
    s_.optimizer->ApplyRows(values_, states_, grads_of_chunk, rows_, s_.config.dim, step_);
    if (s_.policy_on) {  // the rows' uses are counted here, after their old records were copied
      for (size_t r = 0; r < rows_; ++r) {
        uint8_t* rec = reinterpret_cast<uint8_t*>(values_[r]) - RecordLayout::kValueOffset;
        RecordLayout::SetFlags(rec, RecordLayout::Ticked(RecordLayout::Flags(rec)));
        if (chunk_uses_[r]) s_.CountUse(rec, chunk_uses_[r], step_);
      }
    } else {
      for (size_t r = 0; r < rows_; ++r) s_.Tick(chunk_slots_[r]);
    }
    if (!g_.counts.empty()) StepRepeats();
    if (s_.track_dirty) {
      for (size_t r = 0; r < rows_; ++r) s_.MarkDirty(chunk_slots_[r]);
    }
    if (deltas_) {
      for (size_t r = 0; r < rows_; ++r) s_.DeltaEnd(deltas_, chunk_deltas_[r], chunk_slots_[r]);
    }
    first_ += rows_;
    rows_ = 0;
  }

  // The further steps of the chunk's rows standing for several gradients, one round at a time.
  void StepRepeats() {
    uint32_t most = 1;
    for (size_t r = 0; r < rows_; ++r) most = std::max(most, g_.counts[chunk_u_[r]]);
    for (uint32_t round = 2; round <= most; ++round) {
      size_t m2 = 0;
      for (size_t r = 0; r < rows_; ++r) {
        if (g_.counts[chunk_u_[r]] < round) continue;
        round_values_[m2] = values_[r];
        round_states_[m2] = states_[r];
        std::memcpy(round_grads_.get() + m2 * dim_, g_.sums.get() + chunk_u_[r] * dim_, dim_ * sizeof(float));
        s_.Tick(chunk_slots_[r]);
        ++m2;
      }
      s_.optimizer->ApplyRows(round_values_, round_states_, round_grads_.get(), m2, s_.config.dim, step_);
    }
  }

  Impl& s_;
  const SummedGradients& g_;
  const int64_t step_;
  DeltaBatch* const deltas_;
  const size_t dim_;
  float* values_[kChunk];
  float* states_[kChunk];
  uint32_t chunk_slots_[kChunk];
  size_t chunk_deltas_[kChunk];
  bool chunk_copy_[kChunk];      // the old record is still to be copied into its delta
  size_t chunk_u_[kChunk];       // the unique index of each row (consecutive unless rules skip keys)
  uint32_t chunk_uses_[kChunk];  // row rules: occurrences still to count once the old record is copied (0: none)
  float* round_values_[kChunk];  // with repeats: the rows of a chunk that take one more step
  float* round_states_[kChunk];
  std::unique_ptr<float[]> round_grads_;
  std::unique_ptr<float[]> chunk_grads_;  // row rules: a chunk's gathered gradients
  size_t rows_ = 0, first_ = 0;           // rows pending in the chunk, and the unique index of its first row
  uint64_t dropped_ = 0;                  // keys whose gradient the rules dropped
};

}  // namespace

void EmbeddingShard::Push(const int64_t* keys, const float* grads, size_t n, int64_t step, DeltaSink* sink,
                          const uint32_t* repeats, int64_t ttl_before) {
  RequirePushable(keys, grads, n, step, repeats, ttl_before);
  Impl& s = *impl_;
  const SummedGradients g = SumGradients(keys, grads, n, static_cast<size_t>(s.config.dim), repeats);
  const size_t m = g.unique_keys.size();

  std::unique_lock<std::shared_mutex> lock(s.mutex);
  SinkBatch batch(sink, s.record_bytes);
  DeltaBatch* deltas = batch.deltas();
  FetchedRows fetched;  // a tiered shard's slots and records of the unique keys
  s.PrepareBlocks(g.unique_keys.data(), m, /*may_insert=*/true, &fetched, /*for_write=*/true);
  const int64_t every = s.config.row_policy.evict_every_steps;
  const bool pass = s.policy_on && every > 0 && step % every == 0;
  if (pass) s.EnsureAllBlocks();  // the pass reads every block: fault them in before any byte changes
  s.BeginSketch();
  s.DeltaStart(deltas, m);
  TaskPool& pool = TaskPool::Shared();
  const size_t parts = pool.PartsFor(m, s.config.split_min_keys);
  if (parts > 1 && !s.policy_on && g.counts.empty() && !s.Restoring()) {
    PushSplit(s, g.unique_keys.data(), g.sums.get(), m, step, deltas, pool, parts, &fetched);
    batch.Record();
    return;
  }
  const uint64_t dropped = PushPass(s, g, step, deltas).Run();
  if (dropped) s.not_admitted.fetch_add(dropped, std::memory_order_relaxed);
  if (s.sketch) {  // the sketch's aging at its step cadence, after this push's counting (row_policy.h)
    const int64_t decay = s.config.row_policy.sketch_decay_every_steps;
    if (decay > 0 && step % decay == 0) s.HalveCells(deltas);
    s.FinishSketch(deltas);
  }
  // A pass at the step boundary (row_policy.h), in this push's deltas: every path a push takes to parity
  // (and a replayed push) carries it. Slots it frees are reused from the next call on.
  if (pass) s.EvictPass(step, deltas, /*merge=*/true, ttl_before);
  batch.Record();
}

}  // namespace xdl_ec
