// RouteTable: rendezvous-hashed owners of the virtual buckets. What a resize relies on: N -> N+1 servers moves
// ~1/(N+1) of the buckets, all to the newcomer; a drain moves only the drained server's; the table is balanced.
#include "xdl_ec/route_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "xdl_ec/key_router.h"

namespace xdl_ec {
namespace {

std::vector<int> Ids(int n) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i);
  return ids;
}

TEST(RouteTableTest, GrowingByOneMovesAboutOneOverNPlusOneAllToTheNewcomer) {
  for (int n : {1, 2, 4, 5, 7, 8, 16}) {
    const RouteTable& before = RouteTable::Dense(n);
    const RouteTable& after = RouteTable::Dense(n + 1);
    size_t moved = 0;
    for (uint32_t b = 0; b < RouteTable::kBuckets; ++b) {
      if (before.OwnerOf(b) == after.OwnerOf(b)) continue;
      ++moved;
      ASSERT_EQ(after.OwnerOf(b), n) << "bucket " << b << " moved between two old servers, n=" << n;
    }
    const double expected = static_cast<double>(RouteTable::kBuckets) / (n + 1);
    // Tolerance 5% of the expectation: the binomial spread is ~1% at n = 16.
    EXPECT_NEAR(static_cast<double>(moved), expected, expected * 0.05) << "n=" << n;
  }
}

TEST(RouteTableTest, KeysMoveLikeTheirBuckets) {
  const int n = 5;
  const int keys = 200000;
  int moved = 0;
  for (int64_t key = 0; key < keys; ++key) moved += KeyRouter::ServerOf(key, n) != KeyRouter::ServerOf(key, n + 1);
  EXPECT_NEAR(moved, keys / (n + 1), keys / (n + 1) * 0.05);
}

TEST(RouteTableTest, EveryServerGetsItsShareOfBuckets) {
  for (int n : {2, 3, 5, 8, 16, 33}) {
    std::vector<size_t> count(static_cast<size_t>(n), 0);
    for (uint16_t owner : RouteTable::Dense(n).owners()) ++count[owner];
    // Each count is ~binomial(kBuckets, 1/n): within 4 standard deviations (4.4% of the share at n = 8, 9% at 33).
    const double share = static_cast<double>(RouteTable::kBuckets) / n;
    const double sigma = std::sqrt(share * (1.0 - 1.0 / n));
    for (size_t c : count) EXPECT_NEAR(static_cast<double>(c), share, 4 * sigma) << "n=" << n;
  }
}

TEST(RouteTableTest, ADrainMovesOnlyTheDrainedServersBucketsAndSpreadsThem) {
  const RouteTable all(Ids(8));
  const RouteTable drained({0, 1, 2, 4, 5, 6, 7});
  std::vector<size_t> received(8, 0);
  size_t moved = 0;
  for (uint32_t b = 0; b < RouteTable::kBuckets; ++b) {
    if (all.OwnerOf(b) != 3) {
      ASSERT_EQ(drained.OwnerOf(b), all.OwnerOf(b)) << "bucket " << b << " of a kept server moved";
      continue;
    }
    ASSERT_NE(drained.OwnerOf(b), 3);
    ++received[static_cast<size_t>(drained.OwnerOf(b))];
    ++moved;
  }
  for (int s = 0; s < 8; ++s) {
    if (s == 3) continue;
    EXPECT_NEAR(static_cast<double>(received[static_cast<size_t>(s)]), moved / 7.0, moved / 7.0 * 0.15) << s;
  }
  // The hole is refilled by the smallest free id: the original table comes back exactly.
  EXPECT_EQ(RouteTable({0, 1, 2, 4, 5, 6, 7, 3}).owners(), all.owners());
}

TEST(RouteTableTest, DenseIsTheTableOfIdsZeroToNAndKeyRouterUsesIt) {
  const RouteTable explicit_table(Ids(6));
  EXPECT_EQ(RouteTable::Dense(6).owners(), explicit_table.owners());
  EXPECT_EQ(&RouteTable::Dense(6), &RouteTable::Dense(6));
  std::vector<int64_t> keys;
  for (int64_t k = -500; k < 500; ++k) keys.push_back(k * 7919);
  std::vector<int32_t> out(keys.size());
  explicit_table.ServersOf(keys.data(), keys.size(), out.data());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(out[i], KeyRouter::ServerOf(keys[i], 6));
    EXPECT_EQ(out[i], explicit_table.OwnerOf(RouteTable::BucketOf(keys[i])));
  }
  // Order of the given ids does not matter.
  EXPECT_EQ(RouteTable({5, 3, 1, 0, 2, 4}).owners(), explicit_table.owners());
}

TEST(RouteTableTest, RejectsBadIdSets) {
  EXPECT_THROW(RouteTable(std::vector<int>{}), std::invalid_argument);
  EXPECT_THROW(RouteTable({0, 1, 1}), std::invalid_argument);
  EXPECT_THROW(RouteTable({-1, 2}), std::invalid_argument);
  EXPECT_THROW(RouteTable({RouteTable::kMaxServerId}), std::invalid_argument);
  EXPECT_THROW(RouteTable::Dense(0), std::invalid_argument);
  try {
    RouteTable({0, 2, 2});
    FAIL() << "duplicate id accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("given twice"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace xdl_ec
