// One shard of one embedding table: int64 keys mapped to rows that live in stable slots.
//
// Storage is a slot array cut into fixed blocks of `block_slots` records (a SlotStore, slot_store.h); a
// key index (open addressing) maps key -> slot beside it. A slot never moves while its key lives,
// so parity over the block bytes stays valid across inserts elsewhere; freed slots are reused, the
// lowest free slot first, so what a shard does next is a function of its bytes alone (a restored
// shard continues exactly as the lost one would have).
// Blocks are the unit of parity striping and of recovery.
//
// Thread safety: every public method is safe to call from several threads; each batch call is
// atomic with respect to the others (a reader/writer lock), so concurrent calls give the result
// of some serial order.
//
// Deltas: every operation that may change bytes takes its deltas one way, a DeltaSink* (delta_sink.h; null:
// none, at no cost), into which it records, under the write lock, old XOR new of each slot it touched (each
// slot once); a pull of keys that all exist records nothing. On the training path the sink is
// DeltaForwarder::Mutation (parity maintenance); DeltaBatchSink (delta_batch_sink.h) hands them to a caller.
// The operations are implemented one file each (cpp/src/embedding_shard_impl.h lists them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "xdl_ec/delta_sink.h"
#include "xdl_ec/initializer.h"
#include "xdl_ec/optimizer.h"
#include "xdl_ec/record_layout.h"
#include "xdl_ec/row_policy.h"
#include "xdl_ec/spill_tier.h"

namespace xdl_ec {

struct ShardConfig {
  int dim = 8;
  OptimizerConfig optimizer;
  InitializerConfig initializer;
  uint64_t seed = 0;
  uint32_t block_slots = 1024;  // records per block: the stripe unit of parity
  RowPolicyConfig row_policy;   // admission / eviction (row_policy.h); the default has no rules
  // A pull or push of at least this many keys splits its lookups, copies and optimizer steps over
  // TaskPool::Shared()'s threads (results and deltas are the same bytes either way); SIZE_MAX: never.
  size_t split_min_keys = 2048;
  // The disk tier (spill_tier.h): with a budget (bytes, > 0) the records live in a file under spill_dir and
  // at most about memory_budget bytes of rows, key index and slot lists stay in RAM; 0: all in RAM. The
  // bytes, and so every result, are the same either way.
  size_t memory_budget = 0;
  std::string spill_dir;

  void Validate() const;  // throws std::invalid_argument naming the bad field
};

struct ShardMemoryStats {
  SpillStats spill;  // the disk tier's counts (all zero without one)
  size_t live_rows = 0;
  size_t slots = 0;            // slot array length (high-water mark), live or free
  size_t record_bytes = 0;     // bytes of one record
  size_t slot_bytes = 0;       // bytes held by allocated blocks
  size_t index_bytes = 0;      // bytes held by the key index
  size_t free_slots = 0;       // slots below the high-water mark waiting for reuse
  size_t free_list_bytes = 0;  // bytes held by the free-slot list
};

// Called by a shard under restore (see BeginRestore) when an access touches a block that is not yet
// restored: must fill `out` (num block bytes) with the block's bytes, e.g. by decoding it from parity.
using BlockFaultHandler = std::function<void(size_t block, uint8_t* out)>;

class EmbeddingShard {
 public:
  explicit EmbeddingShard(const ShardConfig& config);  // validates; throws std::invalid_argument
  ~EmbeddingShard();
  EmbeddingShard(const EmbeddingShard&) = delete;
  EmbeddingShard& operator=(const EmbeddingShard&) = delete;

  const ShardConfig& config() const;
  const RecordLayout& layout() const;
  int dim() const;

