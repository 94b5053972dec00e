#include "xdl_ec/link_session.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace xdl_ec {
namespace {

constexpr size_t kIovMax = 1024;  // Linux's UIO_MAXIOV
constexpr uint8_t kZeros[LinkSession::kAlign] = {};
constexpr size_t kGmacTag = 16;
const char kGmacKeyLabel[] = "xdl-ec direct gmac key";

void PutLe(uint8_t* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t GetLe(const uint8_t* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

[[noreturn]] void Fail(const char* what) {
  throw std::runtime_error(std::string("LinkSession: OpenSSL failed in ") + what);
}

using Clock = std::chrono::steady_clock;

Clock::time_point Deadline(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits until `fd` is ready for `events`, at most until `deadline` (none: forever); false when it passed.
bool Wait(int fd, short events, bool has_deadline, Clock::time_point deadline,
          const std::function<void()>& interrupted) {
  for (;;) {
    int ms = -1;
    if (has_deadline) {
      const auto left = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      ms = static_cast<int>(std::min(std::ceil(left), static_cast<double>(INT_MAX)));
    }
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, ms);
    if (r > 0) return true;
    if (r < 0 && errno == EINTR) {
      interrupted();
      continue;
    }
    if (r < 0) throw LinkClosed(std::string("poll failed: ") + std::strerror(errno));
  }
}

void ReadAll(int fd, uint8_t* out, size_t size, bool has_deadline, Clock::time_point deadline,
             const std::function<void()>& interrupted) {
  size_t got = 0;
  while (got < size) {
    if (has_deadline && !Wait(fd, POLLIN, true, deadline, interrupted)) {
      throw LinkTimeout("timed out after " + std::to_string(got) + " of " + std::to_string(size) + " bytes");
    }
    // Without a deadline one blocking call takes a whole message (one wake-up, however many segments).
    const ssize_t r = recv(fd, out + got, size - got, has_deadline ? MSG_DONTWAIT : MSG_WAITALL);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      throw LinkClosed("connection closed after " + std::to_string(got) + " of " + std::to_string(size) + " bytes");
    } else if (errno == EINTR) {
      interrupted();
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!has_deadline) Wait(fd, POLLIN, false, deadline, interrupted);  // a non-blocking socket
    } else {
      throw LinkClosed(std::string("connection broke: ") + std::strerror(errno) + " after " + std::to_string(got) +
                       " of " + std::to_string(size) + " bytes");
    }
  }
}

void WriteAll(int fd, std::vector<iovec>& iov, bool has_deadline, Clock::time_point deadline,
              const std::function<void()>& interrupted) {
  size_t i = 0, sent = 0;
  while (i < iov.size()) {
    if (iov[i].iov_len == 0) {
      ++i;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = &iov[i];
    msg.msg_iovlen = std::min(iov.size() - i, kIovMax);
    // With a deadline never block in the kernel: a peer that stopped reading must not hold this thread forever.
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | (has_deadline ? MSG_DONTWAIT : 0));
    if (n < 0) {
      if (errno == EINTR) {
        interrupted();
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!Wait(fd, POLLOUT, has_deadline, deadline, interrupted)) {
          size_t left = 0;
          for (size_t j = i; j < iov.size(); ++j) left += iov[j].iov_len;
          throw LinkTimeout("timed out after sending " + std::to_string(sent) + " of " + std::to_string(sent + left) +
                            " bytes (the peer stopped reading)");
        }
      } else {
        throw LinkClosed(std::string("connection broke: ") + std::strerror(errno));
      }
      continue;
    }
    sent += static_cast<size_t>(n);
    while (n > 0 && i < iov.size()) {
      const size_t take = std::min(static_cast<size_t>(n), iov[i].iov_len);
      iov[i].iov_base = static_cast<uint8_t*>(iov[i].iov_base) + take;
      iov[i].iov_len -= take;
      n -= static_cast<ssize_t>(take);
      if (iov[i].iov_len == 0) ++i;
    }
  }
}

}  // namespace

