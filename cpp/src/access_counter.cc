#include "xdl_ec/access_counter.h"

#include <algorithm>
#include <string>

namespace xdl_ec {
namespace {

constexpr size_t kInitialSlots = 1024;

inline size_t Mix(int64_t key) {  // splitmix64 finaliser: sequential ids spread over the table
  uint64_t z = static_cast<uint64_t>(key) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<size_t>(z ^ (z >> 31));
}

}  // namespace

AccessCounter::AccessCounter() : table_(kInitialSlots, Entry{0, 0, 0}), mask_(kInitialSlots - 1) {}

size_t AccessCounter::Find(int64_t key) const {
  size_t slot = Mix(key) & mask_;
  while (table_[slot].count != 0 && table_[slot].key != key) slot = (slot + 1) & mask_;
  return slot;
}

void AccessCounter::Grow() {
  std::vector<Entry> old(table_.size() * 2, Entry{0, 0, 0});
  old.swap(table_);
  mask_ = table_.size() - 1;
  for (const Entry& e : old) {
    if (e.count != 0) table_[Find(e.key)] = e;
  }
}

void AccessCounter::Add(const int64_t* keys, size_t n, bool once) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t stamp = ++stamp_;
  for (size_t i = 0; i < n; ++i) {
    size_t slot = Find(keys[i]);
    Entry& e = table_[slot];
    if (e.count == 0) {
      if (2 * (size_ + 1) > table_.size()) {
        Grow();
        slot = Find(keys[i]);
      }
      table_[slot] = Entry{keys[i], 1, stamp};
      ++size_;
      ++total_;
    } else if (!once || e.stamp != stamp) {
      ++e.count;
      e.stamp = stamp;
      ++total_;
    }
  }
}

void AccessCounter::Get(const int64_t* keys, size_t n, int64_t* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) out[i] = table_[Find(keys[i])].count;
}

void AccessCounter::EraseAt(size_t slot) {
  // Backward-shift deletion: pull later entries of the probe run into the hole so lookups never stop early.
  size_t hole = slot;
  for (size_t next = (hole + 1) & mask_; table_[next].count != 0; next = (next + 1) & mask_) {
    const size_t home = Mix(table_[next].key) & mask_;
    // The entry may move into the hole only if its home is not cyclically inside (hole, next].
    if (((next - home) & mask_) >= ((next - hole) & mask_)) {
      table_[hole] = table_[next];
      hole = next;
    }
  }
  table_[hole] = Entry{0, 0, 0};
}

void AccessCounter::Set(const int64_t* keys, const int64_t* counts, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (counts[i] < 0) {
      throw std::invalid_argument("AccessCounter::Set: counts[" + std::to_string(i) +
                                  "] = " + std::to_string(counts[i]) + " is negative; counts must be >= 0");
    }
  }
  std::vector<int64_t> sorted(keys, keys + n);
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) {
    throw std::invalid_argument("AccessCounter::Set: key " + std::to_string(*dup) +
                                " appears twice; keys must be unique");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) {
    size_t slot = Find(keys[i]);
    if (table_[slot].count != 0) {
      total_ -= table_[slot].count;
      if (counts[i] == 0) {
        EraseAt(slot);
        --size_;
        continue;
      }
      table_[slot].count = counts[i];
    } else {
      if (counts[i] == 0) continue;
      if (2 * (size_ + 1) > table_.size()) {
        Grow();
        slot = Find(keys[i]);
      }
      table_[slot] = Entry{keys[i], counts[i], 0};
      ++size_;
    }
    total_ += counts[i];
  }
}

size_t AccessCounter::Discard(const int64_t* keys, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t erased = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t slot = Find(keys[i]);
    if (table_[slot].count == 0) continue;
    total_ -= table_[slot].count;
    EraseAt(slot);
    --size_;
    ++erased;
  }
  return erased;
}

void AccessCounter::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  table_.assign(kInitialSlots, Entry{0, 0, 0});
  mask_ = kInitialSlots - 1;
  size_ = 0;
  total_ = 0;
}

size_t AccessCounter::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_;
}

int64_t AccessCounter::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

void AccessCounter::Items(std::vector<int64_t>* keys, std::vector<int64_t>* counts) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Entry*> live;
  live.reserve(size_);
  for (const Entry& e : table_) {
    if (e.count != 0) live.push_back(&e);
  }
  std::sort(live.begin(), live.end(), [](const Entry* a, const Entry* b) { return a->key < b->key; });
  keys->resize(live.size());
  counts->resize(live.size());
  for (size_t i = 0; i < live.size(); ++i) {
    (*keys)[i] = live[i]->key;
    (*counts)[i] = live[i]->count;
  }
}

}  // namespace xdl_ec
