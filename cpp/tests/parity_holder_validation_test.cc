// ParityHolder takes a batch only when it agrees with the stripe layout (parity_holder.h): one test per rule.
// Batches are routed by ParityRouter from real slot deltas, then altered the way a confused or hostile peer
// would; every refusal must leave the holder's bytes and seqs as they were.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "xdl_ec/delta_batch.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_holder.h"
#include "xdl_ec/parity_router.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec {
namespace {

constexpr int kN = 7, kK = 3, kR = 2;  // holder h protects senders (h - 1 .. h - 4) mod 7, not (h - 5), (h - 6)
constexpr uint32_t kSlots = 4;
constexpr size_t kRecord = 16;

class ValidationTest : public ::testing::Test {
 protected:
  ValidationTest() : layout_(kN, kK, kR), router_(layout_, kSlots, kRecord), holder_(kHolder, kN, kK, kR, Tables()) {}
  static constexpr int kHolder = 4;
  static std::map<std::string, size_t> Tables() { return {{"t", kSlots * kRecord}}; }

  // Sender's batch of seq `seq` for `holder` changing `slots` (random deltas); may carry no update.
  BatchPtr Batch(int sender, int holder, const std::vector<uint32_t>& slots, int64_t seq) {
    DeltaBatch deltas;
    deltas.record_bytes = kRecord;
    deltas.slots = slots;
    for (size_t i = 0; i < slots.size() * kRecord; ++i) deltas.xor_bytes.push_back(static_cast<uint8_t>(rng_() | 1));
    std::vector<ParityUpdate> updates;
    router_.Route(sender, deltas, &updates);
    auto batch = std::make_shared<ForwardedBatch>();
    batch->first_seq = batch->seq = seq;
    batch->stamp = std::make_shared<const WorkerSeqs>(WorkerSeqs{{0, seq}});
    if (!updates[holder].empty()) batch->updates.emplace_back("t", std::move(updates[holder]));
    return batch;
  }
  // A batch of sender 0 (protected by holder 4: d = 4) that reaches the holder, seq `seq`.
  std::shared_ptr<ForwardedBatch> Reaching(int64_t seq, std::vector<uint32_t> slots = {}) {
    if (slots.empty())
      for (uint32_t s = 0; s < kSlots * kK; ++s) slots.push_back(s);  // cycle 0: every data block of sender 0
    auto batch = std::make_shared<ForwardedBatch>(*Batch(0, kHolder, slots, seq));
    EXPECT_FALSE(batch->updates.empty()) << "no entry of sender 0 reached holder " << kHolder;
    return batch;
  }
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> out;
    for (size_t c = 0; c < holder_.NumBlocks("t"); ++c) {
      std::vector<uint8_t> block(kSlots * kRecord);
      holder_.ReadBlock("t", c, kRecord, 0, kRecord, block.data());
      out.insert(out.end(), block.begin(), block.end());
    }
    return out;
  }
  // Apply must throw BatchRefused mentioning `why` and change nothing.
  void ExpectRefused(int sender, const BatchPtr& batch, const std::string& why) {
    const std::vector<uint8_t> before = Bytes();
    const auto applied = holder_.AppliedAll();
    const size_t allocated = holder_.Bytes();
    try {
      holder_.Apply(sender, {batch}, 0);
      ADD_FAILURE() << "applied a batch that breaks: " << why;
    } catch (const BatchRefused& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
    EXPECT_EQ(before, Bytes());
    EXPECT_EQ(applied, holder_.AppliedAll());
    EXPECT_EQ(allocated, holder_.Bytes());
  }

  StripeLayout layout_;
  ParityRouter router_;
  ParityHolder holder_;
  std::mt19937_64 rng_{5};
};

TEST_F(ValidationTest, ARoutedBatchOfAProtectedSenderApplies) {
  EXPECT_TRUE(holder_.Protects(0));
  EXPECT_EQ(1, holder_.Apply(0, {Reaching(1)}, 0));
}

TEST_F(ValidationTest, ItsOwnIndexAsSenderIsRefused) {
  EXPECT_FALSE(holder_.Protects(kHolder));
  ExpectRefused(kHolder, Reaching(1), "refused batches from itself");
}

TEST_F(ValidationTest, ASenderItProtectsNoStripeOfIsRefused) {
  // (4 - 6) mod 7 = 5 and (4 - 5) mod 7 = 6: outside [1, k + r)
  for (int stranger : {5, 6, 7, 1000}) {
    EXPECT_FALSE(holder_.Protects(stranger));
    ExpectRefused(stranger, Reaching(1), "protects no stripe of that server");
  }
  EXPECT_EQ(0, holder_.Applied(7));
}

TEST_F(ValidationTest, AnUpdateNamingAnotherSourceOrHolderIsRefused) {
  auto source = Reaching(1);
  source->updates[0].second.source = 1;  // holder 4 protects server 1 too, but this batch comes from server 0
  ExpectRefused(0, source, "names server 1 as its source");
  auto holder = Reaching(1);
  holder->updates[0].second.holder = 3;
  ExpectRefused(0, holder, "meant for parity holder 3");
}

TEST_F(ValidationTest, AnEntryDisagreeingWithTheLayoutIsRefused) {
  auto data = Reaching(1);
  ParityUpdate::Entry& d = data->updates[0].second.entries[0];
  d.data_member = static_cast<uint8_t>((d.data_member + 1) % kK);  // another server's position in that stripe
  ExpectRefused(0, data, "data member");
  auto parity = Reaching(1);
  ParityUpdate::Entry& p = parity->updates[0].second.entries[0];
  p.parity_member = static_cast<uint8_t>((p.parity_member + 1) % kR);
  ExpectRefused(0, parity, "is parity member");
  auto block = Reaching(1);
  block->updates[0].second.entries[0].parity_block ^= 1;  // the other parity row's block: member mismatch
  ExpectRefused(0, block, "does not match the layout");
}

TEST_F(ValidationTest, AnEntryOffARecordBoundaryOrOfAnotherRecordSizeIsRefused) {
  auto offset = Reaching(1);
  offset->updates[0].second.entries[0].offset += 1;
  ExpectRefused(0, offset, "not at a record boundary");
  auto size = Reaching(1);
  ParityUpdate& u = size->updates[0].second;
  u.record_bytes = 24;  // does not divide the 64-byte blocks
  u.deltas.resize(u.entries.size() * 24);
  ExpectRefused(0, size, "do not divide");
}

TEST_F(ValidationTest, ABlockFarBeyondTheExtentIsRefusedWithoutAllocating) {
  for (uint64_t far : {uint64_t{100000000}, uint64_t{1} << 36, uint64_t{1} << 62}) {
    auto batch = Reaching(1);
    ParityUpdate::Entry& e = batch->updates[0].second.entries[0];
    e.parity_block = far / kR * kR + e.parity_member;  // the right member, the wrong cycle
    // keep the stripe's data member at the sender: the cycle alone is wrong
    ExpectRefused(0, batch, "beyond the table's extent");
  }
  EXPECT_EQ(0u, holder_.Bytes());
  EXPECT_EQ(0u, holder_.NumBlocks("t"));
}

TEST_F(ValidationTest, GrowthIsWhatTheSendersInsertsJustify) {
  // Sender 0 fills its first 4 cycles in order (12 data blocks): every cycle's protected block arrives whole.
  std::vector<uint32_t> filled;
  for (uint32_t s = 0; s < 4 * kK * kSlots; ++s) filled.push_back(s);
  EXPECT_EQ(1, holder_.Apply(0, {Reaching(1, filled)}, 0));
  // One entry in cycle 6: the extent is 4 cycles (0..3), cycle 4 may be partly filled already (the protected
  // block need not be the cycle's first), so a batch with fewer than block_slots entries reaches cycle 5 at most.
  const uint32_t cycle6 = 6 * kK * kSlots;
  std::vector<uint32_t> far;
  for (uint32_t s = cycle6; s < cycle6 + kK * kSlots; ++s) far.push_back(s);
  auto jump = Batch(0, kHolder, far, 2);
  ASSERT_FALSE(jump->updates.empty());
  auto one = std::make_shared<ForwardedBatch>(*jump);
  ParityUpdate& u = one->updates[0].second;
  u.entries.resize(1);
  u.deltas.resize(kRecord);
  ExpectRefused(0, one, "beyond the table's extent");
  // Cycle 4, the next one: accepted.
  std::vector<uint32_t> next;
  for (uint32_t s = 4 * kK * kSlots; s < 5 * kK * kSlots; ++s) next.push_back(s);
  EXPECT_EQ(2, holder_.Apply(0, {Reaching(2, next)}, 0));
  // Declared by the driver (a replacement's rebuild extent): far blocks are then in range.
  holder_.SetExtent("t", 10 * kR);
  EXPECT_EQ(3, holder_.Apply(0, {Batch(0, kHolder, far, 3)}, 0));
  EXPECT_THROW(holder_.SetExtent("nope", 1), std::invalid_argument);
}

TEST_F(ValidationTest, ARefusedBatchLeavesTheEarlierOnesAppliedAndChangesNothingElse) {
  EXPECT_EQ(1, holder_.Apply(0, {Reaching(1)}, 0));
  const std::vector<uint8_t> at1 = Bytes();
  auto good = Reaching(2);
  auto bad = Reaching(3);
  bad->updates[0].second.entries.back().data_member =
      static_cast<uint8_t>((bad->updates[0].second.entries.back().data_member + 1) % kK);
  EXPECT_THROW(holder_.Apply(0, {good, bad}, 0), BatchRefused);
  EXPECT_EQ(2, holder_.Applied(0));
  EXPECT_NE(at1, Bytes());  // seq 2 is in
  const std::vector<uint8_t> at2 = Bytes();
  EXPECT_THROW(holder_.Apply(0, {bad}, 0), BatchRefused);
  EXPECT_EQ(at2, Bytes());
}

TEST_F(ValidationTest, ResetSenderOfAServerItDoesNotProtectIsRefused) {
  EXPECT_THROW(holder_.ResetSender(5, 3, {}), std::invalid_argument);
  EXPECT_THROW(holder_.ResetSender(kHolder, 3, {}), std::invalid_argument);
  holder_.ResetSender(0, 3, {});
  EXPECT_EQ(3, holder_.Applied(0));
}

}  // namespace
}  // namespace xdl_ec
