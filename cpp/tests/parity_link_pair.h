// A parity link's two ends over a socket pair, for the send and receive loops' tests: a sender's and a holder's
// LinkSession under one key, as the handshake would leave them, and the bytes of a request by hand.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "xdl_ec/embedding_shard.h"
#include "xdl_ec/link_session.h"
#include "xdl_ec/parity_receive_loop.h"

namespace xdl_ec::testing {

inline const std::function<void()> kNoSignals = [] {};

// The shards both loops' tests train: a (2, 1) code over 3 servers, small blocks so a few pushes span several.
constexpr int kN = 3, kK = 2, kR = 1;

inline ShardConfig Config() {
  ShardConfig c;
  c.dim = 4;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.learning_rate = 0.05f;
  c.seed = 3;
  c.block_slots = 8;
  return c;
}

struct ParityLinkPair {
  int sender_fd = -1, holder_fd = -1;
  std::array<uint8_t, 32> key;
  std::unique_ptr<LinkSession> sender, holder;

  ParityLinkPair() {
    std::iota(key.begin(), key.end(), 11);
    sender = std::make_unique<LinkSession>(key.data(), key.size(), LinkSession::Mac::kAesGmac, true);
    holder = std::make_unique<LinkSession>(key.data(), key.size(), LinkSession::Mac::kAesGmac, false);
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw std::runtime_error("socketpair failed");
    sender_fd = fds[0], holder_fd = fds[1];
    const int size = 4 << 20;
    for (int fd : fds) {
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    }
  }
  ~ParityLinkPair() {
    if (sender_fd >= 0) close(sender_fd);
    if (holder_fd >= 0) close(holder_fd);
  }

  // Sends a request as a sender would: <iiq (holder, sender, durable), `batches` as its buffer.
  void Request(int32_t holder_index, int32_t sender_index, int64_t durable, const std::vector<uint8_t>& batches) {
    uint8_t head[ParityReceiveLoop::kRequestBytes];
    std::memcpy(head, &holder_index, 4);
    std::memcpy(head + 4, &sender_index, 4);
    std::memcpy(head + 8, &durable, 8);
    sender->Send(sender_fd, {head, sizeof(head)}, {{batches.data(), batches.size()}}, 5.0, kNoSignals);
  }
  // The next answer: (status, applied, error).
  std::tuple<int, int64_t, std::string> Answer() {
    const LinkSession::Message m = sender->Receive(sender_fd, 5.0, 1 << 20, kNoSignals);
    const uint8_t* head = m.memory.get() + m.pickle.first;
    int8_t status;
    int64_t applied;
    std::memcpy(&status, head, 1);
    std::memcpy(&applied, head + 1, 8);
    return {status, applied,
            std::string(reinterpret_cast<const char*>(head) + ParityReceiveLoop::kAnswerBytes,
                        m.pickle.second - ParityReceiveLoop::kAnswerBytes)};
  }
};

}  // namespace xdl_ec::testing
