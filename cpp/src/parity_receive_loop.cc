#include "xdl_ec/parity_receive_loop.h"

#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

#include "xdl_ec/forwarded_batch.h"

namespace xdl_ec {
namespace {

template <typename T>
T Read(const uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof(T));  // little-endian hosts only (as the rest of the wire forms)
  return v;
}

// "Type: message" of what applying a batch threw, as the Python receiver wrote it (its exception's name).
std::string Described(const std::exception& e) {
  const char* type = "RuntimeError";
  if (dynamic_cast<const HolderClosed*>(&e) != nullptr) {
    type = "HolderClosed";
  } else if (dynamic_cast<const BatchRefused*>(&e) != nullptr) {
    type = "BatchRefused";
  } else if (dynamic_cast<const std::invalid_argument*>(&e) != nullptr) {
    type = "ValueError";
  } else if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    type = "MemoryError";
  }
  return std::string(type) + ": " + e.what();
}

}  // namespace

std::string ParityAnswer(int8_t status, int64_t applied, const std::string& error) {
  std::string out(ParityReceiveLoop::kAnswerBytes, '\0');
  std::memcpy(&out[0], &status, 1);
  std::memcpy(&out[1], &applied, 8);
  out += error.substr(0, ParityReceiveLoop::kMaxError);
  return out;
}

ParityReceiveLoop::ParityReceiveLoop(std::shared_ptr<ParityHolder> holder, uint64_t max_payload, double call_timeout)
    : holder_(std::move(holder)), max_payload_(max_payload), call_timeout_(call_timeout) {
  if (!holder_) throw std::invalid_argument("ParityReceiveLoop: no holder");
  set_max_payload(max_payload);
}

void ParityReceiveLoop::set_max_payload(uint64_t bytes) {
  if (bytes == 0) throw std::invalid_argument("ParityReceiveLoop: max_payload must be positive");
  max_payload_.store(bytes);
}

void ParityReceiveLoop::Serve(LinkSession& session, int fd, int sender, const std::string& who, const Hooks& hooks) {
  auto answer = [&](int8_t status, int64_t applied, const std::string& error) {
    const std::string bytes = ParityAnswer(status, applied, error);
    session.Send(fd, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, {}, call_timeout_,
                 hooks.interrupted);
  };
  for (;;) {
    LinkSession::Message m;
    const uint64_t max_payload = max_payload_.load();
    try {
      m = session.Receive(fd, -1.0, max_payload + kFraming, hooks.interrupted);
    } catch (const LinkOversized& e) {
      // authenticated, so the member learns why; its bytes are not read: the connection ends after it
      const std::string error = "the request exceeds this receiver's max_payload of " + std::to_string(max_payload) +
                                " bytes (" + e.what() + ")";
      hooks.warn("refused a request of " + who + ": " + error);
      answer(1, 0, error);
      return;
    } catch (const LinkRejected& e) {
      throw LinkRejected("closed the connection of " + who + ": " + e.what());
    }
    if (m.buffers.size() != 1 || m.pickle.second != kRequestBytes) {
      throw LinkRejected("closed the connection of " + who + ": a request of " + std::to_string(m.buffers.size()) +
                         " buffers and a " + std::to_string(m.pickle.second) + "-byte header, not one batch and a " +
                         std::to_string(kRequestBytes) + "-byte header");
    }
    const uint8_t* head = m.memory.get() + m.pickle.first;
    const int32_t holder = Read<int32_t>(head);
    const int32_t claimed = Read<int32_t>(head + 4);
    const int64_t durable = Read<int64_t>(head + 8);
    if (claimed != sender) {
      throw LinkRejected("closed the connection of " + who + ": a request names sender " + std::to_string(claimed));
    }
    if (hooks.refuse && hooks.refuse()) return;  // the server is going down: the sender sees the connection break
    const uint8_t* payload = m.memory.get() + m.buffers[0].first;
    const size_t payload_bytes = m.buffers[0].second;
    int64_t applied = 0;
    std::string error;
    if (holder != holder_->index()) {
      error = "server " + std::to_string(holder_->index()) + " received a batch meant for holder " +
              std::to_string(holder) + "; the link's address is stale";
    } else {
      try {
        applied = holder_->Apply(sender, ParseBatches(payload, payload_bytes), durable);
        batches_received_.fetch_add(1);
        bytes_received_.fetch_add(payload_bytes);
      } catch (const std::exception& e) {  // the sender marks this holder down with the reason
        error = Described(e).substr(0, kMaxError);
      }
    }
    if (!error.empty()) hooks.warn("refused a batch of " + who + ": " + error);
    answer(error.empty() ? 0 : 1, applied, error);
  }
}

}  // namespace xdl_ec
