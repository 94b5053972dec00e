// EmbeddingShard's state and the small helpers its operations share (private to cpp/src). The operations
// live in one file each: construction and stats (embedding_shard.cc), slots and record writes (shard_slots.cc),
// pull (shard_pull.cc), push (shard_push.cc), load and export (shard_load.cc), restore and raw reads
// (shard_restore.cc), row rules (shard_row_rules.cc), the sketch counter (shard_sketch.cc). The helpers the
// pull and push loops call once per row are inline here: the core is built without link-time optimisation.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "xdl_ec/delta_batch.h"
#include "xdl_ec/delta_sink.h"
#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/key_index.h"
#include "xdl_ec/optimizer.h"
#include "xdl_ec/record_layout.h"
#include "xdl_ec/slot_store.h"
#include "xdl_ec/task_pool.h"

namespace xdl_ec {

// ---- argument checks every operation shares ----------------------------------------------------------

constexpr size_t kMaxShardBatch = size_t{1} << 30;  // keys per Push/Load (batch dedup uses 32-bit positions)

inline std::string Str(size_t v) { return std::to_string(v); }

inline void RequireBatch(size_t n, const char* what) {
  if (n > kMaxShardBatch) {
    throw std::invalid_argument(std::string(what) + ": batch of " + std::to_string(n) + " keys exceeds " +
                                std::to_string(kMaxShardBatch) + "; split it");
  }
}

inline void RequirePointer(const void* p, size_t n, const char* what, const char* name) {
  if (n != 0 && p == nullptr) {
    throw std::invalid_argument(std::string(what) + ": " + name + " is null but n = " + Str(n));
  }
}

// Small open-addressing map key -> first position, for deduplicating one batch.
class BatchDedup {
 public:
  explicit BatchDedup(size_t n) {
    size_t capacity = 16;
    while (capacity < 2 * n) capacity *= 2;
    table_.assign(capacity, -1);
    mask_ = capacity - 1;
  }
  // Returns the unique index of `key`, adding it as `next` when new.
  int64_t FindOrAdd(const int64_t* unique_keys, int64_t key, int64_t next) {
    size_t i = KeyIndex::Mix(key) & mask_;
    for (;;) {
      const int32_t u = table_[i];
      if (u < 0) {
        table_[i] = static_cast<int32_t>(next);
        return next;
      }
      if (unique_keys[u] == key) return u;
      i = (i + 1) & mask_;
    }
  }

 private:
  std::vector<int32_t> table_;  // batches are far below 2^31 keys (checked by the callers)
  size_t mask_;
};

// Throws std::invalid_argument naming `what` and the first key of keys[0..n) that appears twice.
inline void RequireUniqueKeys(const int64_t* keys, size_t n, const char* what) {
  BatchDedup dedup(n);
  for (size_t i = 0; i < n; ++i) {
    if (dedup.FindOrAdd(keys, keys[i], static_cast<int64_t>(i)) != static_cast<int64_t>(i)) {
      throw std::invalid_argument(std::string(what) + ": keys must be unique, key " + std::to_string(keys[i]) +
                                  " appears twice (at " + Str(i) + ")");
    }
  }
}

// One mutation's deltas on their way to a sink (delta_sink.h): Begin when made (under the write lock, before
// any byte changes), Record hands them over. Without a sink deltas() is null: nothing is recorded, at no cost.
class SinkBatch {
 public:
  SinkBatch(DeltaSink* sink, size_t record_bytes) : sink_(sink) {
    if (sink_) batch_ = sink_->Begin(record_bytes);
  }
  DeltaBatch* deltas() { return sink_ ? &batch_ : nullptr; }
  void Record() {
    if (sink_) sink_->Record(std::move(batch_));
  }

