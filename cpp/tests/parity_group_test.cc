#include "parity_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xdl_ec/key_router.h"
#include "xdl_ec/parity_router.h"
#include "xdl_ec/parity_store.h"
#include "xdl_ec/parity_update.h"
#include "xdl_ec/recovery.h"

namespace xdl_ec {
namespace {

using testing::ParityGroup;
using testing::ParityGroupStats;
using testing::ServerState;

const std::vector<OptimizerKind> kOptimizers = {OptimizerKind::kSGD, OptimizerKind::kMomentum, OptimizerKind::kAdagrad,
                                                OptimizerKind::kAdam, OptimizerKind::kFtrl};

ShardConfig Config(OptimizerKind kind, uint32_t block_slots = 16, int dim = 4) {
  ShardConfig c;
  c.dim = dim;
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 0.05f;
  c.seed = 7;
  c.block_slots = block_slots;
  return c;
}

// Feeds the same operations to a group and its twin: the twin never loses anything and is the
// reference every rebuilt byte is compared with.
class Twins {
 public:
  Twins(int n, int k, int r, const ShardConfig& config, uint64_t seed)
      : a(n, k, r, config), b(n, k, r, config), rng(seed), dim(config.dim) {}

  // Pulls and pushes random keys (from a pool that grows, so new keys keep being inserted) on server s.
  void Train(int s, int batch, int64_t key_space) {
    std::uniform_int_distribution<int64_t> pick(0, key_space - 1);
    std::normal_distribution<float> grad(0.0f, 1.0f);
    std::vector<int64_t> keys;
    while (static_cast<int>(keys.size()) < batch) {
      const int64_t key = pick(rng);
      if (KeyRouter::ServerOf(key, a.n()) == s) keys.push_back(key);
    }
    std::vector<float> ra(keys.size() * dim), rb(keys.size() * dim);
    a.Pull(s, keys.data(), keys.size(), ra.data());
    b.Pull(s, keys.data(), keys.size(), rb.data());
    ASSERT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float))) << "pull differs on server " << s;
    std::vector<float> grads(keys.size() * dim);
    for (float& g : grads) g = grad(rng);
    ++step;
    a.Push(s, keys.data(), grads.data(), keys.size(), step);
    b.Push(s, keys.data(), grads.data(), keys.size(), step);
  }

  void TrainAll(int rounds, int batch, int64_t key_space) {
    for (int round = 0; round < rounds; ++round)
      for (int s = 0; s < a.n(); ++s) Train(s, batch, key_space);
  }

  void EraseSome(int s, int64_t key_space, int count) {
    std::vector<int64_t> keys;
    for (int64_t key = 0; key < key_space && static_cast<int>(keys.size()) < count; key += 3)
      if (KeyRouter::ServerOf(key, a.n()) == s) keys.push_back(key);
    EXPECT_EQ(a.Erase(s, keys.data(), keys.size()), b.Erase(s, keys.data(), keys.size()));
  }

  // Every byte of every data and parity block of every server.
  void ExpectIdentical(const std::string& when) {
    const size_t bytes = a.block_bytes();
    std::vector<uint8_t> x(bytes), y(bytes);
    for (int s = 0; s < a.n(); ++s) {
      const size_t blocks = std::max(a.num_data_blocks(s), b.num_data_blocks(s));
      for (size_t blk = 0; blk < blocks; ++blk) {
        a.ReadDataBlock(s, blk, x.data());
        b.ReadDataBlock(s, blk, y.data());
        ASSERT_EQ(0, std::memcmp(x.data(), y.data(), bytes)) << when << ": data block " << blk << " of server " << s;
      }
      const size_t pblocks = std::max(a.num_parity_blocks(s), b.num_parity_blocks(s));
      for (size_t blk = 0; blk < pblocks; ++blk) {
        a.ReadParityBlock(s, blk, x.data());
        b.ReadParityBlock(s, blk, y.data());
        ASSERT_EQ(0, std::memcmp(x.data(), y.data(), bytes)) << when << ": parity block " << blk << " of server " << s;
      }
      EXPECT_EQ(a.shard(s)->size(), b.shard(s)->size()) << when;
    }
  }

  ParityGroup a, b;
  std::mt19937_64 rng;
  int dim;
  int64_t step = 0;
};

