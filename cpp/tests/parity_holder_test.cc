// ParityHolder and ForwardedBatch: the holder side of the parity protocol (xdl_ec/ft/ec_strategy.py).
// Deltas are real (old XOR new of random records of a simulated cluster's data), routed by ParityRouter,
// and the holder's bytes are checked against ErasureCode::Encode of that data, not against themselves.
#include "xdl_ec/parity_holder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xdl_ec/delta_batch.h"
#include "xdl_ec/erasure_code.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_router.h"
#include "xdl_ec/parity_update.h"
#include "xdl_ec/stripe_layout.h"

namespace xdl_ec {
namespace {

struct TableShape {
  std::string name;
  uint32_t block_slots;
  size_t record_bytes;
  size_t block_bytes() const { return block_slots * record_bytes; }
};

// n servers' data for a few tables, mutated at random; every mutation of a sender becomes its next seq
// and one ForwardedBatch per holder of that sender (empty when the mutation missed its stripes).
class Cluster {
 public:
  static constexpr size_t kCycles = 2;

  Cluster(int n, int k, int r, std::vector<TableShape> tables, uint64_t seed)
      : layout_(n, k, r), code_(k, r), tables_(std::move(tables)), rng_(seed), seqs_(n, 0) {
    for (const TableShape& t : tables_) {
      routers_.emplace_back(layout_, t.block_slots, t.record_bytes);
      data_.emplace_back(n, std::vector<uint8_t>(kCycles * k * t.block_bytes(), 0));
    }
    for (int s = 0; s < n; ++s) {
      std::set<int> holders;
      for (size_t b = 0; b < kCycles * k; ++b) {
        const StripeSlot slot = layout_.DataSlot(s, b);
        for (int i = 0; i < r; ++i) holders.insert(layout_.ParityMember(slot.stripe, i).server);
      }
      holders_.emplace_back(holders.begin(), holders.end());
    }
  }

  const StripeLayout& layout() const { return layout_; }
  const std::vector<int>& holders_of(int sender) const { return holders_[sender]; }
  std::map<std::string, size_t> table_bytes() const {
    std::map<std::string, size_t> out;
    for (const TableShape& t : tables_) out[t.name] = t.block_bytes();
    return out;
  }
  size_t parity_blocks() const { return kCycles * layout_.r(); }

  // The next mutation of `sender`: `count` random distinct slots of every table get new random records.
  std::map<int, BatchPtr> Mutate(int sender, size_t count) {
    const int64_t seq = ++seqs_[sender];
    auto stamp = std::make_shared<const WorkerSeqs>(WorkerSeqs{{0, seq * 2}, {3, seq * 3 + sender}});
    std::map<int, std::shared_ptr<ForwardedBatch>> out;
    for (int h : holders_[sender]) {
      auto batch = std::make_shared<ForwardedBatch>();
      batch->first_seq = batch->seq = seq;
      batch->stamp = stamp;
      out[h] = batch;
    }
    for (size_t t = 0; t < tables_.size(); ++t) {
      const size_t rb = tables_[t].record_bytes;
      std::vector<uint8_t>& records = data_[t][sender];
      const uint32_t slots = static_cast<uint32_t>(records.size() / rb);
      std::vector<uint32_t> order(slots);
      for (uint32_t x = 0; x < slots; ++x) order[x] = x;
      std::shuffle(order.begin(), order.end(), rng_);
      DeltaBatch deltas;
      deltas.record_bytes = rb;
      deltas.slots.assign(order.begin(), order.begin() + std::min<size_t>(count, slots));
      for (uint32_t x : deltas.slots) {
        for (size_t b = 0; b < rb; ++b) {
          const uint8_t fresh = static_cast<uint8_t>(rng_());
          deltas.xor_bytes.push_back(records[x * rb + b] ^ fresh);
          records[x * rb + b] = fresh;
        }
      }
      std::vector<ParityUpdate> updates;
      routers_[t].Route(sender, deltas, &updates);
      for (int h = 0; h < layout_.n(); ++h) {
        if (updates[h].empty()) continue;
        EXPECT_TRUE(out.count(h)) << "router sent to " << h << ", not a holder of " << sender;
        out[h]->updates.emplace_back(tables_[t].name, std::move(updates[h]));
      }
    }
    return {out.begin(), out.end()};
  }

