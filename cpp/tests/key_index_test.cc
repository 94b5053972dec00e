#include "xdl_ec/key_index.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace xdl_ec {
namespace {

// A key store standing in for the slot records: slot -> key.
struct Slots {
  std::vector<int64_t> keys;
  int64_t operator()(uint32_t slot) const { return keys[slot]; }
};

TEST(KeyIndex, InsertFindEraseAgainstAReferenceMap) {
  KeyIndex index;
  Slots slots;
  std::unordered_map<int64_t, uint32_t> reference;
  std::mt19937_64 rng(1);
  std::vector<int64_t> live;
  for (int op = 0; op < 200000; ++op) {
    const int64_t key = static_cast<int64_t>(rng() % 20000) - 10000;
    const uint32_t found = index.Find(key, slots);
    auto it = reference.find(key);
    ASSERT_EQ(found == KeyIndex::kNone, it == reference.end()) << "key " << key;
    if (it != reference.end()) ASSERT_EQ(found, it->second);
    if (it == reference.end()) {
      const uint32_t slot = static_cast<uint32_t>(slots.keys.size());
      slots.keys.push_back(key);
      index.Insert(key, slot);
      reference[key] = slot;
    } else if (rng() % 2) {
      ASSERT_EQ(index.Erase(key, slots), it->second);
      reference.erase(it);
      ASSERT_EQ(index.Find(key, slots), KeyIndex::kNone);
    }
    ASSERT_EQ(index.size(), reference.size());
  }
  for (const auto& [key, slot] : reference) ASSERT_EQ(index.Find(key, slots), slot);
  EXPECT_EQ(index.Erase(123456789, slots), KeyIndex::kNone);
}

TEST(KeyIndex, SequentialKeysStayUnderLoadLimitAndCompact) {
  KeyIndex index;
  Slots slots;
  const size_t n = 1 << 20;
  for (size_t i = 0; i < n; ++i) {
    slots.keys.push_back(static_cast<int64_t>(i));
    index.Insert(static_cast<int64_t>(i), static_cast<uint32_t>(i));
  }
  EXPECT_LE(index.size() * 4, index.capacity() * 3);
  EXPECT_EQ(index.bytes(), index.capacity() * 8);
  EXPECT_LE(index.bytes(), n * 8 * 2 * 4 / 3 + 64);  // <= 21.4 bytes per row
  for (size_t i = 0; i < n; i += 997) ASSERT_EQ(index.Find(static_cast<int64_t>(i), slots), i);
}

TEST(KeyIndex, TagCollisionsAreResolvedByTheStoredKey) {
  // Find two keys with the same 32-bit tag: the index must still tell them apart.
  std::unordered_map<uint32_t, int64_t> seen;
  int64_t a = 0, b = 0;
  for (int64_t k = 0;; ++k) {
    const uint32_t tag = KeyIndex::Tag(k) >> 12;  // 20 bits: a collision within ~1M keys
    auto [it, fresh] = seen.emplace(tag, k);
    if (!fresh) {
      a = it->second;
      b = k;
      break;
    }
  }
  KeyIndex index;
  Slots slots{{a, b}};
  index.Insert(a, 0);
  index.Insert(b, 1);
  EXPECT_EQ(index.Find(a, slots), 0u);
  EXPECT_EQ(index.Find(b, slots), 1u);
  EXPECT_EQ(index.Erase(a, slots), 0u);
  EXPECT_EQ(index.Find(b, slots), 1u);
  EXPECT_EQ(index.Find(a, slots), KeyIndex::kNone);
}

TEST(KeyIndex, BackwardShiftKeepsClustersReachableAcrossWraparound) {
  // Small table, heavy churn: every erase shifts clusters, including those wrapping the end.
  KeyIndex index;
  Slots slots;
  std::mt19937_64 rng(7);
  std::vector<int64_t> live;
  for (int round = 0; round < 20000; ++round) {
    if (live.size() < 4 || (live.size() < 12 && rng() % 2)) {  // <= 12 keys: 16 buckets at 0.75
      const int64_t key = static_cast<int64_t>(rng());
      slots.keys.push_back(key);
      index.Insert(key, static_cast<uint32_t>(slots.keys.size() - 1));
      live.push_back(key);
    } else {
      const size_t i = rng() % live.size();
      ASSERT_NE(index.Erase(live[i], slots), KeyIndex::kNone);
      live[i] = live.back();
      live.pop_back();
    }
    for (int64_t k : live) ASSERT_NE(index.Find(k, slots), KeyIndex::kNone);
  }
  EXPECT_EQ(index.capacity(), 16u);
}

TEST(KeyIndex, ReserveAndClear) {
  KeyIndex index;
  index.Reserve(1000);
  const size_t capacity = index.capacity();
  EXPECT_GE(capacity * 3, 1000u * 4);
  Slots slots;
  for (int i = 0; i < 1000; ++i) {
    slots.keys.push_back(i);
    index.Insert(i, i);
  }
  EXPECT_EQ(index.capacity(), capacity);  // no growth
  index.Clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.Find(5, slots), KeyIndex::kNone);
  EXPECT_THROW(index.Insert(1, KeyIndex::kMaxSlot + 1), std::out_of_range);
}

}  // namespace
}  // namespace xdl_ec