std::vector<std::vector<int>> Combinations(int n, int max_size) {
  std::vector<std::vector<int>> out;
  for (int mask = 1; mask < (1 << n); ++mask) {
    if (__builtin_popcount(mask) > max_size) continue;
    std::vector<int> c;
    for (int s = 0; s < n; ++s)
      if (mask & (1 << s)) c.push_back(s);
    out.push_back(c);
  }
  return out;
}

// ---- value types, routing and the store --------------------------------------------------------

TEST(ParityUpdateTest, SerialisesAndParsesBack) {
  ParityUpdate u;
  u.source = 3;
  u.holder = 1;
  u.record_bytes = 5;
  u.entries = {{7, 10, 1, 2}, {1ull << 33, 0, 0, 3}};
  u.deltas = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<uint8_t> wire = u.Serialize();
  ParityUpdate v = ParityUpdate::Parse(wire.data(), wire.size());
  EXPECT_EQ(v.source, 3);
  EXPECT_EQ(v.holder, 1);
  EXPECT_EQ(v.record_bytes, 5u);
  ASSERT_EQ(v.entries.size(), 2u);
  EXPECT_EQ(v.entries[1].parity_block, 1ull << 33);
  EXPECT_EQ(v.entries[0].offset, 10u);
  EXPECT_EQ(v.entries[0].parity_member, 1);
  EXPECT_EQ(v.entries[1].data_member, 3);
  EXPECT_EQ(v.deltas, u.deltas);
  EXPECT_THROW(ParityUpdate::Parse(wire.data(), wire.size() - 1), std::invalid_argument);
  std::vector<uint8_t> bad = wire;
  bad[0] = 'Y';
  EXPECT_THROW(ParityUpdate::Parse(bad.data(), bad.size()), std::invalid_argument);
  EXPECT_THROW(ParityUpdate::Parse(wire.data(), 3), std::invalid_argument);
}

TEST(ParityRouterTest, SendsEachSlotToItsStripesParityHolders) {
  StripeLayout layout(5, 3, 2);
  const uint32_t block_slots = 4;
  const size_t record_bytes = 6;
  ParityRouter router(layout, block_slots, record_bytes);
  DeltaBatch d;
  d.record_bytes = record_bytes;
  d.slots = {0, 5, 13};
  for (size_t i = 0; i < d.slots.size() * record_bytes; ++i) d.xor_bytes.push_back(static_cast<uint8_t>(i + 1));
  std::vector<ParityUpdate> out;
  router.Route(2, d, &out);
  ASSERT_EQ(out.size(), 5u);
  size_t total = 0;
  for (int h = 0; h < 5; ++h) {
    EXPECT_EQ(out[h].holder, h);
    EXPECT_EQ(out[h].source, 2);
    total += out[h].size();
    for (size_t e = 0; e < out[h].size(); ++e) {
      const auto& en = out[h].entries[e];
      // The entry's parity block, seen from the holder, is in the stripe of the source's data block.
      const StripeSlot ps = layout.ParitySlot(h, en.parity_block);
      EXPECT_EQ(ps.member, en.parity_member);
      const BlockRef data = layout.DataMember(ps.stripe, en.data_member);
      EXPECT_EQ(data.server, 2);
      const uint32_t slot = static_cast<uint32_t>(data.block * block_slots + en.offset / record_bytes);
      const size_t idx = std::find(d.slots.begin(), d.slots.end(), slot) - d.slots.begin();
      ASSERT_LT(idx, d.slots.size());
      EXPECT_EQ(0, std::memcmp(out[h].delta(e), d.delta(idx), record_bytes));
    }
    EXPECT_NE(h == 2, out[h].size() > 0 || h != 2) << "a server never holds parity of its own data";
  }
  EXPECT_EQ(out[2].size(), 0u);
  EXPECT_EQ(total, d.slots.size() * 2);  // r entries per slot
  DeltaBatch wrong = d;
  wrong.record_bytes = 7;
  EXPECT_THROW(router.Route(2, wrong, &out), std::invalid_argument);
  EXPECT_THROW(router.Route(5, d, &out), std::out_of_range);
}

