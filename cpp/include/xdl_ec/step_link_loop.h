// StepLinkLoop: the role's side of a step's direct link (xdl_ec.ps.direct) for a parameter server: receives
// the link's messages and serves every one-worker push_pull (push_pull_message.h) in ShardServer, with no
// interpreter, until a message it does not serve arrives, which it hands back to its caller (the Python
// LinkServer's thread, which serves pickled calls and the requests the core declines, then calls again).
//
// Why here and not in the binding: the loop is the link's hot path (every step of every worker), and here gtest
// drives it over a socket pair, under the sanitizers too.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "xdl_ec/link_session.h"
#include "xdl_ec/shard_server.h"

namespace xdl_ec {

class StepLinkLoop {
 public:
  // What ended a Serve: the message it hands back, and whether serving it failed after changing state.
  struct Handoff {
    enum class Failure { kNone, kRuntime, kInvalidArgument, kBadAlloc };
    LinkSession::Message message;
    // kNone: the message is the caller's to serve (not a push_pull request, malformed, or declined by the server
    // having changed nothing). Otherwise the server threw while applying it (maybe after a part was applied):
    // the caller answers it with `what` as the error of that kind, and never serves it again.
    Failure failure = Failure::kNone;
    std::string what;
  };

  // Serves the push_pull requests arriving on `fd` over `session` (one at a time, each answered before the
  // next is read) until a message it does not serve arrives, and returns it. Throws LinkSession::Receive's
  // and Send's errors (LinkClosed, LinkRejected, ...; `interrupted` as they call it): the connection is then
  // done. No deadline: a direct link's role waits for its caller's next request.
  static Handoff Serve(ShardServer& server, LinkSession& session, int fd, uint64_t max_payload,
                       const std::function<void()>& interrupted);
};

}  // namespace xdl_ec
