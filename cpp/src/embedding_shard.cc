#include "xdl_ec/embedding_shard.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "xdl_ec/key_index.h"
#include "xdl_ec/mapped_buffer.h"
#include "xdl_ec/task_pool.h"

namespace xdl_ec {
namespace {

constexpr int kMaxDim = 1 << 16;
constexpr uint32_t kMaxBlockSlots = 1u << 24;
constexpr size_t kMaxBatch = size_t{1} << 30;  // keys per Push/Load (batch dedup uses 32-bit positions)

void RequireBatch(size_t n, const char* what) {
  if (n > kMaxBatch) {
    throw std::invalid_argument(std::string(what) + ": batch of " + std::to_string(n) + " keys exceeds " +
                                std::to_string(kMaxBatch) + "; split it");
  }
}

std::string Str(size_t v) { return std::to_string(v); }

void RequirePointer(const void* p, size_t n, const char* what, const char* name) {
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

// The DeltaBatch* overloads' sink: the caller's batch itself (its capacity reused).
class IntoBatch final : public DeltaSink {
 public:
  explicit IntoBatch(DeltaBatch* out) : out_(out) {}
  DeltaBatch Begin(size_t) override { return std::move(*out_); }
  void Record(DeltaBatch deltas) override { *out_ = std::move(deltas); }

 private:
  DeltaBatch* out_;
};

}  // namespace

void ShardConfig::Validate() const {
  if (dim < 1 || dim > kMaxDim) {
    throw std::invalid_argument("ShardConfig: dim must be in [1, " + std::to_string(kMaxDim) + "], got " +
                                std::to_string(dim));
  }
  if (block_slots < 1 || block_slots > kMaxBlockSlots) {
    throw std::invalid_argument("ShardConfig: block_slots must be in [1, " + std::to_string(kMaxBlockSlots) +
                                "], got " + std::to_string(block_slots));
  }
  optimizer.Validate();
  initializer.Validate();
  row_policy.Validate(block_slots);
}

struct EmbeddingShard::Impl {
  ShardConfig config;
  std::unique_ptr<Optimizer> optimizer;
  RecordLayout layout;
  size_t record_bytes = 0;
  size_t value_end = 0;   // bytes from the record start to the end of the value
  size_t read_bytes = 0;  // what a pull reads of a record: through the value
  size_t block_bytes = 0;
  uint32_t block_slots = 0;
  int block_shift = -1;  // log2(block_slots) when it is a power of two

  mutable std::shared_mutex mutex;
  std::vector<uint8_t*> blocks;     // blocks[b] holds slots [b * block_slots, (b + 1) * block_slots)
  std::vector<MappedBuffer> slabs;  // where blocks live: large huge-page mappings, never moved
  size_t slab_used = 0;             // bytes of slabs.back() handed out
  size_t slab_total = 0;            // bytes of all slabs
  // Blocks an eviction pass emptied whole, their pages given back to the kernel (MappedBuffer::ReleasePages)
  // until a slot of theirs is allocated again: they read zeros as freed slots do.
  std::vector<uint8_t> released;
  size_t released_count = 0;
  size_t high_water = 0;  // slots ever used
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

  void MarkDirty(uint32_t slot) {
    if (!track_dirty) return;
    if (slot >= dirty.size()) dirty.resize(std::max<size_t>(size_t{slot} + 1, dirty.size() * 2), 0);
    if (!dirty[slot]) {
      dirty[slot] = 1;
      dirty_slots.push_back(slot);
    }
  }

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

  explicit Impl(const ShardConfig& c) : config(c) {
    config.Validate();
    optimizer = Optimizer::Create(config.optimizer);
    policy_on = config.row_policy.active();
    min_count = config.row_policy.admit_min_count;
    layout = RecordLayout(config.dim, optimizer->StateFloats(config.dim), policy_on ? RecordLayout::kPolicyBytes : 0);
    policy_offset = layout.policy_offset();
    record_bytes = layout.bytes();
    value_end = layout.state_offset();
    read_bytes = value_end;
    admission = min_count > 1;
    admitted_at = admission ? policy_offset + RecordLayout::kAdmittedOffset : 0;
    block_slots = config.block_slots;
    if ((block_slots & (block_slots - 1)) == 0) {
      block_shift = 0;
      while ((1u << block_shift) < block_slots) ++block_shift;
    }
    block_bytes = record_bytes * block_slots;
    sketch = config.row_policy.sketch();
    if (sketch) {  // the reserved slots, all zero (never live), with their blocks
      cells_per_slot = (record_bytes - RecordLayout::kValueOffset) / sizeof(uint16_t);
      sketch_slots = (config.row_policy.sketch_cells() + cells_per_slot - 1) / cells_per_slot;
      high_water = sketch_slots;
      for (size_t b = 0, nb = NumBlocks(); b < nb; ++b) blocks.push_back(AllocateBlock());
      sketch_entry.assign(sketch_slots, kUntouched);
    }
  }

  // ---- the sketch counter (row_policy.h) -----------------------------------------------------------
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
  void TouchSketch(DeltaBatch* deltas, size_t slot) {
    if (sketch_entry[slot] != kUntouched) return;
    sketch_entry[slot] = DeltaBegin(deltas, static_cast<uint32_t>(slot));
    sketch_touched.push_back(static_cast<uint32_t>(slot));
  }
  void SetCell(DeltaBatch* deltas, size_t cell, uint16_t v) {
    TouchSketch(deltas, cell / cells_per_slot);
    std::memcpy(CellAt(cell), &v, sizeof(v));
  }
  // Conservative update: each of the key's cells is raised to at least `to`.
  void RaiseCells(DeltaBatch* deltas, const size_t* cells, uint32_t to) {
    for (int64_t row = 0; row < config.row_policy.sketch_depth; ++row) {
      if (Cell(cells[row]) < to) SetCell(deltas, cells[row], static_cast<uint16_t>(to));
    }
  }
  // Every cell halved (the sketch's aging).
  void HalveCells(DeltaBatch* deltas) {
    for (size_t slot = 0; slot < sketch_slots; ++slot) TouchSketch(deltas, slot);
    for (size_t cell = 0, n = config.row_policy.sketch_cells(); cell < n; ++cell) {
      const uint16_t v = Cell(cell);
      if (v) SetCell(deltas, cell, static_cast<uint16_t>(v >> 1));
    }
  }
  // Adds cells cell-wise, saturating.
  void AddCells(DeltaBatch* deltas, const uint16_t* cells) {
    for (size_t cell = 0, n = config.row_policy.sketch_cells(); cell < n; ++cell) {
      if (!cells[cell]) continue;
      const uint32_t sum = std::min<uint32_t>(uint32_t{Cell(cell)} + cells[cell], RowPolicyConfig::kSketchMaxCount);
      SetCell(deltas, cell, static_cast<uint16_t>(sum));
    }
  }
  // Closes the delta entries of the sketch slots this mutation changed.
  void FinishSketch(DeltaBatch* deltas) {
    for (const uint32_t slot : sketch_touched) {
      DeltaEnd(deltas, sketch_entry[slot], slot);
      sketch_entry[slot] = kUntouched;
    }
    sketch_touched.clear();
  }
  // Under restore: the sketch's blocks faulted in before any byte changes.
  void EnsureSketch() {
    for (size_t b = 0; sketch_slots && Restoring() && b <= (sketch_slots - 1) / block_slots; ++b) EnsureBlock(b);
  }
  // Before a mutation that may change cells: their blocks at hand, and no touch left over from a call that threw.
  void BeginSketch() {
    EnsureSketch();
    for (const uint32_t slot : sketch_touched) sketch_entry[slot] = kUntouched;
    sketch_touched.clear();
  }

  size_t NumBlocks() const { return (high_water + block_slots - 1) / block_slots; }
  // Slot -> (block, index within the block): a shift and a mask when block_slots is a power of two
  // (the default), since a 64-bit division per access is a visible share of a cached row read.
  size_t BlockOf(size_t slot) const { return block_shift >= 0 ? slot >> block_shift : slot / block_slots; }
  size_t WithinBlock(size_t slot) const { return block_shift >= 0 ? slot & (block_slots - 1) : slot % block_slots; }
  bool Restoring() const { return missing_count != 0; }
  bool BlockMissing(size_t b) const { return missing_count != 0 && b < missing.size() && missing[b]; }

  uint8_t* Record(size_t slot) const { return blocks[BlockOf(slot)] + WithinBlock(slot) * record_bytes; }
  float* Value(uint8_t* record) const { return reinterpret_cast<float*>(record + RecordLayout::kValueOffset); }
  float* State(uint8_t* record) const { return reinterpret_cast<float*>(record + layout.state_offset()); }

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