// HMAC-SHA256 under S and, with AES-GMAC, AES-256-GCM under the GMAC key: keyed once, re-initialised per message.
class LinkSession::MacState {
 public:
  MacState(const uint8_t* key, const uint8_t* gmac_key) {
    mac_ = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    hmac_ = mac_ ? EVP_MAC_CTX_new(mac_) : nullptr;
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                 OSSL_PARAM_construct_end()};
    // a throwing constructor runs no destructor: free what was made before failing
    if (!hmac_ || EVP_MAC_init(hmac_, key, kKeyBytes, params) != 1) {
      Release();
      Fail("HMAC set-up");
    }
    if (gmac_key != nullptr) {
      gcm_ = EVP_CIPHER_CTX_new();
      if (!gcm_ || EVP_EncryptInit_ex(gcm_, EVP_aes_256_gcm(), nullptr, gmac_key, nullptr) != 1) {
        Release();
        Fail("AES-GCM set-up");
      }
    }
  }
  ~MacState() { Release(); }

  void HmacBegin() {
    if (EVP_MAC_init(hmac_, nullptr, 0, nullptr) != 1) Fail("HMAC init");  // the key set at construction
  }
  void HmacUpdate(const uint8_t* data, size_t size) {
    if (size && EVP_MAC_update(hmac_, data, size) != 1) Fail("HMAC update");
  }
  void HmacEnd(uint8_t* tag) {
    size_t len = 0;
    if (EVP_MAC_final(hmac_, tag, &len, kTagBytes) != 1 || len != kTagBytes) Fail("HMAC final");
  }
  void GmacBegin(const uint8_t* nonce) {
    if (EVP_EncryptInit_ex(gcm_, nullptr, nullptr, nullptr, nonce) != 1) Fail("GCM init");
  }
  void GmacUpdate(const uint8_t* data, size_t size) {
    while (size) {
      const int chunk = static_cast<int>(std::min<size_t>(size, 1 << 30));
      int out = 0;
      if (EVP_EncryptUpdate(gcm_, nullptr, &out, data, chunk) != 1) Fail("GCM update");
      data += chunk;
      size -= static_cast<size_t>(chunk);
    }
  }
  void GmacEnd(uint8_t* tag) {
    uint8_t none[16];
    int out = 0;
    if (EVP_EncryptFinal_ex(gcm_, none, &out) != 1 ||
        EVP_CIPHER_CTX_ctrl(gcm_, EVP_CTRL_GCM_GET_TAG, kGmacTag, tag) != 1) {
      Fail("GCM final");
    }
    std::memset(tag + kGmacTag, 0, kTagBytes - kGmacTag);
  }
  bool has_gmac() const { return gcm_ != nullptr; }

 private:
  void Release() {
    EVP_CIPHER_CTX_free(gcm_);
    EVP_MAC_CTX_free(hmac_);
    EVP_MAC_free(mac_);
    gcm_ = nullptr, hmac_ = nullptr, mac_ = nullptr;
  }

  EVP_MAC* mac_ = nullptr;
  EVP_MAC_CTX* hmac_ = nullptr;
  EVP_CIPHER_CTX* gcm_ = nullptr;
};

LinkSession::LinkSession(const uint8_t* key, size_t key_size, Mac mac, bool caller)
    : mac_(mac), out_label_(caller ? 'C' : 'R'), in_label_(caller ? 'R' : 'C') {
  if (key == nullptr || key_size != kKeyBytes) {
    throw std::invalid_argument("LinkSession: the session key must be " + std::to_string(kKeyBytes) + " bytes, got " +
                                std::to_string(key_size));
  }
  if (mac != Mac::kHmacSha256 && mac != Mac::kAesGmac) {
    throw std::invalid_argument("LinkSession: mac must be 1 (HMAC-SHA256) or 2 (AES-GMAC), got " +
                                std::to_string(static_cast<int>(mac)));
  }
  uint8_t gmac_key[kTagBytes];
  const uint8_t* gmac = nullptr;
  if (mac == Mac::kAesGmac) {  // the HMAC key never doubles as an AES key
    MacState derive(key, nullptr);
    derive.HmacBegin();
    derive.HmacUpdate(reinterpret_cast<const uint8_t*>(kGmacKeyLabel), sizeof(kGmacKeyLabel) - 1);
    derive.HmacEnd(gmac_key);
    gmac = gmac_key;
  }
  out_ = std::make_unique<MacState>(key, gmac);
  in_ = std::make_unique<MacState>(key, gmac);
  OPENSSL_cleanse(gmac_key, sizeof(gmac_key));
}

LinkSession::~LinkSession() = default;

void LinkSession::HeaderMac(MacState& state, char label, uint64_t counter, const uint8_t* header, uint8_t* tag) {
  uint8_t prefix[10] = {static_cast<uint8_t>(label), 'H'};
  PutLe(prefix + 2, counter, 8);
  state.HmacBegin();
  state.HmacUpdate(prefix, sizeof(prefix));
  state.HmacUpdate(header, kHeaderBytes);
  state.HmacEnd(tag);
}

void LinkSession::PayloadMac(MacState& state, char label, uint64_t counter, const uint8_t* header,
                             const std::vector<Span>& parts, size_t size, uint8_t* tag) {
  if (state.has_gmac() && size >= kGmacMinBytes) {
    uint8_t nonce[12] = {static_cast<uint8_t>(label), 'P', 0, 0};
    PutLe(nonce + 4, counter, 8);
    state.GmacBegin(nonce);
    state.GmacUpdate(header, kHeaderBytes);
    for (const Span& p : parts) state.GmacUpdate(p.data, p.size);
    state.GmacEnd(tag);
    return;
  }
  uint8_t prefix[10] = {static_cast<uint8_t>(label), 'P'};
  PutLe(prefix + 2, counter, 8);
  state.HmacBegin();
  state.HmacUpdate(prefix, sizeof(prefix));
  state.HmacUpdate(header, kHeaderBytes);
  for (const Span& p : parts) state.HmacUpdate(p.data, p.size);
  state.HmacEnd(tag);
}

