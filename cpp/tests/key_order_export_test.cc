// A shard's export in key order (SortedKeys, ExportKeys): the rows Export gives, sorted by key, whether the shard
// is tiered (read a block's worth at a time, so it keeps its budget), has admission (pending ids left out) or is
// under restore; keys that are no row are left out.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/spill_tier.h"

namespace xdl_ec {
namespace {

std::string TempDir() {
  std::string path = testing::TempDir() + "xdl-ec-key-order-test-XXXXXX";
  if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  return path;
}

ShardConfig Config() {
  ShardConfig c;
  c.dim = 4;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.learning_rate = 0.1f;
  c.block_slots = 16;
  c.seed = 3;
  return c;
}

// The rows of Export sorted by key: what a key-order export must give.
EmbeddingShard::Rows SortedExport(const EmbeddingShard& shard) {
  const EmbeddingShard::Rows rows = shard.Export();
  const size_t n = rows.keys.size(), dim = shard.dim(), sf = shard.layout().state_floats;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rows.keys[a] < rows.keys[b]; });
  EmbeddingShard::Rows out;
  for (const size_t i : order) {
    out.keys.push_back(rows.keys[i]);
    out.values.insert(out.values.end(), rows.values.begin() + i * dim, rows.values.begin() + (i + 1) * dim);
    out.state.insert(out.state.end(), rows.state.begin() + i * sf, rows.state.begin() + (i + 1) * sf);
    if (!rows.uses.empty()) {
      out.uses.push_back(rows.uses[i]);
      out.last_step.push_back(rows.last_step[i]);
    }
  }
  return out;
}

// SortedKeys, then ExportKeys `chunk` keys at a time, appended.
EmbeddingShard::Rows KeyOrderExport(const EmbeddingShard& shard, size_t chunk) {
  const std::vector<int64_t> keys = shard.SortedKeys();
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EmbeddingShard::Rows out;
  for (size_t first = 0; first < keys.size(); first += chunk) {
    const EmbeddingShard::Rows part = shard.ExportKeys(keys.data() + first, std::min(chunk, keys.size() - first));
    out.keys.insert(out.keys.end(), part.keys.begin(), part.keys.end());
    out.values.insert(out.values.end(), part.values.begin(), part.values.end());
    out.state.insert(out.state.end(), part.state.begin(), part.state.end());
    out.uses.insert(out.uses.end(), part.uses.begin(), part.uses.end());
    out.last_step.insert(out.last_step.end(), part.last_step.begin(), part.last_step.end());
  }
  return out;
}

void ExpectSameRows(const EmbeddingShard::Rows& a, const EmbeddingShard::Rows& b) {
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.uses, b.uses);
  EXPECT_EQ(a.last_step, b.last_step);
}

