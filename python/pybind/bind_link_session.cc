// xdl_ec._core.LinkSession: one direct link's messages (link_session.h) on a socket's file descriptor. The GIL is
// released around the I/O and the MACs and taken back only when a signal interrupts a system call (so Ctrl-C
// still stops a caller blocked on an answer). A received message comes back as numpy uint8 views of the one
// allocation that holds it (pickle, then each out-of-band buffer, 64-byte aligned), which keeps it alive.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "link_messages.h"
#include "xdl_ec/link_session.h"

namespace py = pybind11;

namespace xdl_ec::python {

void CheckSignals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

py::tuple MessageViews(const LinkSession::Message& m) {
  // One capsule owns the allocation; every view made here keeps it (numpy's base) alive.
  auto* owner = new std::shared_ptr<uint8_t>(m.memory);
  py::capsule base(owner, [](void* p) { delete static_cast<std::shared_ptr<uint8_t>*>(p); });
  auto view = [&](const std::pair<size_t, size_t>& at) {
    return py::array(py::dtype::of<uint8_t>(), {static_cast<py::ssize_t>(at.second)}, {1}, m.memory.get() + at.first,
                     base);
  };
  py::list buffers(m.buffers.size());
  for (size_t i = 0; i < m.buffers.size(); ++i) buffers[i] = view(m.buffers[i]);
  return py::make_tuple(view(m.pickle), buffers);
}

namespace {

size_t Send(LinkSession& session, int fd, const py::buffer& pickle, const std::vector<py::buffer>& buffers,
            std::optional<double> timeout) {
  // The buffer_infos hold the exporters' buffers until the call returns.
  const py::buffer_info pickle_info = pickle.request();
  std::vector<py::buffer_info> infos;
  infos.reserve(buffers.size());
  std::vector<LinkSession::Span> spans;
  spans.reserve(buffers.size());
  for (const py::buffer& b : buffers) {
    infos.push_back(b.request());
    const py::buffer_info& info = infos.back();
    if (!PyBuffer_IsContiguous(info.view(), 'C')) {
      throw std::invalid_argument("LinkSession.send: an out-of-band buffer is not contiguous");
    }
    spans.push_back({static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size * info.itemsize)});
  }
  if (!PyBuffer_IsContiguous(pickle_info.view(), 'C')) {
    throw std::invalid_argument("LinkSession.send: the pickle is not contiguous");
  }
  const LinkSession::Span p{static_cast<const uint8_t*>(pickle_info.ptr),
                            static_cast<size_t>(pickle_info.size * pickle_info.itemsize)};
  size_t sent;
  {
    py::gil_scoped_release release;
    sent = session.Send(fd, p, spans, timeout ? std::max(*timeout, 0.0) : -1.0, CheckSignals);
  }
  return sent;
}

py::tuple Receive(LinkSession& session, int fd, std::optional<double> timeout, uint64_t max_payload) {
  LinkSession::Message m;
  {
    py::gil_scoped_release release;
    m = session.Receive(fd, timeout ? std::max(*timeout, 0.0) : -1.0, max_payload, CheckSignals);
  }
  return MessageViews(m);
}

}  // namespace

void BindLinkSession(py::module_& m) {
  py::register_exception<LinkClosed>(m, "LinkClosed", PyExc_ConnectionError);
  py::register_exception<LinkTimeout>(m, "LinkTimeout", PyExc_TimeoutError);
  const auto rejected = py::register_exception<LinkRejected>(m, "LinkRejected", PyExc_ValueError);
  py::register_exception<LinkOversized>(m, "LinkOversized", rejected.ptr());
  py::class_<LinkSession>(m, "LinkSession",
                          "One authenticated direct link's messages: framing, MACs (HMAC-SHA256 or AES-GMAC) and "
                          "socket I/O, after the handshake gave the session key")
      .def(py::init([](const py::bytes& key, int mac, bool caller) {
             const std::string k = key;
             return std::make_unique<LinkSession>(reinterpret_cast<const uint8_t*>(k.data()), k.size(),
                                                  static_cast<LinkSession::Mac>(mac), caller);
           }),
           py::arg("key"), py::arg("mac"), py::arg("caller"),
           "key: the 32-byte session key; mac: 1 HMAC-SHA256, 2 AES-GMAC for bodies of 16 KiB and more; caller: "
           "this end opened the connection")
      .def("send", &Send, py::arg("fd"), py::arg("pickle"), py::arg("buffers"), py::arg("timeout") = py::none(),
           "Sends one message (a pickle and its out-of-band buffers) on socket fd; returns its bytes on the wire. "
           "timeout: seconds (None: none), then LinkTimeout with part of the message possibly sent (close the "
           "connection); LinkClosed when the connection breaks")
      .def("receive", &Receive, py::arg("fd"), py::arg("timeout"), py::arg("max_payload"),
           "The next message from socket fd, checked: (pickle, [buffers]) as uint8 arrays of one aligned "
           "allocation. timeout: seconds (None: none), then LinkTimeout; LinkRejected "
           "when the peer broke the protocol (close the connection), LinkOversized (a LinkRejected) when its "
           "authenticated header announces more than max_payload bytes; LinkClosed when it closed")
      .def_property_readonly("mac", [](const LinkSession& s) { return static_cast<int>(s.mac()); })
      .def_property_readonly("sent", &LinkSession::sent)
      .def_property_readonly("received", &LinkSession::received);
}

}  // namespace xdl_ec::python
