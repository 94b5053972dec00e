// A bounded table's rules: which ids get a row (admission) and which rows go (eviction), for
// endless training on a stream of ever new ids.
//
// Everything these decisions read lives in record bytes (record_layout.h, the policy words), so
// parity, a rebuilt server and every save carry it and a restored shard decides exactly as the lost
// one would have. A table without rules (the default) has no policy words: its records, parity and
// digests are byte-identical to before.
//
// Admission (admit_min_count = N > 1): an id gets a row on its N-th occurrence, an occurrence being
// one push of the id (a batch's duplicates count once; a cache write-back standing for c gradients
// counts c). Until then the id holds a *pending* record (key, live bit, clock, zero value and state,
// its count and last step): it reads zeros, its gradients are dropped, and a pull does not insert it.
// The push that reaches N writes the id's initial row and applies that push's gradient. Pending
// records are records like rows, so their counts are parity-covered; they are reported by neither
// Find, Export nor TakeDirty.
//
// Eviction happens only in an eviction pass at a step boundary: at the end of every push whose step is
// a multiple of evict_every_steps (in that push's deltas), or by EmbeddingShard::Evict(now_step). A
// pass frees slots as Erase does (deltas to the zero record; a slot the push touched keeps one delta
// entry, taken on to zero). Sync steps and one-worker runs push once per step and server, so passes
// are as deterministic as training. In slot
// order: a record (row or pending) whose last update is more than ttl_steps before now_step goes
// (reason ttl); a row whose value has L2 norm below min_l2 goes (reason l2); then, with max_rows set,
// the lowest ranked go (reason cap) until at most max_rows - max_rows / 8 remain (the eighth is
// headroom for the ids that arrive before the next pass). Rank: lfu by (uses, last_step, key)
// ascending, lru by (last_step, uses, key): no slot, so a shard reloaded from a save into other slots
// ranks the same. Between passes a record that would
// take the table past max_rows is not created (the id reads zeros, its gradient is dropped), so
// max_rows is never exceeded.
//
// TTL by wall time (Evict(ttl_seconds) in Python): the shard never reads a clock. The driver keeps each
// step's start time and, for a push that ends with a pass, works out the cutoff ttl_before (one more than
// the newest step that started more than ttl_seconds before the pass's step did; 0: none) and sends it
// with the push; the pass also frees the records whose last_step is below it (reason ttl). The cutoff is
// part of the push, so a replayed push and the parity path decide exactly as the original did.
//
// A row inserted by a pull and not yet pushed has last_step 0: a pass with now_step > ttl_steps
// evicts it (rows live by being trained).
//
// The sketch counter (admit_counter = kSketch): instead of a pending record per id, the shard counts the
// occurrences of ids without a row in a count-min sketch of sketch_depth rows of sketch_width 16-bit
// saturating cells, with conservative update (a push of c occurrences raises each of the id's cells to at
// least min(its cells) + c). An id gets its row when that estimate reaches admit_min_count (the row's uses
// start at the estimate); an id that does not costs no record at all. Count-min never under-counts, so no id
// is admitted later than under the exact counter; one whose cells are shared with others may be admitted
// early: with N occurrences counted since the cells were last emptied, an estimate exceeds the true count by
// more than e * N / sketch_width with probability at most exp(-sketch_depth).
// Why cells in slots: the cells are the record bytes (after key and flags, which stay zero: never live,
// never indexed) of the shard's first sketch_slots slots, reserved when it is made. Every cell change is then
// a delta on a slot, so parity, a replayed push, the rebuild from parity (which sees no live bit there and
// BeginRestore keeps the slots reserved) and a block read carry the cells exactly like rows, with no second
// mechanism; saves carry them as ExportSketch's cells.
// Aging: at the end of a push whose step is a multiple of sketch_decay_every_steps (> 0; 0: never), after
// that push's counting, every cell is halved (in the push's deltas), so an endless stream does not
// eventually admit everything: an id is admitted on about admit_min_count occurrences within roughly
// 2 * sketch_decay_every_steps steps. Like a pass, a halving rides on a push of its step: a shard that gets
// no push at that step (no key of its table in a one-worker step's batch) skips it, as the lost one did, so
// replays and rebuilds still decide the same.
// Loads: LoadSketch (and a staged sketch, StageSketch) adds cell-wise, saturating, so loading one save's
// sketch into a fresh shard is a copy and loading several (a resume at another server count: sketches of
// different shards cannot be split by key) their sum, an over-estimate that never under-counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace xdl_ec {