  // ErasureCode::Encode of the current data: parity block c of `table` on server `holder`.
  std::vector<uint8_t> ExpectedParity(const std::string& table, int holder, size_t c) const {
    size_t t = 0;
    while (tables_[t].name != table) ++t;
    const size_t bytes = tables_[t].block_bytes();
    const StripeSlot slot = layout_.ParitySlot(holder, c);
    std::vector<const uint8_t*> data;
    for (int j = 0; j < layout_.k(); ++j) {
      const BlockRef member = layout_.DataMember(slot.stripe, j);
      data.push_back(data_[t][member.server].data() + member.block * bytes);
    }
    std::vector<std::vector<uint8_t>> parity(layout_.r(), std::vector<uint8_t>(bytes));
    std::vector<uint8_t*> outputs;
    for (auto& p : parity) outputs.push_back(p.data());
    code_.Encode(bytes, data.data(), outputs.data());
    return parity[slot.member];
  }

  const std::vector<TableShape>& tables() const { return tables_; }

 private:
  StripeLayout layout_;
  ErasureCode code_;
  std::vector<TableShape> tables_;
  std::mt19937_64 rng_;
  std::vector<int64_t> seqs_;
  std::vector<ParityRouter> routers_;
  std::vector<std::vector<std::vector<uint8_t>>> data_;  // [table][server] slot records
  std::vector<std::vector<int>> holders_;
};

const std::vector<TableShape> kTables = {{"emb", 8, 24}, {"wide", 4, 40}};

std::vector<uint8_t> Block(const ParityHolder& holder, const std::string& table, size_t c, size_t rb) {
  std::vector<uint8_t> out(holder.block_bytes(table));
  holder.ReadBlock(table, c, rb, 0, rb, out.data());
  return out;
}

// Every parity byte of a holder, in table and block order: for "nothing changed" checks.
std::vector<uint8_t> Snapshot(const ParityHolder& holder, const Cluster& cluster) {
  std::vector<uint8_t> out;
  for (const TableShape& t : cluster.tables())
    for (size_t c = 0; c < cluster.parity_blocks(); ++c) {
      const std::vector<uint8_t> b = Block(holder, t.name, c, t.record_bytes);
      out.insert(out.end(), b.begin(), b.end());
    }
  return out;
}

void ExpectEncodes(const ParityHolder& holder, int index, const Cluster& cluster) {
  for (const TableShape& t : cluster.tables())
    for (size_t c = 0; c < cluster.parity_blocks(); ++c)
      EXPECT_EQ(Block(holder, t.name, c, t.record_bytes), cluster.ExpectedParity(t.name, index, c))
          << "holder " << index << " table " << t.name << " block " << c;
}

void ExpectSameBatch(const ForwardedBatch& a, const ForwardedBatch& b) {
  EXPECT_EQ(a.first_seq, b.first_seq);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(*a.stamp, *b.stamp);
  ASSERT_EQ(a.updates.size(), b.updates.size());
  for (size_t u = 0; u < a.updates.size(); ++u) {
    EXPECT_EQ(a.updates[u].first, b.updates[u].first);
    EXPECT_EQ(a.updates[u].second.Serialize(), b.updates[u].second.Serialize());
  }
}

std::vector<BatchPtr> SampleBatches() {
  Cluster cluster(5, 3, 2, kTables, 1);
  std::vector<BatchPtr> batches;
  for (int m = 0; m < 3; ++m) batches.push_back(cluster.Mutate(0, 1000).begin()->second);  // every slot
  auto bare = std::make_shared<ForwardedBatch>();                                          // no updates, empty stamp
  bare->first_seq = bare->seq = 4;
  bare->stamp = std::make_shared<const WorkerSeqs>();
  batches.push_back(bare);
  return batches;
}

std::string MessageOf(const std::vector<uint8_t>& bytes) {
  try {
    ParseBatches(bytes.data(), bytes.size());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ForwardedBatchTest, SerializeParseRoundTrip) {
  const std::vector<BatchPtr> batches = SampleBatches();
  size_t deltas = 0;
  for (const auto& [table, update] : batches[0]->updates) deltas += update.deltas.size();
  EXPECT_GT(deltas, 0u);
  EXPECT_EQ(batches[0]->delta_bytes(), deltas);
  EXPECT_EQ(batches[3]->delta_bytes(), 0u);
  const std::vector<uint8_t> wire = SerializeBatches(batches);
  const std::vector<BatchPtr> back = ParseBatches(wire.data(), wire.size());
  ASSERT_EQ(back.size(), batches.size());
  for (size_t b = 0; b < batches.size(); ++b) ExpectSameBatch(*back[b], *batches[b]);
  EXPECT_EQ(SerializeBatches(back), wire);
  const std::vector<uint8_t> none = SerializeBatches({});
  EXPECT_TRUE(ParseBatches(none.data(), none.size()).empty());
}

TEST(ForwardedBatchTest, MalformedInputIsRefusedWithItsReason) {
  const std::vector<uint8_t> wire = SerializeBatches(SampleBatches());
  std::vector<uint8_t> bad = wire;
  bad[1] = 'Q';
  EXPECT_NE(MessageOf(bad).find("bad magic"), std::string::npos) << MessageOf(bad);
  EXPECT_NE(MessageOf({}).find("bad magic"), std::string::npos);
  for (size_t cut = 4; cut < wire.size(); ++cut) {
    const std::string message = MessageOf(std::vector<uint8_t>(wire.begin(), wire.begin() + cut));
    EXPECT_EQ(message.rfind("ParseBatches: ", 0), 0u) << "cut at " << cut << ": " << message;
  }
  EXPECT_NE(MessageOf(std::vector<uint8_t>(wire.begin(), wire.end() - 1)).find("truncated"), std::string::npos);
  bad = wire;
  bad.push_back(0);
  EXPECT_NE(MessageOf(bad).find("1 trailing bytes"), std::string::npos) << MessageOf(bad);
  // The first nested ParityUpdate's magic: the error names the batch, the table and the update's reason.
  bad = wire;
  const uint8_t xpu[4] = {'X', 'P', 'U', '1'};
  auto at = std::search(bad.begin(), bad.end(), xpu, xpu + 4);
  ASSERT_NE(at, bad.end());
  at[3] = '9';
  const std::string nested = MessageOf(bad);
  EXPECT_NE(nested.find("batch 0 (seq 1) update 0 (table 'emb')"), std::string::npos) << nested;
  EXPECT_NE(nested.find("ParityUpdate::Parse: bad magic"), std::string::npos) << nested;
  // A hostile batch count is refused before anything is reserved for it.
  bad = wire;
  for (int b = 4; b < 12; ++b) bad[b] = 0xFF;
  EXPECT_NE(MessageOf(bad).find("cannot fit"), std::string::npos) << MessageOf(bad);
  // seq 0 is not a delta seq.
  bad = wire;
  std::fill(bad.begin() + 12, bad.begin() + 20, 0);
  EXPECT_NE(MessageOf(bad).find("seqs start at 1"), std::string::npos) << MessageOf(bad);
  std::vector<BatchPtr> null_batch = {nullptr};
  EXPECT_THROW(SerializeBatches(null_batch), std::invalid_argument);
  // What ParseBatches would refuse is refused at the sender already.
  auto zero = std::make_shared<ForwardedBatch>(*SampleBatches()[3]);
  zero->first_seq = zero->seq = 0;
  EXPECT_THROW(SerializeBatches({zero}), std::invalid_argument);
  auto unnamed = std::make_shared<ForwardedBatch>(*SampleBatches()[0]);
  unnamed->updates[0].first.clear();
  EXPECT_THROW(SerializeBatches({unnamed}), std::invalid_argument);
}

TEST(ForwardedBatchTest, ASeqRangeSurvivesTheWireAndAnEmptyOrBackwardRangeIsRefused) {
  auto range = std::make_shared<ForwardedBatch>(*SampleBatches()[0]);
  range->first_seq = 2;
  range->seq = 5;
  const std::vector<uint8_t> wire = SerializeBatches({range});
  const std::vector<BatchPtr> back = ParseBatches(wire.data(), wire.size());
  ASSERT_EQ(1u, back.size());
  ExpectSameBatch(*back[0], *range);
  std::vector<uint8_t> bad = wire;
  bad[12] = 6;  // first_seq 6 > seq 5
  EXPECT_NE(MessageOf(bad).find("batch 0 (seqs 6..5): seqs start at 1 and a range must not be empty"),
            std::string::npos)
      << MessageOf(bad);
  auto backward = std::make_shared<ForwardedBatch>(*range);
  backward->first_seq = 6;
  EXPECT_THROW(SerializeBatches({backward}), std::invalid_argument);
}

class ParityHolderTest : public ::testing::Test {
 protected:
  ParityHolderTest() : cluster_(5, 3, 2, kTables, 7) {}
  // Sender 0's next `count` batches for its first holder, each changing `slots` records per table.
  std::vector<BatchPtr> Next(int count, size_t slots = 12) {
    std::vector<BatchPtr> out;
    for (int m = 0; m < count; ++m) out.push_back(cluster_.Mutate(0, slots).at(holder_index()));
    return out;
  }
  int holder_index() const { return cluster_.holders_of(0).front(); }
  Cluster cluster_;
};

TEST_F(ParityHolderTest, AppliesInOrderSkipsResendsRefusesGaps) {
  ParityHolder holder(holder_index(), 5, 3, 2, cluster_.table_bytes());
  const std::vector<BatchPtr> batches = Next(5);
  EXPECT_EQ(holder.Applied(0), 0);
  EXPECT_TRUE(holder.AppliedAll().empty());
  EXPECT_EQ(holder.Apply(0, {batches[0], batches[1]}, 0), 2);
  EXPECT_EQ(holder.Apply(0, {batches[0], batches[1], batches[2]}, 0), 3);  // 1 and 2 are resends
  EXPECT_EQ(holder.Applied(0), 3);
  EXPECT_EQ(holder.WorkerSeqsOf(0), *batches[2]->stamp);
  const std::vector<uint8_t> at3 = Snapshot(holder, cluster_);
  try {
    holder.Apply(0, {batches[4]}, 0);
    ADD_FAILURE() << "a gap was applied";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(
        m.find("batch seq 5 from server 0 on parity holder " + std::to_string(holder_index()) + " arrived after seq 3"),
        std::string::npos)
        << m;
  }
  EXPECT_EQ(holder.Applied(0), 3);
  EXPECT_EQ(Snapshot(holder, cluster_), at3);
  // Batches before the gap stay applied, the rest do not.
  const std::vector<BatchPtr> later = Next(2);  // seqs 6, 7
  EXPECT_THROW(holder.Apply(0, {batches[3], batches[3], batches[4], later[1], later[0]}, 0), std::invalid_argument);
  EXPECT_EQ(holder.Applied(0), 5);
  EXPECT_EQ(holder.WorkerSeqsOf(0), *batches[4]->stamp);
  EXPECT_EQ(holder.AppliedAll(), (std::map<int32_t, int64_t>{{0, 5}}));
  EXPECT_THROW(holder.Apply(-1, {}, 0), std::invalid_argument);
  EXPECT_THROW(holder.Apply(0, {nullptr}, 0), std::invalid_argument);
}

TEST_F(ParityHolderTest, ABadBatchChangesNothing) {
  ParityHolder holder(holder_index(), 5, 3, 2, cluster_.table_bytes());
  holder.Apply(0, Next(1), 0);
  const std::vector<uint8_t> before = Snapshot(holder, cluster_);
  const BatchPtr good = Next(1, 1000)[0];  // every slot: both tables reach this holder
  ASSERT_EQ(good->updates.size(), 2u);
  // An unknown table after a known one.
  auto unknown = std::make_shared<ForwardedBatch>(*good);
  unknown->updates[1].first = "nope";
  try {
    holder.Apply(0, {unknown}, 0);
    ADD_FAILURE() << "an unknown table was applied";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no parity of table 'nope' (it has 'emb', 'wide')"), std::string::npos)
        << e.what();
  }
  // A bad entry in the second update: the first one's bytes are XOR-ed out again.
  auto bad_entry = std::make_shared<ForwardedBatch>(*good);
  bad_entry->updates[1].second.entries.back().parity_member = 2;  // r = 2
  EXPECT_THROW(holder.Apply(0, {bad_entry}, 0), std::invalid_argument);
  auto no_stamp = std::make_shared<ForwardedBatch>(*good);
  no_stamp->stamp = nullptr;
  EXPECT_THROW(holder.Apply(0, {no_stamp}, 0), std::invalid_argument);
  EXPECT_EQ(holder.Applied(0), 1);
  EXPECT_EQ(Snapshot(holder, cluster_), before);
  EXPECT_EQ(holder.Apply(0, {good}, 0), 2);
  ExpectEncodes(holder, holder_index(), cluster_);
}

struct Code {
  int n, k, r;
};
class ParityHolderEncodeTest : public ::testing::TestWithParam<Code> {};

TEST_P(ParityHolderEncodeTest, ParityEqualsTheEncodingOfTheData) {
  const Code g = GetParam();
  Cluster cluster(g.n, g.k, g.r, kTables, 3);
  std::vector<std::unique_ptr<ParityHolder>> holders;
  for (int h = 0; h < g.n; ++h)
    holders.push_back(std::make_unique<ParityHolder>(h, g.n, g.k, g.r, cluster.table_bytes()));
  std::mt19937 rng(5);
  for (int round = 0; round < 30; ++round) {
    const int sender = static_cast<int>(rng() % g.n);
    for (const auto& [h, batch] : cluster.Mutate(sender, 1 + rng() % 12))
      EXPECT_EQ(holders[h]->Apply(sender, {batch}, 0), batch->seq);
  }
  for (int h = 0; h < g.n; ++h) ExpectEncodes(*holders[h], h, cluster);
  size_t bytes = 0;
  for (int h = 0; h < g.n; ++h) bytes += holders[h]->Bytes();
  EXPECT_GT(bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Codes, ParityHolderEncodeTest, ::testing::Values(Code{3, 2, 1}, Code{5, 3, 2}, Code{7, 4, 3}));

TEST_F(ParityHolderTest, RollbackRestoresAnEarlierSeqExactly) {
  ParityHolder holder(holder_index(), 5, 3, 2, cluster_.table_bytes());
  const std::vector<BatchPtr> batches = Next(6);
  holder.Apply(0, {batches[0], batches[1]}, 0);
  const std::vector<uint8_t> at2 = Snapshot(holder, cluster_);
  holder.Apply(0, {batches[2], batches[3], batches[4], batches[5]}, 1);  // durable 1: seq 1 leaves the undo log
  const std::vector<uint8_t> at6 = Snapshot(holder, cluster_);
  ASSERT_NE(at2, at6);
  EXPECT_EQ(holder.Rollback(0, 2), *batches[1]->stamp);
  EXPECT_EQ(holder.Applied(0), 2);
  EXPECT_EQ(holder.WorkerSeqsOf(0), *batches[1]->stamp);
  EXPECT_EQ(Snapshot(holder, cluster_), at2);
  // The rolled-back seqs come again (a rebuilt sender replays them): the same bytes as before.
  EXPECT_EQ(holder.Apply(0, {batches[2], batches[3], batches[4], batches[5]}, 1), 6);
  EXPECT_EQ(Snapshot(holder, cluster_), at6);
  ExpectEncodes(holder, holder_index(), cluster_);
  // Rolling back to the durable seq returns the stamp of the last trimmed batch.
  EXPECT_EQ(holder.Rollback(0, 1), *batches[0]->stamp);
  EXPECT_EQ(holder.Applied(0), 1);
  // At or above applied: nothing to undo.
  EXPECT_EQ(holder.Rollback(0, 4), *batches[0]->stamp);
  EXPECT_EQ(holder.Applied(0), 1);
  EXPECT_TRUE(holder.Rollback(9, 0).empty());  // a sender never seen
  EXPECT_THROW(holder.Rollback(0, -1), std::invalid_argument);
}

TEST_F(ParityHolderTest, RollbackBeyondTheUndoLogIsRefusedAndChangesNothing) {
  ParityHolder holder(holder_index(), 5, 3, 2, cluster_.table_bytes());
  const std::vector<BatchPtr> batches = Next(5);
  holder.Apply(0, batches, 3);  // undo log: 4, 5
  const std::vector<uint8_t> before = Snapshot(holder, cluster_);
  try {
    holder.Rollback(0, 2);
    ADD_FAILURE() << "rolled back past the durable watermark";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("undo log starts at seq 4"), std::string::npos) << e.what();
  }
  EXPECT_EQ(holder.Applied(0), 5);
  EXPECT_EQ(holder.WorkerSeqsOf(0), *batches[4]->stamp);
  EXPECT_EQ(Snapshot(holder, cluster_), before);
  // Durable trimming goes on with later applies; the empty log still reaches its own applied seq.
  holder.Apply(0, {}, 5);
  EXPECT_THROW(holder.Rollback(0, 4), std::invalid_argument);
  EXPECT_EQ(holder.Rollback(0, 5), *batches[4]->stamp);
  EXPECT_EQ(Snapshot(holder, cluster_), before);
}

TEST_F(ParityHolderTest, ResetSenderStartsAFreshStream) {
  ParityHolder holder(holder_index(), 5, 3, 2, cluster_.table_bytes());
  holder.Apply(0, Next(3), 0);
  const WorkerSeqs seqs = {{1, 40}, {2, 7}};
  holder.ResetSender(0, 10, seqs);
  EXPECT_EQ(holder.Applied(0), 10);
  EXPECT_EQ(holder.WorkerSeqsOf(0), seqs);
  EXPECT_THROW(holder.Rollback(0, 9), std::invalid_argument);  // the undo log was cleared
  EXPECT_EQ(holder.Rollback(0, 10), seqs);
  EXPECT_EQ(holder.Apply(0, Next(1), 0), 10);  // seq 4: taken for a resend
  auto next = std::make_shared<ForwardedBatch>(*Next(1)[0]);
  next->first_seq = next->seq = 12;
  EXPECT_THROW(holder.Apply(0, {next}, 0), std::invalid_argument);
  next->first_seq = next->seq = 11;
  EXPECT_EQ(holder.Apply(0, {next}, 0), 11);
  EXPECT_THROW(holder.ResetSender(0, -1, {}), std::invalid_argument);
  EXPECT_THROW(holder.ResetSender(-1, 0, {}), std::invalid_argument);
}

TEST_F(ParityHolderTest, WriteBlockIfComparesEveryExpectedSender) {
  ParityHolder holder(holder_index(), 5, 3, 2, cluster_.table_bytes());
  holder.Apply(0, Next(2), 0);
  const size_t bytes = holder.block_bytes("emb");
  const std::vector<uint8_t> fresh(bytes, 0xA5);
  const std::vector<uint8_t> before = Block(holder, "emb", 1, 24);
  EXPECT_FALSE(holder.WriteBlockIf("emb", 1, fresh.data(), {{0, 1}}));
  EXPECT_FALSE(holder.WriteBlockIf("emb", 1, fresh.data(), {{0, 2}, {4, 1}}));  // sender 4 never seen: 0
  EXPECT_EQ(Block(holder, "emb", 1, 24), before);
  EXPECT_TRUE(holder.WriteBlockIf("emb", 1, fresh.data(), {{0, 2}, {4, 0}}));
  EXPECT_EQ(Block(holder, "emb", 1, 24), fresh);
  EXPECT_THROW(holder.WriteBlockIf("nope", 1, fresh.data(), {}), std::invalid_argument);
  holder.WriteBlock("wide", 9, std::vector<uint8_t>(holder.block_bytes("wide"), 3).data());
  EXPECT_EQ(holder.NumBlocks("wide"), 10u);
  EXPECT_EQ(Block(holder, "wide", 9, 40), std::vector<uint8_t>(160, 3));
}

TEST_F(ParityHolderTest, ReadBlockColumnsAndTheirVersions) {
  ParityHolder holder(holder_index(), 5, 3, 2, cluster_.table_bytes());
  holder.Apply(0, Next(3, 1000), 0);
  holder.ResetSender(2, 4, {});
  size_t c = 0;  // a block holding sender 0's parity
  while (c < cluster_.parity_blocks() && Block(holder, "wide", c, 40) == std::vector<uint8_t>(160, 0)) ++c;
  ASSERT_LT(c, cluster_.parity_blocks());
  const std::vector<uint8_t> whole = Block(holder, "wide", c, 40);
  std::vector<uint8_t> columns(holder.ReadBlockBytes("wide", 40, 8, 16));
  ASSERT_EQ(columns.size(), 4u * 16);
  EXPECT_EQ(holder.ReadBlock("wide", c, 40, 8, 16, columns.data()), (std::map<int32_t, int64_t>{{0, 3}, {2, 4}}));
  for (size_t x = 0; x < 4; ++x)
    EXPECT_EQ(0, std::memcmp(columns.data() + x * 16, whole.data() + x * 40 + 8, 16)) << "record " << x;
  // Blocks never written read as zeros.
  std::vector<uint8_t> far(holder.block_bytes("emb"), 1);
  holder.ReadBlock("emb", 1000, 24, 0, 24, far.data());
  EXPECT_EQ(far, std::vector<uint8_t>(far.size(), 0));
  EXPECT_THROW(holder.ReadBlock("nope", 0, 40, 0, 40, columns.data()), std::invalid_argument);
  EXPECT_THROW(holder.ReadBlockBytes("wide", 0, 0, 1), std::invalid_argument);
  EXPECT_THROW(holder.ReadBlockBytes("wide", 30, 0, 1), std::invalid_argument);  // 160 % 30 != 0
  EXPECT_THROW(holder.ReadBlockBytes("wide", 40, 0, 0), std::invalid_argument);
  EXPECT_THROW(holder.ReadBlockBytes("wide", 40, 30, 11), std::invalid_argument);
  EXPECT_THROW(holder.ReadBlock("wide", 0, 40, 0, 40, nullptr), std::invalid_argument);
}

TEST_F(ParityHolderTest, ClosedHolderRefusesApplyButStillReads) {
  ParityHolder holder(holder_index(), 5, 3, 2, cluster_.table_bytes());
  holder.Apply(0, Next(1), 0);
  const std::vector<uint8_t> before = Snapshot(holder, cluster_);
  EXPECT_FALSE(holder.closed());
  holder.Close();
  EXPECT_TRUE(holder.closed());
  try {
    holder.Apply(0, Next(1), 0);
    ADD_FAILURE() << "a closed holder applied";
  } catch (const HolderClosed& e) {
    EXPECT_EQ(e.index(), holder_index());
    EXPECT_NE(std::string(e.what()).find("is closed"), std::string::npos);
  }
  EXPECT_EQ(holder.Applied(0), 1);
  EXPECT_EQ(Snapshot(holder, cluster_), before);
}

TEST(ParityHolderConstructionTest, RefusesBadArguments) {
  EXPECT_THROW(ParityHolder(0, 5, 0, 1, {{"t", 8}}), std::invalid_argument);
  EXPECT_THROW(ParityHolder(0, 9, 4, 5, {{"t", 8}}), std::invalid_argument);  // ISA-L: k + r <= 8 at r = 5
  EXPECT_THROW(ParityHolder(0, 4, 4, 1, {{"t", 8}}), std::invalid_argument);  // n < k + r
  EXPECT_THROW(ParityHolder(0, 5, 4, 1, {{"", 8}}), std::invalid_argument);
  EXPECT_THROW(ParityHolder(0, 5, 4, 1, {{"t", 0}}), std::invalid_argument);
  EXPECT_THROW(ParityHolder(-1, 5, 4, 1, {{"t", 8}}), std::invalid_argument);
  EXPECT_THROW(ParityHolder(5, 5, 4, 1, {{"t", 8}}), std::invalid_argument);
  ParityHolder holder(2, 5, 4, 1, {{"t", 8}});
  EXPECT_EQ(holder.index(), 2);
  EXPECT_EQ(holder.Bytes(), 0u);
  EXPECT_EQ(holder.NumBlocks("t"), 0u);
  EXPECT_THROW(holder.block_bytes("u"), std::invalid_argument);
}

TEST(ParityHolderThreadsTest, ConcurrentSendersGiveTheSequentialBytes) {
  const int n = 5, k = 3, r = 2;
  Cluster cluster(n, k, r, kTables, 13);
  // Every sender's stream for holder 0, made up front; each stream goes in from its own thread.
  std::map<int, std::vector<BatchPtr>> streams;
  for (int round = 0; round < 40; ++round)
    for (int sender = 1; sender < n; ++sender)
      for (const auto& [h, batch] : cluster.Mutate(sender, 5))
        if (h == 0) streams[sender].push_back(batch);
  ASSERT_GE(streams.size(), 2u);
  ParityHolder sequential(0, n, k, r, cluster.table_bytes());
  for (const auto& [sender, stream] : streams) sequential.Apply(sender, stream, 0);
  ParityHolder concurrent(0, n, k, r, cluster.table_bytes());
  std::vector<std::thread> threads;
  for (const auto& [sender, stream] : streams) {
    threads.emplace_back([&concurrent, sender = sender, &stream = stream] {
      // Chunks of 1..3 with one batch of every chunk resent: the holder skips it.
      for (size_t at = 0; at < stream.size();) {
        const size_t end = std::min(stream.size(), at + 1 + at % 3);
        std::vector<BatchPtr> chunk(stream.begin() + (at > 0 ? at - 1 : 0), stream.begin() + end);
        concurrent.Apply(sender, chunk, static_cast<int64_t>(at) - 4);
        at = end;
      }
    });
  }
  // A reader meanwhile: the versions it gets never go backwards.
  std::map<int32_t, int64_t> last;
  std::vector<uint8_t> out(concurrent.block_bytes("emb"));
  for (int i = 0; i < 200; ++i) {
    const auto applied = concurrent.ReadBlock("emb", 0, 24, 0, 24, out.data());
    for (const auto& [sender, seq] : applied) EXPECT_GE(seq, last[sender]);
    last = applied;
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(concurrent.AppliedAll(), sequential.AppliedAll());
  EXPECT_EQ(Snapshot(concurrent, cluster), Snapshot(sequential, cluster));
  ExpectEncodes(concurrent, 0, cluster);
}

}  // namespace
}  // namespace xdl_ec

namespace xdl_ec {
namespace {

// The batches of seqs [first, last] as one coalesced range: their updates together (XOR commutes, so the
// parity is the same as applying them one by one) with the last one's stamp.
BatchPtr Range(const std::vector<BatchPtr>& batches) {
  auto range = std::make_shared<ForwardedBatch>();
  range->first_seq = batches.front()->first_seq;
  range->seq = batches.back()->seq;
  range->stamp = batches.back()->stamp;
  for (const BatchPtr& b : batches) range->updates.insert(range->updates.end(), b->updates.begin(), b->updates.end());
  return range;
}

TEST_F(ParityHolderTest, RangesApplyWholeAndRollBackOnlyToTheirBoundaries) {
  ParityHolder holder(holder_index(), 5, 3, 2, cluster_.table_bytes());
  const std::vector<uint8_t> empty = Snapshot(holder, cluster_);
  const std::vector<BatchPtr> first = Next(3), later = Next(2);  // seqs 1..3 as one range, then 4 and 5
  EXPECT_THROW(holder.Apply(0, {Range({first[1], first[2]})}, 0), std::invalid_argument);  // starts at 2: a gap
  EXPECT_EQ(holder.Applied(0), 0);
  EXPECT_EQ(holder.Apply(0, {Range(first)}, 0), 3);
  EXPECT_EQ(holder.WorkerSeqsOf(0), *first[2]->stamp);
  const std::vector<uint8_t> at3 = Snapshot(holder, cluster_);
  EXPECT_EQ(holder.Apply(0, {Range(first), later[0], later[1]}, 0), 5);  // the range again: a resend
  ExpectEncodes(holder, holder_index(), cluster_);
  const std::vector<uint8_t> at5 = Snapshot(holder, cluster_);
  try {
    holder.Rollback(0, 2);
    ADD_FAILURE() << "rolled back into a range";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("inside the coalesced batch of seqs 1..3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(holder.Applied(0), 5);  // nothing changed
  EXPECT_EQ(Snapshot(holder, cluster_), at5);
  EXPECT_EQ(holder.Rollback(0, 3), *first[2]->stamp);
  EXPECT_EQ(Snapshot(holder, cluster_), at3);
  EXPECT_EQ(holder.Rollback(0, 0), WorkerSeqs{});
  EXPECT_EQ(Snapshot(holder, cluster_), empty);
  // A durable watermark inside a range keeps the range (it may still be rolled back whole).
  EXPECT_EQ(holder.Apply(0, {Range(first)}, 2), 3);
  EXPECT_EQ(holder.Rollback(0, 0), WorkerSeqs{});
}

}  // namespace
}  // namespace xdl_ec
