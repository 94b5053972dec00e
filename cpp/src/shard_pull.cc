// EmbeddingShard's reads of rows: Pull (inserting missing keys), PullStale (leaving out rows a worker's cache
// holds fresh enough), Find and Clocks (inserting nothing). A pull whose keys all exist runs under the shared
// lock and changes nothing; one with a key to insert (or blocks under restore) is redone under the write lock.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "embedding_shard_impl.h"

namespace xdl_ec {
namespace {

using Impl = EmbeddingShard::Impl;

// Pull's shared-lock pass over `parts` of the pool: every row copied, or false when a key is missing and the
// table inserts it (the batch then goes to the write lock). Keys without a row (row_policy.h) read zeros.
bool PullShared(Impl& s, const int64_t* keys, size_t n, float* out, TaskPool& pool, size_t parts) {
  const size_t dim = static_cast<size_t>(s.config.dim);
  const bool inserts = s.PullInserts();
  std::atomic<bool> absent{false};     // a key to insert: the batch goes to the exclusive path
  std::atomic<uint64_t> zeros_all{0};  // keys without a row (row_policy.h)
  pool.ForEachPart(parts, [&](size_t p) {
    const size_t lo = TaskPool::PartBegin(n, parts, p), hi = TaskPool::PartBegin(n, parts, p + 1);
    uint64_t zeros = 0;
    s.Resolve(
        keys + lo, hi - lo, 0, s.read_bytes,
        [&](size_t j, uint32_t slot) {
          const size_t i = lo + j;
          if (slot == KeyIndex::kNone) {
            if (inserts) {
              absent.store(true, std::memory_order_relaxed);
              return false;
            }
            std::memset(out + i * dim, 0, sizeof(float) * dim);
            ++zeros;
            return true;
          }
          if (parts > 1 && absent.load(std::memory_order_relaxed)) return false;  // another part's key
          if (s.admission && !s.Admitted(s.Record(slot))) ++zeros;                // pending: its value bytes are zero
          s.CopyValue(slot, out + i * dim);
          return true;
        },
        s.admission);
    if (zeros) zeros_all.fetch_add(zeros, std::memory_order_relaxed);
  });
  if (absent.load(std::memory_order_relaxed)) return false;
  const uint64_t zeros = zeros_all.load(std::memory_order_relaxed);
  if (zeros) s.not_admitted.fetch_add(zeros, std::memory_order_relaxed);
  return true;
}

// Pull's pass over a tiered shard's fetched rows (FetchKeys), over `parts` of the pool: the fetch step resolved
// the keys and holds their records (and, without row rules, copied the hits out), so this only copies; false
// (nothing counted) when a key is missing and the table inserts it.
bool PullFetched(Impl& s, const FetchedRows& fetched, size_t n, float* out, TaskPool& pool, size_t parts) {
  const size_t dim = static_cast<size_t>(s.config.dim);
  const bool inserts = s.PullInserts();
  if (inserts && std::find(fetched.slots.begin(), fetched.slots.end(), KeyIndex::kNone) != fetched.slots.end()) {
    return false;
  }
  if (fetched.hits_copied) {  // a table without row rules (every key present): the rows read in are left
    for (const uint32_t i : fetched.read_in) {
      std::memcpy(out + i * dim, fetched.records[i] + RecordLayout::kValueOffset, sizeof(float) * dim);
    }
    return true;
  }
  std::atomic<uint64_t> zeros_all{0};  // keys without a row (row_policy.h)
  pool.ForEachPart(parts, [&](size_t p) {
    const size_t lo = TaskPool::PartBegin(n, parts, p), hi = TaskPool::PartBegin(n, parts, p + 1);
    constexpr size_t kAhead = 8;
    uint64_t zeros = 0;
    for (size_t i = lo; i < hi; ++i) {
      if (i + kAhead < hi && fetched.records[i + kAhead]) {
        __builtin_prefetch(fetched.records[i + kAhead] + RecordLayout::kValueOffset);
        __builtin_prefetch(fetched.records[i + kAhead] + s.value_end - 1);
      }
      const uint8_t* r = fetched.records[i];
      if (!r) {
        std::memset(out + i * dim, 0, sizeof(float) * dim);
        ++zeros;
        continue;
      }
      if (s.admission && !s.Admitted(r)) ++zeros;  // pending: its value bytes are zero
      std::memcpy(out + i * dim, r + RecordLayout::kValueOffset, sizeof(float) * dim);
    }
    if (zeros) zeros_all.fetch_add(zeros, std::memory_order_relaxed);
  });
  const uint64_t zeros = zeros_all.load(std::memory_order_relaxed);
  if (zeros) s.not_admitted.fetch_add(zeros, std::memory_order_relaxed);
  return true;
}

// Pull's exclusive pass split over the pool: the lookups over the parts, the inserts here in order of first
// appearance (what ResolveInserting does), then the new rows and the copies over the parts. Returns the keys that
// read zeros.
uint64_t PullSplit(Impl& s, const int64_t* keys, size_t n, float* out, DeltaBatch* deltas, TaskPool& pool,
                   size_t parts) {
  const size_t dim = static_cast<size_t>(s.config.dim);
  std::vector<uint32_t> slots(n);
  s.ResolveParts(keys, n, pool, parts, slots.data());
  std::vector<size_t> fresh, fresh_entry;  // positions whose new row is still to write, their delta entries
  for (size_t i = 0; i < n; ++i) {
    if (slots[i] != KeyIndex::kNone) continue;
    uint32_t slot = s.Lookup(keys[i]);  // a repeat of a key inserted a few lines up
    if (slot == KeyIndex::kNone && s.PullInserts()) {
      slot = s.AllocateSlot();
      fresh_entry.push_back(s.DeltaBegin(deltas, slot));
      s.WriteNewKey(slot, keys[i]);
      fresh.push_back(i);
      if (s.policy_on) s.admitted.fetch_add(1, std::memory_order_relaxed);
    }
    slots[i] = slot;
  }
  const size_t fresh_parts = pool.PartsFor(fresh.size(), 2 * TaskPool::kPartsPerThread);
  pool.ForEachPart(fresh_parts, [&](size_t p) {
    const size_t lo = TaskPool::PartBegin(fresh.size(), fresh_parts, p);
    const size_t hi = TaskPool::PartBegin(fresh.size(), fresh_parts, p + 1);
    for (size_t f = lo; f < hi; ++f) {
      const size_t i = fresh[f];
      s.WriteNewRow(slots[i], keys[i], nullptr, nullptr);
      s.DeltaEnd(deltas, fresh_entry[f], slots[i]);
    }
  });
  std::atomic<uint64_t> zeros_all{0};
  pool.ForEachPart(parts, [&](size_t p) {
    const size_t lo = TaskPool::PartBegin(n, parts, p), hi = TaskPool::PartBegin(n, parts, p + 1);
    constexpr size_t kAhead = 8;
    uint64_t part_zeros = 0;
    for (size_t i = lo; i < hi; ++i) {
      if (i + kAhead < hi && slots[i + kAhead] != KeyIndex::kNone) s.PrefetchRecord(slots[i + kAhead], 0, s.read_bytes);
      if (slots[i] == KeyIndex::kNone) {
        std::memset(out + i * dim, 0, sizeof(float) * dim);
        ++part_zeros;
        continue;
      }
      if (s.admission && !s.Admitted(s.Record(slots[i]))) ++part_zeros;
      s.CopyValue(slots[i], out + i * dim);
    }
    if (part_zeros) zeros_all.fetch_add(part_zeros, std::memory_order_relaxed);
  });
  return zeros_all.load(std::memory_order_relaxed);
}

// The exclusive pass of Pull and PullStale on this thread: each key resolved, a missing one inserted first when
// the table inserts it (else answered by absent(i)), then answered by present(i, slot, inserted). Returns the
// keys without a row (absent ones and pending ids), which read zeros.
template <class Present, class Absent>
uint64_t ResolveInserting(Impl& s, const int64_t* keys, size_t n, DeltaBatch* deltas, Present present, Absent absent) {
  uint64_t zeros = 0;
  s.Resolve(
      keys, n, 0, s.read_bytes,
      [&](size_t i, uint32_t slot) {
        const bool inserted = slot == KeyIndex::kNone;
        if (inserted) {
          if (!s.PullInserts()) {
            absent(i);
            ++zeros;
            return true;
          }
          slot = s.Insert(keys[i], deltas);
          if (s.policy_on) s.admitted.fetch_add(1, std::memory_order_relaxed);
        } else if (s.admission && !s.Admitted(s.Record(slot))) {
          ++zeros;
        }
        present(i, slot, inserted);
        return true;
      },
      s.admission);
  return zeros;
}

// PullStale's answers, key by key: each key's clock, and its row (written compactly, in the order of the keys)
// when the worker's copy is missing or too old.
class StaleAnswers {
 public:
  StaleAnswers(const Impl& s, const int32_t* known, uint32_t staleness, float* rows, int32_t* clocks, uint8_t* sent)
      : s_(s),
        dim_(static_cast<size_t>(s.config.dim)),
        known_(known),
        staleness_(staleness),
        rows_(rows),
        clocks_(clocks),
        sent_(sent) {}