  // ---- training path --------------------------------------------------------------------------
  // Writes the rows of keys[0..n) to out[n * dim]. Missing keys are inserted with their initial row
  // (and initial optimizer state). A pull that takes the write lock (a key missing, or blocks under restore)
  // reports its inserts to `sink`; a pull of keys that all exist reports nothing.
  void Pull(const int64_t* keys, size_t n, float* out, DeltaSink* sink = nullptr);
  // Looks up without inserting: rows of missing keys are left untouched and found[i] = 0.
  void Find(const int64_t* keys, size_t n, float* out, uint8_t* found) const;
  // Sums the gradients of duplicate keys, then applies one optimizer step per unique key (inserting
  // missing keys first, as a pull would); each step adds one to the row's clock (an inserted row: the
  // initial clock, then one). Validates everything first (finite gradients, step >= 1) and throws
  // std::invalid_argument without changing any byte if anything is wrong.
  //
  // `repeats` (optional, n entries in [1, kMaxRepeats]): grads[i] is the sum of repeats[i] gradients
  // (a worker cache's write-back of rows it held for several steps). The shard then applies, per
  // unique key, c = the sum of its repeats optimizer steps of its summed gradient / c (each a clock
  // tick): what c steps of the mean gradient do, not one step on the sum (for SGD both are the same
  // move; for Adagrad and Adam one step on the sum is about c times shorter).
  //
  // `ttl_before` (in [0, step]) is for a push that ends with an eviction pass (row_policy.h): the pass also frees
  // every record whose last_step is below it (reason ttl), the cutoff of an Evict(ttl_seconds) that the driver
  // works out from its steps' start times and sends with the push, so a replay decides the same; 0: none. A
  // push that runs no pass ignores it.
  //
  // Every push reports to `sink` (its deltas, possibly none).
  static constexpr uint32_t kMaxRepeats = 1u << 16;
  void Push(const int64_t* keys, const float* grads, size_t n, int64_t step, DeltaSink* sink = nullptr,
            const uint32_t* repeats = nullptr, int64_t ttl_before = 0);
  // ---- row clocks, for workers' caches (record_layout.h) ------------------------------------------
  // clocks[i] = the clock of keys[i], or -1 when the key is missing (nothing is inserted).
  void Clocks(const int64_t* keys, size_t n, int32_t* clocks) const;
  // A pull that leaves out rows a worker's cache holds fresh enough. known[i] is the clock of the
  // worker's copy of keys[i] (< 0: none). A missing key is inserted (as Pull does, in order of first
  // appearance) and sent; a present one is sent when known[i] < 0 or the copy is more than `staleness`
  // versions behind (RecordLayout::ClockBehind). The rows of sent keys are written compactly, in the
  // order of `keys`, to rows[j * dim] for the j-th sent key (room for n rows); sent[i] tells which,
  // and clocks[i] is every key's clock after the call. Returns the number of rows sent. Repeated keys
  // are answered per occurrence. Locks and reports to `sink` exactly as Pull does.
  size_t PullStale(const int64_t* keys, size_t n, const int32_t* known, uint32_t staleness, float* rows,
                   int32_t* clocks, uint8_t* sent, DeltaSink* sink = nullptr);

  // Frees the slots of keys that exist; returns how many were erased. A key inserted again starts
  // over at the initial clock (see record_layout.h on ABA).
  size_t Erase(const int64_t* keys, size_t n, DeltaSink* sink = nullptr);

  size_t size() const;  // live records: rows, and pending ids of a table with admission (row_policy.h)
  ShardMemoryStats memory() const;

  // ---- bounded tables (row_policy.h) -------------------------------------------------------------
  // With config().row_policy active: Pull, PullStale and Push admit as row_policy.h says (a missing key
  // that gets no record reads zeros; PullStale sends it as zeros with clock -1), Find reports pending
  // ids as not found, Export and TakeDirty leave them out and carry each row's uses and last_step.
  //
  // One eviction pass at `now_step` (>= 1): frees the records the rules select, each as Erase does
  // (reported to `sink` as deltas to the zero record, in slot order), and returns how many
  // went for which reason, and their keys in slot order. A table without rules frees nothing. Under
  // restore every block is faulted in first.
  struct Eviction {
    EvictionResult counts;
    std::vector<int64_t> keys;
  };
  Eviction Evict(int64_t now_step, DeltaSink* sink = nullptr);
  // The counters of row_policy.h plus, counted now, rows and pending ids.
  struct PolicyStats {
    RowPolicyStats counters;
    size_t rows = 0;
    size_t pending = 0;
  };
  PolicyStats policy_stats() const;
  // Eviction passes (by Evict or in a push) that freed at least one record: a worker cache's copies are not
  // trusted across one (EpochAfterEvictions). A count of this process, not record bytes.
  uint64_t eviction_generation() const;

