#include "xdl_ec/row_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace xdl_ec {
namespace {

constexpr int kMaxDim = 1 << 16;  // as EmbeddingShard's

void RequirePointer(const void* p, size_t n, const char* what, const char* name) {
  if (n != 0 && p == nullptr) {
    throw std::invalid_argument(std::string("RowCache::") + what + ": " + name +
                                " is null but n = " + std::to_string(n));
  }
}

}  // namespace

RowCache::RowCache(int dim, size_t capacity_rows, uint32_t staleness, Policy policy)
    : dim_(dim), capacity_(capacity_rows), staleness_(staleness), policy_(policy) {
  if (dim < 1 || dim > kMaxDim) {
    throw std::invalid_argument("RowCache: dim must be in [1, " + std::to_string(kMaxDim) + "], got " +
                                std::to_string(dim));
  }
  if (capacity_rows < 1 || capacity_rows > KeyIndex::kMaxSlot) {
    throw std::invalid_argument("RowCache: capacity_rows must be in [1, " + std::to_string(KeyIndex::kMaxSlot) +
                                "], got " + std::to_string(capacity_rows) +
                                " (to run without a cache, do not create one)");
  }
  if (policy != Policy::kLRU && policy != Policy::kLFU) {
    throw std::invalid_argument("RowCache: policy must be kLRU or kLFU");
  }
  while ((size_t{2} << chunk_shift_) * static_cast<size_t>(dim) <= (size_t{1} << 18)) ++chunk_shift_;
  chunk_mask_ = (uint32_t{1} << chunk_shift_) - 1;
}

uint32_t RowCache::Find(int64_t key) const {
  return index_.Find(key, [this](uint32_t line) { return lines_[line].key; });
}

void RowCache::Link(uint32_t i) {
  Line& line = lines_[i];
  const uint64_t rank = Rank(line);
  // A touched line keeps its rank (LRU, a refresh) or goes one up (a use): its old list or the next one. A
  // new line has the lowest rank there is (1 use; LRU: 0): the first list.
  Lists::iterator it = line.listed ? line.list : lists_.begin();
  if (it == lists_.end() || it->first != rank) {
    if (line.listed) ++it;
    if (it == lists_.end() || it->first != rank) it = lists_.emplace_hint(it, rank, List());
  }
  List& list = it->second;
  line.list = it;
  line.listed = true;
  line.prev = list.tail;
  line.next = kNone;
  if (list.tail == kNone) {
    list.head = i;
  } else {
    lines_[list.tail].next = i;
  }
  list.tail = i;
  ++linked_;
}

void RowCache::Unlink(uint32_t i) {
  Line& line = lines_[i];
  List& list = line.list->second;
  if (line.prev == kNone) {
    list.head = line.next;
  } else {
    lines_[line.prev].next = line.next;
  }
  if (line.next == kNone) {
    list.tail = line.prev;
  } else {
    lines_[line.next].prev = line.prev;
  }
  line.prev = line.next = kNone;
  --linked_;
  if (list.head == kNone) emptied_.push_back(line.list->first);
}

void RowCache::EraseEmpty() {
  for (const uint64_t rank : emptied_) {
    const auto it = lists_.find(rank);  // by rank: a list emptied twice is erased once
    if (it != lists_.end() && it->second.head == kNone) lists_.erase(it);
  }
  emptied_.clear();
}

void RowCache::LinkTouched(std::vector<uint32_t>& touched) {
  std::sort(touched.begin(), touched.end(), [this](uint32_t a, uint32_t b) { return lines_[a].key < lines_[b].key; });
  for (const uint32_t i : touched) Link(i);
}

void RowCache::ReleasePending(Line& line) {
  pool_owner_[line.pending] = kNone;
  free_pool_.push_back(line.pending);
  stats_.pending_count -= line.count;
  line.pending = kNone;
  line.count = 0;
  --stats_.pending_lines;
}

void RowCache::HandBack(Line& line, Pending& out) {
  const float* g = Grad(line.pending);
  out.keys.push_back(line.key);
  out.grads.insert(out.grads.end(), g, g + dim_);
  out.counts.push_back(line.count);
  ++stats_.write_backs;
  ReleasePending(line);
}

// ---- lookups -----------------------------------------------------------------------------------

void RowCache::Lookup(const int64_t* keys, size_t n, int32_t* known, uint64_t* tags) {
  RequirePointer(keys, n, "Lookup", "keys");
  RequirePointer(known, n, "Lookup", "known");
  RequirePointer(tags, n, "Lookup", "tags");
  std::vector<uint32_t> touched;
  touched.reserve(std::min(n, index_.size()));
  const uint64_t call = ++call_;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t at = Find(keys[i]);
    if (at == kNone) {
      known[i] = -1;
      tags[i] = 0;
      ++stats_.misses;
      continue;
    }
    Line& line = lines_[at];
    known[i] = line.clock;
    tags[i] = line.tag;
    ++stats_.hits;
    if (line.touched != call) {  // once per call, however often the key repeats
      Unlink(at);
      line.touched = call;
      ++line.uses;
      touched.push_back(at);
    }
  }
  LinkTouched(touched);
  EraseEmpty();
}

