// A table group's native calls (group_keys.h, shard_group.h): a group's unique and fresh mask equal each table's
// own, a group's pull and push leave every shard byte for byte as its own calls would, a bad push changes nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/group_keys.h"
#include "xdl_ec/shard_group.h"
#include "xdl_ec/sorted_unique.h"

namespace xdl_ec {
namespace {

ShardConfig Config(OptimizerKind kind, uint64_t seed) {
  ShardConfig c;
  c.dim = 3;
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 0.1f;
  c.block_slots = 8;
  c.seed = seed;
  return c;
}

std::vector<uint8_t> AllBlocks(const EmbeddingShard& shard) {
  std::vector<uint8_t> bytes(shard.num_blocks() * shard.block_bytes());
  for (size_t b = 0; b < shard.num_blocks(); ++b) shard.ReadBlock(b, bytes.data() + b * shard.block_bytes());
  return bytes;
}

TEST(GroupSortedUnique, EachTablesPartIsItsOwnUnique) {
  // parts 0 and 2 belong to table 1, part 1 to table 0
  const std::vector<int64_t> keys = {5, -2, 5, 7, 7, 1, -2, 9};
  const std::vector<int64_t> part_offsets = {0, 3, 5, 8};
  const std::vector<int32_t> part_table = {1, 0, 1};
  std::vector<int64_t> unique;
  std::vector<int64_t> offsets(3);
  std::vector<int32_t> inverse(keys.size());
  GroupSortedUnique(keys.data(), part_offsets.data(), part_table.data(), 3, 2, &unique, offsets.data(), inverse.data());
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 1, 5}));
  EXPECT_EQ(unique, (std::vector<int64_t>{7, -2, 1, 5, 9}));  // table 0: {7, 7}; table 1: {5, -2, 5, 1, -2, 9}
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(unique[inverse[i]], keys[i]) << i;
  // table 1's ids alone, through SortedUnique: the same keys
  const std::vector<int64_t> table1 = {5, -2, 5, 1, -2, 9};
  std::vector<int64_t> own;
  std::vector<int32_t> own_inverse(table1.size());
  SortedUnique(table1.data(), table1.size(), &own, own_inverse.data());
  EXPECT_EQ(own, std::vector<int64_t>(unique.begin() + 1, unique.end()));
}

TEST(GroupSortedUnique, RefusesAPartOfNoTable) {
  const std::vector<int64_t> keys = {1, 2};
  const std::vector<int64_t> part_offsets = {0, 2};
  const std::vector<int32_t> part_table = {2};
  std::vector<int64_t> unique;
  std::vector<int64_t> offsets(3);
  std::vector<int32_t> inverse(2);
  EXPECT_THROW(GroupSortedUnique(keys.data(), part_offsets.data(), part_table.data(), 1, 2, &unique, offsets.data(),
                                 inverse.data()),
               std::invalid_argument);
}

TEST(GroupFresh, IsPerTable) {
  const std::vector<int64_t> keys = {1, 5, 9, 1, 2}, offsets = {0, 3, 5};
  const std::vector<int64_t> before = {5, 1, 3}, before_offsets = {0, 1, 3};
  std::vector<uint8_t> fresh(keys.size());
  GroupFresh(keys.data(), offsets.data(), before.data(), before_offsets.data(), 2, fresh.data());
  EXPECT_EQ(fresh, (std::vector<uint8_t>{1, 0, 1, 0, 1}));
}

TEST(ShardGroup, PullAndPushEqualEachShardsOwnCalls) {
  EmbeddingShard a(Config(OptimizerKind::kAdagrad, 1)), b(Config(OptimizerKind::kAdam, 2));
  EmbeddingShard a_alone(Config(OptimizerKind::kAdagrad, 1)), b_alone(Config(OptimizerKind::kAdam, 2));
  const ShardGroup group({&a, &b});
  const std::vector<int64_t> keys = {3, 8, 3, 11, 12}, offsets = {0, 2, 5};
  std::vector<float> rows(keys.size() * 3), own(keys.size() * 3);
  group.Pull(keys.data(), offsets.data(), rows.data());
  a_alone.Pull(keys.data(), 2, own.data());
  b_alone.Pull(keys.data() + 2, 3, own.data() + 6);
  EXPECT_EQ(0, std::memcmp(rows.data(), own.data(), rows.size() * sizeof(float)));
  std::vector<float> grads(keys.size() * 3);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i) - 0.05f;
  group.Push(keys.data(), grads.data(), offsets.data(), 1, nullptr);
  a_alone.Push(keys.data(), grads.data(), 2, 1);
  b_alone.Push(keys.data() + 2, grads.data() + 6, 3, 1);
  EXPECT_EQ(AllBlocks(a), AllBlocks(a_alone));
  EXPECT_EQ(AllBlocks(b), AllBlocks(b_alone));
}

TEST(ShardGroup, ABadPushChangesNoShard) {
  EmbeddingShard a(Config(OptimizerKind::kAdagrad, 1)), b(Config(OptimizerKind::kSGD, 2));
  const ShardGroup group({&a, &b});
  const std::vector<int64_t> keys = {1, 2}, offsets = {0, 1, 2};
  std::vector<float> rows(6);
  group.Pull(keys.data(), offsets.data(), rows.data());
  const auto a_before = AllBlocks(a), b_before = AllBlocks(b);
  std::vector<float> grads(6, 1.0f);
  grads[5] = std::numeric_limits<float>::quiet_NaN();  // the second table's part: the first's must not apply
  EXPECT_THROW(group.Push(keys.data(), grads.data(), offsets.data(), 1, nullptr), std::invalid_argument);
  EXPECT_THROW(group.Push(keys.data(), rows.data(), offsets.data(), 0, nullptr), std::invalid_argument);
  EXPECT_EQ(AllBlocks(a), a_before);
  EXPECT_EQ(AllBlocks(b), b_before);
}

TEST(ShardGroup, RefusesShardsOfTwoDims) {
  ShardConfig wide = Config(OptimizerKind::kSGD, 1);
  wide.dim = 4;
  EmbeddingShard a(Config(OptimizerKind::kSGD, 1)), b(wide);
  EXPECT_THROW(ShardGroup({&a, &b}), std::invalid_argument);
  const std::vector<int64_t> bad_offsets = {1, 2};
  const ShardGroup one({&a});
  EXPECT_THROW(one.CheckOffsets(bad_offsets.data(), 2), std::invalid_argument);
}

}  // namespace
}  // namespace xdl_ec
