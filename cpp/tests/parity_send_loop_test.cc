#include "xdl_ec/parity_send_loop.h"

#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "parity_link_pair.h"
#include "xdl_ec/delta_forwarder.h"
#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_holder.h"
#include "xdl_ec/parity_receive_loop.h"

namespace xdl_ec {
namespace {

using testing::ParityLinkPair;

using testing::Config;
using testing::kK;
using testing::kN;
using testing::kR;

// Server 0 of a (2, 1) code over 3 servers with both its holders behind parity links (a send loop each, to a
// receive loop over a socket pair), and a twin server whose holders are in-process: the same pushes, the
// parity both ways must agree.
struct Server {
  EmbeddingShard shard{Config()}, twin_shard{Config()};
  size_t block_slots = shard.block_slots(), record_bytes = shard.layout().bytes();
  std::vector<DeltaForwarder::Table> tables{{"t", static_cast<uint32_t>(block_slots), record_bytes}};
  std::shared_ptr<DeltaForwarder> forwarder = std::make_shared<DeltaForwarder>(0, kN, kK, kR, tables);
  DeltaForwarder twin{0, kN, kK, kR, tables};
  std::map<int, std::shared_ptr<ParityHolder>> holders, twins;
  std::mt19937 rng{4};
  int64_t seq = 0;

  Server() {
    for (int h : forwarder->holders()) {
      holders[h] = Holder(h);
      twins[h] = Holder(h);
      twin.SetHolder(h, twins[h]);
    }
  }
  ~Server() {
    forwarder->Close();
    twin.Close();
  }
  std::shared_ptr<ParityHolder> Holder(int h) const {
    return std::make_shared<ParityHolder>(h, kN, kK, kR,
                                          std::map<std::string, size_t>{{"t", block_slots * record_bytes}});
  }
  void Push(int keys = 6) {
    std::uniform_int_distribution<int64_t> key(0, 100);
    std::normal_distribution<float> grad;
    std::vector<int64_t> k(keys);
    std::vector<float> g(static_cast<size_t>(keys) * 4);
    for (auto& x : k) x = key(rng);
    for (auto& x : g) x = grad(rng);
    ++seq;
    for (auto [s, f] : {std::pair<EmbeddingShard*, DeltaForwarder*>{&shard, forwarder.get()}, {&twin_shard, &twin}}) {
      const WorkerSeqs pushes{{0, seq}};  // the Mutation keeps a reference
      DeltaForwarder::Mutation sink(*f, "t", pushes);
      s->Push(k.data(), g.data(), k.size(), seq, &sink);
    }
  }
  std::vector<uint8_t> Block(ParityHolder& holder, size_t c) const {
    std::vector<uint8_t> out(holder.block_bytes("t"));
    holder.ReadBlock("t", c, record_bytes, 0, record_bytes, out.data());
    return out;
  }
};

// One holder's link: the send loop on a thread, its receiver's loop on another.
struct Link {
  ParityLinkPair pair;
  std::shared_ptr<ParitySendLoop> loop;
  ParityReceiveLoop receiver;
  std::atomic<int> connects{0}, deliveries{0};
  ParitySendLoop::Hooks hooks;
  std::future<void> sending, receiving;

