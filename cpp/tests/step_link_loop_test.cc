#include "xdl_ec/step_link_loop.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <future>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "xdl_ec/delta_forwarder.h"
#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/push_pull_message.h"

namespace xdl_ec {
namespace {

using Failure = StepLinkLoop::Handoff::Failure;
const std::function<void()> kNoSignals = [] {};
constexpr uint64_t kMaxPayload = 1 << 20;

ShardConfig Config() {
  ShardConfig c;
  c.dim = 2;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.learning_rate = 0.1f;
  c.seed = 5;
  c.block_slots = 4;
  return c;
}

std::array<uint8_t, 32> Key() {
  std::array<uint8_t, 32> k;
  std::iota(k.begin(), k.end(), 3);
  return k;
}

// A worker's end of a direct link to a server whose end StepLinkLoop serves (on another thread), over a socket
// pair, each end with its own LinkSession under one key.
struct Link {
  int worker_fd = -1, server_fd = -1;
  std::array<uint8_t, 32> key = Key();
  LinkSession worker{key.data(), key.size(), LinkSession::Mac::kAesGmac, true};
  LinkSession server{key.data(), key.size(), LinkSession::Mac::kAesGmac, false};

  Link() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw std::runtime_error("socketpair failed");
    worker_fd = fds[0], server_fd = fds[1];
  }
  ~Link() {
    if (worker_fd >= 0) close(worker_fd);
    if (server_fd >= 0) close(server_fd);
  }
  std::future<StepLinkLoop::Handoff> Serve(ShardServer& shards) {
    return std::async(std::launch::async, [this, &shards] {
      return StepLinkLoop::Serve(shards, server, server_fd, kMaxPayload, kNoSignals);
    });
  }
  void Send(const std::string& head, const std::vector<LinkSession::Span>& buffers) {
    worker.Send(worker_fd, {reinterpret_cast<const uint8_t*>(head.data()), head.size()}, buffers, 5.0, kNoSignals);
  }
  LinkSession::Message Receive() { return worker.Receive(worker_fd, 5.0, kMaxPayload, kNoSignals); }
};

// One worker's push_pull: a push of three keys (one repeated) at `seq`, a pull of two.
struct Step {
  std::vector<int64_t> keys{1, 2, 1};
  std::vector<float> grads{0.5f, -1, 2, 3, 0.25f, 1};
  std::vector<int64_t> pull_keys{2, 8};
  PushPullRequest request;

  explicit Step(int64_t seq, int32_t participants = 1) {
    request.step = seq;
    request.worker = 3;
    request.participants = participants;
    request.parts.push_back({"t", seq, keys.data(), keys.size(), grads.data(), 2, nullptr});
    request.pulls.push_back({"t", pull_keys.data(), pull_keys.size()});
  }
  std::string Head() const { return PushPullMessage::RequestHead(request); }
  std::vector<LinkSession::Span> Buffers() const {
    return {{reinterpret_cast<const uint8_t*>(keys.data()), keys.size() * 8},
            {reinterpret_cast<const uint8_t*>(grads.data()), grads.size() * 4},
            {reinterpret_cast<const uint8_t*>(pull_keys.data()), pull_keys.size() * 8}};
  }
};

std::string HeadOf(const LinkSession::Message& m) {
  return std::string(reinterpret_cast<const char*>(m.memory.get() + m.pickle.first), m.pickle.second);
}

struct StepLinkLoopTest : ::testing::Test {
  std::shared_ptr<EmbeddingShard> shard = std::make_shared<EmbeddingShard>(Config());
  EmbeddingShard twin{Config()};  // the same steps applied directly
  ShardServer shards{7};
  Link link;

