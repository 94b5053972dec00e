// ParityReceiveLoop: the holder's side of the parity links (xdl_ec.ft.parity_link.ParityReceiver): serves one
// authenticated connection's requests (a sender's batches) into a ParityHolder and answers each, with no
// interpreter between receiving a batch and answering it. The Python receiver accepts the connection, runs the
// links' handshake (xdl_ec.net.link_handshake), then hands the connection here until it ends.
//
// Wire form (one LinkSession message each way): a request's first part is <iiq (holder, sender, durable) and its
// one buffer the serialize_batches bytes (forwarded_batch.h), applied in place; the answer's first part is <bq
// (status 0 ok / 1 refused, applied seq) followed by a UTF-8 error of at most kMaxError bytes.
//
// Thread-safe: one loop serves every connection of a receiver, each on its own thread (the holder has its own
// lock, so the senders' batches apply concurrently).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "xdl_ec/link_session.h"
#include "xdl_ec/parity_holder.h"

namespace xdl_ec {

class ParityReceiveLoop {
 public:
  static constexpr size_t kRequestBytes = 16;  // <iiq holder, sender, durable
  static constexpr size_t kAnswerBytes = 9;    // <bq status, applied
  static constexpr size_t kMaxError = 1 << 16;
  // A request's body beyond its batches: the buffer's length word, the request head and the alignment padding.
  static constexpr size_t kFraming = 128;

  struct Hooks {
    std::function<bool()> refuse;                  // true: the server is going down: end instead of applying
    std::function<void(const std::string&)> warn;  // a refused batch or request, named (the caller logs it)
    std::function<void()> interrupted;             // LinkSession's, when a system call is interrupted
  };

  // `max_payload`: the most batch bytes a request may carry; `call_timeout`: seconds an answer may take to send
  // (a sender that stops reading fails its connection, never holds this thread).
  ParityReceiveLoop(std::shared_ptr<ParityHolder> holder, uint64_t max_payload, double call_timeout);

  // Serves the requests of `sender` (which the handshake proved; `who` names the peer in warnings) arriving on
  // `fd` over `session` until the connection ends: returns when `refuse` says so, or after answering an
  // oversized request with its error (the request's bytes are not read: the connection is done). A refused batch
  // (another holder named, a seq gap, a batch the layout refuses, a closed holder) changes nothing and is
  // answered with its error and warned about; the connection goes on. Throws LinkRejected, with `who` in its
  // text, for a peer that broke the protocol (a MAC that does not match, a request not of the form, another
  // sender named): close the connection. LinkClosed or LinkTimeout when the connection broke or stalled.
  void Serve(LinkSession& session, int fd, int sender, const std::string& who, const Hooks& hooks);

  uint64_t max_payload() const { return max_payload_.load(); }
  void set_max_payload(uint64_t bytes);                                   // for the requests read from now on (> 0)
  uint64_t batches_received() const { return batches_received_.load(); }  // requests applied, and their bytes
  uint64_t bytes_received() const { return bytes_received_.load(); }

 private:
  std::shared_ptr<ParityHolder> holder_;
  std::atomic<uint64_t> max_payload_;
  double call_timeout_;
  std::atomic<uint64_t> batches_received_{0}, bytes_received_{0};
};

// The bytes of an answer (status, applied, error truncated to kMaxError), as ParityReceiveLoop sends it.
std::string ParityAnswer(int8_t status, int64_t applied, const std::string& error);

}  // namespace xdl_ec
