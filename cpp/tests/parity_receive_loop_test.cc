#include "xdl_ec/parity_receive_loop.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "parity_link_pair.h"
#include "xdl_ec/delta_forwarder.h"
#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_holder.h"

namespace xdl_ec {
namespace {

using testing::ParityLinkPair;

using testing::Config;
using testing::kK;
using testing::kN;
using testing::kR;

// Server 0's shard and forwarder, its holder `kHolder` remote: each Next() is the serialised batches of one more
// push, as a link takes them.
struct Sender {
  static constexpr int kHolder = 1;
  EmbeddingShard shard{Config()};
  DeltaForwarder forwarder{0, kN, kK, kR, {{"t", shard.block_slots(), shard.layout().bytes()}}};
  uint64_t link = forwarder.SetHolder(kHolder, nullptr);
  std::mt19937 rng{9};
  int64_t seq = 0;

  std::vector<uint8_t> Next(int keys = 6) {
    std::uniform_int_distribution<int64_t> key(0, 100);
    std::normal_distribution<float> grad;
    std::vector<int64_t> k(keys);
    std::vector<float> g(static_cast<size_t>(keys) * 4);
    for (auto& x : k) x = key(rng);
    for (auto& x : g) x = grad(rng);
    ++seq;
    const WorkerSeqs pushes{{0, seq}};  // the Mutation keeps a reference
    DeltaForwarder::Mutation sink(forwarder, "t", pushes);
    shard.Push(k.data(), g.data(), k.size(), seq, &sink);
    forwarder.Flush();
    DeltaForwarder::Delivery d;
    if (!forwarder.Take(kHolder, link, 5000, &d)) throw std::runtime_error("nothing to take");
    forwarder.Ack(kHolder, link, d.batches.back()->seq);
    return SerializeBatches(d.batches);
  }
  ~Sender() { forwarder.Close(); }
};

std::shared_ptr<ParityHolder> Holder() {
  Sender s;
  return std::make_shared<ParityHolder>(
      Sender::kHolder, kN, kK, kR,
      std::map<std::string, size_t>{{"t", s.shard.block_slots() * s.shard.layout().bytes()}});
}

std::vector<uint8_t> Block(ParityHolder& holder, size_t c, size_t record_bytes) {
  std::vector<uint8_t> out(holder.block_bytes("t"));
  holder.ReadBlock("t", c, record_bytes, 0, record_bytes, out.data());
  return out;
}

struct ParityReceiveLoopTest : ::testing::Test {
  Sender sender;
  std::shared_ptr<ParityHolder> holder = Holder();
  std::shared_ptr<ParityHolder> twin = Holder();  // the same batches applied directly
  ParityReceiveLoop loop{holder, 1 << 20, 5.0};
  ParityLinkPair pair;
  std::vector<std::string> warnings;
  bool refusing = false;
  ParityReceiveLoop::Hooks hooks{[this] { return refusing; },
                                 [this](const std::string& line) { warnings.push_back(line); }, testing::kNoSignals};

