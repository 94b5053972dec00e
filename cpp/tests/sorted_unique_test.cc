#include "xdl_ec/sorted_unique.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <vector>

namespace xdl_ec {
namespace {

// The reference: distinct keys in signed order from a std::map, each key's index among them.
void ExpectMatchesReference(const std::vector<int64_t>& keys) {
  std::map<int64_t, int32_t> rank;
  for (int64_t k : keys) rank[k] = 0;
  std::vector<int64_t> expected_unique;
  for (auto& [key, index] : rank) {
    index = static_cast<int32_t>(expected_unique.size());
    expected_unique.push_back(key);
  }
  std::vector<int64_t> unique = {42};  // not empty: SortedUnique replaces what it holds
  std::vector<int32_t> inverse(keys.size(), -1);
  SortedUnique(keys.data(), keys.size(), &unique, inverse.data());
  ASSERT_EQ(unique, expected_unique);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(inverse[i], rank[keys[i]]) << "position " << i;
    ASSERT_EQ(unique[inverse[i]], keys[i]) << "position " << i;
  }
}

TEST(SortedUniqueTest, EmptyAndOneKey) {
  std::vector<int64_t> unique = {7};
  SortedUnique(nullptr, 0, &unique, nullptr);
  EXPECT_TRUE(unique.empty());
  ExpectMatchesReference({-5});
}

TEST(SortedUniqueTest, SignedOrderAtTheExtremes) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> keys = {hi, 0, lo, -1, 1, hi, lo, 0};
  ExpectMatchesReference(keys);
  // the same above the comparison sort's size, so the radix passes see the sign bit too
  std::vector<int64_t> many;
  for (size_t i = 0; i < 1000; ++i) many.push_back(keys[i % keys.size()]);
  ExpectMatchesReference(many);
}

TEST(SortedUniqueTest, ZipfLikeBatchesOfManySizes) {
  std::mt19937_64 rng(7);
  for (size_t n : {2u, 100u, 255u, 256u, 257u, 4096u, 53248u}) {
    std::vector<int64_t> keys(n);
    // a few hot keys and a long tail of random 64-bit ones, as salted feature keys are
    std::vector<int64_t> hot = {static_cast<int64_t>(rng()), static_cast<int64_t>(rng()), -3, 3};
    for (auto& k : keys) k = rng() % 4 == 0 ? hot[rng() % hot.size()] : static_cast<int64_t>(rng() % (n / 2 + 1)) - 17;
    ExpectMatchesReference(keys);
    for (auto& k : keys) k = static_cast<int64_t>(rng());
    ExpectMatchesReference(keys);
  }
}

TEST(SortedUniqueTest, KeysSharingHighDigitsSkipPassesAndStayOrdered) {
  std::vector<int64_t> keys;
  for (int i = 0; i < 5000; ++i) keys.push_back(int64_t{1} << 40 | ((i * 7919) % 3001));
  ExpectMatchesReference(keys);
  std::vector<int64_t> same(3000, -123456789);
  ExpectMatchesReference(same);
}

}  // namespace
}  // namespace xdl_ec
