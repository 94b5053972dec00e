#include "xdl_ec/embedding_shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "xdl_ec/delta_batch_sink.h"
#include "xdl_ec/task_pool.h"

namespace xdl_ec {
namespace {

// Four threads' worth of parts whatever the machine, set before the process's pool is made (the split tests).
const int kPoolThreads = setenv("XDL_EC_CORE_THREADS", "4", 1);

ShardConfig Config(OptimizerKind kind = OptimizerKind::kAdagrad, int dim = 4, uint32_t block_slots = 8) {
  ShardConfig c;
  c.dim = dim;
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 0.1f;
  c.block_slots = block_slots;
  c.seed = 42;
  return c;
}

std::vector<uint8_t> AllBlocks(const EmbeddingShard& shard) {
  std::vector<uint8_t> bytes(shard.num_blocks() * shard.block_bytes());
  for (size_t b = 0; b < shard.num_blocks(); ++b) shard.ReadBlock(b, bytes.data() + b * shard.block_bytes());
  return bytes;
}

std::vector<float> Pull(EmbeddingShard& shard, const std::vector<int64_t>& keys, DeltaBatch* deltas = nullptr) {
  std::vector<float> out(keys.size() * shard.dim());
  shard.Pull(keys.data(), keys.size(), out.data(), DeltaBatchSink(deltas).sink());
  return out;
}

TEST(EmbeddingShard, PullInsertsInitialRowsDeterministically) {
  EmbeddingShard a(Config()), b(Config());
  std::vector<int64_t> keys = {5, -7, 123456789012345LL, 0};
  std::vector<int64_t> reversed(keys.rbegin(), keys.rend());
  auto ra = Pull(a, keys);
  auto rb = Pull(b, reversed);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(&ra[i * 4], &rb[(keys.size() - 1 - i) * 4], 16)) << "key " << keys[i];
  }
  EXPECT_EQ(a.size(), 4u);
  float row[4];
  InitializeRow(a.config().initializer, 42, 5, row, 4);
  EXPECT_EQ(0, std::memcmp(row, ra.data(), sizeof(row)));
  // A second pull reads the same rows and inserts nothing.
  EXPECT_EQ(Pull(a, keys), ra);
  EXPECT_EQ(a.size(), 4u);
}

TEST(EmbeddingShard, RecordLayoutInBlockBytes) {
  EmbeddingShard shard(Config(OptimizerKind::kAdagrad, 3, 4));
  ASSERT_EQ(shard.layout().bytes(), 12u + 12u + 12u);
  auto row = Pull(shard, {77});
  std::vector<uint8_t> block(shard.block_bytes());
  shard.ReadBlock(0, block.data());
  int64_t key;
  uint32_t flags;
  std::memcpy(&key, block.data(), 8);
  std::memcpy(&flags, block.data() + 8, 4);
  EXPECT_EQ(key, 77);
  EXPECT_EQ(flags, RecordLayout::kLive | (RecordLayout::kInitialClock << RecordLayout::kClockShift));
  EXPECT_EQ(0, std::memcmp(block.data() + 12, row.data(), 12));
  float accum[3];
  std::memcpy(accum, block.data() + shard.layout().state_offset(), 12);
  for (float a : accum) EXPECT_EQ(a, 0.1f);
  // The rest of the block is free: all zero bytes.
  EXPECT_TRUE(std::all_of(block.begin() + shard.layout().bytes(), block.end(), [](uint8_t v) { return v == 0; }));
  // Past the end reads as zeros.
  shard.ReadBlock(5, block.data());
  EXPECT_TRUE(std::all_of(block.begin(), block.end(), [](uint8_t v) { return v == 0; }));
}

TEST(EmbeddingShard, FindDoesNotInsert) {
  EmbeddingShard shard(Config());
  Pull(shard, {1, 2});
  std::vector<int64_t> keys = {2, 3, 1};
  std::vector<float> out(12, -1.0f);
  std::vector<uint8_t> found(3);
  shard.Find(keys.data(), 3, out.data(), found.data());
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(out[4], -1.0f);
  EXPECT_EQ(shard.size(), 2u);
}

TEST(EmbeddingShard, PushSumsDuplicatesThenStepsOnce) {
  ShardConfig c = Config(OptimizerKind::kSGD, 2);
  c.initializer.kind = InitializerKind::kZeros;
  EmbeddingShard shard(c);
  std::vector<int64_t> keys = {9, 4, 9, 9};
  std::vector<float> grads = {1, 2, 10, 20, 3, 4, 5, 6};
  shard.Push(keys.data(), grads.data(), 4, 1);
  auto rows = Pull(shard, {9, 4});
  EXPECT_FLOAT_EQ(rows[0], -0.1f * 9.0f);
  EXPECT_FLOAT_EQ(rows[1], -0.1f * 12.0f);
  EXPECT_FLOAT_EQ(rows[2], -0.1f * 10.0f);
  EXPECT_FLOAT_EQ(rows[3], -0.1f * 20.0f);
}

TEST(EmbeddingShard, RejectedPushChangesNoByte) {
  EmbeddingShard shard(Config());
  Pull(shard, {1, 2, 3});
  auto before = AllBlocks(shard);
  std::vector<int64_t> keys = {1, 99};
  std::vector<float> grads(8, 0.5f);
  grads[6] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(shard.Push(keys.data(), grads.data(), 2, 1), std::invalid_argument);
  grads[6] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(shard.Push(keys.data(), grads.data(), 2, 1), std::invalid_argument);
  grads[6] = 0.5f;
  EXPECT_THROW(shard.Push(keys.data(), grads.data(), 2, 0), std::invalid_argument);
  EXPECT_THROW(shard.Push(nullptr, grads.data(), 2, 1), std::invalid_argument);
  EXPECT_EQ(AllBlocks(shard), before);
  EXPECT_EQ(shard.size(), 3u);
}

std::vector<int32_t> Clocks(const EmbeddingShard& shard, const std::vector<int64_t>& keys);