  void SetUp() override {
    shards.SetTable("t", shard);
    shards.SetNative(true, nullptr);
  }
};

TEST_F(StepLinkLoopTest, AnswersEachStepAsTheShardWouldThenHandsBackTheFirstOtherMessage) {
  auto served = link.Serve(shards);
  for (int64_t seq = 1; seq <= 3; ++seq) {
    const Step s(seq);
    link.Send(s.Head(), s.Buffers());
    const LinkSession::Message m = link.Receive();
    twin.Push(s.keys.data(), s.grads.data(), s.keys.size(), seq);
    std::vector<float> expected(4);
    twin.Pull(s.pull_keys.data(), 2, expected.data());
    const MessagePart head{m.memory.get() + m.pickle.first, m.pickle.second};
    ASSERT_TRUE(PushPullMessage::IsAnswer(head));
    const PushPullAnswer answer = PushPullMessage::ParseAnswer(head, m.buffers.size());
    EXPECT_TRUE(answer.has_ack && answer.applied && answer.has_rows);
    EXPECT_EQ(answer.server, 7);
    EXPECT_EQ(answer.seq, seq);
    ASSERT_EQ(m.buffers.size(), 1u);
    ASSERT_EQ(m.buffers[0].second, 16u);
    const float* rows = reinterpret_cast<const float*>(m.memory.get() + m.buffers[0].first);
    EXPECT_EQ(std::vector<float>(rows, rows + 4), expected) << "seq " << seq;
  }
  ASSERT_EQ(served.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);  // still serving
  const std::string pickle = "\x80\x05 a pickled call";
  const std::vector<uint8_t> array(100, 9);
  link.Send(pickle, {{array.data(), array.size()}});
  const StepLinkLoop::Handoff handoff = served.get();
  EXPECT_EQ(handoff.failure, Failure::kNone);
  EXPECT_EQ(HeadOf(handoff.message), pickle);
  ASSERT_EQ(handoff.message.buffers.size(), 1u);
  EXPECT_EQ(handoff.message.buffers[0].second, array.size());
  EXPECT_EQ(shards.LastSeq(3), 3);
  EXPECT_EQ(shards.counters().requests, 3u);
}

TEST_F(StepLinkLoopTest, HandsBackADeclinedOrMalformedRequestHavingChangedNothing) {
  const Step sync(1, 2);  // a step of two workers: the general path's
  auto served = link.Serve(shards);
  link.Send(sync.Head(), sync.Buffers());
  StepLinkLoop::Handoff handoff = served.get();
  EXPECT_EQ(handoff.failure, Failure::kNone);
  EXPECT_EQ(HeadOf(handoff.message), sync.Head());
  const Step s(1);
  served = link.Serve(shards);
  link.Send(s.Head(), {s.Buffers()[0]});  // buffers missing
  handoff = served.get();
  EXPECT_EQ(handoff.failure, Failure::kNone);
  EXPECT_EQ(HeadOf(handoff.message), s.Head());
  shards.SetNative(false, nullptr);
  served = link.Serve(shards);
  link.Send(s.Head(), s.Buffers());
  handoff = served.get();
  EXPECT_EQ(handoff.failure, Failure::kNone);
  EXPECT_EQ(shards.LastSeq(3), 0);
  EXPECT_EQ(shards.counters().requests, 0u);
  const std::vector<int64_t> keys{1, 2, 8};
  std::vector<float> rows(6);
  std::vector<uint8_t> found(3, 1);
  shard->Find(keys.data(), 3, rows.data(), found.data());
  EXPECT_EQ(found, std::vector<uint8_t>(3, 0));  // nothing was inserted
}

TEST_F(StepLinkLoopTest, AFailureAfterAChangeIsHandedBackWithItsKind) {
  // a forwarder made for another table: recording the push throws (after the shard applied it)
  auto forwarder = std::make_shared<DeltaForwarder>(
      7, 9, 2, 1, std::vector<DeltaForwarder::Table>{{"u", shard->block_slots(), shard->layout().bytes()}});
  shards.SetNative(true, forwarder);
  const Step s(1);
  auto served = link.Serve(shards);
  link.Send(s.Head(), s.Buffers());
  const StepLinkLoop::Handoff handoff = served.get();
  EXPECT_EQ(handoff.failure, Failure::kInvalidArgument);
  EXPECT_NE(handoff.what.find("has no table 't'"), std::string::npos) << handoff.what;
  EXPECT_EQ(HeadOf(handoff.message), s.Head());
  forwarder->Close();
}

TEST_F(StepLinkLoopTest, ABrokenOrForgedLinkEndsTheLoopWithTheSessionsError) {
  auto served = link.Serve(shards);
  const uint8_t garbage[64] = {1, 2, 3};
  ASSERT_EQ(send(link.worker_fd, garbage, sizeof(garbage), 0), static_cast<ssize_t>(sizeof(garbage)));
  EXPECT_THROW(served.get(), LinkRejected);
  Link other;
  served = other.Serve(shards);
  close(other.worker_fd);
  other.worker_fd = -1;
  EXPECT_THROW(served.get(), LinkClosed);
}

}  // namespace
}  // namespace xdl_ec