 private:
  DeltaSink* sink_;
  DeltaBatch batch_;
};

// A tiered shard's fetch step handed to its operation: per key its slot (kNone: absent) and resident record
// (null: absent), valid until the next fetch step (frames move only there).
struct FetchedRows {
  std::vector<uint32_t> slots;
  std::vector<uint8_t*> records;
  std::vector<uint32_t> read_in;  // the positions whose rows the fetch step read from disk (the rest were hits)
  bool hits_copied = false;       // the hits' values are already in the pull's output (FetchKeys' hit_values)
  bool empty() const { return slots.empty(); }
};

struct EmbeddingShard::Impl {
  ShardConfig config;
  std::unique_ptr<Optimizer> optimizer;
  RecordLayout layout;
  size_t record_bytes = 0;
  size_t value_end = 0;   // bytes from the record start to the end of the value
  size_t read_bytes = 0;  // what a pull reads of a record: through the value

  mutable std::shared_mutex mutex;
  SlotStore store;
  // Reusable (all-zero) slots as a min-heap: the lowest free slot is always taken next, so what a
  // shard does next depends on its bytes alone and a restored shard behaves exactly as the lost one.
  std::vector<uint32_t> free_slots;
  KeyIndex index;

  // Restore state: blocks not yet installed, and the lost shard's key per slot until they are.
  std::vector<uint8_t> missing;
  size_t missing_count = 0;
  std::vector<int64_t> restore_keys;
  std::vector<uint8_t> restore_live;
  BlockFaultHandler handler;

  // Rows changed since the last TakeDirty (an incremental backstop's cut), when tracking is on: one flag
  // per slot plus the list of flagged slots, so a cut costs the changed rows, not the table.
  bool track_dirty = false;
  std::vector<uint8_t> dirty;
  std::vector<uint32_t> dirty_slots;

  // Row rules (row_policy.h): policy_on adds the policy words to every record.
  bool policy_on = false;
  size_t policy_offset = 0;
  int64_t min_count = 1;
  bool admission = false;  // min_count > 1: pending records exist, a pull checks the admitted word
  size_t admitted_at = 0;  // with admission: the admitted word's offset in a record, prefetched by pulls
  std::atomic<uint64_t> admitted{0}, not_admitted{0}, evicted_ttl{0}, evicted_l2{0}, evicted_cap{0};
  std::atomic<uint64_t> generation{0};  // passes that freed something
  // StageLoadWords: words of rows and pending ids for the next Load
  std::unordered_map<int64_t, std::pair<uint32_t, int64_t>> staged_words;
  std::vector<int64_t> staged_pending_keys;
  std::vector<uint32_t> staged_pending_uses;
  std::vector<int64_t> staged_pending_steps;
  // The sketch counter (row_policy.h): cells in the record bytes after key and flags of slots [0, sketch_slots).
  bool sketch = false;
  size_t sketch_slots = 0;
  size_t cells_per_slot = 0;
  std::vector<uint16_t> staged_sketch;  // StageSketch: cells the next Load adds
  // The sketch slots one mutation changed so far and their delta entries (npos: untouched), reused across calls.
  static constexpr size_t kUntouched = static_cast<size_t>(-1);
  std::vector<size_t> sketch_entry;
  std::vector<uint32_t> sketch_touched;

  explicit Impl(const ShardConfig& c);  // embedding_shard.cc

  // ---- slots and records -------------------------------------------------------------------------
  size_t NumBlocks() const { return store.num_blocks(); }
  bool Restoring() const { return missing_count != 0; }
  bool BlockMissing(size_t b) const { return missing_count != 0 && b < missing.size() && missing[b]; }

  uint8_t* Record(size_t slot) const { return store.Record(slot); }
  float* Value(uint8_t* record) const { return reinterpret_cast<float*>(record + RecordLayout::kValueOffset); }
  float* State(uint8_t* record) const { return reinterpret_cast<float*>(record + layout.state_offset()); }
  void CopyValue(uint32_t slot, float* out) const { std::memcpy(out, Value(Record(slot)), sizeof(float) * config.dim); }

  // A changed live record takes the next clock (record_layout.h), before its delta is closed.
  void Tick(uint32_t slot) const {
    uint8_t* r = Record(slot);
    RecordLayout::SetFlags(r, RecordLayout::Ticked(RecordLayout::Flags(r)));
  }

  void MarkDirty(uint32_t slot) {
    if (!track_dirty) return;
    if (slot >= dirty.size()) dirty.resize(std::max<size_t>(size_t{slot} + 1, dirty.size() * 2), 0);
    if (!dirty[slot]) {
      dirty[slot] = 1;
      dirty_slots.push_back(slot);
    }
  }