TEST(ParityStoreTest, AppliesLazilyAndRejectsBadBatchesWholly) {
  auto code = std::make_shared<const ErasureCode>(3, 2);
  ParityStore store(code, 32);
  std::vector<uint8_t> block(32, 0xAA);
  store.ReadBlock(5, block.data());
  EXPECT_EQ(block, std::vector<uint8_t>(32, 0));
  EXPECT_EQ(store.num_blocks(), 0u);
  ParityUpdate u;
  u.record_bytes = 8;
  u.entries = {{2, 8, 1, 2}};
  u.deltas = {1, 2, 3, 4, 5, 6, 7, 8};
  store.Apply(u);
  EXPECT_EQ(store.num_blocks(), 3u);
  EXPECT_EQ(store.allocated_blocks(), 1u);
  EXPECT_EQ(store.bytes(), 32u);
  EXPECT_EQ(store.delta_bytes_received(), 8u);
  store.ReadBlock(2, block.data());
  std::vector<uint8_t> expect(32, 0);
  code->Update(8, 1, 2, u.deltas.data(), expect.data() + 8);
  EXPECT_EQ(block, expect);
  // A batch with one bad entry changes nothing.
  ParityUpdate bad = u;
  bad.entries.push_back({2, 30, 0, 0});
  bad.deltas.resize(16, 9);
  EXPECT_THROW(store.Apply(bad), std::invalid_argument);
  bad.entries[1] = {2, 0, 2, 0};
  EXPECT_THROW(store.Apply(bad), std::invalid_argument);
  store.ReadBlock(2, block.data());
  EXPECT_EQ(block, expect);
  EXPECT_EQ(store.delta_bytes_received(), 8u);
  std::vector<uint8_t> cols(4 * 2);
  store.ReadColumns(2, 8, 0, 2, cols.data());
  EXPECT_EQ(cols[2], expect[8]);
  EXPECT_EQ(cols[3], expect[9]);
}

// ---- the group ---------------------------------------------------------------------------------

TEST(ParityGroupTest, HealthyGroupScrubsCleanWithEveryOptimizer) {
  for (OptimizerKind kind : kOptimizers) {
    ParityGroup g(5, 3, 2, Config(kind));
    std::mt19937_64 rng(1);
    std::vector<int64_t> keys(64);
    std::vector<float> rows(64 * 4), grads(64 * 4, 0.5f);
    for (int step = 1; step <= 10; ++step) {
      for (int s = 0; s < 5; ++s) {
        for (auto& key : keys) key = static_cast<int64_t>(rng() % 2000);
        g.Pull(s, keys.data(), keys.size(), rows.data());
        g.Push(s, keys.data(), grads.data(), keys.size(), step);
      }
    }
    EXPECT_TRUE(g.Scrub().empty());
  }
}

TEST(ParityGroupTest, RebuildsEveryLossPatternBitExactWithEveryOptimizer) {
  for (OptimizerKind kind : kOptimizers) {
    for (int r : {1, 2}) {
      const int n = r == 1 ? 4 : 5, k = 3;
      Twins t(n, k, r, Config(kind), 11 + r);
      t.TrainAll(6, 40, 5000);
      for (const auto& lost : Combinations(n, r)) {
        std::string name = "optimizer " + std::to_string(static_cast<int>(kind)) + " r=" + std::to_string(r) + " lost";
        for (int s : lost) name += " " + std::to_string(s);
        t.a.Kill(lost);
        for (int s : lost) EXPECT_EQ(t.a.state(s), ServerState::kLost);
        t.a.FinishRebuild();
        EXPECT_TRUE(t.a.unavailable_servers().empty());
        t.ExpectIdentical(name);
        EXPECT_TRUE(t.a.Scrub().empty()) << name;
        t.TrainAll(1, 20, 5000);  // keep training between losses: the rebuilt servers carry on
      }
      t.ExpectIdentical("after the last round");
    }
  }
}

