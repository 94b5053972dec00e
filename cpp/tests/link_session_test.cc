#include "xdl_ec/link_session.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace xdl_ec {
namespace {

using Mac = LinkSession::Mac;
using Span = LinkSession::Span;

const std::function<void()> kNoSignals = [] {};

// A connected pair of stream sockets with buffers large enough for a whole test message.
struct Pair {
  int caller = -1, role = -1;
  Pair() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw std::runtime_error("socketpair failed");
    caller = fds[0], role = fds[1];
    const int size = 4 << 20;
    for (int fd : fds) {
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    }
  }
  ~Pair() {
    if (caller >= 0) close(caller);
    if (role >= 0) close(role);
  }
  // Every byte waiting at the role's end.
  std::vector<uint8_t> Drain() const {
    std::vector<uint8_t> out, chunk(1 << 16);
    for (;;) {
      const ssize_t n = recv(role, chunk.data(), chunk.size(), MSG_DONTWAIT);
      if (n <= 0) return out;
      out.insert(out.end(), chunk.begin(), chunk.begin() + n);
    }
  }
  void Inject(const std::vector<uint8_t>& bytes) const {
    ASSERT_EQ(send(caller, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  }
};

std::array<uint8_t, 32> Key(uint8_t seed) {
  std::array<uint8_t, 32> k;
  std::iota(k.begin(), k.end(), seed);
  return k;
}

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 31 * i);
  return v;
}

std::vector<uint8_t> At(const LinkSession::Message& m, std::pair<size_t, size_t> at) {
  return std::vector<uint8_t>(m.memory.get() + at.first, m.memory.get() + at.first + at.second);
}

class LinkSessionTest : public ::testing::TestWithParam<Mac> {};

TEST_P(LinkSessionTest, MessagesArriveWholeAlignedAndInOrder) {
  const auto key = Key(1);
  LinkSession caller(key.data(), key.size(), GetParam(), true), role(key.data(), key.size(), GetParam(), false);
  Pair pair;
  // small (HMAC either way) and large (GMAC when negotiated) bodies, buffers of odd sizes and none
  for (size_t big : {size_t{0}, size_t{100}, size_t{40000}}) {
    const auto pickle = Bytes(13, 3), a = Bytes(big, 5), b = Bytes(7, 9);
    const size_t sent = caller.Send(pair.caller, {pickle.data(), pickle.size()},
                                    {{a.data(), a.size()}, {b.data(), b.size()}}, -1.0, kNoSignals);
    const auto m = role.Receive(pair.role, 5.0, 1 << 20, kNoSignals);
    EXPECT_EQ(At(m, m.pickle), pickle);
    ASSERT_EQ(m.buffers.size(), 2u);
    EXPECT_EQ(At(m, m.buffers[0]), a);
    EXPECT_EQ(At(m, m.buffers[1]), b);
    for (const auto& at : m.buffers) EXPECT_EQ(reinterpret_cast<uintptr_t>(m.memory.get() + at.first) % 64, 0u);
    EXPECT_GE(sent, 20 + 64 + pickle.size() + a.size() + b.size());
  }
  // and back: the role's messages are MACed under its own direction
  const auto answer = Bytes(30, 7);
  role.Send(pair.role, {answer.data(), answer.size()}, {}, -1.0, kNoSignals);
  const auto m = caller.Receive(pair.caller, -1.0, 1 << 20, kNoSignals);
  EXPECT_EQ(At(m, m.pickle), answer);
  EXPECT_EQ(caller.sent(), 3u);
  EXPECT_EQ(role.received(), 3u);
}

TEST_P(LinkSessionTest, AnAlteredReplayedOrForeignMessageIsRejected) {
  const auto key = Key(1), other = Key(2);
  const auto pickle = Bytes(20, 1), array = Bytes(20000, 2);
  for (const std::string attack : {"header", "body", "tag", "replayed", "foreign key", "own direction"}) {
    SCOPED_TRACE(attack);
    LinkSession caller(key.data(), key.size(), GetParam(), true), role(key.data(), key.size(), GetParam(), false);
    LinkSession stranger(other.data(), other.size(), GetParam(), true);
    Pair pair;
    LinkSession& sender = attack == "foreign key" ? stranger : attack == "own direction" ? role : caller;
    sender.Send(pair.caller, {pickle.data(), pickle.size()}, {{array.data(), array.size()}}, -1.0, kNoSignals);
    auto wire = pair.Drain();
    if (attack == "replayed") {
      pair.Inject(wire);
      role.Receive(pair.role, 5.0, 1 << 20, kNoSignals);  // the first time it is good
    } else if (attack == "header") {
      wire[12] ^= 1;  // the body size
    } else if (attack == "body") {
      wire[wire.size() - 100] ^= 0x80;
    } else if (attack == "tag") {
      wire[wire.size() - 5] ^= 1;  // the tag's last bytes (with GMAC, its zero padding) are checked too
    }
    pair.Inject(wire);
    EXPECT_THROW(role.Receive(pair.role, 5.0, 1 << 20, kNoSignals), LinkRejected);
  }
}

TEST_P(LinkSessionTest, AnOversizedMessageIsRejectedBeforeItsBodyIsRead) {
  const auto key = Key(1);
  LinkSession caller(key.data(), key.size(), GetParam(), true), role(key.data(), key.size(), GetParam(), false);
  Pair pair;
  const auto array = Bytes(5000, 2);
  caller.Send(pair.caller, {array.data(), 10}, {{array.data(), array.size()}}, -1.0, kNoSignals);
  try {
    role.Receive(pair.role, 5.0, 4096, kNoSignals);
    FAIL() << "no error";
  } catch (const LinkOversized& err) {  // a LinkRejected the receiver can tell apart (to answer a member why)
    EXPECT_NE(std::string(err.what()).find("at most 4096 bytes"), std::string::npos) << err.what();
  }
}

