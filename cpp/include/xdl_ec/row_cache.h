// A worker's cache of one table's hot rows with bounded staleness (HET, issue #16).
//
// A line holds a row as last pulled, the server's clock of that row (record_layout.h) and an opaque
// tag (the caller's: e.g. the server's epoch, which restores and rollbacks change). One step of a
// worker goes:
//   Lookup(keys)            -> the cached clocks (-1: not cached), sent by EmbeddingShard::PullStale,
//                              which returns only the rows more than S versions behind;
//   Get(hits not sent)      -> the cached rows, taken BEFORE the Fill (a Fill may evict them);
//   Fill(sent rows, clocks) -> caches fresh rows, returning evicted lines' unpushed gradient;
//   Accumulate(keys, grads) -> what to push now: uncached rows at once (write-through), cached rows'
//                              summed gradient once `staleness` of them were taken (or at once, S = 0);
//   Flush() at barriers (digest, save, evaluation, the end of a run) pushes what is still held.
// The optimizer runs on the servers, so the cache never changes a row's value itself: a cached row is
// the server's row of some clock, at most S versions old (a worker may not see its own last updates).
// Held gradient is outside parity: a worker that dies loses it, so callers flush at barriers.
//
// Recency and frequency are counted per call, not per key occurrence: every line a Lookup hits or a
// Fill writes is touched once by that call (its use count +1 on a Lookup hit; a new line starts at 1),
// and lines touched by one call are equally recent. Eviction picks, among lines the current Fill did
// not write, LRU: the least recently touched, then the lowest key; LFU: the lowest use count, then the
// least recently touched, then the lowest key. So the choice depends on the calls alone.
//
// Thread-compatible, not thread-safe: one worker calls it from one thread at a time (no locking, the
// caller serializes). Every method validates its arguments first and throws std::invalid_argument
// without changing anything when one is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "xdl_ec/key_index.h"

namespace xdl_ec {

class RowCache {
 public:
  enum class Policy { kLRU, kLFU };

  // Lines handed back with gradient summed but not yet pushed: the caller pushes them.
  struct Pending {
    std::vector<int64_t> keys;
    std::vector<float> grads;      // keys.size() * dim: each line's summed gradient
    std::vector<uint32_t> counts;  // gradients summed into each
  };
  // Gradients to push now, in the order they were given to Accumulate.
  struct Due {
    std::vector<int64_t> keys;
    std::vector<float> grads;      // keys.size() * dim
    std::vector<uint32_t> counts;  // gradients summed into each (1: passed on as given)
  };

  struct Stats {
    size_t rows = 0;                 // lines cached
    size_t capacity = 0;             // lines at most
    uint64_t hits = 0;               // Lookup keys found (each occurrence)
    uint64_t misses = 0;             // Lookup keys not found
    uint64_t evictions = 0;          // lines a Fill evicted (Invalidate and Clear drop, they do not evict)
    size_t pending_lines = 0;        // lines holding gradient not yet pushed
    uint64_t pending_count = 0;      // gradients summed into them (what a crash of the worker loses)
    uint32_t max_pending_count = 0;  // the most gradients any line holds now (< staleness)
    uint64_t write_backs = 0;        // summed gradients handed back for pushing (due, evicted, flushed, dropped)
    uint64_t accumulated = 0;        // gradients Accumulate took into lines (hits of the write path)
    uint64_t written_through = 0;    // gradients Accumulate passed on at once because their key was not cached
  };

  // dim in [1, 65536], capacity_rows in [1, 2^32 - 2]; staleness is the write bound S (0: exact mode,
  // every gradient passes through). Throws std::invalid_argument naming the bad argument.
  RowCache(int dim, size_t capacity_rows, uint32_t staleness, Policy policy);

  int dim() const { return dim_; }
  size_t capacity() const { return capacity_; }
  uint32_t staleness() const { return staleness_; }
  Policy policy() const { return policy_; }
  size_t size() const { return index_.size(); }
  // Gradients held in lines, not yet handed back (stats().pending_count without the scan of stats()).
  uint64_t pending_count() const { return stats_.pending_count; }