TEST(ParityGroupTest, WideGroupsAndThreeParitiesRebuildEveryLossPattern) {
  // n well above k + r (servers outside a stripe) and r = 3 (Vandermonde rows beyond XOR).
  for (auto [n, k, r] : {std::tuple{8, 3, 2}, std::tuple{7, 2, 3}}) {
    Twins t(n, k, r, Config(OptimizerKind::kAdam), 51);
    t.TrainAll(3, 30, 6000);
    for (const auto& lost : Combinations(n, r)) {
      t.a.Kill(lost);
      t.a.FinishRebuild();
      t.ExpectIdentical("n=" + std::to_string(n) + " k=" + std::to_string(k) + " r=" + std::to_string(r));
      t.Train(lost[0], 10, 6000);
    }
    EXPECT_TRUE(t.a.Scrub().empty());
  }
}

TEST(ParityGroupTest, TrafficContinuesDuringRebuildWithDegradedReadsAndNewKeys) {
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kFtrl, OptimizerKind::kMomentum}) {
    Twins t(6, 4, 2, Config(kind), 21);
    t.TrainAll(8, 50, 20000);
    t.EraseSome(1, 20000, 30);
    t.EraseSome(4, 20000, 30);
    t.a.Kill({1, 4});
    // Before any rebuild call: operations on the lost servers start it and are served by faults.
    t.Train(1, 30, 20000);
    EXPECT_EQ(t.a.state(1), ServerState::kRestoring);
    ASSERT_GT(t.a.rebuild_remaining(), 3u);
    while (t.a.RebuildStep(2) > 0) {
      for (int s = 0; s < 6; ++s) t.Train(s, 30, 40000);  // key space doubled: many new keys everywhere
    }
    EXPECT_TRUE(t.a.unavailable_servers().empty());
    t.ExpectIdentical("after rebuild under traffic");
    EXPECT_TRUE(t.a.Scrub().empty());
    t.TrainAll(2, 30, 40000);
    t.ExpectIdentical("training after the rebuild");
  }
}

TEST(ParityGroupTest, ServerKilledWhileAnotherIsRebuilding) {
  Twins t(6, 3, 2, Config(OptimizerKind::kAdagrad), 31);
  t.TrainAll(8, 50, 20000);
  t.a.Kill({2});
  t.a.BeginRebuild();
  t.a.RebuildStep(3);
  t.TrainAll(1, 30, 20000);
  t.a.Kill({5});                                       // the second loss arrives mid-rebuild
  EXPECT_THROW(t.a.Kill({0}), std::invalid_argument);  // a third would exceed r=2
  t.TrainAll(1, 30, 20000);
  while (t.a.RebuildStep(4) > 0) t.Train(2, 20, 20000);
  t.ExpectIdentical("after two staggered losses");
  // The replacement being rebuilt is itself killed again.
  t.a.Kill({3});
  t.a.RebuildStep(2);
  t.a.Kill({3});
  t.a.FinishRebuild();
  t.ExpectIdentical("after killing a replacement");
}

