#include "xdl_ec/step_link_loop.h"

#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

#include "xdl_ec/push_pull_message.h"

namespace xdl_ec {
namespace {

// The answer's arrays as the message's buffers, in the form's order (push_pull_message.h).
std::vector<LinkSession::Span> AnswerBuffers(const PushPullAnswer& answer) {
  std::vector<LinkSession::Span> out;
  out.reserve(answer.rows.size() + 3 * answer.stale.size());
  for (const auto& r : answer.rows) out.push_back({reinterpret_cast<const uint8_t*>(r.data.get()), r.floats * 4});
  for (const auto& stale : answer.stale) {
    out.push_back({reinterpret_cast<const uint8_t*>(stale.rows.data.get()), stale.rows.floats * 4});
    out.push_back({reinterpret_cast<const uint8_t*>(stale.clocks.get()), stale.n * 4});
    out.push_back({stale.sent_mask.get(), stale.n});
  }
  return out;
}

}  // namespace

StepLinkLoop::Handoff StepLinkLoop::Serve(ShardServer& server, LinkSession& session, int fd, uint64_t max_payload,
                                          const std::function<void()>& interrupted) {
  using Failure = Handoff::Failure;
  for (;;) {
    Handoff handoff;
    handoff.message = session.Receive(fd, -1.0, max_payload, interrupted);
    const LinkSession::Message& m = handoff.message;
    const MessagePart head{m.memory.get() + m.pickle.first, m.pickle.second};
    if (!PushPullMessage::IsRequest(head)) return handoff;
    std::vector<MessagePart> buffers;
    buffers.reserve(m.buffers.size());
    for (const auto& [offset, size] : m.buffers) buffers.push_back({m.memory.get() + offset, size});
    PushPullRequest request;
    try {
      request = PushPullMessage::ParseRequest(head, buffers);
    } catch (const std::invalid_argument&) {
      return handoff;  // malformed: the caller parses it again, which says why
    }
    PushPullAnswer answer;
    try {
      if (!server.Serve(request, &answer)) return handoff;  // declined, nothing changed: the caller serves it
    } catch (const std::invalid_argument& e) {
      // thrown by a shard or the forwarder, maybe after a part was applied: answered, never served again
      handoff.failure = Failure::kInvalidArgument;
      handoff.what = e.what();
      return handoff;
    } catch (const std::bad_alloc& e) {
      handoff.failure = Failure::kBadAlloc;
      handoff.what = e.what();
      return handoff;
    } catch (const std::exception& e) {
      handoff.failure = Failure::kRuntime;
      handoff.what = e.what();
      return handoff;
    }
    const std::string reply = PushPullMessage::AnswerHead(answer);
    session.Send(fd, {reinterpret_cast<const uint8_t*>(reply.data()), reply.size()}, AnswerBuffers(answer), -1.0,
                 interrupted);
  }
}

}  // namespace xdl_ec