void RowCache::Get(const int64_t* keys, size_t n, float* rows) const {
  RequirePointer(keys, n, "Get", "keys");
  RequirePointer(rows, n, "Get", "rows");
  for (size_t i = 0; i < n; ++i) {
    const uint32_t at = Find(keys[i]);
    if (at == kNone) {
      throw std::invalid_argument("RowCache::Get: key " + std::to_string(keys[i]) + " (at " + std::to_string(i) +
                                  ") is not cached: get only keys Lookup found, and before a Fill that may "
                                  "evict them");
    }
    std::memcpy(rows + i * dim_, Value(at), sizeof(float) * dim_);
  }
}

// ---- fill and eviction -------------------------------------------------------------------------

RowCache::Pending RowCache::Fill(const int64_t* keys, size_t n, const float* rows, const int32_t* clocks,
                                 const uint64_t* tags) {
  RequirePointer(keys, n, "Fill", "keys");
  RequirePointer(rows, n, "Fill", "rows");
  RequirePointer(clocks, n, "Fill", "clocks");
  RequirePointer(tags, n, "Fill", "tags");
  for (size_t i = 0; i < n; ++i) {
    if (clocks[i] < 0) {
      throw std::invalid_argument("RowCache::Fill: clocks[" + std::to_string(i) + "] = " + std::to_string(clocks[i]) +
                                  " for key " + std::to_string(keys[i]) +
                                  ": a cached row needs the server's clock of it (pull_stale's clocks)");
    }
  }

  index_.Reserve(std::min(capacity_, index_.size() + n));
  std::vector<uint32_t> touched;
  touched.reserve(n);
  Pending evicted;

  // First take this Fill's cached lines out of the eviction lists, so that no key of it evicts another
  // (a line it writes anew stays out too, until LinkTouched).
  const uint64_t call = ++call_;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t at = Find(keys[i]);
    if (at != kNone && lines_[at].touched != call) {
      Unlink(at);
      lines_[at].touched = call;
      touched.push_back(at);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    uint32_t at = Find(keys[i]);
    if (at == kNone) {
      if (index_.size() < capacity_ && !free_lines_.empty()) {
        at = free_lines_.back();
        free_lines_.pop_back();
      } else if (index_.size() < capacity_) {
        at = static_cast<uint32_t>(lines_.size());
        lines_.emplace_back();  // geometric growth: Line is small
        if ((at & chunk_mask_) == 0) values_.emplace_back(new float[(size_t{chunk_mask_} + 1) * dim_]);
      } else if (linked_ > 0) {
        at = Evict(evicted);
      } else {
        continue;  // every line holds a key of this Fill: the rest stay uncached
      }
      Line& line = lines_[at];
      line = Line();
      line.key = keys[i];
      line.uses = 1;
      line.touched = call;
      index_.Insert(keys[i], at);
      touched.push_back(at);
    }
    Line& line = lines_[at];
    line.clock = clocks[i];
    line.tag = tags[i];
    std::memcpy(Value(at), rows + i * dim_, sizeof(float) * dim_);
  }
  LinkTouched(touched);
  EraseEmpty();
  return evicted;
}

// ---- the write path ----------------------------------------------------------------------------

