#include "xdl_ec/embedding_shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace xdl_ec {
namespace {

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
  shard.Pull(keys.data(), keys.size(), out.data(), deltas);
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
  EXPECT_EQ(flags, RecordLayout::kLive);
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
  shard.Push(push_keys.data(), grads.data(), 4, 3, &deltas);
  EXPECT_EQ(deltas.size(), 3u);  // 2, 7 (new), 5: each slot once
  apply(deltas);
  EXPECT_EQ(shard_image(), image);
  std::vector<int64_t> erase_keys = {1, 7, 100};
  EXPECT_EQ(shard.Erase(erase_keys.data(), 3, &deltas), 2u);
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
      uint32_t flags;
      std::memcpy(&flags, r + 8, 4);
      if (!flags) continue;
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
