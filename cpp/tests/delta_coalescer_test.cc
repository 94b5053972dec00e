#include "xdl_ec/delta_coalescer.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <stdexcept>
#include <vector>

namespace xdl_ec {
namespace {

DeltaBatch Batch(size_t record_bytes, const std::vector<uint32_t>& slots, std::mt19937& rng) {
  DeltaBatch b;
  b.record_bytes = record_bytes;
  b.slots = slots;
  for (size_t i = 0; i < slots.size() * record_bytes; ++i) b.xor_bytes.push_back(static_cast<uint8_t>(rng()));
  return b;
}

TEST(DeltaCoalescer, EachSlotOnceWithTheXorOfItsDeltasInFirstAppearanceOrder) {
  std::mt19937 rng(5);
  const size_t rb = 13;  // not a multiple of anything: the merge is byte-wise
  std::vector<DeltaBatch> parts;
  std::uniform_int_distribution<uint32_t> slot(0, 300);
  for (int p = 0; p < 6; ++p) {
    std::map<uint32_t, bool> distinct;
    while (distinct.size() < 120) distinct[slot(rng)] = true;
    std::vector<uint32_t> slots;
    for (const auto& [x, _] : distinct) slots.push_back(x);
    std::shuffle(slots.begin(), slots.end(), rng);
    parts.push_back(Batch(rb, slots, rng));
  }
  parts.push_back(Batch(rb, {0xFFFFFFFFu, 7}, rng));  // the largest slot value is a slot like any other
  std::vector<uint32_t> order;
  std::map<uint32_t, std::vector<uint8_t>> expected;
  for (const DeltaBatch& part : parts)
    for (size_t e = 0; e < part.size(); ++e) {
      auto [it, fresh] = expected.emplace(part.slots[e], std::vector<uint8_t>(rb, 0));
      if (fresh) order.push_back(part.slots[e]);
      for (size_t b = 0; b < rb; ++b) it->second[b] ^= part.delta(e)[b];
    }
  DeltaCoalescer coalescer;
  DeltaCoalescer::Merged merged;
  for (int again = 0; again < 2;
       ++again) {  // the slot table is reused between calls (on fresh copies: it merges in place)
    std::vector<DeltaBatch> copies = parts;
    std::vector<DeltaBatch*> pointers;
    for (DeltaBatch& part : copies) pointers.push_back(&part);
    coalescer.Coalesce(pointers, &merged);
    EXPECT_EQ(merged.record_bytes, rb);
    ASSERT_EQ(merged.slots, order);
    ASSERT_EQ(merged.deltas.size(), order.size());
    for (size_t e = 0; e < merged.size(); ++e) {
      EXPECT_EQ(std::vector<uint8_t>(merged.deltas[e], merged.deltas[e] + rb), expected[merged.slots[e]])
          << "slot " << merged.slots[e];
      // it points into the part where the slot first appeared: nothing was copied
      bool inside = false;
      for (const DeltaBatch& part : copies)
        inside |= merged.deltas[e] >= part.xor_bytes.data() &&
                  merged.deltas[e] < part.xor_bytes.data() + part.xor_bytes.size();
      EXPECT_TRUE(inside);
    }
  }
  EXPECT_LT(merged.size(), 7 * 120u);  // the parts overlap: fewer deltas than they held
}

TEST(DeltaCoalescer, EmptyPartsAreSkippedAndMismatchedOnesRefusedWithNothingWritten) {
  std::mt19937 rng(1);
  DeltaCoalescer coalescer;
  DeltaCoalescer::Merged merged;
  DeltaBatch empty;
  coalescer.Coalesce({&empty, &empty}, &merged);
  EXPECT_EQ(merged.size(), 0u);
  DeltaBatch a = Batch(4, {1, 2}, rng), a_again = a, b = Batch(5, {1}, rng);
  const DeltaBatch a_before = a;
  try {
    coalescer.Coalesce({&a, &a_again, &empty, &b}, &merged);
    ADD_FAILURE() << "merged records of different sizes";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("part 3 has record_bytes=5"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.xor_bytes, a_before.xor_bytes);  // refused before any byte was merged
  DeltaBatch short_bytes = a;
  short_bytes.xor_bytes.pop_back();
  EXPECT_THROW(coalescer.Coalesce({&a, &short_bytes}, &merged), std::invalid_argument);
  EXPECT_THROW(coalescer.Coalesce({nullptr}, &merged), std::invalid_argument);
  EXPECT_EQ(a.xor_bytes, a_before.xor_bytes);
}

}  // namespace
}  // namespace xdl_ec