  // known[i] = the clock of keys[i]'s line, or -1 when it is not cached; tags[i] = the line's tag (0
  // when not cached). Counts hits and misses, and touches the lines hit.
  void Lookup(const int64_t* keys, size_t n, int32_t* known, uint64_t* tags);
  // The cached rows of keys[0..n) to rows[n * dim]; a key not cached is an std::invalid_argument.
  void Get(const int64_t* keys, size_t n, float* rows) const;
  // Caches rows[i * dim] as keys[i]'s row at clocks[i] (>= 0, the server's clock) with tags[i]: a
  // cached line is overwritten (its pending gradient stays pending), a new one takes a free line or
  // evicts one (see above). Keys of one Fill never evict each other: once every line holds a key of
  // this Fill, its remaining new keys are left uncached. A repeated key is written in turn (the last
  // row wins). Returns the evicted lines that held gradient, in eviction order.
  Pending Fill(const int64_t* keys, size_t n, const float* rows, const int32_t* clocks, const uint64_t* tags);
  // Takes one gradient per key (a batch's unique keys; a repeated key is taken in turn). An uncached
  // key's gradient is returned as is; a cached line adds it to its pending sum and, when its count
  // reaches `staleness` (at once when staleness <= 1), returns the sum and clears it. The sum is
  // ((g1 + g2) + g3) + ... in the order taken, its first term g1 itself: with staleness 0 the output
  // is the input, bit for bit.
  Due Accumulate(const int64_t* keys, size_t n, const float* grads);
  // Every line's pending gradient, by ascending key, cleared; the lines stay cached.
  Pending Flush();
  // Drops the lines of keys (absent keys are skipped), returning their pending gradient in input order.
  Pending Invalidate(const int64_t* keys, size_t n);
  // Drops every line, returning all pending gradient by ascending key. Counters are kept.
  Pending Clear();
  // Sets the capacity (as the constructor's capacity_rows), keeping the lines: a cache that follows its
  // growing table stays warm. Shrinking below size() evicts the policy's victims (counted as evictions)
  // and returns those that held gradient, in eviction order.
  Pending Resize(size_t capacity_rows);

  Stats stats() const;

 private:
  static constexpr uint32_t kNone = KeyIndex::kNone;

  // The lines of one eviction rank (LFU: one use count; LRU: all lines), ordered by (touched, key).
  struct List {
    uint32_t head = kNone;
    uint32_t tail = kNone;
  };
  using Lists = std::map<uint64_t, List>;

  struct Line {
    int64_t key = 0;
    uint64_t tag = 0;
    uint64_t uses = 0;     // calls that touched it with a use (LFU order)
    uint64_t touched = 0;  // the call that touched it last (recency)
    int32_t clock = 0;
    uint32_t prev = kNone;  // neighbours in its eviction list
    uint32_t next = kNone;
    uint32_t pending = kNone;  // its slot in the gradient pool, kNone when it holds none
    uint32_t count = 0;        // gradients summed into that slot
    // The list it is in, or was in until unlinked by the current call (lists are erased only between
    // calls), so that relinking it finds its new rank's list next to the old one without a search.
    Lists::iterator list;
    bool listed = false;  // `list` is set
  };

  uint32_t Find(int64_t key) const;
  uint64_t Rank(const Line& line) const { return policy_ == Policy::kLFU ? line.uses : 0; }
  void Link(uint32_t line);    // at the tail of its rank's list
  void Unlink(uint32_t line);  // from its rank's list (it must be in one); an emptied list stays until EraseEmpty
  void EraseEmpty();           // the lists the current call emptied, once no line needs them as a hint
  // Appends the lines touched by the current call to their lists, by ascending key: a list stays
  // ordered by (touched, key).
  void LinkTouched(std::vector<uint32_t>& lines);
  const float* Value(uint32_t line) const {
    return values_[line >> chunk_shift_].get() + static_cast<size_t>(line & chunk_mask_) * dim_;
  }
  float* Value(uint32_t line) { return const_cast<float*>(std::as_const(*this).Value(line)); }
  float* Grad(uint32_t slot) { return pool_.data() + static_cast<size_t>(slot) * dim_; }
  // Evicts the policy's victim (some line must be linked): its pending gradient goes to `evicted`, its
  // key leaves the index; returns its line, now unused.
  uint32_t Evict(Pending& evicted);
  // Moves a line's pending gradient to `out` and frees its pool slot.
  void HandBack(Line& line, Pending& out);
  void ReleasePending(Line& line);
  Pending AllPending();  // by ascending key, cleared

  int dim_;
  size_t capacity_;
  uint32_t staleness_;
  Policy policy_;

  std::vector<Line> lines_;
  // Rows in chunks of 2^chunk_shift_ lines (about 1 MiB each): a cache that follows a growing table adds lines
  // at most Fills, and one contiguous array would copy every row it holds whenever it outgrew its allocation.
  uint32_t chunk_shift_ = 0;
  uint32_t chunk_mask_ = 0;
  std::vector<std::unique_ptr<float[]>> values_;
  std::vector<uint32_t> free_lines_;  // lines dropped by Invalidate, reused first
  KeyIndex index_;                    // key -> line
  Lists lists_;                       // rank -> its lines; non-empty between calls
  std::vector<uint64_t> emptied_;     // ranks whose list the current call emptied
  size_t linked_ = 0;                 // lines in lists (every line, between calls)
  uint64_t call_ = 0;                 // calls that touched lines so far

  std::vector<float> pool_;           // pending gradients, dim floats per slot
  std::vector<uint32_t> pool_owner_;  // the line of each slot, kNone when free
  std::vector<uint32_t> free_pool_;

  Stats stats_;
};

}  // namespace xdl_ec