  // ---- slots and record writes (shard_slots.cc) ---------------------------------------------------
  // slots[i] = the slot of keys[i] (kNone: absent), the lookups split over `parts` of `pool`.
  void ResolveParts(const int64_t* keys, size_t n, TaskPool& pool, size_t parts, uint32_t* slots) const;
  uint32_t AllocateSlot();
  // Writes a new live record into a free (all-zero) slot and indexes it. values/state null: initial.
  void WriteNew(uint32_t slot, int64_t key, const float* values, const float* state);
  // WriteNew's two halves: the key, flags and index entry (what other keys' inserts depend on), then the
  // row and optimizer state (a split pull writes these over its parts).
  void WriteNewKey(uint32_t slot, int64_t key);
  void WriteNewRow(uint32_t slot, int64_t key, const float* values, const float* state) const;
  // Writes a pending id (row_policy.h) into a free (all-zero) slot and indexes it: key, live flags at
  // the initial clock, zero value and state, its first count.
  void WritePending(uint32_t slot, int64_t key, uint32_t uses, int64_t step);
  // A pending id reaching admit_min_count: its initial row and optimizer state, marked a row.
  void Admit(uint32_t slot, int64_t key);
  // AllocateSlot, then WriteNew with the initial row, recorded in `deltas`.
  uint32_t Insert(int64_t key, DeltaBatch* deltas);
  // Appends the row of live record r to an export (its policy words too in a table with rules).
  void AppendRow(uint8_t* r, EmbeddingShard::Rows* rows) const;

  // ---- policy words (record_layout.h), policy_on only ----------------------------------------------
  template <typename T>
  T Word(const uint8_t* record, size_t offset) const {
    T v;
    std::memcpy(&v, record + policy_offset + offset, sizeof(v));
    return v;
  }
  template <typename T>
  void SetWord(uint8_t* record, size_t offset, T v) const {
    std::memcpy(record + policy_offset + offset, &v, sizeof(v));
  }
  // Without admission every record is a row (no pending ids): the word is not read.
  bool Admitted(const uint8_t* r) const { return !admission || Word<uint32_t>(r, RecordLayout::kAdmittedOffset); }
  uint32_t Uses(const uint8_t* r) const { return Word<uint32_t>(r, RecordLayout::kUsesOffset); }
  int64_t LastStep(const uint8_t* r) const { return Word<int64_t>(r, RecordLayout::kLastStepOffset); }
  // One push of `c` occurrences at `step`: the counter saturates rather than wraps.
  void CountUse(uint8_t* r, uint32_t c, int64_t step) const {
    const uint64_t uses = std::min<uint64_t>(uint64_t{Uses(r)} + c, std::numeric_limits<uint32_t>::max());
    SetWord<uint32_t>(r, RecordLayout::kUsesOffset, static_cast<uint32_t>(uses));
    SetWord<int64_t>(r, RecordLayout::kLastStepOffset, step);
  }
  // max_rows reached: no record may be created until a pass frees some.
  bool Full() const {
    return config.row_policy.max_rows && static_cast<int64_t>(index.size()) >= *config.row_policy.max_rows;
  }
  // Whether a pull inserts a missing key (else it reads zeros).
  bool PullInserts() const { return !policy_on || (min_count <= 1 && !Full()); }

  // ---- row rules (shard_row_rules.cc) --------------------------------------------------------------
  // Frees the record of `slot`, its key already out of the index: all zero bytes, the slot on the free heap.
  void FreeSlot(uint32_t slot);
  // Block b holds no live record: its pages go back to the kernel (a block of sketch cells never does).
  void ReleaseBlock(size_t b);
  // One eviction pass at now_step (row_policy.h), exclusive lock held, deltas started. With `merge` the
  // deltas already hold this call's entries (a push's pass) and stay one entry per slot.
  // ttl_before > 0: records whose last_step is below it go too (reason ttl: an Evict(ttl_seconds) cutoff).
  EmbeddingShard::Eviction EvictPass(int64_t now_step, DeltaBatch* deltas, bool merge, int64_t ttl_before = 0);
  // The records a pass at now_step frees, in slot order, with the counts of its reasons.
  std::vector<uint32_t> SelectVictims(int64_t now_step, int64_t ttl_before, EvictionResult* counts,
                                      std::vector<uint32_t>* live_in_block) const;