  int64_t KeyAt(uint32_t slot) const {
    const size_t b = BlockOf(slot);
    if (BlockMissing(b)) return restore_keys[slot];
    int64_t key;
    std::memcpy(&key, blocks[b] + WithinBlock(slot) * record_bytes, sizeof(key));
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
    const bool prefetch_records = !Restoring();  // missing blocks have no bytes to prefetch
    for (size_t i = 0; i < std::min(n, kIndexAhead); ++i) index.Prefetch(keys[i]);
    for (size_t i = 0; i < n + kRecordAhead; ++i) {
      if (i < n) {
        if (i + kIndexAhead < n) index.Prefetch(keys[i + kIndexAhead]);
        const uint32_t candidate = index.Candidate(keys[i]);
        ring[i % kRing] = candidate;
        if (candidate != KeyIndex::kNone && prefetch_records) {
          PrefetchRecord(candidate, from, len);
          if (with_admitted) __builtin_prefetch(Record(candidate) + admitted_at);
        }
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

  // Push's steps split over a pool's parts (a table without row rules, one step per key, no block under
  // restore): the lookups over the parts; the inserts and the delta entries here, in order of first
  // appearance as the one-thread pass makes them; each part then steps its rows and closes their
  // entries (rows and entries are disjoint); the dirty marks last, here.
  void PushSplit(const int64_t* unique_keys, const float* sums, size_t m, int64_t step, DeltaBatch* deltas,
                 TaskPool& pool, size_t parts) {
    std::vector<uint32_t> slots(m);
    std::vector<size_t> entry(deltas ? m : 0);
    std::vector<uint8_t> inserted(m, 0);
    pool.ForEachPart(parts, [&](size_t p) {
      const size_t lo = TaskPool::PartBegin(m, parts, p), hi = TaskPool::PartBegin(m, parts, p + 1);
      Resolve(unique_keys + lo, hi - lo, 0, sizeof(int64_t), [&](size_t j, uint32_t slot) {
        slots[lo + j] = slot;
        return true;
      });
    });
    for (size_t u = 0; u < m; ++u) {
      if (slots[u] == KeyIndex::kNone) {
        slots[u] = AllocateSlot();
        if (deltas) entry[u] = DeltaBegin(deltas, slots[u]);  // from the all-zero free record
        WriteNew(slots[u], unique_keys[u], nullptr, nullptr);
        inserted[u] = 1;
      } else if (deltas) {
        entry[u] = DeltaReserve(deltas, slots[u]);
      }
    }
    const size_t dim = static_cast<size_t>(config.dim);
    pool.ForEachPart(parts, [&](size_t p) {
      const size_t lo = TaskPool::PartBegin(m, parts, p), hi = TaskPool::PartBegin(m, parts, p + 1);
      constexpr size_t kChunk = 16, kAhead = 8;
      float* values[kChunk];
      float* states[kChunk];
      for (size_t first = lo; first < hi; first += kChunk) {
        const size_t rows = std::min(kChunk, hi - first);
        for (size_t r = 0; r < rows; ++r) {
          const size_t u = first + r;
          if (u + kAhead < hi) PrefetchRecord(slots[u + kAhead], 0, record_bytes);
          if (deltas && !inserted[u]) DeltaCopy(deltas, entry[u], slots[u]);
          uint8_t* rec = Record(slots[u]);
          values[r] = Value(rec);
          states[r] = State(rec);
        }
        optimizer->ApplyRows(values, states, sums + first * dim, rows, config.dim, step);
        for (size_t r = 0; r < rows; ++r) {
          Tick(slots[first + r]);
          if (deltas) DeltaEnd(deltas, entry[first + r], slots[first + r]);
        }
      }
    });
    if (track_dirty) {
      for (size_t u = 0; u < m; ++u) MarkDirty(slots[u]);
    }
  }

  // A zeroed block carved from the current slab; a new slab (a quarter of what is held, 2 MiB to
  // 64 MiB, whole huge pages) when it is full. Untouched slab pages cost no memory.
  uint8_t* AllocateBlock() {
    if (slabs.empty() || slab_used + block_bytes > slabs.back().size()) {
      constexpr size_t kMinSlab = MappedBuffer::kHugePage, kMaxSlab = size_t{64} << 20;
      size_t bytes = std::min(kMaxSlab, std::max(kMinSlab, slab_total / 4));
      bytes = std::max(bytes, block_bytes);
      bytes = (bytes + MappedBuffer::kHugePage - 1) / MappedBuffer::kHugePage * MappedBuffer::kHugePage;
      slabs.emplace_back(bytes);
      slab_used = 0;
      slab_total += bytes;
    }
    uint8_t* block = slabs.back().data() + slab_used;
    slab_used += block_bytes;
    return block;
  }

  // ---- restore ---------------------------------------------------------------------------------
  // Checks that restored block bytes agree with the index given to BeginRestore: live slots carry
  // their key and the live bit (any clock), free slots are all zero. Returns the first bad slot or -1.
  int64_t FirstMismatch(size_t b, const uint8_t* bytes) const {
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

  void MarkRestored(size_t b) {
    missing[b] = 0;
    if (--missing_count == 0) {
      std::vector<uint8_t>().swap(missing);
      std::vector<int64_t>().swap(restore_keys);
      std::vector<uint8_t>().swap(restore_live);
      handler = nullptr;
    }
  }

  // Exclusive lock held: installs block b through the fault handler when it is still missing.
  void EnsureBlock(size_t b) {
    if (!BlockMissing(b)) return;
    if (!blocks[b]) blocks[b] = AllocateBlock();
    uint8_t* out = blocks[b];
    try {
      handler(b, out);
    } catch (...) {
      std::memset(out, 0, block_bytes);
      throw;
    }
    const int64_t bad = FirstMismatch(b, out);
    if (bad >= 0) {
      std::memset(out, 0, block_bytes);
      throw std::runtime_error("EmbeddingShard: block fault handler returned bytes for block " + Str(b) +
                               " that disagree with the restored key index at slot " + std::to_string(bad));
    }
    MarkRestored(b);
  }

  // Exclusive lock held, restoring: faults in every block a mutation of `keys` may touch, so that
  // a failing handler throws before any byte changes.
  void PrepareBlocks(const int64_t* keys, size_t n, bool may_insert) {
    if (!Restoring()) return;
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
    if (misses > reused) EnsureBlock(high_water / block_slots);
  }

  void EnsureAllBlocks() {
    for (size_t b = 0; Restoring() && b < missing.size(); ++b) EnsureBlock(b);
  }

  // ---- slots -----------------------------------------------------------------------------------
  uint32_t AllocateSlot() {
    if (!free_slots.empty()) {
      const uint32_t slot = free_slots.front();
      EnsureBlock(slot / block_slots);
      if (released_count && released[BlockOf(slot)]) {  // reused: its pages come back as they are touched
        released[BlockOf(slot)] = 0;
        --released_count;
      }
      std::pop_heap(free_slots.begin(), free_slots.end(), std::greater<uint32_t>());
      free_slots.pop_back();
      return slot;
    }
    if (high_water > KeyIndex::kMaxSlot) {
      throw std::out_of_range("EmbeddingShard: shard is full (" + Str(high_water) + " slots)");
    }
    const size_t slot = high_water;
    const size_t b = slot / block_slots;
    if (b >= blocks.size()) {
      blocks.push_back(AllocateBlock());
    } else {
      EnsureBlock(b);
      if (!blocks[b]) blocks[b] = AllocateBlock();
    }
    ++high_water;
    return static_cast<uint32_t>(slot);
  }

  // Writes a new live record into a free (all-zero) slot and indexes it. values/state null: initial.
  void WriteNew(uint32_t slot, int64_t key, const float* values, const float* state) {
    WriteNewKey(slot, key);
    WriteNewRow(slot, key, values, state);
  }
  // WriteNew's two halves: the key, flags and index entry (what other keys' inserts depend on), then the
  // row and optimizer state (a split pull writes these over its parts).
  void WriteNewKey(uint32_t slot, int64_t key) {
    MarkDirty(slot);
    uint8_t* r = Record(slot);
    std::memcpy(r + RecordLayout::kKeyOffset, &key, sizeof(key));
    RecordLayout::SetFlags(r, RecordLayout::LiveFlags(RecordLayout::kInitialClock));
    if (policy_on) SetWord<uint32_t>(r, RecordLayout::kAdmittedOffset, 1);
    index.Insert(key, slot);
  }
  void WriteNewRow(uint32_t slot, int64_t key, const float* values, const float* state) const {
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

  // Writes a pending id (row_policy.h) into a free (all-zero) slot and indexes it: key, live flags at
  // the initial clock, zero value and state, its first count.
  void WritePending(uint32_t slot, int64_t key, uint32_t uses, int64_t step) {
    uint8_t* r = Record(slot);
    std::memcpy(r + RecordLayout::kKeyOffset, &key, sizeof(key));
    RecordLayout::SetFlags(r, RecordLayout::LiveFlags(RecordLayout::kInitialClock));
    CountUse(r, uses, step);
    index.Insert(key, slot);
  }

  // A pending id reaching admit_min_count: its initial row and optimizer state, marked a row.
  void Admit(uint32_t slot, int64_t key) {
    uint8_t* r = Record(slot);
    InitializeRow(config.initializer, config.seed, key, Value(r), config.dim);
    optimizer->InitState(State(r), config.dim);
    SetWord<uint32_t>(r, RecordLayout::kAdmittedOffset, 1);
    admitted.fetch_add(1, std::memory_order_relaxed);
  }

  uint32_t Insert(int64_t key, DeltaBatch* deltas, const float* values = nullptr, const float* state = nullptr) {
    const uint32_t slot = AllocateSlot();
    const size_t d = DeltaBegin(deltas, slot);
    WriteNew(slot, key, values, state);
    DeltaEnd(deltas, d, slot);
    return slot;
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
    if (!deltas) return;
    const uint8_t* r = Record(slot);
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
  void DeltaCopy(DeltaBatch* deltas, size_t d, uint32_t slot) const {
    std::memcpy(deltas->xor_bytes.data() + d * record_bytes, Record(slot), record_bytes);
  }
  void DeltaStart(DeltaBatch* deltas, size_t expected) const {
    if (!deltas) return;
    deltas->clear();
    deltas->record_bytes = record_bytes;
    deltas->slots.reserve(expected);
    deltas->xor_bytes.reserve(expected * record_bytes);
  }

  // Appends the row of live record r to an export (its policy words too in a table with rules).
  void AppendRow(uint8_t* r, EmbeddingShard::Rows* rows) const {
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

  void CopyValue(uint32_t slot, float* out) const { std::memcpy(out, Value(Record(slot)), sizeof(float) * config.dim); }

  // A changed live record takes the next clock (record_layout.h), before its delta is closed.
  void Tick(uint32_t slot) const {
    uint8_t* r = Record(slot);
    RecordLayout::SetFlags(r, RecordLayout::Ticked(RecordLayout::Flags(r)));
  }

  // Block b holds no live record: its pages go back to the kernel (the bytes stay zero).
  void ReleaseBlock(size_t b) {
    if (released.size() < blocks.size()) released.resize(blocks.size(), 0);
    if (b * size_t{block_slots} < sketch_slots) return;  // a block of sketch cells is never empty
    if (released[b] || !blocks[b]) return;
    if (MappedBuffer::ReleasePages(blocks[b], block_bytes) == 0) return;  // a block within one page: kept
    released[b] = 1;
    ++released_count;
  }

  // One eviction pass at now_step (row_policy.h), exclusive lock held, deltas started. With `merge` the
  // deltas already hold this call's entries (a push's pass) and stay one entry per slot.
  // ttl_before > 0: records whose last_step is below it go too (reason ttl: an Evict(ttl_seconds) cutoff).
  EmbeddingShard::Eviction EvictPass(int64_t now_step, DeltaBatch* deltas, bool merge, int64_t ttl_before = 0) {
    using Eviction = EmbeddingShard::Eviction;
    Eviction out;
    if (!policy_on) return out;
    const RowPolicyConfig& rules = config.row_policy;
    EnsureAllBlocks();
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
    const size_t dim = static_cast<size_t>(config.dim);
    std::vector<uint32_t> live_in_block(NumBlocks(), 0);  // to find the blocks the pass empties whole
    // Walked block by block (the scan is a share of a pass step); a released block is all free and not read
    // (reading would map its pages again).
    for (size_t b = 0, nb = NumBlocks(); b < nb; ++b) {
      if (released_count && released[b]) continue;
      const uint8_t* r = blocks[b];
      const size_t end = std::min<size_t>(high_water, (b + 1) * size_t{block_slots});
      for (size_t slot = b * block_slots; slot < end; ++slot, r += record_bytes) {
        if (!RecordLayout::IsLive(RecordLayout::Flags(r))) continue;
        ++live_in_block[b];
        const int64_t last = LastStep(r);
        if ((rules.ttl_steps && now_step - last > *rules.ttl_steps) || last < ttl_before) {
          victims.push_back(static_cast<uint32_t>(slot));
          ++out.counts.ttl;
          continue;
        }
        if (rules.min_l2 && Admitted(r)) {
          const float* v = reinterpret_cast<const float*>(r + RecordLayout::kValueOffset);
          double sq = 0;
          for (size_t j = 0; j < dim; ++j) sq += static_cast<double>(v[j]) * v[j];
          if (std::sqrt(sq) < *rules.min_l2) {
            victims.push_back(static_cast<uint32_t>(slot));
            ++out.counts.l2;
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
      out.counts.cap = go;
    }
    std::sort(victims.begin(), victims.end());
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
        std::memset(Record(slot), 0, record_bytes);
      } else {
        const size_t d = DeltaBegin(deltas, slot);
        std::memset(Record(slot), 0, record_bytes);
        DeltaEnd(deltas, d, slot);
      }
      free_slots.push_back(slot);
      std::push_heap(free_slots.begin(), free_slots.end(), std::greater<uint32_t>());
      out.keys.push_back(key);
      const size_t b = BlockOf(slot);
      if (--live_in_block[b] == 0) ReleaseBlock(b);
    }
    evicted_ttl.fetch_add(out.counts.ttl, std::memory_order_relaxed);
    evicted_l2.fetch_add(out.counts.l2, std::memory_order_relaxed);
    evicted_cap.fetch_add(out.counts.cap, std::memory_order_relaxed);
    if (!victims.empty()) generation.fetch_add(1, std::memory_order_release);
    return out;
  }
};

EmbeddingShard::EmbeddingShard(const ShardConfig& config) : impl_(new Impl(config)) {}
EmbeddingShard::~EmbeddingShard() = default;

const ShardConfig& EmbeddingShard::config() const { return impl_->config; }
const RecordLayout& EmbeddingShard::layout() const { return impl_->layout; }
int EmbeddingShard::dim() const { return impl_->config.dim; }
uint32_t EmbeddingShard::block_slots() const { return impl_->block_slots; }
size_t EmbeddingShard::block_bytes() const { return impl_->block_bytes; }

size_t EmbeddingShard::num_blocks() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->NumBlocks();
}

size_t EmbeddingShard::size() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->index.size();
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
    const size_t block = slot / s.block_slots;
    if (s.BlockMissing(block)) out.push_back(block);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

ShardMemoryStats EmbeddingShard::memory() const {
  Impl& s = *impl_;
  std::shared_lock<std::shared_mutex> lock(s.mutex);
  ShardMemoryStats m;
  m.live_rows = s.index.size();
  m.slots = s.high_water;
  m.record_bytes = s.record_bytes;
  for (const uint8_t* b : s.blocks) m.slot_bytes += b ? s.block_bytes : 0;
  m.slot_bytes -= s.released_count * s.block_bytes;  // emptied by passes and given back (ReleaseBlock)
  m.index_bytes = s.index.bytes();
  m.free_slots = s.free_slots.size();
  m.free_list_bytes = s.free_slots.capacity() * sizeof(uint32_t);
  return m;
}

// ---- training path ---------------------------------------------------------------------------

void EmbeddingShard::Pull(const int64_t* keys, size_t n, float* out, DeltaBatch* deltas) {
  if (!deltas) return PullTo(keys, n, out, nullptr);
  deltas->clear();  // also when the fast path below reports nothing
  deltas->record_bytes = impl_->record_bytes;
  IntoBatch sink(deltas);
  PullTo(keys, n, out, &sink);
}

void EmbeddingShard::Pull(const int64_t* keys, size_t n, float* out, DeltaSink& sink) { PullTo(keys, n, out, &sink); }

void EmbeddingShard::PullTo(const int64_t* keys, size_t n, float* out, DeltaSink* sink) {
  RequirePointer(keys, n, "Pull", "keys");
  RequirePointer(out, n, "Pull", "out");
  Impl& s = *impl_;
  const size_t dim = static_cast<size_t>(s.config.dim);
  TaskPool& pool = TaskPool::Shared();
  const size_t parts = pool.PartsFor(n, s.config.split_min_keys);
  {
    // Fast path: every key present, shared lock, nothing changes.
    std::shared_lock<std::shared_mutex> lock(s.mutex);
    if (!s.Restoring()) {
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
              if (s.admission && !s.Admitted(s.Record(slot))) ++zeros;  // pending: its value bytes are zero
              s.CopyValue(slot, out + i * dim);
              return true;
            },
            s.admission);
        if (zeros) zeros_all.fetch_add(zeros, std::memory_order_relaxed);
      });
      if (!absent.load(std::memory_order_relaxed)) {
        const uint64_t zeros = zeros_all.load(std::memory_order_relaxed);
        if (zeros) s.not_admitted.fetch_add(zeros, std::memory_order_relaxed);
        return;
      }
    }
  }
  // Some key is missing (or a block is under restore): redo the whole batch exclusively, so the
  // pull is atomic and its inserts happen in the order of first appearance.
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  DeltaBatch batch;
  DeltaBatch* deltas = nullptr;
  if (sink) {
    batch = sink->Begin(s.record_bytes);
    deltas = &batch;
  }
  s.DeltaStart(deltas, 0);
  s.PrepareBlocks(keys, n, /*may_insert=*/true);
  uint64_t zeros = 0;
  // Splitting here takes three hand-offs to the pool (lookups, new rows, copies) around the serial
  // inserts, worth it for larger batches only.
  const size_t min_keys = s.config.split_min_keys;
  const size_t split_parts = pool.PartsFor(n, min_keys > SIZE_MAX / 4 ? SIZE_MAX : 4 * min_keys);
  if (split_parts > 1 && !s.Restoring()) {
    // Split: the lookups over the parts, the inserts here in order of first appearance (what the one
    // pass below does), then the copies over the parts.
    std::vector<uint32_t> slots(n);
    pool.ForEachPart(split_parts, [&](size_t p) {
      const size_t lo = TaskPool::PartBegin(n, split_parts, p), hi = TaskPool::PartBegin(n, split_parts, p + 1);
      s.Resolve(keys + lo, hi - lo, 0, sizeof(int64_t), [&](size_t j, uint32_t slot) {
        slots[lo + j] = slot;
        return true;
      });
    });
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
    pool.ForEachPart(split_parts, [&](size_t p) {
      const size_t lo = TaskPool::PartBegin(n, split_parts, p), hi = TaskPool::PartBegin(n, split_parts, p + 1);
      constexpr size_t kAhead = 8;
      uint64_t part_zeros = 0;
      for (size_t i = lo; i < hi; ++i) {
        if (i + kAhead < hi && slots[i + kAhead] != KeyIndex::kNone)
          s.PrefetchRecord(slots[i + kAhead], 0, s.read_bytes);
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
    zeros = zeros_all.load(std::memory_order_relaxed);
  } else {
    s.Resolve(
        keys, n, 0, s.read_bytes,
        [&](size_t i, uint32_t slot) {
          if (slot == KeyIndex::kNone) {
            if (!s.PullInserts()) {
              std::memset(out + i * dim, 0, sizeof(float) * dim);
              ++zeros;
              return true;
            }
            slot = s.Insert(keys[i], deltas);
            if (s.policy_on) s.admitted.fetch_add(1, std::memory_order_relaxed);
          } else if (s.admission && !s.Admitted(s.Record(slot))) {
            ++zeros;
          }
          s.CopyValue(slot, out + i * dim);
          return true;
        },
        s.admission);
  }
  if (zeros) s.not_admitted.fetch_add(zeros, std::memory_order_relaxed);
  if (sink) sink->Record(std::move(batch));
}

namespace {

// A read-only pass over the slots of keys[0..n): under the shared lock, or, while blocks are under restore,
// under the write lock after faulting the keys' blocks in (a read of a block under restore is a degraded read).
template <typename Impl, typename Run>
void ReadPass(Impl& s, const int64_t* keys, size_t n, Run run) {
  {
    std::shared_lock<std::shared_mutex> lock(s.mutex);
    if (!s.Restoring()) return run();
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.PrepareBlocks(keys, n, /*may_insert=*/false);
  run();
}

}  // namespace

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
                                 int32_t* clocks, uint8_t* sent, DeltaBatch* deltas) {
  if (!deltas) return PullStaleTo(keys, n, known, staleness, rows, clocks, sent, nullptr);
  deltas->clear();  // also when the fast path reports nothing
  deltas->record_bytes = impl_->record_bytes;
  IntoBatch sink(deltas);
  return PullStaleTo(keys, n, known, staleness, rows, clocks, sent, &sink);
}

size_t EmbeddingShard::PullStale(const int64_t* keys, size_t n, const int32_t* known, uint32_t staleness, float* rows,
                                 int32_t* clocks, uint8_t* sent, DeltaSink& sink) {
  return PullStaleTo(keys, n, known, staleness, rows, clocks, sent, &sink);
}

size_t EmbeddingShard::PullStaleTo(const int64_t* keys, size_t n, const int32_t* known, uint32_t staleness, float* rows,
                                   int32_t* clocks, uint8_t* sent, DeltaSink* sink) {
  RequirePointer(keys, n, "PullStale", "keys");
  RequirePointer(known, n, "PullStale", "known");
  RequirePointer(rows, n, "PullStale", "rows");
  RequirePointer(clocks, n, "PullStale", "clocks");
  RequirePointer(sent, n, "PullStale", "sent");
  Impl& s = *impl_;
  const size_t dim = static_cast<size_t>(s.config.dim);
  size_t m = 0;
  // Answers key i at `slot` (present): its clock, and its row when the worker's copy is too old.
  auto answer = [&](size_t i, uint32_t slot, bool inserted) {
    const uint8_t* r = s.Record(slot);
    const uint32_t clock = RecordLayout::Clock(r);
    clocks[i] = static_cast<int32_t>(clock);
    const bool send =
        inserted || known[i] < 0 || RecordLayout::ClockBehind(clock, static_cast<uint32_t>(known[i])) > staleness;
    sent[i] = send;
    if (send) std::memcpy(rows + m++ * dim, r + RecordLayout::kValueOffset, sizeof(float) * dim);
  };
  // Answers key i that gets no record (row_policy.h): zeros, sent, clock -1 (nothing to cache against).
  auto absent = [&](size_t i) {
    clocks[i] = -1;
    sent[i] = 1;
    std::memset(rows + m++ * dim, 0, sizeof(float) * dim);
  };
  {
    // Fast path, as Pull's: every key present, shared lock, nothing changes.
    std::shared_lock<std::shared_mutex> lock(s.mutex);
    if (!s.Restoring()) {
      const bool inserts = s.PullInserts();
      uint64_t zeros = 0;
      const bool all = s.Resolve(
          keys, n, 0, s.read_bytes,
          [&](size_t i, uint32_t slot) {
            if (slot == KeyIndex::kNone) {
              if (inserts) return false;
              absent(i);
              ++zeros;
              return true;
            }
            if (s.admission && !s.Admitted(s.Record(slot))) ++zeros;
            answer(i, slot, false);
            return true;
          },
          s.admission);
      if (all) {
        if (zeros) s.not_admitted.fetch_add(zeros, std::memory_order_relaxed);
        return m;
      }
    }
  }
  // Some key is missing (or a block is under restore): redo the whole batch exclusively, as Pull does.
  m = 0;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  DeltaBatch batch;
  DeltaBatch* deltas = nullptr;
  if (sink) {
    batch = sink->Begin(s.record_bytes);
    deltas = &batch;
  }
  s.DeltaStart(deltas, 0);
  s.PrepareBlocks(keys, n, /*may_insert=*/true);
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
        answer(i, slot, inserted);
        return true;
      },
      s.admission);
  if (zeros) s.not_admitted.fetch_add(zeros, std::memory_order_relaxed);
  if (sink) sink->Record(std::move(batch));
  return m;
}

void EmbeddingShard::Push(const int64_t* keys, const float* grads, size_t n, int64_t step, DeltaBatch* deltas,
                          const uint32_t* repeats, int64_t ttl_before) {
  if (!deltas) return PushTo(keys, grads, n, step, nullptr, repeats, ttl_before);
  IntoBatch sink(deltas);
  PushTo(keys, grads, n, step, &sink, repeats, ttl_before);
}

void EmbeddingShard::Push(const int64_t* keys, const float* grads, size_t n, int64_t step, DeltaSink& sink,
                          const uint32_t* repeats, int64_t ttl_before) {
  PushTo(keys, grads, n, step, &sink, repeats, ttl_before);
}

void EmbeddingShard::PushTo(const int64_t* keys, const float* grads, size_t n, int64_t step, DeltaSink* sink,
                            const uint32_t* repeats, int64_t ttl_before) {
  RequirePointer(keys, n, "Push", "keys");
  RequirePointer(grads, n, "Push", "grads");
  RequireBatch(n, "Push");
  if (step < 1)
    throw std::invalid_argument("Push: step must be >= 1 (the 1-based global step), got " + std::to_string(step));
  if (ttl_before < 0 || ttl_before > step)
    throw std::invalid_argument("Push: ttl_before must be in [0, step = " + std::to_string(step) +
                                "] (records last updated before it go at the pass), got " + std::to_string(ttl_before) +
                                "; nothing was applied");
  if (repeats) {
    RequirePointer(repeats, n, "Push", "repeats");
    for (size_t i = 0; i < n; ++i) {
      if (repeats[i] < 1 || repeats[i] > kMaxRepeats)
        throw std::invalid_argument("Push: repeats[" + Str(i) + "] is " + std::to_string(repeats[i]) +
                                    ": each must be in [1, " + std::to_string(kMaxRepeats) +
                                    "] (how many gradients grads[i] sums); nothing was applied");
    }
  }
  Impl& s = *impl_;
  const size_t dim = static_cast<size_t>(s.config.dim);
  // Sum duplicates in order of appearance, from 0 as TF's unsorted_segment_sum does, into a private
  // buffer (outside the lock), checking finiteness in the same pass over the gradients; nothing of
  // the shard is touched before the whole batch is known to be valid.
  std::vector<int64_t> unique_keys;
  unique_keys.reserve(n);
  std::unique_ptr<float[]> sums;
  std::vector<uint32_t> counts;  // with repeats: optimizer steps per unique key
  {
    std::vector<uint32_t> position(n);
    bool ascending = true;  // a worker's batch keys come sorted and unique: nothing to find
    for (size_t i = 1; i < n && ascending; ++i) ascending = keys[i] > keys[i - 1];
    if (ascending) {
      unique_keys.assign(keys, keys + n);
      std::iota(position.begin(), position.end(), 0u);
    } else {
      BatchDedup dedup(n);
      for (size_t i = 0; i < n; ++i) {
        const int64_t u = dedup.FindOrAdd(unique_keys.data(), keys[i], static_cast<int64_t>(unique_keys.size()));
        if (static_cast<size_t>(u) == unique_keys.size()) unique_keys.push_back(keys[i]);
        position[i] = static_cast<uint32_t>(u);
      }
    }
    sums.reset(new float[unique_keys.size() * dim]);
    uint32_t non_finite = 0;
    uint32_t next_new = 0;  // positions of first appearances come in increasing order
    for (size_t i = 0; i < n; ++i) {
      float* sum = sums.get() + static_cast<size_t>(position[i]) * dim;
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
    if (repeats) {
      counts.assign(unique_keys.size(), 0);
      for (size_t i = 0; i < n; ++i) counts[position[i]] += repeats[i];
      for (size_t u = 0; u < counts.size(); ++u) {
        if (counts[u] > kMaxRepeats)
          throw std::invalid_argument("Push: key " + std::to_string(unique_keys[u]) + " repeats " +
                                      std::to_string(counts[u]) + " times in all, more than " +
                                      std::to_string(kMaxRepeats) + "; nothing was applied");
        if (counts[u] > 1) {  // c steps of the mean: the sum scaled once, before any step
          const float inv = 1.0f / static_cast<float>(counts[u]);
          float* sum = sums.get() + u * dim;
          for (size_t j = 0; j < dim; ++j) sum[j] *= inv;
        }
      }
    }
    if (non_finite) {
      for (size_t i = 0; i < n * dim; ++i) {
        if (!std::isfinite(grads[i])) {
          throw std::invalid_argument("Push: grads[" + Str(i / dim) + ", " + Str(i % dim) + "] is " +
                                      (std::isnan(grads[i]) ? "NaN" : "infinite") +
                                      ": gradients must be finite; nothing was applied");
        }
      }
    }
  }
  const size_t m = unique_keys.size();

  std::unique_lock<std::shared_mutex> lock(s.mutex);
  DeltaBatch batch;
  DeltaBatch* deltas = nullptr;
  if (sink) {
    batch = sink->Begin(s.record_bytes);
    deltas = &batch;
  }
  s.PrepareBlocks(unique_keys.data(), m, /*may_insert=*/true);
  const int64_t every = s.config.row_policy.evict_every_steps;
  const bool pass = s.policy_on && every > 0 && step % every == 0;
  if (pass) s.EnsureAllBlocks();  // the pass reads every block: fault them in before any byte changes
  s.BeginSketch();
  s.DeltaStart(deltas, m);
  TaskPool& pool = TaskPool::Shared();
  const size_t parts = pool.PartsFor(m, s.config.split_min_keys);
  if (parts > 1 && !s.policy_on && counts.empty() && !s.Restoring()) {
    s.PushSplit(unique_keys.data(), sums.get(), m, step, deltas, pool, parts);
    if (sink) sink->Record(std::move(batch));
    return;
  }
  // One pass: each unique key's record (prefetched whole by Resolve) is inserted if missing, in order
  // of first appearance, then stepped in chunks of kChunk rows while still in cache; a chunk lets
  // step-wide constants (Adam's bias correction) be computed once per chunk, not per row.
  constexpr size_t kChunk = 16;
  float* values[kChunk];
  float* states[kChunk];
  uint32_t chunk_slots[kChunk];
  size_t chunk_deltas[kChunk];
  bool chunk_copy[kChunk];      // the old record is still to be copied into its delta
  size_t chunk_u[kChunk];       // the unique index of each row (consecutive unless rules skip keys)
  uint32_t chunk_uses[kChunk];  // row rules: occurrences still to count once the old record is copied (0: none)
  float* round_values[kChunk];  // with repeats: the rows of a chunk that take one more step
  float* round_states[kChunk];
  std::unique_ptr<float[]> round_grads(counts.empty() ? nullptr : new float[kChunk * dim]);
  // With row rules a chunk's rows need not be consecutive unique keys: their gradients are gathered.
  std::unique_ptr<float[]> chunk_grads(s.policy_on ? new float[kChunk * dim] : nullptr);
  size_t rows = 0, first = 0;  // rows pending in the chunk, and the unique index of its first row
  uint64_t dropped = 0;        // keys whose gradient the rules dropped
  auto step_chunk = [&]() {
    if (deltas) {
      for (size_t r = 0; r < rows; ++r)
        if (chunk_copy[r]) s.DeltaCopy(deltas, chunk_deltas[r], chunk_slots[r]);
    }
    const float* grads_of_chunk = sums.get() + first * dim;
    if (s.policy_on) {
      if (chunk_u[rows - 1] - chunk_u[0] == rows - 1) {  // no key skipped: the sums are in place
        grads_of_chunk = sums.get() + chunk_u[0] * dim;
      } else {
        for (size_t r = 0; r < rows; ++r) {
          std::memcpy(chunk_grads.get() + r * dim, sums.get() + chunk_u[r] * dim, dim * sizeof(float));
        }
        grads_of_chunk = chunk_grads.get();
      }
    }
    s.optimizer->ApplyRows(values, states, grads_of_chunk, rows, s.config.dim, step);
    if (s.policy_on) {  // the rows' uses are counted here, after their old records were copied
      for (size_t r = 0; r < rows; ++r) {
        uint8_t* rec = reinterpret_cast<uint8_t*>(values[r]) - RecordLayout::kValueOffset;
        RecordLayout::SetFlags(rec, RecordLayout::Ticked(RecordLayout::Flags(rec)));
        if (chunk_uses[r]) s.CountUse(rec, chunk_uses[r], step);
      }
    } else {
      for (size_t r = 0; r < rows; ++r) s.Tick(chunk_slots[r]);
    }
    if (!counts.empty()) {  // the further steps of rows standing for several gradients, one round at a time
      uint32_t most = 1;
      for (size_t r = 0; r < rows; ++r) most = std::max(most, counts[chunk_u[r]]);
      for (uint32_t round = 2; round <= most; ++round) {
        size_t m2 = 0;
        for (size_t r = 0; r < rows; ++r) {
          if (counts[chunk_u[r]] < round) continue;
          round_values[m2] = values[r];
          round_states[m2] = states[r];
          std::memcpy(round_grads.get() + m2 * dim, sums.get() + chunk_u[r] * dim, dim * sizeof(float));
          s.Tick(chunk_slots[r]);
          ++m2;
        }
        s.optimizer->ApplyRows(round_values, round_states, round_grads.get(), m2, s.config.dim, step);
      }
    }
    if (s.track_dirty) {
      for (size_t r = 0; r < rows; ++r) s.MarkDirty(chunk_slots[r]);
    }
    if (deltas) {
      for (size_t r = 0; r < rows; ++r) s.DeltaEnd(deltas, chunk_deltas[r], chunk_slots[r]);
    }
    first += rows;
    rows = 0;
  };
  constexpr size_t kCellsAhead = 8;
  s.Resolve(unique_keys.data(), m, 0, s.record_bytes, [&](size_t u, uint32_t slot) {
    if (s.sketch && u + kCellsAhead < m) s.PrefetchCells(unique_keys[u + kCellsAhead]);
    if (s.policy_on) {
      // Row rules (row_policy.h): count the occurrence; a key without a row after it is not stepped.
      const uint32_t c = counts.empty() ? 1u : counts[u];
      uint8_t* rec = slot == KeyIndex::kNone ? nullptr : s.Record(slot);
      size_t d = 0;
      bool copy = false;
      uint32_t uses_later = 0;
      if (slot == KeyIndex::kNone && s.sketch) {
        // The sketch counter: the id gets its row when its estimate reaches min_count (and the cap has room);
        // else only its cells count the occurrence, and it costs no record.
        size_t cells[Impl::kMaxDepth];
        s.CellsOf(unique_keys[u], cells);
        const uint32_t estimate = std::min<uint32_t>(s.Estimate(cells) + c, RowPolicyConfig::kSketchMaxCount);
        if (estimate < s.min_count || s.Full()) {
          s.RaiseCells(deltas, cells, estimate);
          ++dropped;
          return true;
        }
        slot = s.AllocateSlot();
        d = s.DeltaBegin(deltas, slot);
        s.WriteNew(slot, unique_keys[u], nullptr, nullptr);
        s.admitted.fetch_add(1, std::memory_order_relaxed);
        s.CountUse(s.Record(slot), estimate, step);
      } else if (slot == KeyIndex::kNone) {
        if (s.Full()) {
          ++dropped;
          return true;
        }
        slot = s.AllocateSlot();
        d = s.DeltaBegin(deltas, slot);
        if (s.min_count <= 1) {
          s.WriteNew(slot, unique_keys[u], nullptr, nullptr);
          s.admitted.fetch_add(1, std::memory_order_relaxed);
          s.CountUse(s.Record(slot), c, step);
        } else {
          s.WritePending(slot, unique_keys[u], c, step);
          if (s.Uses(s.Record(slot)) >= s.min_count) {
            s.Admit(slot, unique_keys[u]);
          } else {
            s.DeltaEnd(deltas, d, slot);
            ++dropped;
            return true;
          }
        }
      } else if (s.Admitted(rec)) {
        // A row (the common case): its old record is copied and its use counted in the chunk, as an
        // unruled row's copy is (copying at once stalls on the record's prefetch).
        if (deltas) d = s.DeltaReserve(deltas, slot);
        copy = true;
        uses_later = c;
      } else {
        d = s.DeltaBegin(deltas, slot);
        s.CountUse(rec, c, step);  // a pending id
        if (s.Uses(rec) >= s.min_count) {
          s.Admit(slot, unique_keys[u]);
        } else {
          s.Tick(slot);  // its count changed: a new version
          s.DeltaEnd(deltas, d, slot);
          ++dropped;
          return true;
        }
      }
      if (!rec) rec = s.Record(slot);
      chunk_deltas[rows] = d;
      chunk_copy[rows] = copy;
      chunk_uses[rows] = uses_later;
      chunk_u[rows] = u;
      chunk_slots[rows] = slot;
      values[rows] = s.Value(rec);
      states[rows] = s.State(rec);
      if (++rows == kChunk) step_chunk();
      return true;
    }
    chunk_u[rows] = u;
    if (slot == KeyIndex::kNone) {
      slot = s.AllocateSlot();
      chunk_deltas[rows] = s.DeltaBegin(deltas, slot);  // from the all-zero free record
      chunk_copy[rows] = false;
      s.WriteNew(slot, unique_keys[u], nullptr, nullptr);
    } else {
      if (deltas) chunk_deltas[rows] = s.DeltaReserve(deltas, slot);
      chunk_copy[rows] = true;
    }
    uint8_t* rec = s.Record(slot);
    chunk_slots[rows] = slot;
    values[rows] = s.Value(rec);
    states[rows] = s.State(rec);
    if (++rows == kChunk) step_chunk();
    return true;
  });
  if (rows) step_chunk();
  if (dropped) s.not_admitted.fetch_add(dropped, std::memory_order_relaxed);
  if (s.sketch) {  // the sketch's aging at its step cadence, after this push's counting (row_policy.h)
    const int64_t decay = s.config.row_policy.sketch_decay_every_steps;
    if (decay > 0 && step % decay == 0) s.HalveCells(deltas);
    s.FinishSketch(deltas);
  }
  // A pass at the step boundary (row_policy.h), in this push's deltas: every path a push takes to parity
  // (and a replayed push) carries it. Slots it frees are reused from the next call on.
  if (pass) s.EvictPass(step, deltas, /*merge=*/true, ttl_before);
  if (sink) sink->Record(std::move(batch));
}

size_t EmbeddingShard::Erase(const int64_t* keys, size_t n, DeltaBatch* deltas) {
  RequirePointer(keys, n, "Erase", "keys");
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.PrepareBlocks(keys, n, /*may_insert=*/false);
  s.DeltaStart(deltas, 0);
  size_t erased = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = s.index.Erase(keys[i], [&s](uint32_t sl) { return s.KeyAt(sl); });
    if (slot == KeyIndex::kNone) continue;
    const size_t d = s.DeltaBegin(deltas, slot);
    std::memset(s.Record(slot), 0, s.record_bytes);
    s.DeltaEnd(deltas, d, slot);
    s.free_slots.push_back(slot);
    std::push_heap(s.free_slots.begin(), s.free_slots.end(), std::greater<uint32_t>());
    ++erased;
  }
  return erased;
}

// ---- bounded tables ----------------------------------------------------------------------------

EmbeddingShard::Eviction EmbeddingShard::Evict(int64_t now_step, DeltaBatch* deltas) {
  if (!deltas) return EvictTo(now_step, nullptr);
  IntoBatch sink(deltas);
  return EvictTo(now_step, &sink);
}

EmbeddingShard::Eviction EmbeddingShard::Evict(int64_t now_step, DeltaSink& sink) { return EvictTo(now_step, &sink); }

EmbeddingShard::Eviction EmbeddingShard::EvictTo(int64_t now_step, DeltaSink* sink) {
  if (now_step < 1) {
    throw std::invalid_argument("Evict: now_step must be >= 1 (the 1-based global step), got " +
                                std::to_string(now_step));
  }
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  DeltaBatch batch;
  DeltaBatch* deltas = nullptr;
  if (sink) {
    batch = sink->Begin(s.record_bytes);
    deltas = &batch;
  }
  s.DeltaStart(deltas, 0);
  Eviction out = s.EvictPass(now_step, deltas, /*merge=*/false);
  if (sink) sink->Record(std::move(batch));
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
  std::shared_lock<std::shared_mutex> lock(s.mutex);
  if (!s.policy_on || s.Restoring()) {  // under restore the words are not all here: count records as rows
    out.rows = s.index.size();
    return out;
  }
  for (size_t slot = 0; slot < s.high_water; ++slot) {
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
                                     DeltaBatch* deltas) {
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
  {
    BatchDedup dedup(n);
    for (size_t i = 0; i < n; ++i) {
      if (dedup.FindOrAdd(keys, keys[i], static_cast<int64_t>(i)) != static_cast<int64_t>(i)) {
        throw std::invalid_argument("LoadPolicyWords: keys must be unique, key " + std::to_string(keys[i]) +
                                    " appears twice (at " + Str(i) + ")");
      }
    }
  }
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
}

EmbeddingShard::Rows EmbeddingShard::ExportPending() const {
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);  // exclusive: under restore blocks are faulted in
  s.EnsureAllBlocks();
  Rows rows;
  if (!s.policy_on) return rows;
  for (size_t slot = 0; slot < s.high_water; ++slot) {
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
                                 DeltaBatch* deltas) {
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
  {
    BatchDedup dedup(n);
    for (size_t i = 0; i < n; ++i) {
      if (dedup.FindOrAdd(keys, keys[i], static_cast<int64_t>(i)) != static_cast<int64_t>(i)) {
        throw std::invalid_argument("LoadPending: keys must be unique, key " + std::to_string(keys[i]) +
                                    " appears twice (at " + Str(i) + ")");
      }
    }
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  for (size_t i = 0; i < n; ++i) {
    if (s.Lookup(keys[i]) != KeyIndex::kNone) {
      throw std::invalid_argument("LoadPending: key " + std::to_string(keys[i]) +
                                  " already has a record; nothing was changed");
    }
  }
  s.PrepareBlocks(keys, n, /*may_insert=*/true);
  s.DeltaStart(deltas, n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = s.AllocateSlot();
    const size_t d = s.DeltaBegin(deltas, slot);
    s.WritePending(slot, keys[i], uses[i], last_step[i]);
    s.DeltaEnd(deltas, d, slot);
  }
}

// ---- export / import -------------------------------------------------------------------------

EmbeddingShard::Rows EmbeddingShard::Export() const {
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> exclusive(s.mutex, std::defer_lock);
  std::shared_lock<std::shared_mutex> shared(s.mutex, std::defer_lock);
  shared.lock();
  if (s.Restoring()) {
    shared.unlock();
    exclusive.lock();
    s.EnsureAllBlocks();
  }
  Rows rows;
  const size_t dim = s.config.dim, sf = s.layout.state_floats, live = s.index.size();
  rows.keys.reserve(live);
  rows.values.reserve(live * dim);
  rows.state.reserve(live * sf);
  for (size_t slot = 0; slot < s.high_water; ++slot) {
    uint8_t* r = s.Record(slot);
    if (!RecordLayout::IsLive(RecordLayout::Flags(r)) || !s.Admitted(r)) continue;
    s.AppendRow(r, &rows);
  }
  return rows;
}

void EmbeddingShard::TrackDirty(bool on) {
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.track_dirty = on;
  s.dirty.clear();
  s.dirty_slots.clear();
}

bool EmbeddingShard::tracking_dirty() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->track_dirty;
}

EmbeddingShard::Rows EmbeddingShard::TakeDirty() {
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  if (!s.track_dirty) throw std::logic_error("TakeDirty: dirty tracking is off (TrackDirty(true) first)");
  if (s.Restoring()) s.EnsureAllBlocks();
  std::sort(s.dirty_slots.begin(), s.dirty_slots.end());  // slot order, as Export
  Rows rows;
  for (const uint32_t slot : s.dirty_slots) {
    s.dirty[slot] = 0;
    uint8_t* r = s.Record(slot);
    if (!RecordLayout::IsLive(RecordLayout::Flags(r))) continue;  // erased since: its slot is free
    if (!s.Admitted(r)) continue;                                 // a pending id: no row
    s.AppendRow(r, &rows);
  }
  s.dirty_slots.clear();
  return rows;
}

void EmbeddingShard::Load(const int64_t* keys, const float* values, const float* state, size_t n, DeltaBatch* deltas) {
  if (!deltas) return LoadTo(keys, values, state, n, nullptr);
  IntoBatch sink(deltas);
  LoadTo(keys, values, state, n, &sink);
}

void EmbeddingShard::Load(const int64_t* keys, const float* values, const float* state, size_t n, DeltaSink& sink) {
  LoadTo(keys, values, state, n, &sink);
}

void EmbeddingShard::LoadTo(const int64_t* keys, const float* values, const float* state, size_t n, DeltaSink* sink) {
  RequirePointer(keys, n, "Load", "keys");
  RequirePointer(values, n, "Load", "values");
  RequireBatch(n, "Load");
  Impl& s = *impl_;
  const size_t dim = s.config.dim, sf = s.layout.state_floats;
  for (size_t i = 0; i < n * dim; ++i) {
    if (!std::isfinite(values[i])) {
      throw std::invalid_argument("Load: values[" + Str(i / dim) + ", " + Str(i % dim) + "] is not finite");
    }
  }
  if (state) {
    for (size_t i = 0; i < n * sf; ++i) {
      if (!std::isfinite(state[i])) {
        throw std::invalid_argument("Load: state[" + Str(i / sf) + ", " + Str(i % sf) + "] is not finite");
      }
    }
  }
  {
    BatchDedup dedup(n);
    for (size_t i = 0; i < n; ++i) {
      if (dedup.FindOrAdd(keys, keys[i], static_cast<int64_t>(i)) != static_cast<int64_t>(i)) {
        throw std::invalid_argument("Load: keys must be unique, key " + std::to_string(keys[i]) +
                                    " appears twice (at " + Str(i) + ")");
      }
    }
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  // A stage (StageLoadWords) is consumed by this load; its pending ids must be new to the shard and the load.
  auto words = std::move(s.staged_words);
  auto pending_keys = std::move(s.staged_pending_keys);
  auto pending_uses = std::move(s.staged_pending_uses);
  auto pending_steps = std::move(s.staged_pending_steps);
  auto sketch_cells = std::move(s.staged_sketch);
  s.staged_sketch.clear();
  s.staged_words.clear();
  s.staged_pending_keys.clear();
  s.staged_pending_uses.clear();
  s.staged_pending_steps.clear();
  if (!pending_keys.empty()) {
    const std::unordered_set<int64_t> loaded(keys, keys + n);
    for (const int64_t key : pending_keys) {
      if (s.Lookup(key) != KeyIndex::kNone || loaded.count(key)) {
        throw std::invalid_argument("Load: staged pending id " + std::to_string(key) +
                                    " already has a record or is loaded as a row; nothing was changed");
      }
    }
  }
  DeltaBatch batch;
  DeltaBatch* deltas = nullptr;
  if (sink) {
    batch = sink->Begin(s.record_bytes);
    deltas = &batch;
  }
  s.PrepareBlocks(keys, n, /*may_insert=*/true);
  if (!pending_keys.empty()) s.EnsureAllBlocks();  // inserts beyond the batch's own: every block at hand
  if (!sketch_cells.empty()) s.BeginSketch();
  s.DeltaStart(deltas, n + pending_keys.size());
  auto staged_words_of = [&](uint8_t* r, int64_t key) {
    if (words.empty()) return;
    const auto found = words.find(key);
    if (found == words.end()) return;
    s.SetWord<uint32_t>(r, RecordLayout::kUsesOffset, found->second.first);
    s.SetWord<int64_t>(r, RecordLayout::kLastStepOffset, found->second.second);
  };
  for (size_t i = 0; i < n; ++i) {
    const float* v = values + i * dim;
    const float* st = state ? state + i * sf : nullptr;
    const uint32_t slot = s.Lookup(keys[i]);
    if (slot == KeyIndex::kNone) {
      const uint32_t fresh = s.AllocateSlot();
      const size_t d = s.DeltaBegin(deltas, fresh);
      s.WriteNew(fresh, keys[i], v, st);
      staged_words_of(s.Record(fresh), keys[i]);
      s.DeltaEnd(deltas, d, fresh);
      continue;
    }
    const size_t d = s.DeltaBegin(deltas, slot);
    s.MarkDirty(slot);
    uint8_t* r = s.Record(slot);
    std::memcpy(s.Value(r), v, sizeof(float) * dim);
    if (st) {
      std::memcpy(s.State(r), st, sizeof(float) * sf);
    } else {
      s.optimizer->InitState(s.State(r), s.config.dim);
    }
    if (s.policy_on) s.SetWord<uint32_t>(r, RecordLayout::kAdmittedOffset, 1);  // a pending id becomes a row
    staged_words_of(r, keys[i]);
    s.Tick(slot);
    s.DeltaEnd(deltas, d, slot);
  }
  for (size_t i = 0; i < pending_keys.size(); ++i) {
    const uint32_t slot = s.AllocateSlot();
    const size_t d = s.DeltaBegin(deltas, slot);
    s.WritePending(slot, pending_keys[i], pending_uses[i], pending_steps[i]);
    s.DeltaEnd(deltas, d, slot);
  }
  if (!sketch_cells.empty()) {
    s.AddCells(deltas, sketch_cells.data());
    s.FinishSketch(deltas);
  }
  if (sink) sink->Record(std::move(batch));
}

// ---- the sketch counter ----------------------------------------------------------------------

size_t EmbeddingShard::sketch_slots() const { return impl_->sketch_slots; }

namespace {

void RequireSketch(const RowPolicyConfig& rules, size_t n, const char* what) {
  if (!rules.sketch()) {
    throw std::invalid_argument(std::string(what) +
                                ": the table has no sketch counter (row_policy.admit_counter is not sketch)");
  }
  if (n != rules.sketch_cells()) {
    throw std::invalid_argument(std::string(what) + ": got " + Str(n) + " cells, the sketch has sketch_width * " +
                                "sketch_depth = " + Str(rules.sketch_cells()) +
                                " (a save of a table with another sketch shape cannot be loaded); nothing was changed");
  }
}

}  // namespace

std::vector<uint16_t> EmbeddingShard::ExportSketch() const {
  Impl& s = *impl_;
  std::unique_lock<std::shared_mutex> lock(s.mutex);  // exclusive: under restore the cells are faulted in
  std::vector<uint16_t> out;
  if (!s.sketch) return out;
  s.EnsureSketch();
  out.resize(s.config.row_policy.sketch_cells());
  for (size_t cell = 0; cell < out.size(); ++cell) out[cell] = s.Cell(cell);
  return out;
}

void EmbeddingShard::LoadSketch(const uint16_t* cells, size_t n, DeltaBatch* deltas) {
  RequirePointer(cells, n, "LoadSketch", "cells");
  Impl& s = *impl_;
  RequireSketch(s.config.row_policy, n, "LoadSketch");
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.BeginSketch();
  s.DeltaStart(deltas, s.sketch_slots);
  s.AddCells(deltas, cells);
  s.FinishSketch(deltas);
}

void EmbeddingShard::StageSketch(const uint16_t* cells, size_t n) {
  RequirePointer(cells, n, "StageSketch", "cells");
  Impl& s = *impl_;
  RequireSketch(s.config.row_policy, n, "StageSketch");
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.staged_sketch.assign(cells, cells + n);
}

void EmbeddingShard::SketchEstimate(const int64_t* keys, size_t n, uint32_t* out) const {
  RequirePointer(keys, n, "SketchEstimate", "keys");
  RequirePointer(out, n, "SketchEstimate", "out");
  Impl& s = *impl_;
  RequireSketch(s.config.row_policy, s.config.row_policy.sketch_cells(), "SketchEstimate");
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.EnsureSketch();
  for (size_t i = 0; i < n; ++i) out[i] = s.Estimate(keys[i]);
}

void EmbeddingShard::StageLoadWords(const int64_t* keys, const uint32_t* uses, const int64_t* last_step, size_t n,
                                    const int64_t* pending_keys, const uint32_t* pending_uses,
                                    const int64_t* pending_last_step, size_t pending_n) {
  RequirePointer(keys, n, "StageLoadWords", "keys");
  RequirePointer(uses, n, "StageLoadWords", "uses");
  RequirePointer(last_step, n, "StageLoadWords", "last_step");
  RequirePointer(pending_keys, pending_n, "StageLoadWords", "pending_keys");
  RequirePointer(pending_uses, pending_n, "StageLoadWords", "pending_uses");
  RequirePointer(pending_last_step, pending_n, "StageLoadWords", "pending_last_step");
  Impl& s = *impl_;
  if (!s.policy_on && (n != 0 || pending_n != 0)) {
    throw std::invalid_argument("StageLoadWords: the table has no row rules (row_policy), so no policy words");
  }
  if (pending_n != 0 && (s.min_count <= 1 || s.sketch)) {
    throw std::invalid_argument(
        "StageLoadWords: the table has no admission or counts with a sketch, so no pending ids");
  }
  std::unordered_map<int64_t, std::pair<uint32_t, int64_t>> words;
  words.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (last_step[i] < 0) {
      throw std::invalid_argument("StageLoadWords: last_step[" + Str(i) + "] is " + std::to_string(last_step[i]) +
                                  ", must be >= 0");
    }
    if (!words.emplace(keys[i], std::make_pair(uses[i], last_step[i])).second) {
      throw std::invalid_argument("StageLoadWords: key " + std::to_string(keys[i]) + " appears twice");
    }
  }
  std::unordered_map<int64_t, size_t> seen;
  for (size_t i = 0; i < pending_n; ++i) {
    if (pending_uses[i] < 1 || static_cast<int64_t>(pending_uses[i]) >= s.min_count || pending_last_step[i] < 0) {
      throw std::invalid_argument("StageLoadWords: pending id " + std::to_string(pending_keys[i]) + " has uses " +
                                  std::to_string(pending_uses[i]) +
                                  " (must be in [1, admit_min_count)) and "
                                  "last_step " +
                                  std::to_string(pending_last_step[i]) + " (must be >= 0)");
    }
    if (!seen.emplace(pending_keys[i], i).second || words.count(pending_keys[i])) {
      throw std::invalid_argument("StageLoadWords: pending id " + std::to_string(pending_keys[i]) +
                                  " appears twice or also as a row");
    }
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.staged_words = std::move(words);
  s.staged_pending_keys.assign(pending_keys, pending_keys + pending_n);
  s.staged_pending_uses.assign(pending_uses, pending_uses + pending_n);
  s.staged_pending_steps.assign(pending_last_step, pending_last_step + pending_n);
}

// ---- raw slot access -------------------------------------------------------------------------

void EmbeddingShard::ReadBlock(size_t b, uint8_t* out) const {
  RequirePointer(out, 1, "ReadBlock", "out");
  Impl& s = *impl_;
  {
    std::shared_lock<std::shared_mutex> lock(s.mutex);
    if (b >= s.NumBlocks()) {
      std::memset(out, 0, s.block_bytes);
      return;
    }
    if (!s.BlockMissing(b)) {
      std::memcpy(out, s.blocks[b], s.block_bytes);
      return;
    }
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  s.EnsureBlock(b);
  std::memcpy(out, s.blocks[b], s.block_bytes);
}

void EmbeddingShard::ReadSlots(size_t slot, size_t count, uint8_t* out) const {
  RequirePointer(out, count, "ReadSlots", "out");
  Impl& s = *impl_;
  auto run = [&]() {
    const size_t nb = s.NumBlocks();
    size_t done = 0;
    while (done < count) {
      const size_t at = slot + done;
      const size_t b = at / s.block_slots, within = at % s.block_slots;
      const size_t take = std::min(count - done, s.block_slots - within);
      uint8_t* dst = out + done * s.record_bytes;
      if (b < nb && b < s.blocks.size() && s.blocks[b]) {
        std::memcpy(dst, s.blocks[b] + within * s.record_bytes, take * s.record_bytes);
      } else {
        std::memset(dst, 0, take * s.record_bytes);
      }
      done += take;
    }
  };
  if (slot + count < slot) throw std::out_of_range("ReadSlots: slot + count overflows");
  {
    std::shared_lock<std::shared_mutex> lock(s.mutex);
    if (!s.Restoring()) return run();
  }
  std::unique_lock<std::shared_mutex> lock(s.mutex);
  if (count > 0) {
    const size_t first = slot / s.block_slots, last = (slot + count - 1) / s.block_slots;
    for (size_t b = first; b <= last && b < s.NumBlocks(); ++b) s.EnsureBlock(b);
  }
  run();
}

// ---- restore ---------------------------------------------------------------------------------

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
  // Build everything aside first: a bad argument leaves the shard untouched.
  // A sketch's reserved slots stay reserved (row_policy.h): never a key's, never free, always restored.
  const size_t reserved = s.sketch_slots;
  high_water = std::max(high_water, reserved);
  std::vector<int64_t> restore_keys(high_water, 0);
  std::vector<uint8_t> restore_live(high_water, 0);
  KeyIndex index;
  index.Reserve(n);
  auto key_of = [&restore_keys](uint32_t sl) { return restore_keys[sl]; };
  for (size_t i = 0; i < n; ++i) {
    if (slots[i] >= high_water) {
      throw std::invalid_argument("BeginRestore: slots[" + Str(i) + "] = " + Str(slots[i]) +
                                  " is not below high_water " + Str(high_water));
    }
    if (restore_live[slots[i]]) {
      throw std::invalid_argument("BeginRestore: slot " + Str(slots[i]) + " appears twice");
    }
    if (slots[i] < reserved) {
      throw std::invalid_argument("BeginRestore: slot " + Str(slots[i]) +
                                  " is one of the sketch's reserved slots [0, " + Str(reserved) + ")");
    }
    if (index.Find(keys[i], key_of) != KeyIndex::kNone) {
      throw std::invalid_argument("BeginRestore: key " + std::to_string(keys[i]) + " appears twice");
    }
    restore_keys[slots[i]] = keys[i];
    restore_live[slots[i]] = 1;
    index.Insert(keys[i], slots[i]);
  }
  std::vector<uint32_t> free_slots;
  free_slots.reserve(high_water - n);
  for (size_t slot = reserved; slot < high_water; ++slot) {
    if (!restore_live[slot]) free_slots.push_back(static_cast<uint32_t>(slot));  // ascending: a min-heap
  }

  std::unique_lock<std::shared_mutex> lock(s.mutex);
  if (s.high_water != reserved || s.index.size() != 0 || s.Restoring()) {
    throw std::invalid_argument("BeginRestore: the shard must be new and empty (it holds " + Str(s.index.size()) +
                                " rows, " + Str(s.high_water) + " slots)");
  }
  s.high_water = high_water;
  const size_t nb = s.NumBlocks();
  s.blocks.clear();
  s.blocks.resize(nb);
  s.index = std::move(index);
  s.free_slots = std::move(free_slots);
  if (nb == 0) return;
  s.missing.assign(nb, 1);
  s.missing_count = nb;
  s.restore_keys = std::move(restore_keys);
  s.restore_live = std::move(restore_live);
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
  if (!s.blocks[b]) s.blocks[b] = s.AllocateBlock();
  std::memcpy(s.blocks[b], bytes, s.block_bytes);
  s.MarkRestored(b);
  return true;
}

}  // namespace xdl_ec