// Each thread owns one server, so every shard sees the same order as in the serial twin; parity
// deltas commute. A rebuild thread steps concurrently.
void ExpectConcurrentRebuildEqualsSerialRun() {
  const int n = 5;
  ParityGroup a(n, 3, 2, Config(OptimizerKind::kAdagrad));
  ParityGroup b(n, 3, 2, Config(OptimizerKind::kAdagrad));
  auto batch = [&](int s, int round, std::vector<int64_t>* keys, std::vector<float>* grads) {
    std::mt19937_64 rng(s * 1000 + round);
    keys->clear();
    while (keys->size() < 40) {
      int64_t key = static_cast<int64_t>(rng() % 30000);
      if (KeyRouter::ServerOf(key, n) == s) keys->push_back(key);
    }
    grads->assign(keys->size() * 4, 0.0f);
    for (float& g : *grads) g = static_cast<float>(static_cast<int>(rng() % 200) - 100) / 50.0f;
  };
  auto run = [&](ParityGroup& g, int s, int from, int to) {
    std::vector<int64_t> keys;
    std::vector<float> grads;
    for (int round = from; round < to; ++round) {
      batch(s, round, &keys, &grads);
      g.Push(s, keys.data(), grads.data(), keys.size(), round + 1);
    }
  };
  for (int s = 0; s < n; ++s) {
    run(a, s, 0, 30);
    run(b, s, 0, 30);
  }
  a.Kill({0, 3});
  a.BeginRebuild();
  const size_t planned = a.rebuild_remaining();
  ASSERT_GT(planned, 20u);
  std::atomic<int> pushers_done{0};
  std::vector<std::thread> threads;
  for (int s = 0; s < n; ++s)
    threads.emplace_back([&, s] {
      run(a, s, 30, 60);
      ++pushers_done;
    });
  // Slow steps so the pushes (and the block faults of servers 0 and 3) overlap the rebuild.
  std::atomic<size_t> remaining_when_pushes_ended{0};
  std::thread rebuilder([&] {
    size_t left = planned;
    while (left > 0) {
      if (pushers_done == n && remaining_when_pushes_ended == 0) remaining_when_pushes_ended = left;
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      left = a.RebuildStep(1);
    }
  });
  for (auto& th : threads) th.join();
  rebuilder.join();
  a.FinishRebuild();
  EXPECT_GT(remaining_when_pushes_ended.load(), 0u) << "the pushes did not overlap the rebuild";
  for (int s = 0; s < n; ++s) run(b, s, 30, 60);
  EXPECT_TRUE(a.Scrub().empty());
  const size_t bytes = a.block_bytes();
  std::vector<uint8_t> x(bytes), y(bytes);
  for (int s = 0; s < n; ++s) {
    for (size_t blk = 0; blk < std::max(a.num_data_blocks(s), b.num_data_blocks(s)); ++blk) {
      a.ReadDataBlock(s, blk, x.data());
      b.ReadDataBlock(s, blk, y.data());
      ASSERT_EQ(0, std::memcmp(x.data(), y.data(), bytes)) << "server " << s << " block " << blk;
    }
    for (size_t blk = 0; blk < std::max(a.num_parity_blocks(s), b.num_parity_blocks(s)); ++blk) {
      a.ReadParityBlock(s, blk, x.data());
      b.ReadParityBlock(s, blk, y.data());
      ASSERT_EQ(0, std::memcmp(x.data(), y.data(), bytes)) << "server " << s << " parity block " << blk;
    }
  }
}

TEST(ParityGroupTest, ConcurrentPushesDuringRebuildEqualTheSerialRun) { ExpectConcurrentRebuildEqualsSerialRun(); }

TEST(ParityGroupTest, ScrubCatchesASingleFlippedBitInDataOrParity) {
  ParityGroup g(5, 3, 2, Config(OptimizerKind::kAdam));
  std::vector<int64_t> keys;
  for (int64_t key = 0; key < 600; ++key) keys.push_back(key);
  std::vector<float> rows(keys.size() * 4), grads(keys.size() * 4, 0.25f);
  for (int s = 0; s < 5; ++s) {
    g.Pull(s, keys.data(), keys.size(), rows.data());
    g.Push(s, keys.data(), grads.data(), keys.size(), 1);
  }
  ASSERT_TRUE(g.Scrub().empty());

  // Data: one bit of one float of one row, written behind the parity's back.
  auto shard = g.shard(3);
  EmbeddingShard::Rows exported = shard->Export();
  const size_t row = 123;
  const int64_t key = exported.keys[row];
  std::vector<float> value(exported.values.begin() + row * 4, exported.values.begin() + row * 4 + 4);
  std::vector<float> state(exported.state.begin() + row * 8, exported.state.begin() + row * 8 + 8);
  uint32_t bits;
  std::memcpy(&bits, &value[2], 4);
  bits ^= 1u << 9;
  std::memcpy(&value[2], &bits, 4);
  shard->Load(&key, value.data(), state.data(), 1);
  std::vector<ScrubMismatch> bad = g.Scrub();
  ASSERT_EQ(bad.size(), 2u);  // both parity blocks of that one stripe
  // Export is in slot order and nothing was erased, so row 123 lives in slot 123.
  const size_t stripe = g.layout().DataSlot(3, row / 16).stripe;
  for (const auto& m : bad) EXPECT_EQ(m.stripe, stripe);
  EXPECT_NE(bad[0].parity_member, bad[1].parity_member);
  // Undo by rebuilding the server from parity: the record comes back byte for byte (a second Load
  // would not do: every load is a mutation, its row's clock moves on), and the group is clean again.
  g.Kill({3});
  g.FinishRebuild();
  ASSERT_TRUE(g.Scrub().empty());
  bits ^= 1u << 9;
  std::memcpy(&value[2], &bits, 4);
  std::vector<float> rebuilt(4);
  uint8_t found = 0;
  g.Find(3, &key, 1, rebuilt.data(), &found);
  EXPECT_EQ(rebuilt, value);

  // Parity: one bit of one parity block.
  auto store = g.parity_store(1);
  ASSERT_GT(store->num_blocks(), 0u);
  std::vector<uint8_t> pblock(g.block_bytes());
  store->ReadBlock(0, pblock.data());
  pblock[77] ^= 0x10;
  store->WriteBlock(0, pblock.data());
  bad = g.Scrub();
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].server, 1);
  EXPECT_EQ(bad[0].block, 0u);
  EXPECT_EQ(bad[0].stripe, g.layout().ParitySlot(1, 0).stripe);
}