  // ---- keys to slots -------------------------------------------------------------------------------
  int64_t KeyAt(uint32_t slot) const {
    const size_t b = store.BlockOf(slot);
    if (BlockMissing(b)) return restore_keys[slot];
    if (store.tiered()) return store.KeyOf(slot);  // no file read to confirm a candidate
    int64_t key;
    std::memcpy(&key, Record(slot), sizeof(key));
    return key;
  }
  uint32_t Lookup(int64_t key) const {
    return index.Find(key, [this](uint32_t s) { return KeyAt(s); });
  }

  void PrefetchRecord(uint32_t slot, size_t from, size_t len) const {
    const uint8_t* r = Record(slot) + from;
    for (size_t o = 0; o < len; o += 64) __builtin_prefetch(r + o);
    __builtin_prefetch(r + len - 1);
  }

  // Resolves keys[0..n) to slots, calling visit(i, slot) in order (slot kNone: absent; visit returns
  // false to stop). A batch is bound by cache misses, so they are overlapped: index buckets are
  // prefetched kIndexAhead keys ahead, and the record bytes [from, from + len) of each tag-matching
  // candidate kRecordAhead keys ahead; the key is confirmed when visited (visit may insert keys,
  // so an unconfirmed candidate falls back to a full lookup).
  // with_admitted: the admitted word's line is prefetched too (a pull of a table with admission reads it).
  template <class Visit>
  bool Resolve(const int64_t* keys, size_t n, size_t from, size_t len, Visit&& visit,
               bool with_admitted = false) const {
    constexpr size_t kIndexAhead = 16, kRecordAhead = 8, kRing = 16;
    static_assert(kRing > kRecordAhead, "the ring must hold the keys in flight");
    uint32_t ring[kRing];
    // Missing blocks have no bytes to prefetch. A tiered store's rows may be on disk: what is prefetched is
    // what KeyAt reads, in two stages (the slot's frame word, then kKeyAhead keys later the key's bytes).
    const bool prefetch_records = !Restoring() && !store.tiered();
    const bool prefetch_tier = !Restoring() && store.tiered();
    constexpr size_t kKeyAhead = kRecordAhead / 2;
    for (size_t i = 0; i < std::min(n, kIndexAhead); ++i) index.Prefetch(keys[i]);
    for (size_t i = 0; i < n + kRecordAhead; ++i) {
      if (i < n) {
        if (i + kIndexAhead < n) index.Prefetch(keys[i + kIndexAhead]);
        const uint32_t candidate = index.Candidate(keys[i]);
        ring[i % kRing] = candidate;
        if (candidate != KeyIndex::kNone && prefetch_records) {
          PrefetchRecord(candidate, from, len);
          if (with_admitted) __builtin_prefetch(Record(candidate) + admitted_at);
        } else if (candidate != KeyIndex::kNone && prefetch_tier) {
          store.PrefetchSlot(candidate);
        }
      }
      if (prefetch_tier && i >= kKeyAhead && i - kKeyAhead < n && ring[(i - kKeyAhead) % kRing] != KeyIndex::kNone) {
        store.PrefetchKey(ring[(i - kKeyAhead) % kRing]);
      }
      if (i >= kRecordAhead) {
        const size_t j = i - kRecordAhead;
        uint32_t slot = ring[j % kRing];
        if (slot == KeyIndex::kNone || KeyAt(slot) != keys[j]) slot = Lookup(keys[j]);
        if (!visit(j, slot)) return false;
      }
    }
    return true;
  }