size_t LinkSession::Send(int fd, Span pickle, const std::vector<Span>& buffers, double timeout_seconds,
                         const std::function<void()>& interrupted) {
  if (buffers.size() > kMaxBuffers) {
    throw std::invalid_argument("LinkSession.send: " + std::to_string(buffers.size()) + " buffers, at most " +
                                std::to_string(kMaxBuffers));
  }
  std::vector<uint8_t> lengths(8 * buffers.size());
  std::vector<Span> body;
  body.reserve(2 + 2 * buffers.size());
  body.push_back({lengths.data(), lengths.size()});
  body.push_back(pickle);
  size_t offset = lengths.size() + pickle.size;
  for (size_t i = 0; i < buffers.size(); ++i) {
    PutLe(lengths.data() + 8 * i, buffers[i].size, 8);
    const size_t pad = (kAlign - offset % kAlign) % kAlign;
    if (pad) body.push_back({kZeros, pad});
    body.push_back(buffers[i]);
    offset += pad + buffers[i].size;
  }
  uint8_t header[kHeaderBytes], head_tag[kTagBytes], tag[kTagBytes];
  PutLe(header, pickle.size, 8);
  PutLe(header + 8, buffers.size(), 4);
  PutLe(header + 12, offset, 8);
  HeaderMac(*out_, out_label_, sent_, header, head_tag);
  PayloadMac(*out_, out_label_, sent_, header, body, offset, tag);
  std::vector<iovec> iov;
  iov.reserve(body.size() + 3);
  iov.push_back({header, kHeaderBytes});
  iov.push_back({head_tag, kTagBytes});
  for (const Span& p : body) iov.push_back({const_cast<uint8_t*>(p.data), p.size});
  iov.push_back({tag, kTagBytes});
  const bool has_deadline = timeout_seconds >= 0;
  WriteAll(fd, iov, has_deadline, has_deadline ? Deadline(timeout_seconds) : Clock::time_point(), interrupted);
  ++sent_;
  return kHeaderBytes + offset + 2 * kTagBytes;
}

LinkSession::Message LinkSession::Receive(int fd, double timeout_seconds, uint64_t max_payload,
                                          const std::function<void()>& interrupted) {
  const bool has_deadline = timeout_seconds >= 0;
  const auto deadline = has_deadline ? Deadline(timeout_seconds) : Clock::time_point();
  uint8_t head[kHeaderBytes + kTagBytes], expected[kTagBytes];
  ReadAll(fd, head, sizeof(head), has_deadline, deadline, interrupted);
  HeaderMac(*in_, in_label_, received_, head, expected);
  if (CRYPTO_memcmp(expected, head + kHeaderBytes, kTagBytes) != 0) {
    throw LinkRejected("a message header failed its MAC (altered, replayed or out of order)");
  }
  const uint64_t pickle_size = GetLe(head, 8), count = GetLe(head + 8, 4), total = GetLe(head + 12, 8);
  if (count > kMaxBuffers || total > max_payload || pickle_size > total || 8 * count > total - pickle_size) {
    const std::string what = "a message of " + std::to_string(total) + " bytes and " + std::to_string(count) +
                             " buffers (at most " + std::to_string(max_payload) + " bytes, " +
                             std::to_string(kMaxBuffers) + " buffers)";
    if (total > max_payload) throw LinkOversized(what);
    throw LinkRejected(what);
  }
  Message m;
  m.size = (kBodyOffset + total + kTagBytes + kAlign - 1) / kAlign * kAlign;
  void* memory = std::aligned_alloc(kAlign, m.size);
  if (memory == nullptr) throw std::bad_alloc();
  m.memory = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(memory), [](uint8_t* p) { std::free(p); });
  uint8_t* header = m.memory.get() + kBodyOffset - kHeaderBytes;
  uint8_t* body = m.memory.get() + kBodyOffset;
  std::memcpy(header, head, kHeaderBytes);
  ReadAll(fd, body, total + kTagBytes, has_deadline, deadline, interrupted);
  PayloadMac(*in_, in_label_, received_, header, {{body, total}}, total, expected);
  if (CRYPTO_memcmp(expected, body + total, kTagBytes) != 0) {
    throw LinkRejected("a message failed its MAC (altered on the way)");
  }
  size_t offset = 8 * count;
  m.pickle = {kBodyOffset + offset, pickle_size};
  offset += pickle_size;
  m.buffers.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t n = GetLe(body + 8 * i, 8);
    offset += (kAlign - offset % kAlign) % kAlign;
    if (offset > total || n > total - offset) throw LinkRejected("a message's buffers overrun its body");
    m.buffers.emplace_back(kBodyOffset + offset, n);
    offset += n;
  }
  ++received_;
  return m;
}

}  // namespace xdl_ec