TEST_P(LinkSessionTest, ASendToAPeerThatStopsReadingEndsAtItsDeadline) {
  const auto key = Key(1);
  LinkSession caller(key.data(), key.size(), GetParam(), true);
  Pair pair;                              // nobody reads the role's end
  const auto array = Bytes(24 << 20, 4);  // far beyond both sockets' buffers
  // NOLINTNEXTLINE(clang-analyzer-deadcode.DeadStores): read after the try; the analyzer follows FAIL()'s return
  const auto start = std::chrono::steady_clock::now();
  try {
    caller.Send(pair.caller, {array.data(), 1}, {{array.data(), array.size()}}, 0.2, kNoSignals);
    FAIL() << "no error";
  } catch (const LinkTimeout& err) {
    EXPECT_NE(std::string(err.what()).find("the peer stopped reading"), std::string::npos) << err.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.2);
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(caller.sent(), 0u);  // not counted: the connection is unusable
  // a deadline that leaves time enough changes nothing for a reader that keeps up
  LinkSession fresh(key.data(), key.size(), GetParam(), true), role(key.data(), key.size(), GetParam(), false);
  Pair other;
  std::thread sender([&] {
    fresh.Send(other.caller, {array.data(), 1}, {{array.data(), array.size()}}, 30.0, kNoSignals);
  });
  const auto m = role.Receive(other.role, 30.0, 1 << 30, kNoSignals);
  sender.join();
  ASSERT_EQ(m.buffers.size(), 1u);
  EXPECT_EQ(At(m, m.buffers[0]), array);
}

TEST_P(LinkSessionTest, AClosedConnectionOrAPassedDeadlineEndsAReceive) {
  const auto key = Key(1);
  LinkSession caller(key.data(), key.size(), GetParam(), true), role(key.data(), key.size(), GetParam(), false);
  {
    Pair pair;
    EXPECT_THROW(role.Receive(pair.role, 0.05, 1 << 20, kNoSignals), LinkTimeout);  // nothing comes
  }
  {
    Pair pair;  // half a message, then the peer closes
    const auto array = Bytes(3000, 2);
    caller.Send(pair.caller, {array.data(), 10}, {{array.data(), array.size()}}, -1.0, kNoSignals);
    auto wire = pair.Drain();
    wire.resize(wire.size() / 2);
    pair.Inject(wire);
    close(pair.caller);
    pair.caller = -1;
    try {
      role.Receive(pair.role, -1.0, 1 << 20, kNoSignals);
      FAIL() << "no error";
    } catch (const LinkClosed& err) {
      EXPECT_NE(std::string(err.what()).find("connection closed after"), std::string::npos) << err.what();
    }
  }
  {
    Pair pair;  // a sender whose peer is gone
    close(pair.role);
    pair.role = -1;
    const auto array = Bytes(100, 2);
    EXPECT_THROW(caller.Send(pair.caller, {array.data(), array.size()}, {}, -1.0, kNoSignals), LinkClosed);
  }
}

TEST_P(LinkSessionTest, ALargeMessageGoesThroughAFullSocketBuffer) {
  const auto key = Key(1);
  LinkSession caller(key.data(), key.size(), GetParam(), true), role(key.data(), key.size(), GetParam(), false);
  Pair pair;
  const auto array = Bytes(24 << 20, 4);  // far beyond the sockets' buffers: the sender waits for the reader
  std::thread sender([&] {
    caller.Send(pair.caller, {array.data(), 1}, {{array.data(), array.size()}}, -1.0, kNoSignals);
  });
  const auto m = role.Receive(pair.role, 30.0, 1 << 30, kNoSignals);
  sender.join();
  ASSERT_EQ(m.buffers.size(), 1u);
  EXPECT_EQ(At(m, m.buffers[0]), array);
}

INSTANTIATE_TEST_SUITE_P(Macs, LinkSessionTest, ::testing::Values(Mac::kHmacSha256, Mac::kAesGmac),
                         [](const ::testing::TestParamInfo<Mac>& info) {
                           return info.param == Mac::kHmacSha256 ? "Hmac" : "Gmac";
                         });

TEST(LinkSession, BadArgumentsAreClearErrors) {
  const auto key = Key(1);
  EXPECT_THROW(LinkSession(key.data(), 31, Mac::kHmacSha256, true), std::invalid_argument);
  EXPECT_THROW(LinkSession(nullptr, 32, Mac::kHmacSha256, true), std::invalid_argument);
  EXPECT_THROW(LinkSession(key.data(), 32, static_cast<Mac>(3), true), std::invalid_argument);
  LinkSession caller(key.data(), key.size(), Mac::kHmacSha256, true);
  Pair pair;
  std::vector<Span> many(LinkSession::kMaxBuffers + 1, Span{key.data(), 1});
  EXPECT_THROW(caller.Send(pair.caller, {key.data(), 1}, many, -1.0, kNoSignals), std::invalid_argument);
  EXPECT_EQ(caller.sent(), 0u);
  EXPECT_TRUE(pair.Drain().empty());  // nothing went out
}

}  // namespace
}  // namespace xdl_ec