// A row that stands for c gradients (a worker cache's write-back) takes c optimizer steps of their mean:
// bit for bit what c pushes of sum * (1/c) at the same step do, for every optimizer, with c clock ticks.
TEST(EmbeddingShard, PushWithRepeatsStepsEachKeyItsCountOfTimes) {
  for (OptimizerKind kind : {OptimizerKind::kSGD, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    // 20 keys: more than one chunk of rows, with counts 1..4 mixed; key 7 twice (4 + 2 = 6 steps)
    std::vector<int64_t> keys;
    std::vector<uint32_t> repeats;
    std::vector<float> grads;
    for (int64_t k = 0; k < 20; ++k) {
      keys.push_back(k);
      repeats.push_back(static_cast<uint32_t>(1 + k % 4));
      for (int j = 0; j < 4; ++j) grads.push_back(0.25f * static_cast<float>((k + 1) * (j + 1)) - 1.0f);
    }
    keys.push_back(7);
    repeats.push_back(2);
    for (int j = 0; j < 4; ++j) grads.push_back(0.5f);
    EmbeddingShard once(Config(kind)), steps(Config(kind));
    Pull(once, keys);
    Pull(steps, keys);
    once.Push(keys.data(), grads.data(), keys.size(), 3, nullptr, repeats.data());
    // the reference: the summed gradient of each unique key, scaled by 1 / its count, pushed count times
    std::vector<float> sums(20 * 4, 0.0f);
    std::vector<uint32_t> counts(20, 0);
    for (size_t i = 0; i < keys.size(); ++i) {
      counts[keys[i]] += repeats[i];
      for (int j = 0; j < 4; ++j) sums[keys[i] * 4 + j] += grads[i * 4 + j];
    }
    for (uint32_t round = 1; round <= 6; ++round) {  // key 7: 4 + 2
      for (int64_t k = 0; k < 20; ++k) {
        if (counts[k] < round) continue;
        std::vector<float> g(4);
        for (int j = 0; j < 4; ++j) g[j] = sums[k * 4 + j] * (1.0f / static_cast<float>(counts[k]));
        steps.Push(&k, g.data(), 1, 3);
      }
    }
    EXPECT_EQ(AllBlocks(once), AllBlocks(steps)) << "optimizer " << static_cast<int>(kind);
    EXPECT_EQ(Clocks(once, {7, 0, 3}), (std::vector<int32_t>{7, 2, 5}));  // inserted at 1, then a tick per step
  }
}

TEST(EmbeddingShard, PushRejectsBadRepeatsAndChangesNoByte) {
  EmbeddingShard shard(Config());
  Pull(shard, {1, 2});
  auto before = AllBlocks(shard);
  std::vector<int64_t> keys = {1, 2};
  std::vector<float> grads(8, 0.5f);
  std::vector<uint32_t> zero = {1, 0}, huge = {1, EmbeddingShard::kMaxRepeats + 1};
  EXPECT_THROW(shard.Push(keys.data(), grads.data(), 2, 1, nullptr, zero.data()), std::invalid_argument);
  EXPECT_THROW(shard.Push(keys.data(), grads.data(), 2, 1, nullptr, huge.data()), std::invalid_argument);
  std::vector<int64_t> same = {1, 1};  // each in range, but 2^16 + 1 steps in all
  std::vector<uint32_t> split = {EmbeddingShard::kMaxRepeats, 1};
  EXPECT_THROW(shard.Push(same.data(), grads.data(), 2, 1, nullptr, split.data()), std::invalid_argument);
  EXPECT_EQ(AllBlocks(shard), before);
}

TEST(EmbeddingShard, DeltasAreOldXorNew) {
  EmbeddingShard shard(Config(OptimizerKind::kAdam, 4, 4));
  DeltaBatch deltas;
  std::vector<int64_t> keys = {1, 2, 3, 4, 5};
  Pull(shard, keys, &deltas);  // inserts: deltas from the zero record
  ASSERT_EQ(deltas.size(), 5u);
  // Mirror the shard's bytes by applying deltas to a zero image; it must track the shard exactly.
  std::vector<uint8_t> image(4 * shard.block_bytes(), 0);
  auto apply = [&](const DeltaBatch& d) {
    ASSERT_EQ(d.record_bytes, shard.layout().bytes());
    for (size_t i = 0; i < d.size(); ++i) {
      uint8_t* r = image.data() + d.slots[i] * d.record_bytes;
      for (size_t j = 0; j < d.record_bytes; ++j) r[j] ^= d.delta(i)[j];
    }
  };
  apply(deltas);
  auto shard_image = [&]() {
    auto bytes = AllBlocks(shard);
    bytes.resize(image.size(), 0);
    return bytes;
  };
  EXPECT_EQ(shard_image(), image);
  std::vector<int64_t> push_keys = {2, 7, 2, 5};
  std::vector<float> grads(16, 0.25f);
  shard.Push(push_keys.data(), grads.data(), 4, 3, DeltaBatchSink(&deltas).sink());
  EXPECT_EQ(deltas.size(), 3u);  // 2, 7 (new), 5: each slot once
  apply(deltas);
  EXPECT_EQ(shard_image(), image);
  std::vector<int64_t> erase_keys = {1, 7, 100};
  EXPECT_EQ(shard.Erase(erase_keys.data(), 3, DeltaBatchSink(&deltas).sink()), 2u);
  EXPECT_EQ(deltas.size(), 2u);
  apply(deltas);
  EXPECT_EQ(shard_image(), image);
  // Pull of existing keys: no delta.
  Pull(shard, {2, 3}, &deltas);
  EXPECT_EQ(deltas.size(), 0u);
}

TEST(EmbeddingShard, EraseFreesSlotsForReuse) {
  EmbeddingShard shard(Config(OptimizerKind::kAdagrad, 4, 4));
  std::vector<int64_t> keys(10);
  std::iota(keys.begin(), keys.end(), 100);
  Pull(shard, keys);
  EXPECT_EQ(shard.memory().slots, 10u);
  std::vector<int64_t> gone = {101, 105, 109};
  EXPECT_EQ(shard.Erase(gone.data(), 3), 3u);
  EXPECT_EQ(shard.Erase(gone.data(), 3), 0u);
  EXPECT_EQ(shard.size(), 7u);
  EXPECT_EQ(shard.memory().free_slots, 3u);
  Pull(shard, {500, 501, 502, 503});
  EXPECT_EQ(shard.memory().slots, 11u);  // three reused, one new
  EXPECT_EQ(shard.size(), 11u);
  // Erased keys come back with their initial rows.
  ShardConfig c = shard.config();
  EmbeddingShard fresh(c);
  EXPECT_EQ(Pull(shard, {105}), Pull(fresh, {105}));
}

TEST(EmbeddingShard, GrowsAcrossManyBlocksAndExportLoadRoundTrips) {
  EmbeddingShard shard(Config(OptimizerKind::kFtrl, 3, 13));  // not a power of two: the division path
  std::vector<int64_t> keys(5000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i * 7919) - 100000;
  std::vector<float> grads(keys.size() * 3);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * static_cast<float>(i % 97) - 0.04f;
  shard.Push(keys.data(), grads.data(), keys.size(), 1);
  EXPECT_EQ(shard.size(), 5000u);
  EXPECT_EQ(shard.num_blocks(), (5000u + 12) / 13);
  std::vector<int64_t> gone(keys.begin(), keys.begin() + 1000);
  shard.Erase(gone.data(), gone.size());
  EmbeddingShard::Rows rows = shard.Export();
  ASSERT_EQ(rows.keys.size(), 4000u);
  ASSERT_EQ(rows.state.size(), 4000u * 6);
  EmbeddingShard copy(shard.config());
  copy.Load(rows.keys.data(), rows.values.data(), rows.state.data(), rows.keys.size());
  EmbeddingShard::Rows again = copy.Export();
  EXPECT_EQ(again.keys, rows.keys);
  EXPECT_EQ(again.values, rows.values);
  EXPECT_EQ(again.state, rows.state);
  std::vector<float> a(4000 * 3), b(4000 * 3);
  shard.Pull(rows.keys.data(), 4000, a.data());
  copy.Pull(rows.keys.data(), 4000, b.data());
  EXPECT_EQ(a, b);
  // Duplicate keys in a load are rejected before any change.
  std::vector<int64_t> dup = {1, 1};
  std::vector<float> vals(6, 1.0f);
  EXPECT_THROW(copy.Load(dup.data(), vals.data(), nullptr, 2), std::invalid_argument);
  EXPECT_EQ(copy.size(), 4000u);
}

TEST(EmbeddingShard, ConfigValidation) {
  ShardConfig c = Config();
  c.dim = 0;
  EXPECT_THROW(EmbeddingShard{c}, std::invalid_argument);
  c = Config();
  c.block_slots = 0;
  EXPECT_THROW(EmbeddingShard{c}, std::invalid_argument);
  c = Config();
  c.optimizer.learning_rate = -1.0f;
  EXPECT_THROW(EmbeddingShard{c}, std::invalid_argument);
  c = Config();
  c.initializer.stddev = 0.0f;
  EXPECT_THROW(EmbeddingShard{c}, std::invalid_argument);
}

TEST(EmbeddingShard, ConcurrentPushesAreAtomic) {
  // SGD with constant gradients: whatever the interleaving, every key ends at init - lr * count * g.
  ShardConfig c = Config(OptimizerKind::kSGD, 4, 64);
  c.optimizer.learning_rate = 0.5f;  // exact in binary: the sums stay exact
  c.initializer.kind = InitializerKind::kZeros;
  EmbeddingShard shard(c);
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&shard, t]() {
      std::mt19937 rng(t);
      for (int r = 0; r < kRounds; ++r) {
        std::vector<int64_t> keys(32);
        for (int i = 0; i < 32; ++i) keys[i] = i;  // every key, every push
        std::shuffle(keys.begin(), keys.end(), rng);
        std::vector<float> grads(32 * 4, 1.0f);
        if (r % 2) {
          shard.Push(keys.data(), grads.data(), 32, 1);
        } else {
          std::vector<float> out(32 * 4);
          shard.Pull(keys.data(), 32, out.data());
          // A pull sees a state between whole pushes: all 4 elements of a row are equal.
          for (int i = 0; i < 32; ++i) {
            for (int j = 1; j < 4; ++j) ASSERT_EQ(out[i * 4 + j], out[i * 4]);
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<int64_t> keys(32);
  std::iota(keys.begin(), keys.end(), 0);
  auto rows = Pull(shard, keys);
  for (float v : rows) EXPECT_EQ(v, -0.5f * kThreads * (kRounds / 2));
  EXPECT_EQ(shard.size(), 32u);
}

// ---- row clocks -------------------------------------------------------------------------------

std::vector<int32_t> Clocks(const EmbeddingShard& shard, const std::vector<int64_t>& keys) {
  std::vector<int32_t> clocks(keys.size(), -7);
  shard.Clocks(keys.data(), keys.size(), clocks.data());
  return clocks;
}

void PushOnce(EmbeddingShard& shard, const std::vector<int64_t>& keys, int64_t step = 1) {
  std::vector<float> grads(keys.size() * shard.dim(), 0.25f);
  shard.Push(keys.data(), grads.data(), keys.size(), step);
}

// The clock in the record bytes of `key` (scanning every block), -1 when no live record holds it.
int64_t ClockInBytes(const EmbeddingShard& shard, int64_t key) {
  const auto bytes = AllBlocks(shard);
  const size_t rb = shard.layout().bytes();
  for (size_t at = 0; at + rb <= bytes.size(); at += rb) {
    const uint8_t* r = bytes.data() + at;
    int64_t k;
    std::memcpy(&k, r, sizeof(k));
    if (k == key && RecordLayout::IsLive(RecordLayout::Flags(r))) return RecordLayout::Clock(r);
  }
  return -1;
}

struct PullStaleResult {
  size_t sent_count = 0;
  std::vector<float> rows;  // the sent rows, compact
  std::vector<int32_t> clocks;
  std::vector<uint8_t> sent;
};

PullStaleResult PullStale(EmbeddingShard& shard, const std::vector<int64_t>& keys, const std::vector<int32_t>& known,
                          uint32_t staleness, DeltaBatch* deltas = nullptr) {
  PullStaleResult r;
  r.rows.assign(keys.size() * shard.dim(), -99.0f);
  r.clocks.assign(keys.size(), -7);
  r.sent.assign(keys.size(), 7);
  r.sent_count = shard.PullStale(keys.data(), keys.size(), known.data(), staleness, r.rows.data(), r.clocks.data(),
                                 r.sent.data(), DeltaBatchSink(deltas).sink());
  r.rows.resize(r.sent_count * shard.dim());
  return r;
}

TEST(EmbeddingShardClocks, StartAtOneOnInsertAndCountEveryMutation) {
  EmbeddingShard shard(Config(OptimizerKind::kAdagrad, 2));
  EXPECT_EQ(Clocks(shard, {1, 2}), (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(shard.size(), 0u);  // a clock check inserts nothing
  Pull(shard, {1, 2});
  EXPECT_EQ(Clocks(shard, {1, 2, 3}), (std::vector<int32_t>{1, 1, -1}));
  Pull(shard, {1, 2});  // reads change nothing
  EXPECT_EQ(Clocks(shard, {1, 2}), (std::vector<int32_t>{1, 1}));
  PushOnce(shard, {1, 1, 3});  // duplicates are one step; 3 is inserted (1), then stepped
  EXPECT_EQ(Clocks(shard, {1, 2, 3}), (std::vector<int32_t>{2, 1, 2}));
  PushOnce(shard, {2}, 2);
  PushOnce(shard, {2, 1}, 3);
  EXPECT_EQ(Clocks(shard, {1, 2, 3}), (std::vector<int32_t>{3, 3, 2}));
  // A load over a row is a mutation; a loaded new row starts at the initial clock.
  const int64_t load_keys[] = {3, 4};
  const float values[] = {1, 2, 3, 4};
  shard.Load(load_keys, values, nullptr, 2);
  EXPECT_EQ(Clocks(shard, {3, 4}), (std::vector<int32_t>{3, 1}));
  // Erased and inserted again: the clock starts over (the ABA a per-server epoch must cover).
  const int64_t gone = 2;
  shard.Erase(&gone, 1);
  EXPECT_EQ(Clocks(shard, {2}), (std::vector<int32_t>{-1}));
  Pull(shard, {2});
  EXPECT_EQ(Clocks(shard, {2}), (std::vector<int32_t>{1}));
  // The clock lives in the record bytes (so parity covers it).
  for (int64_t k : {1, 2, 3, 4}) EXPECT_EQ(ClockInBytes(shard, k), Clocks(shard, {k})[0]) << "key " << k;
}

TEST(EmbeddingShardClocks, RejectedPushChangesNoClock) {
  EmbeddingShard shard(Config());
  Pull(shard, {1, 2});
  PushOnce(shard, {1});
  const auto before = AllBlocks(shard);
  std::vector<int64_t> keys = {1, 2, 9};
  std::vector<float> grads(12, 0.5f);
  grads[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(shard.Push(keys.data(), grads.data(), 3, 2), std::invalid_argument);
  grads[5] = 0.5f;
  EXPECT_THROW(shard.Push(keys.data(), grads.data(), 3, 0), std::invalid_argument);
  EXPECT_EQ(Clocks(shard, {1, 2, 9}), (std::vector<int32_t>{2, 1, -1}));
  EXPECT_EQ(AllBlocks(shard), before);
}

TEST(EmbeddingShardClocks, PushDeltasCarryTheClock) {
  EmbeddingShard shard(Config(OptimizerKind::kSGD, 2, 4));
  Pull(shard, {5});
  const auto before = AllBlocks(shard);
  DeltaBatch deltas;
  const int64_t key = 5;
  const float zero[] = {0.0f, 0.0f};  // SGD with a zero gradient leaves the value: only the clock moves
  shard.Push(&key, zero, 1, 1, DeltaBatchSink(&deltas).sink());
  ASSERT_EQ(deltas.size(), 1u);
  const uint8_t* d = deltas.delta(0);
  uint32_t flags_xor;
  std::memcpy(&flags_xor, d + RecordLayout::kFlagsOffset, 4);
  EXPECT_EQ(flags_xor, RecordLayout::LiveFlags(1) ^ RecordLayout::LiveFlags(2));
  for (size_t j = RecordLayout::kValueOffset; j < deltas.record_bytes; ++j) EXPECT_EQ(d[j], 0) << "byte " << j;
  EXPECT_NE(AllBlocks(shard), before);
}

TEST(EmbeddingShardClocks, PullStaleSendsExactlyTheRowsMoreThanSBehind) {
  for (uint32_t staleness : {0u, 1u, 5u}) {
    EmbeddingShard shard(Config(OptimizerKind::kAdagrad, 3));
    std::vector<int64_t> keys(10);
    std::iota(keys.begin(), keys.end(), 100);
    Pull(shard, keys);
    // Key 100 + k is pushed k times: clock 1 + k.
    for (int k = 1; k < 10; ++k) {
      std::vector<int64_t> pushed(keys.begin() + k, keys.end());
      PushOnce(shard, pushed, k);
    }
    std::vector<int64_t> ask = keys;
    std::vector<int32_t> known(10, 1);  // every copy taken at clock 1
    ask.push_back(100);                 // a repeated key, no copy
    known.push_back(-1);
    ask.push_back(103);  // a copy "from the future" (e.g. before a rollback): sent
    known.push_back(5);
    ask.push_back(777);  // missing: inserted and sent, whatever the worker holds
    known.push_back(3);
    DeltaBatch deltas;
    const PullStaleResult r = PullStale(shard, ask, known, staleness, &deltas);
    std::vector<int64_t> want_sent_keys;
    for (size_t i = 0; i < ask.size(); ++i) {
      bool want;
      if (i < 10) {
        want = static_cast<uint32_t>(i) > staleness;  // key 100 + i is i versions past the copy
      } else {
        want = true;
      }
      EXPECT_EQ(r.sent[i], want) << "key " << ask[i] << " S " << staleness;
      if (want) want_sent_keys.push_back(ask[i]);
    }
    EXPECT_EQ(r.sent_count, want_sent_keys.size());
    EXPECT_EQ(r.rows, Pull(shard, want_sent_keys));  // compact, in the order of the keys
    std::vector<int32_t> want_clocks;
    for (int k = 0; k < 10; ++k) want_clocks.push_back(1 + k);
    want_clocks.insert(want_clocks.end(), {1, 4, 1});
    EXPECT_EQ(r.clocks, want_clocks);
    // The insert of 777 is the one mutation, reported as a pull's insert is.
    EXPECT_EQ(deltas.size(), 1u);
    EXPECT_EQ(shard.size(), 11u);
    // Nothing missing: the shared-lock path, no deltas, the same answer.
    ask.pop_back();
    known.pop_back();
    const PullStaleResult again = PullStale(shard, ask, known, staleness, &deltas);
    EXPECT_EQ(deltas.size(), 0u);
    EXPECT_EQ(again.sent, std::vector<uint8_t>(r.sent.begin(), r.sent.end() - 1));
  }
}

TEST(EmbeddingShardClocks, PullStaleInsertsMissingKeysAsPullDoes) {
  EmbeddingShard a(Config()), b(Config());
  const std::vector<int64_t> keys = {8, 3, 8, 5};
  const PullStaleResult r = PullStale(a, keys, {-1, -1, 1, 4}, 0);
  // Inserted in order of first appearance, with Pull's initial rows and slots; both 8s are answered
  // (the second occurrence now finds the row at clock 1 and its copy current: not sent again).
  EXPECT_EQ(r.sent, (std::vector<uint8_t>{1, 1, 0, 1}));
  EXPECT_EQ(r.clocks, (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(r.rows, Pull(b, {8, 3, 5}));
  EXPECT_EQ(AllBlocks(a), AllBlocks(b));
}

// Sees every mutation a shard reports, as DeltaForwarder::Mutation would.
class RecordingSink final : public DeltaSink {
 public:
  DeltaBatch Begin(size_t record_bytes) override {
    ++begins;
    DeltaBatch batch;
    batch.record_bytes = record_bytes;
    return batch;
  }
  void Record(DeltaBatch deltas) override { recorded.push_back(std::move(deltas)); }
  int begins = 0;
  std::vector<DeltaBatch> recorded;
};

TEST(EmbeddingShardClocks, PullStaleReportsItsInsertsToASink) {
  EmbeddingShard shard(Config(OptimizerKind::kAdam, 4, 4));
  const auto zero_image = AllBlocks(shard);
  RecordingSink sink;
  std::vector<int64_t> keys = {1, 2, 3};
  std::vector<int32_t> known(3, -1), clocks(3);
  std::vector<float> rows(3 * 4);
  std::vector<uint8_t> sent(3);
  EXPECT_EQ(shard.PullStale(keys.data(), 3, known.data(), 0, rows.data(), clocks.data(), sent.data(), &sink), 3u);
  ASSERT_EQ(sink.recorded.size(), 1u);
  EXPECT_EQ(sink.recorded[0].slots, (std::vector<uint32_t>{0, 1, 2}));
  // The deltas rebuild the shard's bytes from the zero image (clocks included).
  std::vector<uint8_t> image(AllBlocks(shard).size(), 0);
  for (size_t i = 0; i < sink.recorded[0].size(); ++i) {
    const DeltaBatch& d = sink.recorded[0];
    for (size_t j = 0; j < d.record_bytes; ++j) image[d.slots[i] * d.record_bytes + j] ^= d.delta(i)[j];
  }
  EXPECT_EQ(image, AllBlocks(shard));
  // All present: nothing changes, nothing is reported (as a pull of present keys).
  known = clocks;
  EXPECT_EQ(shard.PullStale(keys.data(), 3, known.data(), 0, rows.data(), clocks.data(), sent.data(), &sink), 0u);
  EXPECT_EQ(sink.begins, 1);
  EXPECT_EQ(sent, (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_THROW(shard.PullStale(keys.data(), 3, nullptr, 0, rows.data(), clocks.data(), sent.data(), &sink),
               std::invalid_argument);
}

TEST(EmbeddingShardClocks, DistanceIsModular) {
  constexpr uint32_t kTop = RecordLayout::kClockMask;  // 2^31 - 1, the last clock before the wrap
  EXPECT_EQ(RecordLayout::ClockBehind(3, 3), 0u);
  EXPECT_EQ(RecordLayout::ClockBehind(9, 3), 6u);
  EXPECT_EQ(RecordLayout::ClockBehind(0, kTop), 1u);
  EXPECT_EQ(RecordLayout::ClockBehind(5, kTop - 1), 7u);
  EXPECT_EQ(RecordLayout::ClockBehind(3, 4), kTop);  // a copy ahead of the server is as far as can be
  const uint32_t top = RecordLayout::LiveFlags(kTop);
  EXPECT_EQ(RecordLayout::ClockOf(top), kTop);
  EXPECT_EQ(RecordLayout::Ticked(top), RecordLayout::LiveFlags(0));  // wraps, stays live
  EXPECT_TRUE(RecordLayout::IsLive(RecordLayout::Ticked(top)));
  uint8_t record[16] = {};
  RecordLayout::SetFlags(record, RecordLayout::LiveFlags(4));
  RecordLayout::SetClock(record, kTop + 3);  // taken mod 2^31
  EXPECT_EQ(RecordLayout::Clock(record), 2u);
  EXPECT_TRUE(RecordLayout::IsLive(RecordLayout::Flags(record)));
}

// ---- restore protocol -------------------------------------------------------------------------

struct Original {
  std::unique_ptr<EmbeddingShard> shard;
  std::vector<int64_t> keys;
  std::vector<uint32_t> slots;
  size_t high_water;
};

Original MakeOriginal() {
  Original o;
  o.shard.reset(new EmbeddingShard(Config(OptimizerKind::kAdagrad, 4, 8)));
  std::vector<int64_t> keys(100);
  std::iota(keys.begin(), keys.end(), 1000);
  std::vector<float> grads(400, 0.3f);
  o.shard->Push(keys.data(), grads.data(), 100, 1);
  std::vector<int64_t> gone = {1003, 1050, 1051};
  o.shard->Erase(gone.data(), 3);
  o.high_water = o.shard->memory().slots;
  // Recover the (key, slot) index from the block bytes, as parity recovery would.
  for (size_t b = 0; b < o.shard->num_blocks(); ++b) {
    std::vector<uint8_t> block(o.shard->block_bytes());
    o.shard->ReadBlock(b, block.data());
    for (size_t i = 0; i < o.shard->block_slots(); ++i) {
      const uint8_t* r = block.data() + i * o.shard->layout().bytes();
      if (!RecordLayout::IsLive(RecordLayout::Flags(r))) continue;
      int64_t key;
      std::memcpy(&key, r, 8);
      o.keys.push_back(key);
      o.slots.push_back(static_cast<uint32_t>(b * o.shard->block_slots() + i));
    }
  }
  return o;
}

TEST(EmbeddingShard, RestoreByFaultsAndBackgroundBlocks) {
  Original o = MakeOriginal();
  EmbeddingShard restored(o.shard->config());
  std::vector<size_t> faults;
  EmbeddingShard* original = o.shard.get();
  restored.BeginRestore(o.keys.data(), o.slots.data(), o.keys.size(), o.high_water,
                        [&faults, original](size_t b, uint8_t* out) {
                          faults.push_back(b);
                          original->ReadBlock(b, out);
                        });
  EXPECT_EQ(restored.missing_blocks(), o.shard->num_blocks());
  EXPECT_EQ(restored.size(), o.keys.size());
  // A degraded read faults in exactly the block of that key.
  std::vector<int64_t> k = {1042};
  std::vector<float> got(4), want(4);
  std::vector<uint8_t> found(1);
  restored.Find(k.data(), 1, got.data(), found.data());
  o.shard->Find(k.data(), 1, want.data(), found.data());
  EXPECT_EQ(got, want);
  ASSERT_EQ(faults.size(), 1u);
  const size_t faulted = faults[0];
  for (size_t b = 0; b < o.shard->num_blocks(); ++b) EXPECT_EQ(restored.block_missing(b), b != faulted) << b;
  EXPECT_FALSE(restored.block_missing(o.shard->num_blocks() + 5));  // past the end: nothing to restore
  // The missing blocks a batch of keys touches, each once, ascending; restored blocks and unknown keys left out.
  std::vector<size_t> expected;
  for (size_t i = 0; i < o.keys.size(); ++i)
    if (o.slots[i] / o.shard->block_slots() != faulted) expected.push_back(o.slots[i] / o.shard->block_slots());
  std::sort(expected.begin(), expected.end());
  expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
  std::vector<int64_t> touched(o.keys.rbegin(), o.keys.rend());
  touched.push_back(987654321);  // not in the index
  EXPECT_EQ(restored.MissingBlocksOf(touched.data(), touched.size()), expected);
  EXPECT_TRUE(restored.MissingBlocksOf(k.data(), 1).empty());                     // 1042's block was faulted in
  EXPECT_TRUE(o.shard->MissingBlocksOf(touched.data(), touched.size()).empty());  // not restoring
  // Background restore: the faulted block is skipped.
  std::vector<uint8_t> block(o.shard->block_bytes());
  size_t installed = 0;
  for (size_t b = 0; b < o.shard->num_blocks(); ++b) {
    o.shard->ReadBlock(b, block.data());
    if (b == 2) {  // a wrong block is refused without being installed
      std::vector<uint8_t> wrong(block);
      wrong[0] ^= 1;
      EXPECT_THROW(restored.RestoreBlock(b, wrong.data()), std::invalid_argument);
    }
    installed += restored.RestoreBlock(b, block.data());
  }
  EXPECT_EQ(installed, o.shard->num_blocks() - 1);
  EXPECT_EQ(restored.missing_blocks(), 0u);
  EXPECT_FALSE(restored.block_missing(0));
  EXPECT_FALSE(restored.RestoreBlock(faulted, block.data()));
  EXPECT_EQ(AllBlocks(restored), AllBlocks(*o.shard));
  // The free list was rebuilt: the next new key takes the lowest freed slot, as in the original.
  DeltaBatch d1, d2;
  Pull(restored, {5555}, &d1);
  Pull(*o.shard, {5555}, &d2);
  EXPECT_EQ(d1.slots, d2.slots);
  EXPECT_EQ(AllBlocks(restored), AllBlocks(*o.shard));
}

TEST(EmbeddingShard, RestoreMutationsFaultFirstAndStayExact) {
  Original o = MakeOriginal();
  EmbeddingShard restored(o.shard->config());
  EmbeddingShard* original = o.shard.get();
  restored.BeginRestore(o.keys.data(), o.slots.data(), o.keys.size(), o.high_water,
                        [original](size_t b, uint8_t* out) { original->ReadBlock(b, out); });
  // Same pushes (incl. new keys into freed slots) and erases on both: identical bytes after.
  std::vector<int64_t> keys = {1001, 1099, 7, 8, 1001};
  std::vector<float> grads(20, -0.2f);
  restored.Push(keys.data(), grads.data(), 5, 2);
  o.shard->Push(keys.data(), grads.data(), 5, 2);
  std::vector<int64_t> gone = {1010, 1020};
  EXPECT_EQ(restored.Erase(gone.data(), 2), 2u);
  o.shard->Erase(gone.data(), 2);
  EXPECT_GT(restored.missing_blocks(), 0u);
  EmbeddingShard::Rows a = restored.Export();  // faults in the rest
  EmbeddingShard::Rows b = o.shard->Export();
  EXPECT_EQ(restored.missing_blocks(), 0u);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(AllBlocks(restored), AllBlocks(*o.shard));
}

TEST(EmbeddingShard, RestoreUnderConcurrentTraffic) {
  // A background thread installs blocks while readers pull: every read sees the original rows,
  // whichever of fault or background install brought its block in.
  Original o = MakeOriginal();
  EmbeddingShard restored(o.shard->config());
  EmbeddingShard* original = o.shard.get();
  std::atomic<size_t> faults{0};
  restored.BeginRestore(o.keys.data(), o.slots.data(), o.keys.size(), o.high_water,
                        [&faults, original](size_t b, uint8_t* out) {
                          ++faults;
                          original->ReadBlock(b, out);
                        });
  std::vector<float> want(o.keys.size() * 4);
  o.shard->Pull(o.keys.data(), o.keys.size(), want.data());
  std::atomic<size_t> installed{0};
  std::thread background([&]() {
    std::vector<uint8_t> block(original->block_bytes());
    for (size_t b = original->num_blocks(); b-- > 0;) {
      original->ReadBlock(b, block.data());
      installed += restored.RestoreBlock(b, block.data());
    }
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t]() {
      std::mt19937 rng(t);
      for (int round = 0; round < 200; ++round) {
        const size_t i = rng() % o.keys.size();
        float row[4];
        restored.Pull(&o.keys[i], 1, row);
        for (int j = 0; j < 4; ++j) ASSERT_EQ(row[j], want[i * 4 + j]) << "key " << o.keys[i];
      }
    });
  }
  background.join();
  for (auto& r : readers) r.join();
  EXPECT_EQ(restored.missing_blocks(), 0u);
  EXPECT_EQ(installed + faults, o.shard->num_blocks());  // each block installed exactly once
  EXPECT_EQ(AllBlocks(restored), AllBlocks(*o.shard));
}

TEST(EmbeddingShardClocks, ARestoredShardHasTheLostOnesClocks) {
  Original o = MakeOriginal();
  PushOnce(*o.shard, {1001, 1002, 1001}, 2);
  PushOnce(*o.shard, {1002}, 3);
  EmbeddingShard restored(o.shard->config());
  EmbeddingShard* original = o.shard.get();
  restored.BeginRestore(o.keys.data(), o.slots.data(), o.keys.size(), o.high_water,
                        [original](size_t b, uint8_t* out) { original->ReadBlock(b, out); });
  // Clock checks are degraded reads while blocks are missing, and answer as the lost shard would.
  EXPECT_EQ(Clocks(restored, {1001, 1002, 1042, 1003}), (std::vector<int32_t>{3, 4, 2, -1}));
  EXPECT_GT(restored.missing_blocks(), 0u);
  const std::vector<int32_t> known = {2, 2, 2, -1};
  const PullStaleResult a = PullStale(restored, {1001, 1002, 1042, 1003}, known, 1);
  const PullStaleResult b = PullStale(*o.shard, {1001, 1002, 1042, 1003}, known, 1);
  EXPECT_EQ(a.sent, (std::vector<uint8_t>{0, 1, 0, 1}));
  EXPECT_EQ(a.sent, b.sent);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.clocks, b.clocks);
  EXPECT_EQ(Clocks(restored, o.keys), Clocks(*o.shard, o.keys));
}

TEST(EmbeddingShardClocks, ClocksWrapModTwoToThe31) {
  // A shard whose row 1042 is at the last clock before the wrap, made through the restore path (the
  // clock is record bytes, so a crafted block carries it).
  Original o = MakeOriginal();
  const size_t at = std::find(o.keys.begin(), o.keys.end(), 1042) - o.keys.begin();
  const uint32_t slot = o.slots[at];
  EmbeddingShard* original = o.shard.get();
  const uint32_t block_slots = original->block_slots();
  const size_t rb = original->layout().bytes();
  constexpr uint32_t kTop = RecordLayout::kClockMask;
  EmbeddingShard shard(o.shard->config());
  shard.BeginRestore(o.keys.data(), o.slots.data(), o.keys.size(), o.high_water, [=](size_t b, uint8_t* out) {
    original->ReadBlock(b, out);
    if (b == slot / block_slots) RecordLayout::SetClock(out + (slot % block_slots) * rb, kTop);
  });
  EXPECT_EQ(Clocks(shard, {1042}), (std::vector<int32_t>{static_cast<int32_t>(kTop)}));
  PushOnce(shard, {1042}, 2);
  EXPECT_EQ(Clocks(shard, {1042}), (std::vector<int32_t>{0}));
  EXPECT_EQ(ClockInBytes(shard, 1042), 0);  // and the record is still live
  const int32_t top = static_cast<int32_t>(kTop);
  EXPECT_EQ(PullStale(shard, {1042}, {top}, 0).sent, (std::vector<uint8_t>{1}));  // one behind, across the wrap
  EXPECT_EQ(PullStale(shard, {1042}, {top}, 1).sent, (std::vector<uint8_t>{0}));
  EXPECT_EQ(PullStale(shard, {1042}, {0}, 0).sent, (std::vector<uint8_t>{0}));
}

TEST(EmbeddingShard, RestoreRejectsBadArgumentsAndFailingHandlers) {
  Original o = MakeOriginal();
  auto handler = [](size_t, uint8_t*) {};
  {
    EmbeddingShard busy(o.shard->config());
    Pull(busy, {1});
    EXPECT_THROW(busy.BeginRestore(o.keys.data(), o.slots.data(), o.keys.size(), o.high_water, handler),
                 std::invalid_argument);
  }
  EmbeddingShard restored(o.shard->config());
  std::vector<uint32_t> bad_slots(o.slots);
  bad_slots[3] = static_cast<uint32_t>(o.high_water);
  EXPECT_THROW(restored.BeginRestore(o.keys.data(), bad_slots.data(), o.keys.size(), o.high_water, handler),
               std::invalid_argument);
  bad_slots[3] = bad_slots[4];
  EXPECT_THROW(restored.BeginRestore(o.keys.data(), bad_slots.data(), o.keys.size(), o.high_water, handler),
               std::invalid_argument);
  EXPECT_EQ(restored.size(), 0u);
  // A handler that throws, or returns bytes that disagree with the index, leaves the block missing.
  bool fail = true;
  EmbeddingShard* original = o.shard.get();
  restored.BeginRestore(o.keys.data(), o.slots.data(), o.keys.size(), o.high_water,
                        [&fail, original](size_t b, uint8_t* out) {
                          if (fail) throw std::runtime_error("parity peer down");
                          original->ReadBlock(b, out);
                          out[0] ^= 0;  // exact bytes
                        });
  const size_t missing = restored.missing_blocks();
  std::vector<int64_t> k = {1042};
  std::vector<float> row(4);
  EXPECT_THROW(restored.Pull(k.data(), 1, row.data()), std::runtime_error);
  EXPECT_EQ(restored.missing_blocks(), missing);
  fail = false;
  restored.Pull(k.data(), 1, row.data());
  EXPECT_EQ(restored.missing_blocks(), missing - 1);
  EXPECT_THROW(restored.RestoreBlock(missing + 5, nullptr), std::invalid_argument);
}

TEST(EmbeddingShard, TakeDirtyReturnsTheRowsChangedSinceTheLastTake) {
  EmbeddingShard shard(Config(OptimizerKind::kAdagrad, 2));
  std::vector<int64_t> keys = {5, 6, 7};
  std::vector<float> out(keys.size() * 2), grads(keys.size() * 2, 0.5f);
  shard.Pull(keys.data(), keys.size(), out.data());
  EXPECT_THROW(shard.TakeDirty(), std::logic_error);  // tracking is off
  shard.TrackDirty(true);
  EXPECT_TRUE(shard.TakeDirty().keys.empty());  // nothing changed since tracking began
  const int64_t pushed[] = {7, 5, 7};
  shard.Push(pushed, grads.data(), 3, 1);
  const int64_t fresh = 9;
  shard.Pull(&fresh, 1, out.data());
  EmbeddingShard::Rows dirty = shard.TakeDirty();
  EXPECT_EQ(dirty.keys, (std::vector<int64_t>{5, 7, 9}));  // slot order; 6 untouched
  // the rows are the current ones, byte for byte as Export gives them
  EmbeddingShard::Rows all = shard.Export();
  for (size_t i = 0; i < dirty.keys.size(); ++i) {
    size_t j = std::find(all.keys.begin(), all.keys.end(), dirty.keys[i]) - all.keys.begin();
    ASSERT_LT(j, all.keys.size());
    EXPECT_EQ(0, std::memcmp(&dirty.values[i * 2], &all.values[j * 2], 2 * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(&dirty.state[i * 2], &all.state[j * 2], 2 * sizeof(float)));
  }
  EXPECT_TRUE(shard.TakeDirty().keys.empty());  // taken: the set is clear
  const int64_t erased = 5;
  shard.Push(&erased, grads.data(), 1, 2);
  shard.Erase(&erased, 1);
  EXPECT_TRUE(shard.TakeDirty().keys.empty());  // an erased row is not reported
  shard.TrackDirty(false);
  EXPECT_FALSE(shard.tracking_dirty());
}

}  // namespace
}  // namespace xdl_ec

namespace xdl_ec {
namespace {

// Large pulls and pushes are split over TaskPool::Shared()'s threads; with split_min_keys = 1 every call of
// more than one key is. The split calls must give the bytes the one-thread pass gives: rows read, deltas
// (slots and XOR bytes, in order), records, dirty rows and counters.
struct SplitTwins {
  explicit SplitTwins(ShardConfig config) : split(WithSplit(config, 1)), whole(WithSplit(config, SIZE_MAX)) {
    split.TrackDirty(true);
    whole.TrackDirty(true);
  }
  static ShardConfig WithSplit(ShardConfig config, size_t min_keys) {
    config.split_min_keys = min_keys;
    return config;
  }
  void Pull(const std::vector<int64_t>& keys) {
    DeltaBatch ds, dw;
    std::vector<float> rs(keys.size() * split.dim()), rw(rs.size());
    split.Pull(keys.data(), keys.size(), rs.data(), DeltaBatchSink(&ds).sink());
    whole.Pull(keys.data(), keys.size(), rw.data(), DeltaBatchSink(&dw).sink());
    ASSERT_EQ(0, std::memcmp(rs.data(), rw.data(), rs.size() * sizeof(float)));
    ExpectSameDeltas(ds, dw);
  }
  void Push(const std::vector<int64_t>& keys, const std::vector<float>& grads, int64_t step) {
    DeltaBatch ds, dw;
    split.Push(keys.data(), grads.data(), keys.size(), step, DeltaBatchSink(&ds).sink());
    whole.Push(keys.data(), grads.data(), keys.size(), step, DeltaBatchSink(&dw).sink());
    ExpectSameDeltas(ds, dw);
  }
  static void ExpectSameDeltas(const DeltaBatch& a, const DeltaBatch& b) {
    EXPECT_EQ(a.slots, b.slots);
    EXPECT_EQ(a.xor_bytes, b.xor_bytes);
  }
  void ExpectSameState() {
    EXPECT_EQ(AllBlocks(split), AllBlocks(whole));
    const EmbeddingShard::Rows ds = split.TakeDirty(), dw = whole.TakeDirty();
    EXPECT_EQ(ds.keys, dw.keys);
    EXPECT_EQ(ds.values, dw.values);
    const auto ps = split.policy_stats(), pw = whole.policy_stats();
    EXPECT_EQ(ps.counters.not_admitted_lookups, pw.counters.not_admitted_lookups);
    EXPECT_EQ(ps.counters.admitted, pw.counters.admitted);
    EXPECT_EQ(ps.rows, pw.rows);
  }
  EmbeddingShard split, whole;
};

void RunSplitTwins(ShardConfig config) {
  SplitTwins twins(config);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> id(0, 3000);  // repeats across and within batches, new ids each time
  std::normal_distribution<float> grad(0.0f, 0.1f);
  const size_t dim = static_cast<size_t>(config.dim);
  for (int step = 1; step <= 12; ++step) {
    std::vector<int64_t> keys(static_cast<size_t>(200 + 150 * step));
    for (int64_t& k : keys) k = id(rng);
    twins.Pull(keys);
    std::vector<int64_t> pushed(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(keys.size() / 2));
    for (int j = 0; j < 20; ++j) pushed.push_back(5000 + step * 100 + j);  // pushed before any pull
    std::vector<float> grads(pushed.size() * dim);
    for (float& g : grads) g = grad(rng);
    twins.Push(pushed, grads, step);
    twins.Pull(pushed);  // every key present: the shared-lock path
    ASSERT_NO_FATAL_FAILURE(twins.ExpectSameState());
  }
  EXPECT_GT(twins.split.size(), 1000u);
}

TEST(EmbeddingShardSplit, PullsAndPushesSplitOverThreadsGiveTheOneThreadBytes) {
  ASSERT_GT(TaskPool::Shared().threads(), 0u) << "XDL_EC_CORE_THREADS is set below (4): the pool must have threads";
  RunSplitTwins(Config(OptimizerKind::kAdagrad, 5, 64));
  RunSplitTwins(Config(OptimizerKind::kAdam, 3, 16));
  ShardConfig normal = Config(OptimizerKind::kFtrl, 4, 32);
  normal.initializer.kind = InitializerKind::kTruncatedNormal;
  RunSplitTwins(normal);
}

TEST(EmbeddingShardSplit, TablesWithRowRulesGiveTheOneThreadBytes) {
  ShardConfig admit = Config(OptimizerKind::kAdagrad, 4, 64);
  admit.row_policy.admit_min_count = 2;  // pulls read zeros for pending ids and insert nothing
  RunSplitTwins(admit);
  ShardConfig capped = Config(OptimizerKind::kAdagrad, 4, 64);
  capped.row_policy.max_rows = 2048;  // pulls stop inserting once full
  RunSplitTwins(capped);
}

}  // namespace
}  // namespace xdl_ec

namespace xdl_ec {
namespace {

// Keys pushed in ascending order skip the duplicate search (a worker's batch keys come sorted and unique); the
// bytes must be those of the same push in any other order.
TEST(EmbeddingShard, AnAscendingPushStepsAsTheSamePushInAnotherOrder) {
  for (bool with_repeats : {false, true}) {
    EmbeddingShard sorted(Config(OptimizerKind::kAdam, 3, 16)), shuffled(Config(OptimizerKind::kAdam, 3, 16));
    std::vector<int64_t> keys(300);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i * 7) - 900;  // ascending, unique
    Pull(sorted, keys);
    Pull(shuffled, keys);
    std::vector<float> grads(keys.size() * 3);
    std::vector<uint32_t> repeats(keys.size());
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = i % 5 == 0 ? -0.0f : 0.01f * static_cast<float>(i % 17);
    for (size_t i = 0; i < repeats.size(); ++i) repeats[i] = 1 + static_cast<uint32_t>(i % 3);
    std::vector<size_t> order(keys.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
    std::vector<int64_t> keys2;
    std::vector<float> grads2;
    std::vector<uint32_t> repeats2;
    for (size_t i : order) {
      keys2.push_back(keys[i]);
      grads2.insert(grads2.end(), grads.begin() + static_cast<std::ptrdiff_t>(3 * i),
                    grads.begin() + static_cast<std::ptrdiff_t>(3 * i + 3));
      repeats2.push_back(repeats[i]);
    }
    sorted.Push(keys.data(), grads.data(), keys.size(), 1, nullptr, with_repeats ? repeats.data() : nullptr);
    shuffled.Push(keys2.data(), grads2.data(), keys2.size(), 1, nullptr, with_repeats ? repeats2.data() : nullptr);
    EXPECT_EQ(AllBlocks(sorted), AllBlocks(shuffled)) << (with_repeats ? "with repeats" : "");
  }
}

}  // namespace
}  // namespace xdl_ec
