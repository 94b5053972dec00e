// libFuzzer target: LinkSession::Receive, what a direct link does with a member's bytes once their MACs check
// (an authenticated peer can still send any header and body). The input is a message without its MACs:
// pickle bytes (<Q), buffer count (<I), then the body; this target adds the MACs a member would (an independent
// HMAC-SHA256, not LinkSession's) and feeds it through a socket. Receive either throws LinkRejected or returns
// a pickle and buffers that lie inside the body, each buffer 64-byte aligned, in order and not overlapping.
#include <openssl/evp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_input.h"
#include "xdl_ec/link_session.h"

namespace {

constexpr uint8_t kKey[32] = {7,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                              16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

void Put(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// HMAC-SHA256(kKey, "C" | kind | counter 0 | header | body), appended to `out`.
void Tag(std::vector<uint8_t>& out, char kind, const uint8_t* header, const uint8_t* body, size_t body_size) {
  std::vector<uint8_t> signed_bytes = {'C', static_cast<uint8_t>(kind)};
  Put(signed_bytes, 0, 8);
  signed_bytes.insert(signed_bytes.end(), header, header + xdl_ec::LinkSession::kHeaderBytes);
  signed_bytes.insert(signed_bytes.end(), body, body + body_size);
  uint8_t tag[32];
  size_t len = 0;
  if (!EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, kKey, sizeof(kKey), signed_bytes.data(),
                 signed_bytes.size(), tag, sizeof(tag), &len)) {
    xdl_ec::fuzz::Broken("HMAC failed");
  }
  out.insert(out.end(), tag, tag + len);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using xdl_ec::LinkSession;
  if (size < 12) return 0;
  const uint8_t* body = data + 12;
  const size_t body_size = size - 12;
  std::vector<uint8_t> header(data, data + 12);  // pickle bytes, buffer count, then the body's true size
  Put(header, body_size, 8);
  std::vector<uint8_t> wire(header);
  Tag(wire, 'H', header.data(), nullptr, 0);
  wire.insert(wire.end(), body, body + body_size);
  Tag(wire, 'P', header.data(), body, body_size);

  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) xdl_ec::fuzz::Broken("socketpair failed");
  const int buffer = 1 << 20;
  setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  if (send(fds[0], wire.data(), wire.size(), 0) != static_cast<ssize_t>(wire.size())) {
    xdl_ec::fuzz::Broken("the message did not fit the socket");
  }
  close(fds[0]);
  LinkSession role(kKey, sizeof(kKey), LinkSession::Mac::kHmacSha256, false);
  try {
    const LinkSession::Message m = role.Receive(fds[1], 5.0, 1 << 20, [] {});
    const size_t begin = LinkSession::kBodyOffset, end = begin + body_size;
    if (m.pickle.first < begin || m.pickle.first + m.pickle.second > end)
      xdl_ec::fuzz::Broken("the pickle is outside the body");
    size_t at = m.pickle.first + m.pickle.second;
    for (const auto& [offset, bytes] : m.buffers) {
      if (offset < at || offset + bytes > end) xdl_ec::fuzz::Broken("a buffer overlaps another or leaves the body");
      if (reinterpret_cast<uintptr_t>(m.memory.get() + offset) % LinkSession::kAlign) {
        xdl_ec::fuzz::Broken("a buffer is not aligned");
      }
      if (bytes && m.memory.get()[offset + bytes - 1] != body[offset + bytes - 1 - begin]) {
        xdl_ec::fuzz::Broken("a buffer's bytes are not the body's");
      }
      at = offset + bytes;
    }
  } catch (const xdl_ec::LinkRejected&) {
  }
  close(fds[1]);
  return 0;
}
