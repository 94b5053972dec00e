// xdl_ec._core.ParityReceiveLoop and ParitySendLoop (parity_receive_loop.h, parity_send_loop.h): the parity
// links' loops, run by a Python thread with the GIL released; it is taken back only for their hooks (the
// receiver's refuse and warnings, the sender's connect and Ray call, once per connection or fallback send, and
// its delivery notice).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "link_messages.h"
#include "xdl_ec/delta_forwarder.h"
#include "xdl_ec/link_session.h"
#include "xdl_ec/parity_holder.h"
#include "xdl_ec/parity_receive_loop.h"
#include "xdl_ec/parity_send_loop.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

// A Python hook's exception as the send loop records it: repr(err), and is_loss(err).
ParitySendLoop::HookFailed Failed(const py::error_already_set& e, const py::function& is_loss) {
  return ParitySendLoop::HookFailed(py::repr(e.value()).cast<std::string>(), is_loss(e.value()).cast<bool>());
}

void Serve(ParityReceiveLoop& loop, LinkSession& session, int fd, int sender, const std::string& who,
           const py::function& refuse, const py::function& warn) {
  ParityReceiveLoop::Hooks hooks;
  hooks.refuse = [&refuse] {
    py::gil_scoped_acquire gil;
    return refuse().cast<bool>();
  };
  hooks.warn = [&warn](const std::string& line) {
    py::gil_scoped_acquire gil;
    warn(line);
  };
  hooks.interrupted = CheckSignals;
  py::gil_scoped_release release;
  loop.Serve(session, fd, sender, who, hooks);
}

void Run(ParitySendLoop& loop, const py::function& connect, const py::function& call, const py::object& delivered,
         const py::function& is_loss) {
  ParitySendLoop::Hooks hooks;
  hooks.connect = [&]() -> ParitySendLoop::Connection {
    py::gil_scoped_acquire gil;
    try {
      const py::object got = connect();
      if (got.is_none()) return {};
      const py::tuple pair = got.cast<py::tuple>();
      return {pair[0].cast<LinkSession*>(), pair[1].cast<int>()};
    } catch (const py::error_already_set& e) {
      throw Failed(e, is_loss);
    }
  };
  hooks.call = [&](const std::vector<uint8_t>& batches, int64_t durable) -> int64_t {
    py::gil_scoped_acquire gil;
    try {
      const py::bytes bytes(reinterpret_cast<const char*>(batches.data()), batches.size());
      return call(bytes, durable).cast<int64_t>();
    } catch (const py::error_already_set& e) {
      throw Failed(e, is_loss);
    }
  };
  if (!delivered.is_none()) {
    hooks.delivered = [&delivered] {
      py::gil_scoped_acquire gil;
      try {
        delivered();
      } catch (py::error_already_set& e) {  // a waiter's notice: never stops the link
        e.discard_as_unraisable("ParitySendLoop's delivered()");
      }
    };
  }
  hooks.interrupted = CheckSignals;
  py::gil_scoped_release release;
  loop.Run(hooks);
}

}  // namespace

void BindParityLink(py::module_& m) {
  py::class_<ParityReceiveLoop, std::shared_ptr<ParityReceiveLoop>>(
      m, "ParityReceiveLoop", "A parity receiver's serving of its connections into its ParityHolder")
      .def(py::init<std::shared_ptr<ParityHolder>, uint64_t, double>(), py::arg("holder"), py::arg("max_payload"),
           py::arg("call_timeout"))
      .def("serve", &Serve, py::arg("session"), py::arg("fd"), py::arg("sender"), py::arg("who"), py::arg("refuse"),
           py::arg("warn"),
           "Serves sender's requests on socket fd over session (a LinkSession) until the connection ends: returns "
           "once refuse() is true at a request, or after answering an oversized one; warn(line) for each refused "
           "batch or request. LinkRejected (its text names who) for a peer that broke the protocol; LinkClosed, "
           "LinkTimeout when the connection broke or stalled")
      .def_property("max_payload", &ParityReceiveLoop::max_payload, &ParityReceiveLoop::set_max_payload)
      .def_property_readonly("batches_received", &ParityReceiveLoop::batches_received)
      .def_property_readonly("bytes_received", &ParityReceiveLoop::bytes_received);

  py::class_<ParitySendLoop, std::shared_ptr<ParitySendLoop>>(
      m, "ParitySendLoop", "One parity link's sending of a DeltaForwarder's batches to one remote holder")
      .def(py::init<std::shared_ptr<DeltaForwarder>, int, uint64_t, double, double, double>(), py::arg("forwarder"),
           py::arg("holder"), py::arg("link"), py::arg("send_interval"), py::arg("poll_seconds"),
           py::arg("call_timeout"))
      .def("run", &Run, py::arg("connect"), py::arg("call"), py::arg("delivered"), py::arg("is_loss"),
           "Runs until stop(). connect() -> (session, fd) of a connection the loop then owns (keep the session "
           "alive until the next connect), or None when the receiver cannot be reached; call(bytes, durable) -> "
           "applied carries a send instead then; delivered() (or None) after each send was acked or failed; "
           "is_loss(err): whether a hook's exception is the holder's loss")
      .def("flush", &ParitySendLoop::Flush)
      .def("stop", &ParitySendLoop::Stop)
      .def_property_readonly("sends", &ParitySendLoop::sends)
      .def_property_readonly("bytes_sent", &ParitySendLoop::bytes_sent)
      .def_property_readonly("over_call", &ParitySendLoop::over_call);
}

}  // namespace xdl_ec::python