// 2000 rows trained a little, a few erased (free slots among the live ones).
void Train(EmbeddingShard& shard) {
  std::vector<int64_t> keys(2000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>((i * 7919) % 100003) - 50000;
  std::vector<float> out(keys.size() * 4), grads(keys.size() * 4);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  shard.Pull(keys.data(), keys.size(), out.data());
  shard.Push(keys.data(), grads.data(), keys.size(), 1);
  shard.Push(keys.data(), grads.data(), 500, 2);
  shard.Erase(keys.data() + 100, 50);
}

TEST(KeyOrderExport, IsExportSortedByKeyInAnyChunks) {
  EmbeddingShard shard(Config());
  Train(shard);
  const EmbeddingShard::Rows expected = SortedExport(shard);
  ASSERT_EQ(expected.keys.size(), 1950u);
  for (const size_t chunk : {size_t{1}, size_t{7}, size_t{1000}, size_t{5000}}) {
    ExpectSameRows(KeyOrderExport(shard, chunk), expected);
  }
}

TEST(KeyOrderExport, LeavesOutKeysThatAreNoRowAndKeepsTheAskedOrder) {
  EmbeddingShard shard(Config());
  Train(shard);
  const std::vector<int64_t> keys = shard.SortedKeys();
  std::vector<int64_t> asked = {keys[5], 123456789, keys[2], keys[2] + 1 == keys[3] ? -999999999 : keys[2] + 1};
  const EmbeddingShard::Rows rows = shard.ExportKeys(asked.data(), asked.size());
  EXPECT_EQ(rows.keys, (std::vector<int64_t>{keys[5], keys[2]}));
  EXPECT_EQ(rows.values.size(), 2u * 4);
  EXPECT_EQ(shard.ExportKeys(nullptr, 0).keys.size(), 0u);
  EXPECT_THROW(shard.ExportKeys(nullptr, 3), std::invalid_argument);
}

TEST(KeyOrderExport, TieredShardGivesTheSameRowsWithinItsBudget) {
  const std::string dir = TempDir();
  ShardConfig tiered_config = Config();
  tiered_config.spill_dir = dir;
  EmbeddingShard probe(Config());
  tiered_config.memory_budget = SpillTier::MinimumBudget(probe.layout().bytes());
  EmbeddingShard plain(Config()), tiered(tiered_config);
  Train(plain);
  Train(tiered);
  ExpectSameRows(KeyOrderExport(tiered, 100000), SortedExport(plain));
  const ShardMemoryStats m = tiered.memory();
  // one chunk of every row asked: read a block's worth at a time, so most rows stayed on disk
  EXPECT_GT(m.spill.rows_on_disk, m.spill.rows_in_memory);
}

TEST(KeyOrderExport, AdmissionLeavesPendingIdsOutAndCarriesTheWords) {
  ShardConfig c = Config();
  c.row_policy.admit_min_count = 2;
  EmbeddingShard shard(c);
  // an occurrence is a push: 1, 2, 3 pushed once stay pending, 10 and 11 pushed twice are rows
  std::vector<int64_t> once = {1, 2, 3}, twice = {10, 11};
  std::vector<float> grads(3 * 4, 0.5f);
  shard.Push(once.data(), grads.data(), once.size(), 1);
  shard.Push(twice.data(), grads.data(), twice.size(), 2);
  shard.Push(twice.data(), grads.data(), twice.size(), 3);
  ASSERT_EQ(shard.size(), 5u);
  EXPECT_EQ(shard.SortedKeys(), (std::vector<int64_t>{10, 11}));
  const EmbeddingShard::Rows rows = KeyOrderExport(shard, 1);
  ExpectSameRows(rows, SortedExport(shard));
  EXPECT_EQ(rows.uses.size(), 2u);
  std::vector<int64_t> pending = {1, 2};
  EXPECT_TRUE(shard.ExportKeys(pending.data(), pending.size()).keys.empty());
}

TEST(KeyOrderExport, ShardUnderRestoreFaultsItsBlocksIn) {
  EmbeddingShard original(Config());
  Train(original);
  const size_t rb = original.layout().bytes();
  std::vector<uint8_t> block(original.block_bytes());
  std::vector<int64_t> live;
  std::vector<uint32_t> slots;
  for (size_t b = 0; b < original.num_blocks(); ++b) {
    original.ReadBlock(b, block.data());
    for (size_t s = 0; s < original.block_slots(); ++s) {
      if (!RecordLayout::IsLive(RecordLayout::Flags(block.data() + s * rb))) continue;
      int64_t key;
      std::memcpy(&key, block.data() + s * rb, sizeof(key));
      live.push_back(key);
      slots.push_back(static_cast<uint32_t>(b * original.block_slots() + s));
    }
  }
  EmbeddingShard restored(Config());
  restored.BeginRestore(live.data(), slots.data(), live.size(), original.memory().slots,
                        [&original](size_t b, uint8_t* bytes) { original.ReadBlock(b, bytes); });
  ExpectSameRows(KeyOrderExport(restored, 300), SortedExport(original));
  EXPECT_EQ(restored.missing_blocks(), 0u);
}

}  // namespace
}  // namespace xdl_ec