enum class EvictPolicy { kLfu, kLru };
// How a table with admission counts the occurrences of ids without a row: a pending record per id, or a
// count-min sketch (see the doc above).
enum class AdmitCounter { kExact, kSketch };
// "exact" / "sketch"; throws std::invalid_argument naming `field` for any other name.
AdmitCounter ParseAdmitCounter(const std::string& name, const char* field = "admit_counter");
const char* AdmitCounterName(AdmitCounter counter);

// "lfu" / "lru"; throws std::invalid_argument naming `field` for any other name.
EvictPolicy ParseEvictPolicy(const std::string& name, const char* field = "policy");
const char* EvictPolicyName(EvictPolicy policy);

struct RowPolicyConfig {
  int64_t admit_min_count = 1;       // >= 1; 1: every id gets a row on first sight (no admission)
  std::optional<int64_t> ttl_steps;  // >= 1 when set
  std::optional<double> min_l2;      // finite and > 0 when set
  std::optional<int64_t> max_rows;   // >= block_slots (one block) when set: per shard
  EvictPolicy policy = EvictPolicy::kLfu;
  // > 0: a push whose step is a multiple of it ends with a pass at that step, in the push's own deltas (so the
  // pass reaches parity, a replay and the native path as the push does); 0: passes only by Evict.
  int64_t evict_every_steps = 0;
  // Admission's counter; the sketch's settings are read only with kSketch (admit_min_count in [2, 65535]).
  AdmitCounter admit_counter = AdmitCounter::kExact;
  int64_t sketch_width = 1 << 14;                    // cells per row, in [16, 2^22]
  int64_t sketch_depth = 4;                          // rows (hash functions), in [1, 8]
  int64_t sketch_decay_every_steps = 0;              // >= 0; 0: cells are never halved
  static constexpr int64_t kSketchMaxCount = 65535;  // a cell saturates here

  bool sketch() const { return admit_min_count > 1 && admit_counter == AdmitCounter::kSketch; }
  size_t sketch_cells() const { return sketch() ? static_cast<size_t>(sketch_width * sketch_depth) : 0; }

  // Whether the table has any rule, i.e. whether its records carry the policy words.
  bool active() const { return admit_min_count > 1 || ttl_steps || min_l2 || max_rows || evict_every_steps; }
  // Throws std::invalid_argument naming the bad field (row_policy.admit_min_count, ...).
  void Validate(uint32_t block_slots) const;
  // The most records a pass keeps: max_rows - max_rows / 8.
  int64_t cap_low_water() const { return *max_rows - *max_rows / 8; }
};

// What a shard's rules did since it was made (counters of this process, not record bytes: a rebuilt
// server starts them at zero).
struct RowPolicyStats {
  uint64_t admitted = 0;              // pending ids that got their row (and rows inserted outright)
  uint64_t not_admitted_lookups = 0;  // pulled or pushed keys answered with zeros / dropped
  uint64_t evicted_ttl = 0;
  uint64_t evicted_l2 = 0;
  uint64_t evicted_cap = 0;
};

// A server's epoch (ParameterServer.epoch, in [1, 2^62]) moved on by `generations` eviction passes that freed
// something (EmbeddingShard::eviction_generation, summed over its tables): a worker cache's copies from before
// a pass are not trusted after it, since an evicted row inserted again restarts at the initial clock (ABA,
// record_layout.h). Zero generations give the epoch unchanged (tables without rules).
int64_t EpochAfterEvictions(int64_t epoch, uint64_t generations);

// What one eviction pass freed.
struct EvictionResult {
  size_t ttl = 0;
  size_t l2 = 0;
  size_t cap = 0;
  size_t total() const { return ttl + l2 + cap; }
};

}  // namespace xdl_ec
