// libFuzzer target: PushPullMessage::ParseRequest and ParseAnswer, what a server's native path does with a
// member's step request (and a worker with its answer) once the message's MACs checked. The input is the
// message's buffers and head: a buffer count (one byte, at most 16), each buffer's length (<H), the buffers'
// bytes, then the head. Parsing either throws std::invalid_argument or gives a request whose arrays lie inside
// their buffers, whose head re-encodes to exactly the input's (the parse is strict: a fixed point).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "xdl_ec/push_pull_message.h"

namespace {

bool Inside(const void* p, size_t bytes, const xdl_ec::MessagePart& buffer) {
  const auto* at = static_cast<const uint8_t*>(p);
  return bytes == 0 || (at >= buffer.data && at + bytes <= buffer.data + buffer.size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using xdl_ec::MessagePart;
  using xdl_ec::PushPullMessage;
  if (size < 1) return 0;
  const size_t count = data[0] % 17;
  size_t at = 1;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < count; ++i) {
    if (at + 2 > size) return 0;
    sizes.push_back(data[at] | (static_cast<size_t>(data[at + 1]) << 8));
    at += 2;
  }
  // each buffer in an allocation of its own, 64-byte aligned as LinkSession receives them
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> owned;
  std::vector<MessagePart> buffers;
  for (size_t n : sizes) {
    if (at + n > size) return 0;
    owned.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64 + 64)), &std::free);
    std::memcpy(owned.back().get(), data + at, n);
    buffers.push_back({owned.back().get(), n});
    at += n;
  }
  const MessagePart head{data + at, size - at};
  try {
    const xdl_ec::PushPullRequest request = PushPullMessage::ParseRequest(head, buffers);
    size_t b = 0;
    for (const xdl_ec::PushPullPart& part : request.parts) {
      if (!Inside(part.keys, part.n * 8, buffers[b++])) xdl_ec::fuzz::Broken("keys outside their buffer");
      if (!Inside(part.grads, part.n * part.dim * 4, buffers[b++])) xdl_ec::fuzz::Broken("grads outside their buffer");
      if (part.repeats != nullptr && !Inside(part.repeats, part.n * 4, buffers[b++])) {
        xdl_ec::fuzz::Broken("repeats outside their buffer");
      }
    }
    for (const xdl_ec::PushPullPull& pull : request.pulls) {
      if (!Inside(pull.keys, pull.n * 8, buffers[b++])) xdl_ec::fuzz::Broken("pull keys outside their buffer");
    }
    for (const xdl_ec::PushPullStalePull& pull : request.stale) {
      if (!Inside(pull.keys, pull.n * 8, buffers[b++])) xdl_ec::fuzz::Broken("stale keys outside their buffer");
      if (!Inside(pull.known, pull.n * 4, buffers[b++])) xdl_ec::fuzz::Broken("known clocks outside their buffer");
    }
    if (b != buffers.size()) xdl_ec::fuzz::Broken("a buffer left unused");
    const std::string again = PushPullMessage::RequestHead(request);
    if (again.size() != head.size || std::memcmp(again.data(), head.data, head.size) != 0) {
      xdl_ec::fuzz::Broken("RequestHead(ParseRequest(x)) is not x");
    }
  } catch (const std::invalid_argument&) {
  }
  try {
    const xdl_ec::PushPullAnswer answer = PushPullMessage::ParseAnswer(head, buffers.size());
    const std::string again = PushPullMessage::AnswerHead(answer);
    if (again.size() != head.size || std::memcmp(again.data(), head.data, head.size) != 0) {
      xdl_ec::fuzz::Broken("AnswerHead(ParseAnswer(x)) is not x");
    }
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
