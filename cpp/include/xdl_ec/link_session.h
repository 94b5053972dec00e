// One authenticated direct-link connection's messages: framing, MACs and socket I/O (xdl_ec.ps.direct).
//
// The handshake (membership, the session key S, the MAC chosen) is Python's; what it hands over is S and
// which end this is. From there every message costs one call here instead of a few dozen Python operations
// per side (the per-request cost that dominated a small Ray step). The wire form, as direct.py documents it:
//
//   header   <QIQ: pickle bytes, buffer count, body bytes          20 bytes
//   MAC(S, dir | "H" | counter | header)                          32 bytes, HMAC-SHA256
//   body     buffer lengths (<Q each), pickle, each buffer at the next multiple of 64 bytes of the body
//   MAC(S, dir | "P" | counter | header | body)                   32 bytes
//
// dir is "C" from the caller and "R" from the role; counter counts a direction's messages (a replayed,
// reordered or altered message fails). The payload MAC is HMAC-SHA256, or, when AES-GMAC was negotiated
// and the body has kGmacMinBytes or more, AES-256-GCM over no plaintext with header | body as associated
// data, under HMAC(S, "xdl-ec direct gmac key") and the 12-byte nonce dir | "P" | 0 0 | counter (never
// used twice under one key); its 16-byte tag is followed by 16 zero bytes. The header is checked before
// anything is allocated, so an unauthenticated peer cannot make this end allocate.
//
// A received message is one 64-byte-aligned allocation (the body at kBodyOffset, the header right before
// it so the payload MAC runs in place): arrays are used from it without a copy.
//
// Thread-compatible: one thread sends at a time and one receives at a time (they may be different).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace xdl_ec {

// The connection closed, or broke, before a whole message went through.
class LinkClosed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The deadline passed before a whole message arrived.
class LinkTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The peer broke the protocol: a MAC that does not match, a message over the limits, a malformed body.
class LinkRejected : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A message whose authenticated header announces more than the receiver takes: its body was not read (the
// connection is unusable for further messages), but the peer is a member and may be told why.
class LinkOversized : public LinkRejected {
 public:
  using LinkRejected::LinkRejected;
};

class LinkSession {
 public:
  enum class Mac : int { kHmacSha256 = 1, kAesGmac = 2 };  // the bits direct.py offers in its hello
  static constexpr size_t kKeyBytes = 32;
  static constexpr size_t kHeaderBytes = 20;
  static constexpr size_t kTagBytes = 32;
  static constexpr size_t kAlign = 64;
  static constexpr size_t kBodyOffset = kAlign;  // of a received message's body in its allocation
  static constexpr size_t kGmacMinBytes = 16 << 10;
  static constexpr size_t kMaxBuffers = 1 << 12;

  struct Span {
    const uint8_t* data;
    size_t size;
  };

  // A received message; `memory` holds header (right before the body), body and tag.
  struct Message {
    std::shared_ptr<uint8_t> memory;
    size_t size = 0;                                 // bytes of `memory`
    std::pair<size_t, size_t> pickle;                // (offset in memory, bytes)
    std::vector<std::pair<size_t, size_t>> buffers;  // (offset in memory, bytes), each 64-byte aligned
  };

  // `key`: the session key S (kKeyBytes); `caller`: this end opened the connection (it sends "C").
  LinkSession(const uint8_t* key, size_t key_size, Mac mac, bool caller);
  ~LinkSession();
  LinkSession(const LinkSession&) = delete;
  LinkSession& operator=(const LinkSession&) = delete;

  // Sends one message (pickle and out-of-band buffers) on `fd`, blocking until the kernel took every byte;
  // returns the bytes on the wire. `timeout_seconds` < 0: no deadline; else LinkTimeout once that long has
  // passed with bytes still unsent (a peer that stopped reading; part of the message may have gone out, so the
  // connection is unusable). `interrupted` runs when a system call is interrupted by a signal (it may throw, to
  // abandon the call: the connection is then unusable). LinkClosed when the connection breaks.
  size_t Send(int fd, Span pickle, const std::vector<Span>& buffers, double timeout_seconds,
              const std::function<void()>& interrupted);

  // Receives and checks the next message from `fd`. `timeout_seconds` < 0: no deadline; else LinkTimeout once
  // that long has passed. LinkRejected when the peer broke the protocol (then close the connection), its
  // LinkOversized when an authenticated header announces more than `max_payload` bytes; LinkClosed when it
  // closed or broke.
  Message Receive(int fd, double timeout_seconds, uint64_t max_payload, const std::function<void()>& interrupted);

  Mac mac() const { return mac_; }
  uint64_t sent() const { return sent_; }
  uint64_t received() const { return received_; }

 private:
  class MacState;  // OpenSSL contexts of one direction

  // The payload MAC of header | parts under `state`, into `tag` (kTagBytes).
  void PayloadMac(MacState& state, char label, uint64_t counter, const uint8_t* header, const std::vector<Span>& parts,
                  size_t size, uint8_t* tag);
  void HeaderMac(MacState& state, char label, uint64_t counter, const uint8_t* header, uint8_t* tag);

  Mac mac_;
  char out_label_, in_label_;
  uint64_t sent_ = 0, received_ = 0;
  std::unique_ptr<MacState> out_, in_;
};

}  // namespace xdl_ec