  Link(Server& server, int holder, double interval = 0.0)
      : loop(std::make_shared<ParitySendLoop>(server.forwarder, holder, server.forwarder->SetHolder(holder, nullptr),
                                              interval, 0.02, 5.0)),
        receiver(server.holders.at(holder), 1 << 20, 5.0) {
    hooks.connect = [this] {
      ++connects;
      const ParitySendLoop::Connection c{pair.sender.get(), pair.sender_fd};
      pair.sender_fd = -1;  // the loop's now
      return c;
    };
    hooks.call = [](const std::vector<uint8_t>&, int64_t) -> int64_t { throw std::logic_error("no call expected"); };
    hooks.delivered = [this] { ++deliveries; };
    hooks.interrupted = testing::kNoSignals;
  }
  void Start() {
    receiving = std::async(std::launch::async, [this] {
      ParityReceiveLoop::Hooks h{[] { return false; }, [](const std::string&) {}, testing::kNoSignals};
      try {
        receiver.Serve(*pair.holder, pair.holder_fd, 0, "sender 0", h);
      } catch (const LinkClosed&) {  // the send loop closed its end
      }
    });
    sending = std::async(std::launch::async, [this] { loop->Run(hooks); });
  }
  ~Link() {
    loop->Stop();
    if (sending.valid()) sending.get();
    if (receiving.valid()) receiving.get();
  }
};

void Drain(Server& server, std::vector<std::unique_ptr<Link>>& links) {
  server.forwarder->Flush();
  server.twin.Flush();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.forwarder->progress().pending || server.twin.progress().pending) {
    for (auto& l : links) l->loop->Flush();
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "parity did not catch up";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // the loop calls `delivered` after its Ack, so the last send's hook may still be on its way once nothing is pending
  for (auto& l : links) {
    while (l->deliveries.load() != static_cast<int>(l->loop->sends())) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a send's delivered hook did not run";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

TEST(ParitySendLoop, DeliversEveryBatchInOrderSoParityEqualsTheInProcessHolders) {
  Server server;
  std::vector<std::unique_ptr<Link>> links;
  for (int h : server.forwarder->holders()) links.push_back(std::make_unique<Link>(server, h));
  for (auto& l : links) l->Start();
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 5; ++i) server.Push();
    Drain(server, links);
  }
  const DeltaForwarder::Progress p = server.forwarder->progress();
  EXPECT_TRUE(p.down.empty());
  EXPECT_TRUE(server.forwarder->errors().empty());
  EXPECT_EQ(server.forwarder->DurableSeq(0), 20);
  for (auto& [h, holder] : server.holders) {
    EXPECT_EQ(holder->Applied(0), server.forwarder->seq()) << h;
    ASSERT_EQ(holder->NumBlocks("t"), server.twins.at(h)->NumBlocks("t"));
    for (size_t c = 0; c < holder->NumBlocks("t"); ++c)
      EXPECT_EQ(server.Block(*holder, c), server.Block(*server.twins.at(h), c)) << h << " " << c;
  }
  for (auto& l : links) {
    EXPECT_EQ(l->connects.load(), 1);  // one connection, kept
    EXPECT_GE(l->loop->sends(), 4u);
    EXPECT_EQ(l->deliveries.load(), static_cast<int>(l->loop->sends()));
    EXPECT_EQ(l->receiver.batches_received(), l->loop->sends());
    EXPECT_EQ(l->receiver.bytes_received(), l->loop->bytes_sent());
  }
}

TEST(ParitySendLoop, ARefusalFailsTheHolderWithItsErrorAndABrokenLinkIsALoss) {
  Server server;
  const int refusing = server.forwarder->holders()[0], gone = server.forwarder->holders()[1];
  std::vector<std::unique_ptr<Link>> links;
  links.push_back(std::make_unique<Link>(server, refusing));
  links.push_back(std::make_unique<Link>(server, gone));
  server.holders.at(refusing)->Close();  // answers HolderClosed
  close(links[1]->pair.holder_fd);       // the holder's process died
  links[1]->pair.holder_fd = -1;
  links[0]->Start();
  links[1]->sending = std::async(std::launch::async, [&] { links[1]->loop->Run(links[1]->hooks); });
  server.Push();
  server.forwarder->Flush();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.forwarder->progress().down.size() < 2) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the holders were not marked down";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::vector<std::string> errors = server.forwarder->errors();
  ASSERT_EQ(errors.size(), 1u);  // a lost holder is no error to report
  EXPECT_NE(
      errors[0].find("HolderRefused('holder " + std::to_string(refusing) + " refused the batches: HolderClosed: "),
      std::string::npos)
      << errors[0];
}

TEST(ParitySendLoop, AnUnreachableReceiverSendsThroughTheCallAndAHookFailureFailsTheHolder) {
  Server server;
  const int over_call = server.forwarder->holders()[0], failing = server.forwarder->holders()[1];
  std::vector<std::unique_ptr<Link>> links;
  links.push_back(std::make_unique<Link>(server, over_call));
  links.push_back(std::make_unique<Link>(server, failing));
  std::atomic<int> calls{0};
  links[0]->hooks.connect = [] { return ParitySendLoop::Connection{}; };
  links[0]->hooks.call = [&](const std::vector<uint8_t>& batches, int64_t durable) {
    ++calls;
    return server.holders.at(over_call)->Apply(0, ParseBatches(batches.data(), batches.size()), durable);
  };
  links[1]->hooks.connect = []() -> ParitySendLoop::Connection {
    throw ParitySendLoop::HookFailed("CallTimeout('parity_address')", false);
  };
  for (auto& l : links) l->sending = std::async(std::launch::async, [&l] { l->loop->Run(l->hooks); });
  for (int i = 0; i < 3; ++i) {
    server.Push();
    server.forwarder->Flush();
    for (auto& l : links) l->loop->Flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.holders.at(over_call)->Applied(0) < 3 || server.forwarder->progress().down.empty()) {
    for (auto& l : links) l->loop->Flush();
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "not delivered";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(links[0]->loop->over_call());
  EXPECT_GE(calls.load(), 1);
  EXPECT_EQ(server.forwarder->progress().down, std::vector<int>{failing});
  EXPECT_EQ(server.forwarder->errors(),
            std::vector<std::string>{"holder " + std::to_string(failing) + ": CallTimeout('parity_address')"});
}

TEST(ParitySendLoop, StopEndsAnIdleLoopPromptlyAndPacesSendsToTheInterval) {
  Server server;
  std::vector<std::unique_ptr<Link>> links;
  for (int h : server.forwarder->holders()) links.push_back(std::make_unique<Link>(server, h, 0.3));
  for (auto& l : links) l->Start();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {  // 20 pushes in ~0.4 s: at most two sends a link (one per 0.3 s), unflushed
    server.Push();
    server.forwarder->Flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& l : links) EXPECT_LE(l->loop->sends(), static_cast<uint64_t>(seconds / 0.3) + 1);
  const auto stopping = std::chrono::steady_clock::now();
  for (auto& l : links) {
    l->loop->Stop();
    l->sending.get();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::seconds(1));
}

TEST(ParitySendLoop, AReplacedLinkOrAClosedForwarderLeavesTheLoopIdleNotSpinning) {
  Server server;
  const int holder = server.forwarder->holders()[0];
  ParitySendLoop loop(server.forwarder, holder, server.forwarder->SetHolder(holder, nullptr), 0.0, 0.05, 5.0);
  server.forwarder->SetHolder(holder, nullptr);  // replaced: this loop's Take answers nothing, at once
  std::atomic<int> connects{0};
  ParitySendLoop::Hooks hooks;
  hooks.connect = [&] {
    ++connects;
    return ParitySendLoop::Connection{};
  };
  double loop_cpu = 0;  // seconds of CPU the loop's thread used
  auto running = std::async(std::launch::async, [&] {
    loop.Run(hooks);
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    loop_cpu = t.tv_sec + t.tv_nsec * 1e-9;
  });
  server.Push();
  server.forwarder->Flush();
  server.forwarder->Close();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  loop.Stop();
  running.get();
  EXPECT_EQ(connects.load(), 0);
  EXPECT_EQ(loop.sends(), 0u);
  // about ten idle polls: well under a millisecond; spinning, even a share of a busy machine's core is tens of ms
  EXPECT_LT(loop_cpu, 0.005);
}

}  // namespace
}  // namespace xdl_ec
