// Deduplication of a batch of ids: unique keys in order of first appearance plus, for every position,
// the index of its key among them. Order of first appearance keeps the pull/push order (and so every
// floating-point sum) independent of hashing, which deterministic training relies on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xdl_ec::tf_ops {

class UniqueIds {
 public:
  // Fills keys() and writes inverse[i] for ids[0..n).
  void Build(const int64_t* ids, size_t n, int32_t* inverse) {
    keys_.clear();
    size_t capacity = 16;
    while (capacity < 2 * n) capacity <<= 1;
    const size_t mask = capacity - 1;
    // Open addressing over (id, unique index); -1 marks an empty bucket.
    table_ids_.resize(capacity);
    table_index_.assign(capacity, -1);
    keys_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t id = ids[i];
      size_t bucket = Mix(static_cast<uint64_t>(id)) & mask;
      while (true) {
        const int32_t index = table_index_[bucket];
        if (index < 0) {
          table_ids_[bucket] = id;
          table_index_[bucket] = static_cast<int32_t>(keys_.size());
          inverse[i] = static_cast<int32_t>(keys_.size());
          keys_.push_back(id);
          break;
        }
        if (table_ids_[bucket] == id) {
          inverse[i] = index;
          break;
        }
        bucket = (bucket + 1) & mask;
      }
    }
  }

  const std::vector<int64_t>& keys() const { return keys_; }

 private:
  // splitmix64's finaliser: ids are often sequential or share low bits.
  static uint64_t Mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
  }

  std::vector<int64_t> keys_;
  std::vector<int64_t> table_ids_;
  std::vector<int32_t> table_index_;
};

}  // namespace xdl_ec::tf_ops
