#include "xdl_ec/access_counter.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace xdl_ec {
namespace {

std::map<int64_t, int64_t> AsMap(const AccessCounter& c) {
  std::vector<int64_t> keys, counts;
  c.Items(&keys, &counts);
  std::map<int64_t, int64_t> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) EXPECT_LT(keys[i - 1], keys[i]);  // sorted, unique
    out[keys[i]] = counts[i];
  }
  return out;
}

TEST(AccessCounterTest, MatchesAReferenceMapThroughGrowthAndDiscards) {
  AccessCounter c;
  std::map<int64_t, int64_t> ref;
  int64_t total = 0;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> hot(-300, 300);
  for (int call = 0; call < 400; ++call) {
    std::vector<int64_t> keys;
    for (int i = 0; i < 40; ++i) keys.push_back(i % 3 ? hot(rng) : static_cast<int64_t>(rng()));
    const bool once = call % 2 == 0;
    c.Add(keys.data(), keys.size(), once);
    std::set<int64_t> seen;
    for (int64_t k : keys) {
      if (once && !seen.insert(k).second) continue;
      ++ref[k];
      ++total;
    }
    if (call % 50 == 49) {  // discard a range: backward-shift deletion must keep every other key findable
      std::vector<int64_t> gone;
      for (int64_t k = -300; k < -200; ++k) gone.push_back(k);
      size_t expected = 0;
      for (int64_t k : gone) {
        auto it = ref.find(k);
        if (it != ref.end()) {
          total -= it->second;
          ref.erase(it);
          ++expected;
        }
      }
      EXPECT_EQ(c.Discard(gone.data(), gone.size()), expected);
    }
  }
  EXPECT_EQ(AsMap(c), ref);
  EXPECT_EQ(c.size(), ref.size());
  EXPECT_EQ(c.total(), total);
  std::vector<int64_t> probe;
  for (const auto& [k, n] : ref) probe.push_back(k);
  probe.push_back(std::numeric_limits<int64_t>::min());
  std::vector<int64_t> got(probe.size());
  c.Get(probe.data(), probe.size(), got.data());
  for (size_t i = 0; i + 1 < probe.size(); ++i) EXPECT_EQ(got[i], ref[probe[i]]);
  EXPECT_EQ(got.back(), ref.count(probe.back()) ? ref[probe.back()] : 0);
}

TEST(AccessCounterTest, DiscardEverythingThenClear) {
  AccessCounter c;
  std::vector<int64_t> keys(5000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i) * 1024;  // same low bits
  c.Add(keys.data(), keys.size(), true);
  c.Add(keys.data(), 10, false);
  EXPECT_EQ(c.total(), 5010);
  EXPECT_EQ(c.Discard(keys.data() + 10, keys.size() - 10), keys.size() - 10);
  EXPECT_EQ(AsMap(c).size(), 10u);
  std::vector<int64_t> got(10);
  c.Get(keys.data(), 10, got.data());
  for (int64_t n : got) EXPECT_EQ(n, 2);
  c.Clear();
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.total(), 0);
  c.Get(keys.data(), 10, got.data());
  for (int64_t n : got) EXPECT_EQ(n, 0);
  c.Add(nullptr, 0, true);  // an empty batch is fine
  EXPECT_EQ(c.size(), 0u);
}

TEST(AccessCounterTest, SetOverwritesInsertsForgetsAndRejectsBadInput) {
  AccessCounter c;
  const std::vector<int64_t> keys = {1, 2, 3};
  c.Add(keys.data(), keys.size(), true);
  c.Add(keys.data(), 1, true);
  const std::vector<int64_t> set_keys = {1, 3, 9}, set_counts = {5, 0, 4};
  c.Set(set_keys.data(), set_counts.data(), 3);
  EXPECT_EQ(AsMap(c), (std::map<int64_t, int64_t>{{1, 5}, {2, 1}, {9, 4}}));
  EXPECT_EQ(c.total(), 10);
  const std::vector<int64_t> bad_counts = {1, -1, 1}, dup_keys = {4, 5, 4}, ok_counts = {1, 1, 1};
  EXPECT_THROW(c.Set(set_keys.data(), bad_counts.data(), 3), std::invalid_argument);
  EXPECT_THROW(c.Set(dup_keys.data(), ok_counts.data(), 3), std::invalid_argument);
  EXPECT_EQ(AsMap(c), (std::map<int64_t, int64_t>{{1, 5}, {2, 1}, {9, 4}}));  // unchanged
  std::vector<int64_t> many(3000), counts(3000, 2);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i) + 100;
  c.Set(many.data(), counts.data(), many.size());  // grows the table
  EXPECT_EQ(c.size(), 3003u);
  EXPECT_EQ(c.total(), 10 + 6000);
}

}  // namespace
}  // namespace xdl_ec
