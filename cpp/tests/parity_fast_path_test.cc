// The in-process parity path: deltas applied by reference (ParityRouter::RouteRefs + ParityStore::Apply
// of refs) must give the very bytes of the copying path (Route + Apply of ParityUpdate), for XOR rows
// and GF-multiply rows alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "xdl_ec/delta_batch.h"
#include "xdl_ec/erasure_code.h"
#include "xdl_ec/parity_router.h"
#include "xdl_ec/parity_store.h"
#include "xdl_ec/parity_update.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec {
namespace {

// Random deltas for distinct random slots of one source server.
DeltaBatch RandomDeltas(std::mt19937_64& rng, size_t count, uint32_t max_slot, size_t record_bytes) {
  DeltaBatch d;
  d.record_bytes = record_bytes;
  std::vector<uint32_t> slots(max_slot);
  for (uint32_t s = 0; s < max_slot; ++s) slots[s] = s;
  std::shuffle(slots.begin(), slots.end(), rng);
  d.slots.assign(slots.begin(), slots.begin() + count);
  d.xor_bytes.resize(count * record_bytes);
  for (uint8_t& b : d.xor_bytes) b = static_cast<uint8_t>(rng());
  return d;
}

std::vector<uint8_t> Blocks(const ParityStore& store) {
  std::vector<uint8_t> out(store.num_blocks() * store.block_bytes());
  for (size_t c = 0; c < store.num_blocks(); ++c) store.ReadBlock(c, out.data() + c * store.block_bytes());
  return out;
}

struct Geometry {
  int n, k, r;
  uint32_t block_slots;
  size_t record_bytes;
};

class ParityFastPathTest : public ::testing::TestWithParam<Geometry> {};

TEST_P(ParityFastPathTest, RefsGiveTheBytesOfTheCopyingPath) {
  const Geometry g = GetParam();
  const StripeLayout layout(g.n, g.k, g.r);
  const ParityRouter router(layout, g.block_slots, g.record_bytes);
  auto code = std::make_shared<const ErasureCode>(g.k, g.r);
  std::vector<std::unique_ptr<ParityStore>> copied, by_ref;
  for (int h = 0; h < g.n; ++h) {
    copied.push_back(std::make_unique<ParityStore>(code, router.block_bytes()));
    by_ref.push_back(std::make_unique<ParityStore>(code, router.block_bytes()));
  }
  std::mt19937_64 rng(11);
  std::vector<ParityUpdate> updates;
  std::vector<std::vector<ParityDeltaRef>> refs;
  std::vector<std::vector<uint8_t>> reference(g.n);
  for (int round = 0; round < 6; ++round) {
    for (int source = 0; source < g.n; ++source) {
      const DeltaBatch d = RandomDeltas(rng, 150, g.block_slots * 20, g.record_bytes);
      router.Route(source, d, &updates);
      router.RouteRefs(source, d, &refs);
      ASSERT_EQ(refs.size(), updates.size());
      // Route from delta pointers (a coalesced range's form) gives the same updates, byte for byte.
      std::vector<const uint8_t*> pointers;
      for (size_t e = 0; e < d.size(); ++e) pointers.push_back(d.delta(e));
      std::vector<ParityUpdate> from_pointers;
      router.Route(source, d.slots, pointers, &from_pointers);
      for (int h = 0; h < g.n; ++h) ASSERT_EQ(from_pointers[h].Serialize(), updates[h].Serialize());
      for (int h = 0; h < g.n; ++h) {
        ASSERT_EQ(refs[h].size(), updates[h].size());
        for (size_t e = 0; e < refs[h].size(); ++e) {
          const ParityUpdate::Entry& a = refs[h][e].entry;
          const ParityUpdate::Entry& b = updates[h].entries[e];
          EXPECT_EQ(a.parity_block, b.parity_block);
          EXPECT_EQ(a.offset, b.offset);
          EXPECT_EQ(a.parity_member, b.parity_member);
          EXPECT_EQ(a.data_member, b.data_member);
          EXPECT_EQ(0, std::memcmp(refs[h][e].delta, updates[h].delta(e), g.record_bytes));
        }
        // Independent reference: ErasureCode::Update on plain bytes, one entry at a time.
        for (size_t e = 0; e < updates[h].size(); ++e) {
          const ParityUpdate::Entry& en = updates[h].entries[e];
          std::vector<uint8_t>& ref = reference[h];
          ref.resize(std::max(ref.size(), (en.parity_block + 1) * router.block_bytes()));
          code->Update(g.record_bytes, en.parity_member, en.data_member, updates[h].delta(e),
                       ref.data() + en.parity_block * router.block_bytes() + en.offset);
        }
        if (!updates[h].empty()) copied[h]->Apply(updates[h]);
        by_ref[h]->Apply(refs[h].data(), refs[h].size(), g.record_bytes);
      }
    }
  }
  for (int h = 0; h < g.n; ++h) {
    EXPECT_EQ(Blocks(*by_ref[h]), Blocks(*copied[h])) << "holder " << h;
    EXPECT_EQ(Blocks(*by_ref[h]), reference[h]) << "holder " << h;
    EXPECT_EQ(by_ref[h]->delta_bytes_received(), copied[h]->delta_bytes_received());
    EXPECT_EQ(by_ref[h]->updates_received(), copied[h]->updates_received());
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, ParityFastPathTest,
                         ::testing::Values(Geometry{5, 4, 1, 1024, 136},  // power-of-two blocks, XOR only
                                           Geometry{6, 4, 2, 64, 72},     // GF rows too
                                           Geometry{7, 3, 4, 13, 24},     // division path, short records
                                           Geometry{8, 5, 3, 16, 200}));  // records over three lines

TEST(ParityStoreRefsTest, RejectsABadEntryWithoutChangingAnything) {
  auto code = std::make_shared<const ErasureCode>(3, 2);
  ParityStore store(code, 64);
  const std::vector<uint8_t> delta(16, 0x5A);
  std::vector<ParityDeltaRef> refs = {{{1, 16, 1, 2}, delta.data()}};
  store.Apply(refs.data(), refs.size(), 16);
  std::vector<uint8_t> expect(64, 0);
  code->Update(16, 1, 2, delta.data(), expect.data() + 16);
  std::vector<uint8_t> block(64);
  store.ReadBlock(1, block.data());
  EXPECT_EQ(block, expect);
  const std::vector<ParityDeltaRef> good = refs;
  for (const ParityDeltaRef& bad : {ParityDeltaRef{{1, 56, 0, 0}, delta.data()},  // past the block
                                    ParityDeltaRef{{1, 0, 2, 0}, delta.data()},   // parity member >= r
                                    ParityDeltaRef{{1, 0, 0, 3}, delta.data()},   // data member >= k
                                    ParityDeltaRef{{1, 0, 0, 0}, nullptr}}) {     // no delta bytes
    refs = good;
    refs.push_back(bad);
    EXPECT_THROW(store.Apply(refs.data(), refs.size(), 16), std::invalid_argument);
  }
  EXPECT_THROW(store.Apply(nullptr, 1, 16), std::invalid_argument);
  store.ReadBlock(1, block.data());
  EXPECT_EQ(block, expect);
  EXPECT_EQ(store.delta_bytes_received(), 16u);
  EXPECT_EQ(store.num_blocks(), 2u);
}

TEST(ParityRouterRefsTest, RejectsBadBatchesLikeRoute) {
  const ParityRouter router(StripeLayout(5, 4, 1), 16, 8);
  std::vector<std::vector<ParityDeltaRef>> refs;
  DeltaBatch d;
  d.record_bytes = 8;
  d.slots = {3};
  d.xor_bytes.assign(8, 1);
  EXPECT_THROW(router.RouteRefs(5, d, &refs), std::out_of_range);
  EXPECT_THROW(router.RouteRefs(-1, d, &refs), std::out_of_range);
  d.record_bytes = 9;
  EXPECT_THROW(router.RouteRefs(0, d, &refs), std::invalid_argument);
  d.record_bytes = 8;
  d.xor_bytes.resize(7);
  EXPECT_THROW(router.RouteRefs(0, d, &refs), std::invalid_argument);
  std::vector<ParityUpdate> updates;
  const uint8_t delta[8] = {};
  EXPECT_THROW(router.Route(5, {3}, {delta}, &updates), std::out_of_range);
  EXPECT_THROW(router.Route(0, {3, 4}, {delta}, &updates), std::invalid_argument);
  EXPECT_THROW(router.Route(0, {3}, {nullptr}, &updates), std::invalid_argument);
}

}  // namespace
}  // namespace xdl_ec