TEST(ParityGroupTest, DeltaTrafficIsBalancedAcrossServers) {
  for (int r : {1, 2}) {
    const int n = 6, k = 4;
    ParityGroup g(n, k, r, Config(OptimizerKind::kAdagrad, 64, 8));
    std::mt19937_64 rng(5);
    std::vector<std::vector<int64_t>> per_server(n);
    std::vector<float> rows, grads;
    for (int round = 0; round < 15; ++round) {
      for (auto& keys : per_server) keys.clear();
      for (int i = 0; i < 3000; ++i) {
        const int64_t key = static_cast<int64_t>(rng() % 50000);
        per_server[KeyRouter::ServerOf(key, n)].push_back(key);
      }
      for (int s = 0; s < n; ++s) {
        grads.assign(per_server[s].size() * 8, 0.1f);
        g.Push(s, per_server[s].data(), grads.data(), per_server[s].size(), round + 1);
      }
    }
    const ParityGroupStats st = g.stats();
    const auto [lo, hi] = std::minmax_element(st.delta_bytes_received.begin(), st.delta_bytes_received.end());
    ASSERT_GT(*lo, 0u);
    EXPECT_LE(static_cast<double>(*hi) / static_cast<double>(*lo), 1.2) << "r=" << r;
  }
}

TEST(ParityGroupTest, ParityMemoryIsCloseToRoverKOfTheData) {
  for (auto [n, k, r] : {std::tuple{5, 4, 1}, std::tuple{6, 4, 2}, std::tuple{8, 3, 3}}) {
    ParityGroup g(n, k, r, Config(OptimizerKind::kAdagrad, 128, 8));
    for (int s = 0; s < n; ++s) {
      std::vector<int64_t> keys;
      for (int64_t key = 0; keys.size() < 128 * 22 + 5; ++key)
        if (KeyRouter::ServerOf(key, n) == s) keys.push_back(key);
      std::vector<float> rows(keys.size() * 8);
      g.Pull(s, keys.data(), keys.size(), rows.data());
    }
    const ParityGroupStats st = g.stats();
    const double ratio = static_cast<double>(st.total_parity_bytes) / static_cast<double>(st.total_data_bytes);
    EXPECT_NEAR(ratio, static_cast<double>(r) / k, 0.1 * r / k) << "n=" << n << " k=" << k << " r=" << r;
  }
}