  std::future<void> Serve(ParityReceiveLoop& on) {
    return std::async(std::launch::async, [this, &on] { on.Serve(*pair.holder, pair.holder_fd, 0, "peer", hooks); });
  }
};

TEST_F(ParityReceiveLoopTest, AppliesEachRequestAsTheHolderWouldAndAnswersHowFarItApplied) {
  auto served = Serve(loop);
  size_t bytes = 0;
  for (int64_t i = 1; i <= 5; ++i) {
    const std::vector<uint8_t> wire = sender.Next();
    bytes += wire.size();
    pair.Request(Sender::kHolder, 0, i - 1, wire);
    EXPECT_EQ(pair.Answer(), std::make_tuple(0, i, std::string()));
    EXPECT_EQ(twin->Apply(0, ParseBatches(wire.data(), wire.size()), i - 1), i);
  }
  EXPECT_EQ(loop.batches_received(), 5u);
  EXPECT_EQ(loop.bytes_received(), bytes);
  const size_t rb = sender.shard.layout().bytes();
  ASSERT_GT(holder->NumBlocks("t"), 0u);
  for (size_t c = 0; c < holder->NumBlocks("t"); ++c) EXPECT_EQ(Block(*holder, c, rb), Block(*twin, c, rb)) << c;
  EXPECT_TRUE(warnings.empty());
  close(pair.sender_fd);
  pair.sender_fd = -1;
  EXPECT_THROW(served.get(), LinkClosed);
}

TEST_F(ParityReceiveLoopTest, ARefusedBatchChangesNothingIsAnsweredAndWarnedAndTheConnectionGoesOn) {
  auto served = Serve(loop);
  const std::vector<uint8_t> first = sender.Next(), second = sender.Next();
  pair.Request(2, 0, 0, first);  // meant for another holder: a stale address
  auto [status, applied, error] = pair.Answer();
  EXPECT_EQ(status, 1);
  EXPECT_NE(error.find("received a batch meant for holder 2"), std::string::npos) << error;
  pair.Request(Sender::kHolder, 0, 0, second);  // seq 2 before seq 1: a gap
  std::tie(status, applied, error) = pair.Answer();
  EXPECT_EQ(status, 1);
  EXPECT_EQ(error.rfind("ValueError: ", 0), 0u) << error;
  pair.Request(Sender::kHolder, 0, 0, {1, 2, 3});  // not batches
  std::tie(status, applied, error) = pair.Answer();
  EXPECT_EQ(status, 1);
  EXPECT_EQ(error.rfind("ValueError: ", 0), 0u) << error;
  EXPECT_EQ(holder->Applied(0), 0);
  pair.Request(Sender::kHolder, 0, 0, first);
  EXPECT_EQ(pair.Answer(), std::make_tuple(0, int64_t{1}, std::string()));
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[0].rfind("refused a batch of peer: server 1 received a batch meant for holder 2", 0), 0u)
      << warnings[0];
  holder->Close();
  pair.Request(Sender::kHolder, 0, 0, second);
  std::tie(status, applied, error) = pair.Answer();
  EXPECT_EQ(error.rfind("HolderClosed: ", 0), 0u) << error;
  close(pair.sender_fd);
  pair.sender_fd = -1;
  EXPECT_THROW(served.get(), LinkClosed);
}

TEST_F(ParityReceiveLoopTest, AnOversizedRequestIsAnsweredWithWhyAndEndsTheConnection) {
  ParityReceiveLoop small(holder, 16, 5.0);
  auto served = Serve(small);
  pair.Request(Sender::kHolder, 0, 0, sender.Next(40));
  const auto [status, applied, error] = pair.Answer();
  EXPECT_EQ(status, 1);
  EXPECT_NE(error.find("exceeds this receiver's max_payload of 16 bytes"), std::string::npos) << error;
  served.get();  // returned
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("refused a request of peer: ", 0), 0u) << warnings[0];
  EXPECT_EQ(holder->Applied(0), 0);
}

TEST_F(ParityReceiveLoopTest, APeerThatBreaksTheFormIsRefusedNamingItAndWhy) {
  auto served = Serve(loop);
  pair.Request(Sender::kHolder, 2, 0, sender.Next());  // the handshake proved sender 0
  try {
    served.get();
    FAIL() << "no LinkRejected";
  } catch (const LinkRejected& e) {
    EXPECT_STREQ(e.what(), "closed the connection of peer: a request names sender 2");
  }
  ParityLinkPair other;
  auto again = std::async(std::launch::async, [&] { loop.Serve(*other.holder, other.holder_fd, 0, "peer", hooks); });
  const uint8_t head[3] = {1, 2, 3};
  other.sender->Send(other.sender_fd, {head, 3}, {}, 5.0, testing::kNoSignals);
  EXPECT_THROW(again.get(), LinkRejected);
  EXPECT_EQ(holder->Applied(0), 0);
}

TEST_F(ParityReceiveLoopTest, AServerGoingDownEndsTheConnectionWithoutApplying) {
  refusing = true;
  auto served = Serve(loop);
  pair.Request(Sender::kHolder, 0, 0, sender.Next());
  served.get();
  EXPECT_EQ(holder->Applied(0), 0);
  EXPECT_EQ(loop.batches_received(), 0u);
}

}  // namespace
}  // namespace xdl_ec
