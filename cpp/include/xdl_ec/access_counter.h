// Per-key counters kept BESIDE a shard, never inside its parity-protected slot records: CPR-MFU's updates since
// each row's last save, SSU's touched rows and the lost-update ledger of a partial restore.
//
// Open addressing with linear probing over int64 keys (power-of-two capacity, load <= 1/2, backward-shift
// deletion), so counting a batch is O(batch) with no sort. "Once" counting (each distinct key once per call: one
// push = one optimizer update per row) uses a per-call stamp in the entry instead of deduplicating the batch.
//
// Thread safety: every method takes an internal mutex, so calls from several threads are serialised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace xdl_ec {

class AccessCounter {
 public:
  AccessCounter();

  // Adds one to the count of each key; with `once`, a key repeated within this call counts once.
  void Add(const int64_t* keys, size_t n, bool once);
  // out[i] = count of keys[i], 0 when never counted (or discarded since).
  void Get(const int64_t* keys, size_t n, int64_t* out) const;
  // Sets the count of each key (0 forgets it), e.g. to rewind a ledger to what a restore brought back. Keys must
  // be unique and counts >= 0; throws std::invalid_argument, changing nothing, otherwise.
  void Set(const int64_t* keys, const int64_t* counts, size_t n);
  // Forgets the keys (their counts restart from 0); returns how many were counted.
  size_t Discard(const int64_t* keys, size_t n);
  void Clear();

  size_t size() const;    // distinct keys counted
  int64_t total() const;  // sum of all counts
  // Every counted key and its count, sorted by key.
  void Items(std::vector<int64_t>* keys, std::vector<int64_t>* counts) const;

 private:
  struct Entry {
    int64_t key;
    int64_t count;   // 0: empty slot
    uint64_t stamp;  // the Add call that last counted this key (for `once`)
  };
  size_t Find(int64_t key) const;  // slot of key, or the empty slot where it would go
  void Grow();
  void EraseAt(size_t slot);

  mutable std::mutex mu_;
  std::vector<Entry> table_;
  size_t mask_;
  size_t size_ = 0;
  int64_t total_ = 0;
  uint64_t stamp_ = 0;
};

}  // namespace xdl_ec