TEST(ParityGroupTest, RejectsBadGeometryAndTooManyLossesWithoutChangingAnything) {
  const ShardConfig c = Config(OptimizerKind::kSGD);
  EXPECT_THROW(ParityGroup(5, 0, 1, c), std::invalid_argument);
  EXPECT_THROW(ParityGroup(5, 3, 0, c), std::invalid_argument);
  EXPECT_THROW(ParityGroup(9, 3, 5, c), std::invalid_argument);    // r beyond the code's maximum
  EXPECT_THROW(ParityGroup(40, 30, 3, c), std::invalid_argument);  // k + r beyond 32
  EXPECT_THROW(ParityGroup(4, 3, 2, c), std::invalid_argument);    // n < k + r
  ShardConfig zero_blocks = c;
  zero_blocks.block_slots = 0;
  EXPECT_THROW(ParityGroup(5, 3, 2, zero_blocks), std::invalid_argument);

  Twins t(5, 3, 2, c, 3);
  t.TrainAll(3, 30, 3000);
  try {
    t.a.Kill({0, 2, 4});
    FAIL() << "three losses with r=2 must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unrecoverable: lost servers {0, 2, 4}, the code tolerates r=2"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(t.a.unavailable_servers().empty());
  t.a.Kill({1});
  EXPECT_THROW(t.a.Kill({2, 3}), std::invalid_argument);
  EXPECT_EQ(t.a.unavailable_servers(), std::vector<int>{1});
  EXPECT_THROW(t.a.Kill({5}), std::out_of_range);
  EXPECT_THROW(t.a.Scrub(), std::invalid_argument);
  std::vector<float> out(4);
  int64_t key = 1;
  EXPECT_THROW(t.a.Pull(-1, &key, 1, out.data()), std::out_of_range);
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> grad(4, nan);
  EXPECT_THROW(t.a.Push(0, &key, grad.data(), 1, 1), std::invalid_argument);
  t.a.FinishRebuild();
  t.ExpectIdentical("after refused operations");
}

TEST(RecoveryTest, StripeReadsNameTheFragmentsDecodeStripeReads) {
  // Callers fetch StripeReads' fragments at one version before decoding: the two must agree in every pattern.
  for (auto [n, k, r] : {std::tuple{3, 2, 1}, std::tuple{6, 4, 2}, std::tuple{7, 2, 3}}) {
    const StripeLayout layout(n, k, r);
    const Recovery recovery(layout, std::make_shared<ErasureCode>(k, r), 4, 16);
    for (int a = 0; a < n; ++a) {
      for (int b = a; b < n; ++b) {
        const std::vector<int> lost = a == b ? std::vector<int>{a} : std::vector<int>{a, b};
        if (static_cast<int>(lost.size()) > r) continue;
        for (size_t stripe = 0; stripe < 2 * static_cast<size_t>(n); ++stripe) {
          std::vector<int> wanted;
          for (int t = 0; t < k + r; ++t)
            if (std::count(lost.begin(), lost.end(), layout.ServerAt(stripe, t))) wanted.push_back(t);
          if (wanted.empty()) continue;
          std::vector<std::tuple<bool, int, size_t>> read;
          auto recorder = [&read](bool parity) {
            return [&read, parity](int server, size_t block, size_t, size_t width, uint8_t* out) {
              read.emplace_back(parity, server, block);
              std::memset(out, 0, 4 * width);
            };
          };
          std::vector<std::vector<uint8_t>> blocks(wanted.size(), std::vector<uint8_t>(recovery.block_bytes()));
          std::vector<uint8_t*> outputs;
          for (auto& block : blocks) outputs.push_back(block.data());
          recovery.DecodeStripe(stripe, wanted, outputs.data(), lost, FragmentReader{recorder(false), recorder(true)});
          std::vector<std::tuple<bool, int, size_t>> listed;
          for (const FragmentRef& f : recovery.StripeReads(stripe, lost)) {
            EXPECT_EQ(std::count(lost.begin(), lost.end(), f.ref.server), 0);
            listed.emplace_back(f.parity, f.ref.server, f.ref.block);
          }
          EXPECT_EQ(listed, read) << "n=" << n << " k=" << k << " r=" << r << " stripe " << stripe;
          EXPECT_EQ(static_cast<int>(listed.size()), k);
        }
      }
    }
  }
  const StripeLayout layout(3, 2, 1);
  const Recovery recovery(layout, std::make_shared<ErasureCode>(2, 1), 4, 16);
  EXPECT_THROW(recovery.StripeReads(0, {0, 1}), std::invalid_argument);
}

}  // namespace
}  // namespace xdl_ec
