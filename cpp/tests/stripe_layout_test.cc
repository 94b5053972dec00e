#include "xdl_ec/stripe_layout.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "xdl_ec/key_index.h"
#include "xdl_ec/key_router.h"
#include "xdl_ec/route_table.h"

namespace xdl_ec {
namespace {

struct Geometry {
  int n, k, r;
};

const std::vector<Geometry> kGeometries = {{2, 1, 1}, {3, 2, 1}, {5, 4, 1},  {6, 4, 2},  {7, 4, 2},
                                           {8, 3, 3}, {9, 5, 4}, {12, 6, 3}, {16, 12, 4}};

TEST(StripeLayoutTest, DataBlocksMapToStripesAndBack) {
  for (const auto& g : kGeometries) {
    StripeLayout layout(g.n, g.k, g.r);
    const size_t cycles = 3;
    std::set<std::pair<size_t, int>> seen;
    for (int p = 0; p < g.n; ++p) {
      for (size_t b = 0; b < cycles * g.k; ++b) {
        StripeSlot slot = layout.DataSlot(p, b);
        ASSERT_LT(slot.member, g.k);
        ASSERT_LT(slot.stripe, cycles * g.n);
        BlockRef back = layout.DataMember(slot.stripe, slot.member);
        EXPECT_EQ(back.server, p);
        EXPECT_EQ(back.block, b);
        EXPECT_EQ(layout.ServerAt(slot.stripe, slot.member), p);
        EXPECT_TRUE(seen.insert({slot.stripe, slot.member}).second) << "two blocks claim one stripe position";
      }
    }
    // Every (stripe, data member) of those cycles is claimed exactly once: a bijection.
    EXPECT_EQ(seen.size(), cycles * g.n * g.k);
  }
}

TEST(StripeLayoutTest, ParityBlocksMapToStripesAndBack) {
  for (const auto& g : kGeometries) {
    StripeLayout layout(g.n, g.k, g.r);
    const size_t cycles = 3;
    std::set<std::pair<size_t, int>> seen;
    for (int p = 0; p < g.n; ++p) {
      for (size_t c = 0; c < cycles * g.r; ++c) {
        StripeSlot slot = layout.ParitySlot(p, c);
        ASSERT_LT(slot.member, g.r);
        BlockRef back = layout.ParityMember(slot.stripe, slot.member);
        EXPECT_EQ(back.server, p);
        EXPECT_EQ(back.block, c);
        EXPECT_EQ(layout.ServerAt(slot.stripe, g.k + slot.member), p);
        EXPECT_TRUE(seen.insert({slot.stripe, slot.member}).second);
      }
    }
    EXPECT_EQ(seen.size(), cycles * g.n * g.r);
  }
}

TEST(StripeLayoutTest, MembersOfEveryStripeAreDistinctServers) {
  for (const auto& g : kGeometries) {
    StripeLayout layout(g.n, g.k, g.r);
    for (size_t s = 0; s < 4u * g.n; ++s) {
      std::set<int> servers;
      for (int t = 0; t < g.k + g.r; ++t) servers.insert(layout.ServerAt(s, t));
      EXPECT_EQ(servers.size(), static_cast<size_t>(g.k + g.r)) << "stripe " << s;
      for (int j = 0; j < g.k; ++j) EXPECT_EQ(layout.DataMember(s, j).block / g.k, s / g.n);
      for (int i = 0; i < g.r; ++i) EXPECT_EQ(layout.ParityMember(s, i).block / g.r, s / g.n);
    }
  }
}

TEST(StripeLayoutTest, EveryServerHoldsKDataAndRParityBlocksPerCycle) {
  for (const auto& g : kGeometries) {
    StripeLayout layout(g.n, g.k, g.r);
    for (size_t q = 0; q < 3; ++q) {
      std::vector<int> data(g.n, 0), parity(g.n, 0);
      for (size_t s = q * g.n; s < (q + 1) * g.n; ++s) {
        for (int j = 0; j < g.k; ++j) ++data[layout.DataMember(s, j).server];
        for (int i = 0; i < g.r; ++i) ++parity[layout.ParityMember(s, i).server];
      }
      for (int p = 0; p < g.n; ++p) {
        EXPECT_EQ(data[p], g.k) << "server " << p;
        EXPECT_EQ(parity[p], g.r) << "server " << p;
      }
    }
  }
}

TEST(StripeLayoutTest, StripeCountsCoverWholeCycles) {
  StripeLayout layout(6, 4, 2);
  EXPECT_EQ(layout.StripesForDataBlocks(0), 0u);
  EXPECT_EQ(layout.StripesForDataBlocks(1), 6u);
  EXPECT_EQ(layout.StripesForDataBlocks(4), 6u);
  EXPECT_EQ(layout.StripesForDataBlocks(5), 12u);
  EXPECT_EQ(layout.StripesForParityBlocks(2), 6u);
  EXPECT_EQ(layout.StripesForParityBlocks(3), 12u);
}

TEST(StripeLayoutTest, RejectsBadGeometryAndIndices) {
  EXPECT_THROW(StripeLayout(4, 0, 1), std::invalid_argument);
  EXPECT_THROW(StripeLayout(4, 3, 0), std::invalid_argument);
  EXPECT_THROW(StripeLayout(4, 3, 2), std::invalid_argument);
  try {
    StripeLayout(4, 3, 2);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("n (servers)"), std::string::npos) << e.what();
  }
  StripeLayout layout(5, 3, 2);
  EXPECT_THROW(layout.DataSlot(5, 0), std::out_of_range);
  EXPECT_THROW(layout.ParitySlot(-1, 0), std::out_of_range);
  EXPECT_THROW(layout.DataMember(0, 3), std::out_of_range);
  EXPECT_THROW(layout.ParityMember(0, 2), std::out_of_range);
  EXPECT_THROW(layout.ServerAt(0, 5), std::out_of_range);
}

TEST(KeyRouterTest, SpreadsConsecutiveAndStridedKeysEvenly) {
  for (int n : {3, 5, 8}) {
    for (int64_t stride : {1, 8, 1024}) {
      std::vector<int> count(n, 0);
      const int keys = 60000;
      for (int64_t i = 0; i < keys; ++i) {
        int s = KeyRouter::ServerOf(i * stride, n);
        ASSERT_GE(s, 0);
        ASSERT_LT(s, n);
        ++count[s];
      }
      // Each server's expected count is its share of the route table's buckets (a rendezvous table's shares
      // differ by a few %, route_table_test bounds them); the keys must spread over the buckets like random ones.
      std::vector<int> buckets(n, 0);
      for (uint16_t owner : RouteTable::Dense(n).owners()) ++buckets[owner];
      for (int s = 0; s < n; ++s) {
        const double expected = static_cast<double>(keys) * buckets[s] / RouteTable::kBuckets;
        EXPECT_NEAR(count[s], expected, expected * 0.05) << "n=" << n << " stride=" << stride << " server " << s;
      }
    }
  }
}

TEST(KeyRouterTest, IsStableAndNotModulo) {
  // Pinned values: the routing must never change between runs or builds (servers and workers agree). Pinned
  // anew when routing became the rendezvous bucket table (route_table.h); saved runs re-route on resume.
  std::vector<int64_t> keys = {0, 1, 2, 3, -1, 1234567890123LL};
  std::vector<int32_t> out(keys.size());
  KeyRouter::ServersOf(keys.data(), keys.size(), 7, out.data());
  const std::vector<int32_t> pinned = {3, 2, 1, 1, 1, 5};
  EXPECT_EQ(out, pinned);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(out[i], KeyRouter::ServerOf(keys[i], 7));
  int differs_from_modulo = 0;
  for (int64_t key = 0; key < 100; ++key) differs_from_modulo += KeyRouter::ServerOf(key, 7) != key % 7;
  EXPECT_GT(differs_from_modulo, 50);
  EXPECT_THROW(KeyRouter::ServerOf(1, 0), std::invalid_argument);
}

TEST(KeyRouterTest, OneServersKeysSpreadOverTheWholeShardIndex) {
  // The shard's KeyIndex homes a key by the high bits of its tag: if routing used the same bits, all
  // keys of one server would share 1/n of the index and linear probing would crawl.
  const int n = 8;
  std::vector<int> buckets(16, 0);
  int mine = 0;
  for (int64_t key = 0; mine < 32000; ++key) {
    if (KeyRouter::ServerOf(key, n) != 3) continue;
    ++mine;
    ++buckets[KeyIndex::Tag(key) >> 28];
  }
  for (int b : buckets) EXPECT_NEAR(b, mine / 16, mine / 16 * 0.1);
}

}  // namespace
}  // namespace xdl_ec
