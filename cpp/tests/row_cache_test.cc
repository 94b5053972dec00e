#include "xdl_ec/row_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace xdl_ec {
namespace {

using Policy = RowCache::Policy;

// A row whose every element is `v`, for readable expectations.
std::vector<float> Rows(const std::vector<int64_t>& keys, int dim, float base = 0.0f) {
  std::vector<float> rows(keys.size() * dim);
  for (size_t i = 0; i < keys.size(); ++i)
    for (int j = 0; j < dim; ++j) rows[i * dim + j] = base + static_cast<float>(keys[i]) + 0.25f * j;
  return rows;
}

RowCache::Pending Fill(RowCache& cache, const std::vector<int64_t>& keys, int32_t clock = 1, uint64_t tag = 7,
                       float base = 0.0f) {
  const std::vector<float> rows = Rows(keys, cache.dim(), base);
  const std::vector<int32_t> clocks(keys.size(), clock);
  const std::vector<uint64_t> tags(keys.size(), tag);
  return cache.Fill(keys.data(), keys.size(), rows.data(), clocks.data(), tags.data());
}

std::vector<int32_t> Lookup(RowCache& cache, const std::vector<int64_t>& keys, std::vector<uint64_t>* tags = nullptr) {
  std::vector<int32_t> known(keys.size(), -7);
  std::vector<uint64_t> t(keys.size(), 99);
  cache.Lookup(keys.data(), keys.size(), known.data(), t.data());
  if (tags) *tags = t;
  return known;
}

// Whether `key` is cached, without touching it (Get is const).
bool Cached(const RowCache& cache, int64_t key) {
  std::vector<float> row(cache.dim());
  try {
    cache.Get(&key, 1, row.data());
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

std::vector<int64_t> CachedOf(const RowCache& cache, const std::vector<int64_t>& keys) {
  std::vector<int64_t> out;
  for (int64_t k : keys)
    if (Cached(cache, k)) out.push_back(k);
  return out;
}

RowCache::Due Accumulate(RowCache& cache, const std::vector<int64_t>& keys, const std::vector<float>& grads) {
  return cache.Accumulate(keys.data(), keys.size(), grads.data());
}

TEST(RowCache, ConstructionIsChecked) {
  try {
    RowCache cache(4, 0, 1, Policy::kLRU);
    FAIL() << "capacity 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("capacity_rows must be in [1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(RowCache(0, 4, 1, Policy::kLRU), std::invalid_argument);
  EXPECT_THROW(RowCache(1 << 17, 4, 1, Policy::kLFU), std::invalid_argument);
  EXPECT_THROW(RowCache(4, 4, 1, static_cast<Policy>(9)), std::invalid_argument);
  RowCache ok(1, 1, 0, Policy::kLFU);
  EXPECT_EQ(ok.stats().capacity, 1u);
  EXPECT_EQ(ok.size(), 0u);
}

TEST(RowCache, LookupFillGet) {
  RowCache cache(3, 8, 2, Policy::kLRU);
  std::vector<uint64_t> tags;
  EXPECT_EQ(Lookup(cache, {4, 5}, &tags), (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(tags, (std::vector<uint64_t>{0, 0}));
  EXPECT_TRUE(Fill(cache, {4, 5}, 12, 0xABCDEF0123456789ull).keys.empty());
  Fill(cache, {6}, 3, 2);
  EXPECT_EQ(Lookup(cache, {5, 9, 6, 5}, &tags), (std::vector<int32_t>{12, -1, 3, 12}));
  EXPECT_EQ(tags, (std::vector<uint64_t>{0xABCDEF0123456789ull, 0, 2, 0xABCDEF0123456789ull}));
  std::vector<int64_t> keys = {6, 4};
  std::vector<float> rows(6);
  cache.Get(keys.data(), 2, rows.data());
  EXPECT_EQ(rows, Rows(keys, 3));
  const int64_t absent[] = {4, 77};
  try {
    cache.Get(absent, 2, rows.data());
    FAIL() << "an uncached key was answered";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("key 77"), std::string::npos) << e.what();
  }
  const RowCache::Stats s = cache.stats();
  EXPECT_EQ(s.rows, 3u);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.evictions, 0u);
  // A negative clock is refused before anything changes.
  const int64_t k = 4;
  const float row[3] = {0, 0, 0};
  const int32_t bad_clock = -1;
  const uint64_t tag = 0;
  EXPECT_THROW(cache.Fill(&k, 1, row, &bad_clock, &tag), std::invalid_argument);
  EXPECT_EQ(Lookup(cache, {4}), (std::vector<int32_t>{12}));
}

TEST(RowCache, LruEvictsTheLeastRecentThenTheLowestKey) {
  RowCache cache(2, 3, 0, Policy::kLRU);
  Fill(cache, {5, 2, 9});  // one call: equally recent
  Fill(cache, {7});        // -> 2, the lowest key of the least recent
  EXPECT_EQ(CachedOf(cache, {2, 5, 7, 9}), (std::vector<int64_t>{5, 7, 9}));
  Lookup(cache, {9, 100});  // 9 is now the most recent
  Fill(cache, {1});         // -> 5 (filled first), not 9
  EXPECT_EQ(CachedOf(cache, {1, 5, 7, 9}), (std::vector<int64_t>{1, 7, 9}));
  Fill(cache, {3, 4});  // -> 7 then 9: 1 was filled after the lookup of 9
  EXPECT_EQ(CachedOf(cache, {1, 3, 4, 7, 9}), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(cache.stats().evictions, 4u);
}

TEST(RowCache, LfuEvictsTheLowestCountThenTheLeastRecentThenTheLowestKey) {
  RowCache cache(2, 3, 0, Policy::kLFU);
  Fill(cache, {10, 20, 30});    // uses 1 each
  Lookup(cache, {30, 20});      // 2, 2
  Lookup(cache, {30});          // 30: 3
  Lookup(cache, {10, 10, 10});  // 10: 2 (one use per call, however often the key repeats)
  Fill(cache, {40});            // uses 10: 2, 20: 2, 30: 3 -> 20, used less recently than 10
  EXPECT_EQ(CachedOf(cache, {10, 20, 30, 40}), (std::vector<int64_t>{10, 30, 40}));
  Fill(cache, {50});  // -> 40 (1 use), the most recent line: frequency first
  EXPECT_EQ(CachedOf(cache, {10, 30, 40, 50}), (std::vector<int64_t>{10, 30, 50}));
  Fill(cache, {2, 1});  // -> 50 (1 use), then 10 (2 uses)
  EXPECT_EQ(CachedOf(cache, {1, 2, 10, 30, 50}), (std::vector<int64_t>{1, 2, 30}));
  Fill(cache, {3});  // 1 and 2: one use, one call -> the lower key
  EXPECT_EQ(CachedOf(cache, {1, 2, 3, 30}), (std::vector<int64_t>{2, 3, 30}));
  // A refresh is not a use: 2 stays at one use and goes next, though written last.
  Lookup(cache, {3});  // 3: 2 uses
  Fill(cache, {2}, 5);
  Fill(cache, {4});
  EXPECT_EQ(CachedOf(cache, {2, 3, 4, 30}), (std::vector<int64_t>{3, 4, 30}));
}

TEST(RowCache, KeysOfOneFillNeverEvictEachOther) {
  RowCache cache(2, 3, 0, Policy::kLRU);
  Fill(cache, {7, 8, 9});
  // 8 is cached and in this Fill: protected; 7 and 9 go; 3 and 4 find no line left: not cached.
  Fill(cache, {1, 2, 3, 4, 8}, 2);
  EXPECT_EQ(CachedOf(cache, {1, 2, 3, 4, 7, 8, 9}), (std::vector<int64_t>{1, 2, 8}));
  EXPECT_EQ(Lookup(cache, {8, 3}), (std::vector<int32_t>{2, -1}));
  // A batch larger than the cache: the first `capacity` new keys are cached.
  RowCache small(2, 2, 0, Policy::kLFU);
  Fill(small, {4, 3, 2, 1});
  EXPECT_EQ(CachedOf(small, {1, 2, 3, 4}), (std::vector<int64_t>{3, 4}));
  // A key repeated in one Fill: the last row wins, one line.
  const std::vector<int64_t> keys = {6, 6};
  const std::vector<float> rows = {1, 1, 2, 2};
  const std::vector<int32_t> clocks = {3, 4};
  const std::vector<uint64_t> tags = {0, 0};
  small.Fill(keys.data(), 2, rows.data(), clocks.data(), tags.data());
  EXPECT_EQ(Lookup(small, {6}), (std::vector<int32_t>{4}));
  std::vector<float> got(2);
  small.Get(keys.data(), 1, got.data());
  EXPECT_EQ(got, (std::vector<float>{2, 2}));
  EXPECT_EQ(small.size(), 2u);
}

TEST(RowCache, AccumulateHoldsCachedRowsUntilTheBoundAndWritesThroughTheRest) {
  RowCache cache(2, 4, 3, Policy::kLRU);
  Fill(cache, {1, 2});
  auto due = Accumulate(cache, {1, 5, 2}, {1, 1, 50, 50, 2, 2});
  EXPECT_EQ(due.keys, (std::vector<int64_t>{5}));  // 5 is not cached: written through as is
  EXPECT_EQ(due.grads, (std::vector<float>{50, 50}));
  due = Accumulate(cache, {2, 1}, {3, 3, 4, 4});
  EXPECT_TRUE(due.keys.empty());
  EXPECT_EQ(cache.stats().pending_lines, 2u);
  EXPECT_EQ(cache.stats().pending_count, 4u);
  EXPECT_EQ(cache.stats().max_pending_count, 2u);
  due = Accumulate(cache, {6, 1, 2}, {9, 9, 8, 8, 0.5f, 0.5f});  // the third gradient of 1 and 2: due
  EXPECT_EQ(due.keys, (std::vector<int64_t>{6, 1, 2}));          // input order
  EXPECT_EQ(due.grads, (std::vector<float>{9, 9, 1 + 4 + 8, 1 + 4 + 8, 2 + 3 + 0.5f, 2 + 3 + 0.5f}));
  EXPECT_EQ(due.counts, (std::vector<uint32_t>{1, 3, 3}));  // each sum stands for that many steps' gradients
  const RowCache::Stats s = cache.stats();
  EXPECT_EQ(s.pending_lines, 0u);
  EXPECT_EQ(s.pending_count, 0u);
  EXPECT_EQ(s.max_pending_count, 0u);
  EXPECT_EQ(s.accumulated, 6u);
  EXPECT_EQ(s.written_through, 2u);
  EXPECT_EQ(s.write_backs, 2u);
  // A non-finite gradient is refused before anything is taken.
  EXPECT_TRUE(Accumulate(cache, {1}, {1, 1}).keys.empty());
  EXPECT_THROW(Accumulate(cache, {1, 2}, {1, 1, 2, std::numeric_limits<float>::infinity()}), std::invalid_argument);
  EXPECT_EQ(cache.stats().max_pending_count, 1u);
  EXPECT_EQ(cache.stats().pending_lines, 1u);
}

TEST(RowCache, AccumulateSumsInTheOrderTaken) {
  // (a + b) + c = 1 but a + (b + c) = 0 in float: the sum is taken left to right, as given.
  RowCache cache(1, 2, 3, Policy::kLRU);
  Fill(cache, {1});
  Accumulate(cache, {1}, {1e8f});
  Accumulate(cache, {1}, {-1e8f});
  const auto due = Accumulate(cache, {1}, {1.0f});
  ASSERT_EQ(due.grads.size(), 1u);
  EXPECT_EQ(due.grads[0], 1.0f);
  // A repeated key in one batch is taken in turn.
  Accumulate(cache, {1, 1}, {2.0f, 3.0f});
  EXPECT_EQ(cache.Flush().grads, (std::vector<float>{5.0f}));
}

TEST(RowCache, StalenessZeroAndOnePassEveryGradientThroughBitForBit) {
  for (uint32_t staleness : {0u, 1u}) {
    RowCache cache(4, 16, staleness, Policy::kLFU);
    Fill(cache, {1, 2, 3, 4, 5, 6, 7, 8});
    std::mt19937 rng(staleness);
    std::uniform_real_distribution<float> u(-1e-3f, 1e-3f);
    for (int round = 0; round < 5; ++round) {
      std::vector<int64_t> keys = {3, 11, 1, 8, 12, 5};
      std::vector<float> grads(keys.size() * 4);
      for (float& g : grads) g = u(rng);
      grads[0] = -0.0f;  // 0 + g would turn it into +0: the exact mode must not
      grads[5] = std::numeric_limits<float>::denorm_min();
      const auto due = Accumulate(cache, keys, grads);
      EXPECT_EQ(due.keys, keys);
      ASSERT_EQ(due.grads.size(), grads.size());
      EXPECT_EQ(0, std::memcmp(due.grads.data(), grads.data(), grads.size() * sizeof(float)));
      EXPECT_TRUE(std::signbit(due.grads[0]));
    }
    EXPECT_EQ(cache.stats().pending_lines, 0u);
    EXPECT_TRUE(cache.Flush().keys.empty());
  }
}

TEST(RowCache, EvictionWritesBackPendingGradient) {
  RowCache cache(2, 2, 4, Policy::kLRU);
  Fill(cache, {1, 2});
  Accumulate(cache, {1}, {0.5f, 1});
  Accumulate(cache, {1, 2}, {0.25f, 2, 7, 7});
  const auto evicted = Fill(cache, {3});  // 1 and 2 equally recent: 1 goes, with its two gradients
  EXPECT_EQ(evicted.keys, (std::vector<int64_t>{1}));
  EXPECT_EQ(evicted.grads, (std::vector<float>{0.75f, 3}));
  EXPECT_EQ(evicted.counts, (std::vector<uint32_t>{2}));
  // Evicting a line without pending gradient hands nothing back.
  Fill(cache, {2}, 2);  // 2 refreshed: 3 is now the least recent
  EXPECT_TRUE(Fill(cache, {4}).keys.empty());
  const RowCache::Stats s = cache.stats();
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.write_backs, 1u);
  EXPECT_EQ(s.pending_lines, 1u);  // 2's gradient stayed pending through its refresh
  const auto flushed = cache.Flush();
  EXPECT_EQ(flushed.keys, (std::vector<int64_t>{2}));
  EXPECT_EQ(flushed.grads, (std::vector<float>{7, 7}));
}

TEST(RowCache, RefreshReplacesValueAndClockButKeepsPendingGradient) {
  RowCache cache(2, 4, 3, Policy::kLRU);
  Fill(cache, {1}, 1, 5);
  Accumulate(cache, {1}, {1, 2});
  Fill(cache, {1}, 9, 6, 100.0f);
  std::vector<uint64_t> tags;
  EXPECT_EQ(Lookup(cache, {1}, &tags), (std::vector<int32_t>{9}));
  EXPECT_EQ(tags, (std::vector<uint64_t>{6}));
  std::vector<float> row(2);
  const int64_t key = 1;
  cache.Get(&key, 1, row.data());
  EXPECT_EQ(row, Rows({1}, 2, 100.0f));
  const auto due = Accumulate(cache, {1, 1}, {1, 1, 1, 1});  // the pending count went on: 3 reached
  EXPECT_EQ(due.keys, (std::vector<int64_t>{1}));
  EXPECT_EQ(due.grads, (std::vector<float>{3, 4}));
}

TEST(RowCache, FlushInvalidateAndClearHandBackPendingGradient) {
  RowCache cache(1, 8, 5, Policy::kLFU);
  Fill(cache, {9, 3, 6, 1});
  Accumulate(cache, {9, 3, 6}, {9, 3, 6});
  Accumulate(cache, {9}, {9});
  auto flushed = cache.Flush();  // ascending key
  EXPECT_EQ(flushed.keys, (std::vector<int64_t>{3, 6, 9}));
  EXPECT_EQ(flushed.grads, (std::vector<float>{3, 6, 18}));
  EXPECT_EQ(flushed.counts, (std::vector<uint32_t>{1, 1, 2}));
  EXPECT_EQ(cache.size(), 4u);  // lines stay
  EXPECT_TRUE(cache.Flush().keys.empty());

  Accumulate(cache, {6, 9, 1}, {6, 9, 1});
  const std::vector<int64_t> drop = {9, 42, 3, 6};
  auto dropped = cache.Invalidate(drop.data(), drop.size());  // input order, only lines with gradient
  EXPECT_EQ(dropped.keys, (std::vector<int64_t>{9, 6}));
  EXPECT_EQ(dropped.grads, (std::vector<float>{9, 6}));
  EXPECT_EQ(CachedOf(cache, {1, 3, 6, 9}), (std::vector<int64_t>{1}));
  EXPECT_EQ(cache.stats().evictions, 0u);  // dropped, not evicted
  // Freed lines are reused before anything is evicted.
  Fill(cache, {20, 21, 22, 23, 24, 25, 26});
  EXPECT_EQ(cache.size(), 8u);
  EXPECT_EQ(cache.stats().evictions, 0u);

  Accumulate(cache, {25, 1}, {25, 1});
  const uint64_t hits = cache.stats().hits;
  auto cleared = cache.Clear();
  EXPECT_EQ(cleared.keys, (std::vector<int64_t>{1, 25}));
  EXPECT_EQ(cleared.grads, (std::vector<float>{2, 25}));  // 1 held 1 since the Invalidate, +1
  EXPECT_EQ(cleared.counts, (std::vector<uint32_t>{2, 1}));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.stats().pending_lines, 0u);
  EXPECT_EQ(cache.stats().hits, hits);  // counters are kept
  EXPECT_EQ(Lookup(cache, {1, 25}), (std::vector<int32_t>{-1, -1}));
  // Usable after a Clear.
  Fill(cache, {1});
  EXPECT_EQ(Lookup(cache, {1}), (std::vector<int32_t>{1}));
}

TEST(RowCache, ResizeKeepsTheLinesAndShrinksByThePolicy) {
  RowCache cache(2, 4, 3, Policy::kLFU);
  Fill(cache, {1, 2, 3, 4});
  Lookup(cache, {1, 2, 3});
  Lookup(cache, {1, 3});
  Accumulate(cache, {2, 4}, {1, 1, 2, 2});    // 2 and 4 hold one gradient each
  EXPECT_TRUE(cache.Resize(6).keys.empty());  // growing keeps every line, rows and pending gradient
  EXPECT_EQ(CachedOf(cache, {1, 2, 3, 4}), (std::vector<int64_t>{1, 2, 3, 4}));
  Fill(cache, {5, 6});  // the two new lines, nothing evicted
  EXPECT_EQ(cache.size(), 6u);
  EXPECT_EQ(cache.stats().evictions, 0u);
  // uses: 1: 3, 3: 3, 2: 2, 4: 1, 5: 1, 6: 1 -> to 3 rows, 4 (least recent of one use) then 5 and 6 go
  const auto out = cache.Resize(3);
  EXPECT_EQ(out.keys, (std::vector<int64_t>{4}));  // the only one of them holding gradient
  EXPECT_EQ(out.grads, (std::vector<float>{2, 2}));
  EXPECT_EQ(out.counts, (std::vector<uint32_t>{1}));
  EXPECT_EQ(CachedOf(cache, {1, 2, 3, 4, 5, 6}), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(cache.stats().evictions, 3u);
  EXPECT_EQ(cache.stats().pending_count, 1u);  // 2's gradient stays
  EXPECT_EQ(cache.capacity(), 3u);
  Fill(cache, {7});  // full at the new capacity: evicts 2 (the lowest count left), returning its gradient
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(CachedOf(cache, {1, 2, 3, 7}), (std::vector<int64_t>{1, 3, 7}));
  EXPECT_THROW(cache.Resize(0), std::invalid_argument);
  EXPECT_EQ(cache.capacity(), 3u);  // a refused resize changes nothing
  EXPECT_EQ(cache.size(), 3u);
}

TEST(RowCache, CapacityOne) {
  for (Policy policy : {Policy::kLRU, Policy::kLFU}) {
    RowCache cache(2, 1, 3, policy);
    Fill(cache, {1});
    Lookup(cache, {1, 1, 1});
    Accumulate(cache, {1}, {1, 1});
    const auto evicted = Fill(cache, {2});  // the only line goes, whatever its uses
    EXPECT_EQ(evicted.keys, (std::vector<int64_t>{1}));
    EXPECT_EQ(evicted.counts, (std::vector<uint32_t>{1}));
    const auto second = Fill(cache, {3, 4});  // 3 evicts 2; 4 finds no line
    EXPECT_TRUE(second.keys.empty());
    EXPECT_EQ(CachedOf(cache, {2, 3, 4}), (std::vector<int64_t>{3}));
    Fill(cache, {3, 3}, 4);  // a refresh, twice: no eviction
    EXPECT_EQ(Lookup(cache, {3}), (std::vector<int32_t>{4}));
    const auto due = Accumulate(cache, {4, 3}, {4, 4, 3, 3});
    EXPECT_EQ(due.keys, (std::vector<int64_t>{4}));
    const std::vector<int64_t> gone = {3};
    EXPECT_EQ(cache.Invalidate(gone.data(), 1).keys, gone);
    Fill(cache, {5});
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(cache.stats().evictions, 2u);
  }
}

// The rules of row_cache.h spelled out naively (every victim an argmin over all lines), to check the
// cache's lists against under random traffic.
class ReferenceCache {
 public:
  struct Line {
    uint64_t uses = 0, touched = 0;
    int32_t clock = 0;
    std::vector<float> row, pending;
    uint32_t count = 0;
  };
  ReferenceCache(int dim, size_t capacity, uint32_t staleness, Policy policy)
      : dim_(dim), capacity_(capacity), staleness_(staleness), policy_(policy) {}

  std::vector<int32_t> Lookup(const std::vector<int64_t>& keys) {
    ++call_;
    std::vector<int32_t> known;
    for (int64_t k : keys) {
      auto it = lines_.find(k);
      known.push_back(it == lines_.end() ? -1 : it->second.clock);
      if (it != lines_.end() && it->second.touched != call_) {
        it->second.touched = call_;
        ++it->second.uses;
      }
    }
    return known;
  }
  RowCache::Pending Fill(const std::vector<int64_t>& keys, const std::vector<float>& rows, int32_t clock) {
    ++call_;
    for (int64_t k : keys) {
      if (lines_.count(k)) lines_[k].touched = call_;  // protected from this Fill's evictions
    }
    RowCache::Pending evicted;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!lines_.count(keys[i])) {
        if (lines_.size() == capacity_ && !EvictOne(evicted)) continue;
        Line& line = lines_[keys[i]];
        line.uses = 1;
        line.touched = call_;
      }
      Line& line = lines_[keys[i]];
      line.clock = clock;
      line.row.assign(rows.begin() + i * dim_, rows.begin() + (i + 1) * dim_);
    }
    return evicted;
  }
  RowCache::Due Accumulate(const std::vector<int64_t>& keys, const std::vector<float>& grads) {
    RowCache::Due due;
    for (size_t i = 0; i < keys.size(); ++i) {
      const float* g = grads.data() + i * dim_;
      auto it = lines_.find(keys[i]);
      if (it == lines_.end() || staleness_ <= 1) {
        due.keys.push_back(keys[i]);
        due.grads.insert(due.grads.end(), g, g + dim_);
        continue;
      }
      Line& line = it->second;
      if (line.count == 0) {
        line.pending.assign(g, g + dim_);
      } else {
        for (int j = 0; j < dim_; ++j) line.pending[j] += g[j];
      }
      if (++line.count >= staleness_) {
        due.keys.push_back(keys[i]);
        due.grads.insert(due.grads.end(), line.pending.begin(), line.pending.end());
        line.count = 0;
      }
    }
    return due;
  }
  RowCache::Pending Flush() {
    RowCache::Pending out;
    for (auto& [k, line] : lines_) HandBack(k, out);  // std::map: ascending key
    return out;
  }
  RowCache::Pending Invalidate(const std::vector<int64_t>& keys) {
    RowCache::Pending out;
    for (int64_t k : keys) {
      if (!lines_.count(k)) continue;
      HandBack(k, out);
      lines_.erase(k);
    }
    return out;
  }
  RowCache::Pending Resize(size_t capacity) {
    RowCache::Pending evicted;
    ++call_;  // no line is this call's: any may go
    while (lines_.size() > capacity) EvictOne(evicted);
    capacity_ = capacity;
    return evicted;
  }
  const std::map<int64_t, Line>& lines() const { return lines_; }

 private:
  // The policy's argmin among lines the current call did not touch; false when there is none.
  bool EvictOne(RowCache::Pending& evicted) {
    const int64_t* victim = nullptr;
    std::tuple<uint64_t, uint64_t, int64_t> best;
    for (const auto& [k, line] : lines_) {
      if (line.touched == call_) continue;
      const auto rank = std::make_tuple(policy_ == Policy::kLFU ? line.uses : 0, line.touched, k);
      if (!victim || rank < best) {
        best = rank;
        victim = &k;
      }
    }
    if (!victim) return false;
    const int64_t v = *victim;
    HandBack(v, evicted);
    lines_.erase(v);
    return true;
  }

  void HandBack(int64_t key, RowCache::Pending& out) {
    Line& line = lines_[key];
    if (line.count == 0) return;
    out.keys.push_back(key);
    out.grads.insert(out.grads.end(), line.pending.begin(), line.pending.end());
    out.counts.push_back(line.count);
    line.count = 0;
  }
  int dim_;
  size_t capacity_;
  uint32_t staleness_;
  Policy policy_;
  uint64_t call_ = 0;
  std::map<int64_t, Line> lines_;
};

void ExpectSame(const RowCache::Pending& a, const RowCache::Pending& b, int op) {
  EXPECT_EQ(a.keys, b.keys) << "op " << op;
  EXPECT_EQ(a.grads, b.grads) << "op " << op;
  EXPECT_EQ(a.counts, b.counts) << "op " << op;
}

TEST(RowCache, MatchesTheRulesUnderRandomTraffic) {
  for (Policy policy : {Policy::kLRU, Policy::kLFU}) {
    for (uint32_t staleness : {0u, 2u, 3u}) {
      constexpr int kDim = 2;
      RowCache cache(kDim, 6, staleness, policy);
      ReferenceCache ref(kDim, 6, staleness, policy);
      std::mt19937 rng(static_cast<unsigned>(staleness * 2 + (policy == Policy::kLFU)));
      auto some_keys = [&rng](size_t most) {
        std::vector<int64_t> keys(1 + rng() % most);
        for (int64_t& k : keys) k = static_cast<int64_t>(rng() % 20);
        return keys;
      };
      for (int op = 0; op < 3000; ++op) {
        const unsigned what = rng() % 10;
        if (what < 3) {
          const auto keys = some_keys(8);
          EXPECT_EQ(Lookup(cache, keys), ref.Lookup(keys)) << "op " << op;
        } else if (what < 6) {
          const auto keys = some_keys(8);
          const int32_t clock = static_cast<int32_t>(rng() % 1000);
          const auto rows = Rows(keys, kDim, static_cast<float>(op));
          const std::vector<int32_t> clocks(keys.size(), clock);
          const std::vector<uint64_t> tags(keys.size(), 0);
          ExpectSame(cache.Fill(keys.data(), keys.size(), rows.data(), clocks.data(), tags.data()),
                     ref.Fill(keys, rows, clock), op);
        } else if (what < 9) {
          auto keys = some_keys(6);
          std::sort(keys.begin(), keys.end());
          keys.erase(std::unique(keys.begin(), keys.end()), keys.end());  // a batch's unique keys
          std::vector<float> grads(keys.size() * kDim);
          for (float& g : grads) g = static_cast<float>(static_cast<int>(rng() % 9) - 4);
          const auto a = Accumulate(cache, keys, grads);
          const auto b = ref.Accumulate(keys, grads);
          EXPECT_EQ(a.keys, b.keys) << "op " << op;
          EXPECT_EQ(a.grads, b.grads) << "op " << op;
        } else if (rng() % 4 == 0) {
          ExpectSame(cache.Flush(), ref.Flush(), op);
        } else if (rng() % 3 == 0) {
          const size_t capacity = 1 + rng() % 9;  // 1..9 around the start's 6: shrinks and growths
          ExpectSame(cache.Resize(capacity), ref.Resize(capacity), op);
          ASSERT_EQ(cache.capacity(), capacity) << "op " << op;
        } else {
          const auto keys = some_keys(3);
          ExpectSame(cache.Invalidate(keys.data(), keys.size()), ref.Invalidate(keys), op);
        }
        // The same lines with the same rows, read without touching anything.
        ASSERT_EQ(cache.size(), ref.lines().size()) << "op " << op;
        uint64_t held = 0;
        for (const auto& [k, line] : ref.lines()) held += line.count;
        ASSERT_EQ(cache.stats().pending_count, held) << "op " << op;
        for (const auto& [k, line] : ref.lines()) {
          std::vector<float> row(kDim);
          cache.Get(&k, 1, row.data());
          ASSERT_EQ(row, line.row) << "key " << k << " op " << op;
        }
      }
      EXPECT_LE(cache.stats().max_pending_count, staleness);
      EXPECT_GT(cache.stats().evictions, 500u);  // the traffic did exercise the eviction order
      EXPECT_GT(cache.stats().write_backs, staleness > 1 ? 300u : 0u);
    }
  }
}

}  // namespace
}  // namespace xdl_ec
