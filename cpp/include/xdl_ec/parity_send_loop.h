// ParitySendLoop: the sender's side of one parity link (xdl_ec.ft.parity_link.RemoteHolderLink): takes what a
// DeltaForwarder queued for one remote holder, sends it, and acknowledges how far the holder applied (or fails
// the holder), paced to one send per interval unless flushed, with no interpreter on the way. Its caller (a
// Python thread, which runs Run with the GIL released) gives it the two things that need Ray: a connection to the
// holder's receiver (asked for the first time there is something to send, and again after a failure), and, when
// that receiver cannot be reached, a call that carries a batch instead.
//
// The wire form is ParityReceiveLoop's (parity_receive_loop.h): a request <iiq (holder, sender, durable) with the
// serialize_batches bytes as its one buffer, an answer <bq (status, applied) and an error's text.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "xdl_ec/delta_forwarder.h"
#include "xdl_ec/link_session.h"

namespace xdl_ec {

class ParitySendLoop {
 public:
  // A connection to the holder's receiver, after the handshake: its session (kept alive by the caller until the
  // next Connect, or until Run returns) and socket, which the loop then owns (closes). fd < 0: the receiver cannot
  // be reached: batches go through Hooks::call.
  struct Connection {
    LinkSession* session = nullptr;
    int fd = -1;
  };
  // A hook's failure, as the forwarder records it (`what`), and whether it is the holder's loss (a broken
  // connection, a dead process) rather than an error to report.
  class HookFailed : public std::runtime_error {
   public:
    HookFailed(const std::string& what, bool lost) : std::runtime_error(what), lost_(lost) {}
    bool lost() const { return lost_; }

   private:
    bool lost_;
  };
  struct Hooks {
    std::function<Connection()> connect;  // throws HookFailed
    // Carries one send's bytes and durable watermark by another way; returns the holder's applied seq. Throws
    // HookFailed.
    std::function<int64_t(const std::vector<uint8_t>& batches, int64_t durable)> call;
    std::function<void()> delivered;    // after each send was acked or failed (someone may wait for parity)
    std::function<void()> interrupted;  // LinkSession's, when a system call is interrupted
  };

  // Sends `forwarder`'s batches for `holder` on link generation `link` (what DeltaForwarder::SetHolder returned),
  // at most one send per `send_interval` seconds unless flushed, checking for Stop every `poll_seconds` while idle;
  // a holder has `call_timeout` seconds to take a request and answer it.
  ParitySendLoop(std::shared_ptr<DeltaForwarder> forwarder, int holder, uint64_t link, double send_interval,
                 double poll_seconds, double call_timeout);
  ~ParitySendLoop();
  ParitySendLoop(const ParitySendLoop&) = delete;
  ParitySendLoop& operator=(const ParitySendLoop&) = delete;

  // Runs until Stop (or until the link is replaced: Take then answers nothing, and the caller's Stop ends it).
  // Any failure of a send fails the holder (DeltaForwarder::Fail: down until replaced) and drops the connection;
  // the next send connects again. Closes its connection before returning.
  void Run(const Hooks& hooks);
  void Flush();  // sends what is queued now, without waiting out the interval
  void Stop();

  uint64_t sends() const { return sends_.load(); }  // sends made, and the serialised bytes they carried
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  bool over_call() const { return over_call_.load(); }  // the receiver was unreachable: Hooks::call carries them

 private:
  int64_t Exchange(const Hooks& hooks, const std::vector<uint8_t>& batches, int64_t durable);
  void Drop();

  std::shared_ptr<DeltaForwarder> forwarder_;
  int holder_;
  uint64_t link_;
  std::chrono::duration<double> send_interval_;
  int poll_ms_;
  double call_timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool flush_ = false, stop_ = false;
  Connection connection_;
  std::atomic<bool> over_call_{false};
  std::atomic<uint64_t> sends_{0}, bytes_sent_{0};
};

}  // namespace xdl_ec