  // ---- export / import (keys, values, optimizer state), in slot order -------------------------
  struct Rows {
    std::vector<int64_t> keys;
    std::vector<float> values;  // keys.size() * dim
    std::vector<float> state;   // keys.size() * layout().state_floats
    // Tables with row rules only (else empty): each row's policy words (record_layout.h).
    std::vector<uint32_t> uses;
    std::vector<int64_t> last_step;
  };
  Rows Export() const;
  // Export in key order, a chunk at a time (a digest or copy of a table larger than RAM): SortedKeys is the keys of
  // every row (pending ids left out), ascending, from one slot-order scan (tiered: a block at a time, as Export);
  // ExportKeys the rows of keys[0..n) in that order, keys that are no row (absent, pending) left out (tiered: read
  // in one fetch step). Neither changes a row's bytes.
  std::vector<int64_t> SortedKeys() const;
  Rows ExportKeys(const int64_t* keys, size_t n) const;
  // Dirty tracking, for incremental backstops: TrackDirty(true) starts (and clears) a set of the slots
  // changed since (inserted, pushed, loaded); TakeDirty returns their live rows in slot order and clears
  // the set, under the write lock, so a cut taken between mutations is consistent. Erased keys are not
  // reported (training never erases). TrackDirty(false) stops and frees the set.
  void TrackDirty(bool on);
  bool tracking_dirty() const;
  Rows TakeDirty();
  // Inserts or overwrites the given rows (slots assigned as for new keys; a new row gets the initial
  // clock, an overwritten one its clock plus one). Validates first (keys unique, values and state
  // finite); state == nullptr gives the loaded rows fresh optimizer state. In a table with row rules a
  // loaded key becomes a row (admitted); a new one starts with uses 0 and last_step 0, an overwritten
  // one keeps its words (LoadPolicyWords sets them); Load does not apply max_rows (the next pass does).
  // The loaded slots go to `sink`: a resumed run's rows reach parity maintenance as any other mutation does.
  void Load(const int64_t* keys, const float* values, const float* state, size_t n, DeltaSink* sink = nullptr);
  // Tables with row rules: sets the uses and last_step of rows that exist (a save's words after its Load);
  // validates first (every key a row, unique, last_step >= 0) and throws std::invalid_argument changing
  // nothing otherwise. Each changed row ticks its clock.
  void LoadPolicyWords(const int64_t* keys, const uint32_t* uses, const int64_t* last_step, size_t n,
                       DeltaSink* sink = nullptr);
  // Tables with admission: the pending ids (row_policy.h) as keys, uses and last_step (values, state empty), in
  // slot order; LoadPending puts a save's pending ids back (after its Load): every key absent and unique, uses in
  // [1, admit_min_count), last_step >= 0, validated first (std::invalid_argument, nothing changed). Like Load it
  // does not apply max_rows.
  Rows ExportPending() const;
  void LoadPending(const int64_t* keys, const uint32_t* uses, const int64_t* last_step, size_t n,
                   DeltaSink* sink = nullptr);
  // For a load whose deltas go where the caller cannot reach (a resume through a server's fault-tolerance agent):
  // stages the words (uses, last_step) of rows the next Load writes, and pending ids it then inserts, all within
  // that Load's own deltas. Validated as LoadPolicyWords / LoadPending (the rows need not exist yet); the next
  // Load checks that the pending keys are absent and not among its keys, and consumes the stage.
  void StageLoadWords(const int64_t* keys, const uint32_t* uses, const int64_t* last_step, size_t n,
                      const int64_t* pending_keys, const uint32_t* pending_uses, const int64_t* pending_last_step,
                      size_t pending_n);

  // Tables with the sketch counter (row_policy.h): its cells (sketch_depth rows of sketch_width, row-major), in
  // the record bytes of slots [0, sketch_slots()), which are reserved (never a row's, never in the key index).
  // ExportSketch reads them (empty without a sketch); LoadSketch adds n = sketch_width * sketch_depth cells to them
  // cell-wise, saturating (into a fresh shard: a copy), validated first (std::invalid_argument, nothing changed);
  // StageSketch does the same within the next Load's own deltas (as StageLoadWords). SketchEstimate: each key's
  // estimated count (the minimum of its cells), for tests and tools.
  size_t sketch_slots() const;
  std::vector<uint16_t> ExportSketch() const;
  void LoadSketch(const uint16_t* cells, size_t n, DeltaSink* sink = nullptr);
  void StageSketch(const uint16_t* cells, size_t n);
  void SketchEstimate(const int64_t* keys, size_t n, uint32_t* out) const;

  // ---- raw slot access for parity and recovery ------------------------------------------------
  uint32_t block_slots() const;
  size_t block_bytes() const;  // block_slots * record bytes
  size_t num_blocks() const;   // blocks covering the slot array's high-water mark
  // Copies block `b` to out[block_bytes()]; blocks past the end read as zeros.
  void ReadBlock(size_t b, uint8_t* out) const;
  // Copies records [slot, slot + count) to out; slots past the end read as zeros.
  void ReadSlots(size_t slot, size_t count, uint8_t* out) const;

  // Restore protocol, used to rebuild a lost shard into this (new, empty) one:
  //  1. BeginRestore(keys, slots, high_water, handler): the key index of the lost shard, recovered
  //     first (it is cheap: only key/flag bytes); every block below high_water is marked missing.
  //  2. RestoreBlock(b, bytes) for each block, in any order, from a background rebuild; blocks
  //     already restored (by a fault) are skipped and RestoreBlock returns false.
  //  3. Any Pull/Find/Push/Erase/Read* touching a missing block first calls the handler for it
  //     (a degraded read) and installs the result, so callers never see unrestored bytes.
  void BeginRestore(const int64_t* keys, const uint32_t* slots, size_t n, size_t high_water, BlockFaultHandler handler);
  bool RestoreBlock(size_t b, const uint8_t* bytes);
  size_t missing_blocks() const;       // 0 when not restoring or when done
  bool block_missing(size_t b) const;  // block b still waits for RestoreBlock or a fault
  // The missing blocks holding rows of keys[0..n) (ascending, each once): a caller about to touch them
  // can restore them together (one decode for all) instead of one fault each. Keys not in the index
  // are skipped (an insert's slot is faulted in as usual).
  std::vector<size_t> MissingBlocksOf(const int64_t* keys, size_t n) const;

  struct Impl;  // the state, private to the operations' files (cpp/src/embedding_shard_impl.h)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace xdl_ec
