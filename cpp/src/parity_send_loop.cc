#include "xdl_ec/parity_send_loop.h"

#include <unistd.h>

#include <cstring>
#include <utility>

#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_receive_loop.h"

namespace xdl_ec {
namespace {

// What a failure reads as in the forwarder's errors: Type('text'), as the Python link wrote repr(err).
std::string Repr(const char* type, const std::string& text) { return std::string(type) + "('" + text + "')"; }

}  // namespace

ParitySendLoop::ParitySendLoop(std::shared_ptr<DeltaForwarder> forwarder, int holder, uint64_t link,
                               double send_interval, double poll_seconds, double call_timeout)
    : forwarder_(std::move(forwarder)),
      holder_(holder),
      link_(link),
      send_interval_(send_interval),
      poll_ms_(static_cast<int>(poll_seconds * 1000.0)),
      call_timeout_(call_timeout) {
  if (!forwarder_) throw std::invalid_argument("ParitySendLoop: no forwarder");
  if (!(send_interval >= 0) || !(poll_seconds > 0) || !(call_timeout > 0)) {
    throw std::invalid_argument("ParitySendLoop: send_interval must be >= 0 and poll_seconds, call_timeout > 0");
  }
}

ParitySendLoop::~ParitySendLoop() { Drop(); }

void ParitySendLoop::Flush() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    flush_ = true;
  }
  wake_.notify_all();
}

void ParitySendLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    flush_ = true;
  }
  wake_.notify_all();
}

void ParitySendLoop::Drop() {
  if (connection_.fd >= 0) close(connection_.fd);
  connection_ = Connection{};
}

int64_t ParitySendLoop::Exchange(const Hooks& hooks, const std::vector<uint8_t>& batches, int64_t durable) {
  if (connection_.session == nullptr && !over_call_) {
    connection_ = hooks.connect();
    if (connection_.fd < 0 || connection_.session == nullptr) {
      connection_ = Connection{};
      over_call_ = true;
    }
  }
  if (over_call_) return hooks.call(batches, durable);
  uint8_t request[ParityReceiveLoop::kRequestBytes];
  const int32_t holder = holder_, sender = forwarder_->index();
  std::memcpy(request, &holder, 4);
  std::memcpy(request + 4, &sender, 4);
  std::memcpy(request + 8, &durable, 8);
  LinkSession& session = *connection_.session;
  session.Send(connection_.fd, {request, sizeof(request)}, {{batches.data(), batches.size()}}, call_timeout_,
               hooks.interrupted);
  LinkSession::Message m;
  try {
    m = session.Receive(connection_.fd, call_timeout_,
                        ParityReceiveLoop::kAnswerBytes + ParityReceiveLoop::kMaxError + ParityReceiveLoop::kFraming,
                        hooks.interrupted);
  } catch (const LinkRejected& e) {  // an answer altered on the way: the connection is not to be trusted
    throw HookFailed(
        Repr("LinkBroken", "holder " + std::to_string(holder_) + "'s answer failed its check: " + e.what()), true);
  }
  if (m.pickle.second < ParityReceiveLoop::kAnswerBytes) {
    throw HookFailed(Repr("LinkBroken", "holder " + std::to_string(holder_) + " answered with " +
                                            std::to_string(m.pickle.second) + " bytes, less than any answer"),
                     true);
  }
  const uint8_t* head = m.memory.get() + m.pickle.first;
  int8_t status;
  int64_t applied;
  std::memcpy(&status, head, 1);
  std::memcpy(&applied, head + 1, 8);
  if (status != 0) {
    const std::string error(reinterpret_cast<const char*>(head) + ParityReceiveLoop::kAnswerBytes,
                            m.pickle.second - ParityReceiveLoop::kAnswerBytes);
    throw HookFailed(Repr("HolderRefused", "holder " + std::to_string(holder_) + " refused the batches: " + error),
                     false);
  }
  return applied;
}

void ParitySendLoop::Run(const Hooks& hooks) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_send{};
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto next = last_send + std::chrono::duration_cast<Clock::duration>(send_interval_);
      wake_.wait_until(lock, next, [&] { return flush_ || stop_; });
      flush_ = false;
      if (stop_) break;
    }
    DeltaForwarder::Delivery delivery;
    // waits up to poll_ms_; false also at once when the forwarder closed or the link was replaced (then Stop
    // comes): the rest of the poll is waited out here, so such a loop never spins
    const Clock::time_point taking = Clock::now();
    if (!forwarder_->Take(holder_, link_, poll_ms_, &delivery)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_until(lock, taking + std::chrono::milliseconds(poll_ms_), [&] { return stop_; });
      continue;
    }
    last_send = Clock::now();
    const std::vector<uint8_t> wire = SerializeBatches(delivery.batches);
    sends_.fetch_add(1);
    bytes_sent_.fetch_add(wire.size());
    std::string error;
    bool lost = false;
    int64_t applied = 0;
    try {
      applied = Exchange(hooks, wire, delivery.durable);
    } catch (const HookFailed& e) {
      error = e.what(), lost = e.lost();
    } catch (const LinkClosed& e) {  // the holder's process died or closed the link
      error = Repr("LinkClosed", e.what()), lost = true;
    } catch (const LinkTimeout& e) {  // a holder that stopped answering: an error, as a refusal
      error = Repr("LinkTimeout", e.what());
    } catch (const std::exception& e) {
      error = Repr("RuntimeError", e.what());
    }
    if (error.empty()) {
      forwarder_->Ack(holder_, delivery.link, applied);
    } else {
      Drop();
      forwarder_->Fail(holder_, delivery.link, error, lost);
    }
    if (hooks.delivered) hooks.delivered();
  }
  Drop();
}

}  // namespace xdl_ec