  // ---- deltas: copy the record before, XOR it with the record after ------------------------------
  size_t DeltaBegin(DeltaBatch* deltas, uint32_t slot) const {
    if (!deltas) return 0;
    const uint8_t* r = Record(slot);
    deltas->slots.push_back(slot);
    deltas->xor_bytes.insert(deltas->xor_bytes.end(), r, r + record_bytes);
    return deltas->slots.size() - 1;
  }
  void DeltaEnd(DeltaBatch* deltas, size_t d, uint32_t slot) const {
    if (deltas) DeltaEnd(deltas, d, Record(slot));
  }
  // ... of the record at r (an operation holding its records).
  void DeltaEnd(DeltaBatch* deltas, size_t d, const uint8_t* r) const {
    if (!deltas) return;
    uint8_t* x = deltas->xor_bytes.data() + d * record_bytes;
    // A local bound: byte stores may alias the member, which kept this loop scalar (half a push).
    const size_t bytes = record_bytes;
    for (size_t j = 0; j < bytes; ++j) x[j] ^= r[j];
  }
  // Push's split form of DeltaBegin: Reserve keeps the entry's place in batch order, Copy fills it
  // later, right before the step touches the record anyway (copying at once stalled on the record's
  // prefetch still in flight).
  size_t DeltaReserve(DeltaBatch* deltas, uint32_t slot) const {
    deltas->slots.push_back(slot);
    deltas->xor_bytes.resize(deltas->xor_bytes.size() + record_bytes);
    return deltas->slots.size() - 1;
  }
  void DeltaCopy(DeltaBatch* deltas, size_t d, uint32_t slot) const { DeltaCopy(deltas, d, Record(slot)); }
  void DeltaCopy(DeltaBatch* deltas, size_t d, const uint8_t* r) const {
    std::memcpy(deltas->xor_bytes.data() + d * record_bytes, r, record_bytes);
  }
  void DeltaStart(DeltaBatch* deltas, size_t expected) const {
    if (!deltas) return;
    deltas->clear();
    deltas->record_bytes = record_bytes;
    deltas->slots.reserve(expected);
    deltas->xor_bytes.reserve(expected * record_bytes);
  }

  // ---- the tier's fetch step (slot_store.h), tiered stores only, exclusive lock held ----------------
  // What the budget covers beside the rows: the key index and the free-slot list.
  size_t OtherBytes() const { return index.bytes() + free_slots.capacity() * sizeof(uint32_t); }
  // The rows of keys[0..n) that exist made resident together, before an operation touches any. With
  // `fetched`, its slots and resident records are handed back (an untiered store leaves it empty), so the
  // operation does not resolve the keys a second time; `for_write`: the operation writes those records.
  // `hit_values` (with `fetched`, a pull's output): each hit's value is copied there as its key is confirmed,
  // its frame in cache, and only the rows read in are left to copy (fetched->read_in). `may_insert`: the
  // operation may add a row for each absent key, and room is made for those too.
  void FetchKeys(const int64_t* keys, size_t n, FetchedRows* fetched = nullptr, bool for_write = false,
                 float* hit_values = nullptr, bool may_insert = false) const;
  // A scan in slot order: the block starting at `slot` read in whole (the scan's earlier blocks may go).
  void ScanAt(size_t slot) const {
    if (store.tiered() && store.WithinBlock(slot) == 0) store.FetchRange(slot, store.block_slots(), OtherBytes());
  }

  // ---- restore (shard_restore.cc) ------------------------------------------------------------------
  // Checks that restored block bytes agree with the index given to BeginRestore: live slots carry
  // their key and the live bit (any clock), free slots are all zero. Returns the first bad slot or -1.
  int64_t FirstMismatch(size_t b, const uint8_t* bytes) const;
  void MarkRestored(size_t b);
  // Exclusive lock held: installs block b through the fault handler when it is still missing.
  void EnsureBlock(size_t b);
  // Exclusive lock held, before an operation on `keys` changes any byte: restoring, faults in every block
  // it may touch (FaultBlocks), so that a failing handler throws first; tiered, its fetch step (FetchKeys).
  void PrepareBlocks(const int64_t* keys, size_t n, bool may_insert, FetchedRows* fetched = nullptr,
                     bool for_write = false);
  void FaultBlocks(const int64_t* keys, size_t n, bool may_insert);
  void EnsureAllBlocks() {
    for (size_t b = 0; Restoring() && b < missing.size(); ++b) EnsureBlock(b);
  }