RowCache::Due RowCache::Accumulate(const int64_t* keys, size_t n, const float* grads) {
  RequirePointer(keys, n, "Accumulate", "keys");
  RequirePointer(grads, n, "Accumulate", "grads");
  for (size_t i = 0; i < n * dim_; ++i) {
    if (!std::isfinite(grads[i])) {
      throw std::invalid_argument("RowCache::Accumulate: grads[" + std::to_string(i / dim_) + ", " +
                                  std::to_string(i % dim_) + "] (key " + std::to_string(keys[i / dim_]) + ") is " +
                                  (std::isnan(grads[i]) ? "NaN" : "infinite") +
                                  ": gradients must be finite; nothing was taken");
    }
  }
  // Resolve every key and grow the gradient pool for the lines that start a sum, once per batch.
  std::vector<uint32_t> at(n);
  size_t new_slots = 0;
  for (size_t i = 0; i < n; ++i) {
    at[i] = Find(keys[i]);
    if (at[i] != kNone && lines_[at[i]].pending == kNone && staleness_ > 1) ++new_slots;
  }
  if (new_slots > free_pool_.size()) {
    const size_t slots = pool_owner_.size() + new_slots - free_pool_.size();
    pool_.resize(slots * dim_);
    free_pool_.reserve(slots);
    for (size_t s = pool_owner_.size(); s < slots; ++s) free_pool_.push_back(static_cast<uint32_t>(s));
    pool_owner_.resize(slots, kNone);
  }
  Due due;
  due.keys.reserve(n);
  due.grads.reserve(n * dim_);
  due.counts.reserve(n);
  const size_t row_bytes = sizeof(float) * dim_;
  for (size_t i = 0; i < n; ++i) {
    const float* g = grads + i * dim_;
    auto pass = [&](const float* row, uint32_t count) {
      due.keys.push_back(keys[i]);
      due.grads.insert(due.grads.end(), row, row + dim_);
      due.counts.push_back(count);
    };
    if (at[i] == kNone) {
      pass(g, 1);  // write-through
      ++stats_.written_through;
      continue;
    }
    ++stats_.accumulated;
    Line& line = lines_[at[i]];
    if (staleness_ <= 1) {
      pass(g, 1);  // due at once: the gradient itself, bit for bit
      ++stats_.write_backs;
      continue;
    }
    if (line.pending == kNone) {
      line.pending = free_pool_.back();
      free_pool_.pop_back();
      pool_owner_[line.pending] = at[i];
      std::memcpy(Grad(line.pending), g, row_bytes);  // the first term as is: no 0 + g
      line.count = 1;
      ++stats_.pending_lines;
    } else {
      float* sum = Grad(line.pending);
      for (int j = 0; j < dim_; ++j) sum[j] += g[j];
      ++line.count;
    }
    ++stats_.pending_count;
    if (line.count >= staleness_) {
      pass(Grad(line.pending), line.count);
      ++stats_.write_backs;
      ReleasePending(line);
    }
  }
  return due;
}

RowCache::Pending RowCache::AllPending() {
  std::vector<uint32_t> owners;
  owners.reserve(stats_.pending_lines);
  for (const uint32_t line : pool_owner_) {
    if (line != kNone) owners.push_back(line);
  }
  std::sort(owners.begin(), owners.end(), [this](uint32_t a, uint32_t b) { return lines_[a].key < lines_[b].key; });
  Pending out;
  out.keys.reserve(owners.size());
  out.grads.reserve(owners.size() * dim_);
  out.counts.reserve(owners.size());
  for (const uint32_t line : owners) HandBack(lines_[line], out);
  return out;
}

RowCache::Pending RowCache::Flush() { return AllPending(); }

RowCache::Pending RowCache::Invalidate(const int64_t* keys, size_t n) {
  RequirePointer(keys, n, "Invalidate", "keys");
  Pending out;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t at = Find(keys[i]);
    if (at == kNone) continue;
    Line& line = lines_[at];
    if (line.pending != kNone) HandBack(line, out);
    Unlink(at);
    index_.Erase(line.key, [this](uint32_t l) { return lines_[l].key; });
    free_lines_.push_back(at);
  }
  EraseEmpty();
  return out;
}

uint32_t RowCache::Evict(Pending& evicted) {
  auto it = lists_.begin();
  while (it->second.head == kNone) ++it;  // lists this call emptied are erased after it
  const uint32_t at = it->second.head;    // the lowest rank's first line: the policy's victim
  Line& victim = lines_[at];
  if (victim.pending != kNone) HandBack(victim, evicted);
  Unlink(at);
  index_.Erase(victim.key, [this](uint32_t l) { return lines_[l].key; });
  ++stats_.evictions;
  return at;
}

RowCache::Pending RowCache::Resize(size_t capacity_rows) {
  if (capacity_rows < 1 || capacity_rows > KeyIndex::kMaxSlot) {
    throw std::invalid_argument("RowCache::Resize: capacity_rows must be in [1, " + std::to_string(KeyIndex::kMaxSlot) +
                                "], got " + std::to_string(capacity_rows));
  }
  Pending evicted;
  // Every line is in a list between calls, so the lists hold a victim while size() > capacity_rows >= 1.
  while (index_.size() > capacity_rows) free_lines_.push_back(Evict(evicted));
  EraseEmpty();
  capacity_ = capacity_rows;
  return evicted;
}

RowCache::Pending RowCache::Clear() {
  Pending out = AllPending();
  lines_.clear();
  values_.clear();
  free_lines_.clear();
  index_.Clear();
  lists_.clear();
  emptied_.clear();
  linked_ = 0;
  pool_.clear();
  pool_owner_.clear();
  free_pool_.clear();
  return out;
}

RowCache::Stats RowCache::stats() const {
  Stats s = stats_;
  s.rows = index_.size();
  s.capacity = capacity_;
  s.max_pending_count = 0;
  for (const uint32_t line : pool_owner_) {
    if (line != kNone) s.max_pending_count = std::max(s.max_pending_count, lines_[line].count);
  }
  return s;
}

}  // namespace xdl_ec