  // Key i at `slot` (present); an inserted key is always sent.
  void Row(size_t i, uint32_t slot, bool inserted) {
    const uint8_t* r = s_.Record(slot);
    const uint32_t clock = RecordLayout::Clock(r);
    clocks_[i] = static_cast<int32_t>(clock);
    const bool send =
        inserted || known_[i] < 0 || RecordLayout::ClockBehind(clock, static_cast<uint32_t>(known_[i])) > staleness_;
    sent_[i] = send;
    if (send) std::memcpy(rows_ + m_++ * dim_, r + RecordLayout::kValueOffset, sizeof(float) * dim_);
  }
  // Key i that gets no record (row_policy.h): zeros, sent, clock -1 (nothing to cache against).
  void Absent(size_t i) {
    clocks_[i] = -1;
    sent_[i] = 1;
    std::memset(rows_ + m_++ * dim_, 0, sizeof(float) * dim_);
  }
  size_t rows_sent() const { return m_; }
  void Restart() { m_ = 0; }

 private:
  const Impl& s_;
  const size_t dim_;
  const int32_t* known_;
  const uint32_t staleness_;
  float* rows_;
  int32_t* clocks_;
  uint8_t* sent_;
  size_t m_ = 0;
};

// PullStale's shared-lock pass: every key answered, or false when a key is missing and the table inserts it.
bool PullStaleShared(Impl& s, const int64_t* keys, size_t n, StaleAnswers* answers) {
  const bool inserts = s.PullInserts();
  uint64_t zeros = 0;
  const bool all = s.Resolve(
      keys, n, 0, s.read_bytes,
      [&](size_t i, uint32_t slot) {
        if (slot == KeyIndex::kNone) {
          if (inserts) return false;
          answers->Absent(i);
          ++zeros;
          return true;
        }
        if (s.admission && !s.Admitted(s.Record(slot))) ++zeros;
        answers->Row(i, slot, false);
        return true;
      },
      s.admission);
  if (all && zeros) s.not_admitted.fetch_add(zeros, std::memory_order_relaxed);
  return all;
}

}  // namespace

void EmbeddingShard::Pull(const int64_t* keys, size_t n, float* out, DeltaSink* sink) {
  RequirePointer(keys, n, "Pull", "keys");
  RequirePointer(out, n, "Pull", "out");
  Impl& s = *impl_;
  TaskPool& pool = TaskPool::Shared();
  {
    // Fast path: every key present, shared lock, nothing changes.
    ReadLock lock(s);
    const size_t parts = pool.PartsFor(n, s.config.split_min_keys);
    if (!s.Restoring() && s.store.tiered()) {
      FetchedRows fetched;
      // Without row rules every present key's value is its row: the hits are copied out as they are found.
      s.FetchKeys(keys, n, &fetched, /*for_write=*/false, s.policy_on ? nullptr : out);
      if (PullFetched(s, fetched, n, out, pool, parts)) return;
    } else if (!s.Restoring() && PullShared(s, keys, n, out, pool, parts)) {
      return;
    }
  }
  // Some key is missing (or a block is under restore): redo the whole batch exclusively, so the
  // pull is atomic and its inserts happen in the order of first appearance.
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  SinkBatch batch(sink, s.record_bytes);
  DeltaBatch* deltas = batch.deltas();
  s.DeltaStart(deltas, 0);
  s.PrepareBlocks(keys, n, /*may_insert=*/true);
  // Splitting here takes three hand-offs to the pool (lookups, new rows, copies) around the serial
  // inserts, worth it for larger batches only.
  const size_t min_keys = s.config.split_min_keys;
  const size_t split_parts = pool.PartsFor(n, min_keys > SIZE_MAX / 4 ? SIZE_MAX : 4 * min_keys);
  const size_t dim = static_cast<size_t>(s.config.dim);
  uint64_t zeros;
  if (split_parts > 1 && !s.Restoring()) {
    zeros = PullSplit(s, keys, n, out, deltas, pool, split_parts);
  } else {
    zeros = ResolveInserting(
        s, keys, n, deltas, [&](size_t i, uint32_t slot, bool) { s.CopyValue(slot, out + i * dim); },
        [&](size_t i) { std::memset(out + i * dim, 0, sizeof(float) * dim); });
  }
  if (zeros) s.not_admitted.fetch_add(zeros, std::memory_order_relaxed);
  batch.Record();
}

void EmbeddingShard::Find(const int64_t* keys, size_t n, float* out, uint8_t* found) const {
  RequirePointer(keys, n, "Find", "keys");
  RequirePointer(out, n, "Find", "out");
  RequirePointer(found, n, "Find", "found");
  Impl& s = *impl_;
  const size_t dim = static_cast<size_t>(s.config.dim);
  ReadPass(s, keys, n, [&]() {
    s.Resolve(keys, n, 0, s.value_end, [&](size_t i, uint32_t slot) {
      found[i] = slot != KeyIndex::kNone && s.Admitted(s.Record(slot));
      if (found[i]) s.CopyValue(slot, out + i * dim);
      return true;
    });
  });
}

void EmbeddingShard::Clocks(const int64_t* keys, size_t n, int32_t* clocks) const {
  RequirePointer(keys, n, "Clocks", "keys");
  RequirePointer(clocks, n, "Clocks", "clocks");
  Impl& s = *impl_;
  ReadPass(s, keys, n, [&]() {  // under restore a clock check is a degraded read too
    s.Resolve(keys, n, 0, RecordLayout::kValueOffset, [&](size_t i, uint32_t slot) {
      clocks[i] = slot == KeyIndex::kNone ? -1 : static_cast<int32_t>(RecordLayout::Clock(s.Record(slot)));
      return true;
    });
  });
}

size_t EmbeddingShard::PullStale(const int64_t* keys, size_t n, const int32_t* known, uint32_t staleness, float* rows,
                                 int32_t* clocks, uint8_t* sent, DeltaSink* sink) {
  RequirePointer(keys, n, "PullStale", "keys");
  RequirePointer(known, n, "PullStale", "known");
  RequirePointer(rows, n, "PullStale", "rows");
  RequirePointer(clocks, n, "PullStale", "clocks");
  RequirePointer(sent, n, "PullStale", "sent");
  Impl& s = *impl_;
  StaleAnswers answers(s, known, staleness, rows, clocks, sent);
  {
    // Fast path, as Pull's: every key present, shared lock, nothing changes.
    ReadLock lock(s);
    if (!s.Restoring()) s.FetchKeys(keys, n);
    if (!s.Restoring() && PullStaleShared(s, keys, n, &answers)) return answers.rows_sent();
  }
  // Some key is missing (or a block is under restore): redo the whole batch exclusively, as Pull does.
  answers.Restart();
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  SinkBatch batch(sink, s.record_bytes);
  DeltaBatch* deltas = batch.deltas();
  s.DeltaStart(deltas, 0);
  s.PrepareBlocks(keys, n, /*may_insert=*/true);
  const uint64_t zeros = ResolveInserting(
      s, keys, n, deltas, [&](size_t i, uint32_t slot, bool inserted) { answers.Row(i, slot, inserted); },
      [&](size_t i) { answers.Absent(i); });
  if (zeros) s.not_admitted.fetch_add(zeros, std::memory_order_relaxed);
  batch.Record();
  return answers.rows_sent();
}

}  // namespace xdl_ec