  // ---- the sketch counter (row_policy.h; reads inline, changes in shard_sketch.cc) ------------------
  uint8_t* CellAt(size_t cell) const {
    return Record(cell / cells_per_slot) + RecordLayout::kValueOffset + sizeof(uint16_t) * (cell % cells_per_slot);
  }
  uint16_t Cell(size_t cell) const {
    uint16_t v;
    std::memcpy(&v, CellAt(cell), sizeof(v));
    return v;
  }
  // The cell of `key` in sketch row `row`: a seeded 64-bit mix per row, mapped onto the width by a multiply.
  size_t CellOf(int64_t key, int64_t row) const {
    uint64_t x = static_cast<uint64_t>(key) ^ (config.seed * 0xD6E8FEB86659FD93ull) ^
                 (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(row + 1));
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    const uint64_t width = static_cast<uint64_t>(config.row_policy.sketch_width);
    return static_cast<size_t>(row) * width + static_cast<size_t>(((x >> 32) * width) >> 32);
  }
  static constexpr int kMaxDepth = 8;  // RowPolicyConfig::Validate's bound
  // The key's cell in every row (depth entries), hashed once for the estimate and the update.
  void CellsOf(int64_t key, size_t* cells) const {
    for (int64_t row = 0; row < config.row_policy.sketch_depth; ++row) cells[row] = CellOf(key, row);
  }
  uint32_t Estimate(const size_t* cells) const {
    uint32_t least = std::numeric_limits<uint32_t>::max();
    for (int64_t row = 0; row < config.row_policy.sketch_depth; ++row)
      least = std::min<uint32_t>(least, Cell(cells[row]));
    return least;
  }
  uint32_t Estimate(int64_t key) const {
    size_t cells[kMaxDepth];
    CellsOf(key, cells);
    return Estimate(cells);
  }
  // A push reads the cells of keys a few ahead of the one it counts: they are scattered cache misses.
  void PrefetchCells(int64_t key) const {
    for (int64_t row = 0; row < config.row_policy.sketch_depth; ++row) __builtin_prefetch(CellAt(CellOf(key, row)));
  }
  // Before a change to the cells of sketch slot `slot` in this mutation: its delta entry, once.
  void TouchSketch(DeltaBatch* deltas, size_t slot);
  void SetCell(DeltaBatch* deltas, size_t cell, uint16_t v);
  // Conservative update: each of the key's cells is raised to at least `to`.
  void RaiseCells(DeltaBatch* deltas, const size_t* cells, uint32_t to);
  // Every cell halved (the sketch's aging).
  void HalveCells(DeltaBatch* deltas);
  // Adds cells cell-wise, saturating.
  void AddCells(DeltaBatch* deltas, const uint16_t* cells);
  // Closes the delta entries of the sketch slots this mutation changed.
  void FinishSketch(DeltaBatch* deltas);
  // Under restore: the sketch's blocks faulted in before any byte changes.
  void EnsureSketch();
  // Before a mutation that may change cells: their blocks at hand, and no touch left over from a call that threw.
  void BeginSketch();
};

// A reader's hold on the shard's lock: shared, but exclusive over a tiered store, whose fetch step moves
// the frames other readers would be reading.
class ReadLock {
 public:
  explicit ReadLock(const EmbeddingShard::Impl& s) {
    if (s.store.tiered()) {
      exclusive_ = std::unique_lock<std::shared_mutex>(s.mutex);
    } else {
      shared_ = std::shared_lock<std::shared_mutex>(s.mutex);
    }
  }

 private:
  std::shared_lock<std::shared_mutex> shared_;
  std::unique_lock<std::shared_mutex> exclusive_;
};

// A read-only pass over the slots of keys[0..n): under the shared lock, or, while blocks are under restore,
// under the write lock after faulting the keys' blocks in (a read of a block under restore is a degraded read).
template <typename Run>
void ReadPass(EmbeddingShard::Impl& s, const int64_t* keys, size_t n, Run run) {
  {
    ReadLock lock(s);
    if (!s.Restoring()) {
      s.FetchKeys(keys, n);
      return run();
    }
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.PrepareBlocks(keys, n, /*may_insert=*/false);
  run();
}

}  // namespace xdl_ec
