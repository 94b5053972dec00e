// xdl_ec._core.ShardServer (shard_server.h) and the push_pull wire form (push_pull_message.h): numpy and
// Python tuples in and out. ShardServer.serve runs a direct link's serving loop (step_link_loop.h) with the GIL
// released, and hands Python the first message it does not serve.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "link_messages.h"
#include "xdl_ec/link_session.h"
#include "xdl_ec/push_pull_message.h"
#include "xdl_ec/shard_server.h"
#include "xdl_ec/step_link_loop.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

using Keys = py::array_t<int64_t, py::array::c_style>;
using Floats = py::array_t<float, py::array::c_style>;
using Counts = py::array_t<uint32_t, py::array::c_style>;
using Clocks = py::array_t<int32_t, py::array::c_style>;

// Python takes the server's lock at once when it is free, keeping the GIL (a try_lock: what a step's Python
// path pays), else waits with the GIL released: its holder may be the native path, which never waits for the
// GIL but may need it (a shard's restore handler), or a Python thread that needs the GIL to finish.
std::unique_lock<std::recursive_mutex> Hold(ShardServer& server) {
  std::unique_lock<std::recursive_mutex> lock(server.mutex(), std::try_to_lock);
  if (!lock.owns_lock()) {
    py::gil_scoped_release release;
    lock.lock();
  }
  return lock;
}

// The server's lock as Python uses threading.RLock: `with server.lock:`, acquire / release.
struct ServerLock {
  std::shared_ptr<ShardServer> server;

  bool Acquire(bool blocking) {
    if (!blocking) return server->mutex().try_lock();
    Hold(*server).release();  // stays locked until Release
    return true;
  }
  void Release() { server->mutex().unlock(); }
};

// A ShardServer method called with the lock held as Hold takes it (the method's own lock is then reentrant).
template <typename R, typename... Args>
auto Held(R (ShardServer::*method)(Args...)) {
  return [method](ShardServer& server, Args... args) {
    const auto lock = Hold(server);
    return (server.*method)(args...);
  };
}
template <typename R, typename... Args>
auto Held(R (ShardServer::*method)(Args...) const) {
  return [method](const ShardServer& server, Args... args) {
    const auto lock = Hold(const_cast<ShardServer&>(server));
    return (server.*method)(args...);
  };
}

MessagePart PartOf(const py::buffer_info& info) {
  return {static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size * info.itemsize)};
}

// StepLinkLoop::Serve with the GIL released; returns (head, buffers, failure): the message it handed back, and
// failure (an exception to answer with, or None) when serving it failed.
py::tuple Serve(ShardServer& server, LinkSession& session, int fd, uint64_t max_payload) {
  StepLinkLoop::Handoff handoff;
  {
    py::gil_scoped_release release;
    handoff = StepLinkLoop::Serve(server, session, fd, max_payload, CheckSignals);
  }
  const py::tuple message = MessageViews(handoff.message);
  py::object error = py::none();
  using Failure = StepLinkLoop::Handoff::Failure;
  if (handoff.failure != Failure::kNone) {
    const char* type = handoff.failure == Failure::kInvalidArgument ? "ValueError"
                       : handoff.failure == Failure::kBadAlloc      ? "MemoryError"
                                                                    : "RuntimeError";
    error = py::module_::import("builtins").attr(type)(handoff.what);
  }
  return py::make_tuple(message[0], message[1], error);
}

// The table names of a group's part or pull (a tuple of str), or false.
bool TablesOf(const py::handle& item, std::vector<std::string>* tables) {
  if (!py::isinstance<py::tuple>(item)) return false;
  for (const py::handle& name : py::reinterpret_borrow<py::tuple>(item)) {
    if (!py::isinstance<py::str>(name)) return false;
    tables->push_back(name.cast<std::string>());
  }
  return !tables->empty();
}

// A group's offsets (tables + 1 int64s rising from 0 to `n` keys), or null: ShardServer::Serve reads them as
// they are (a parsed message's were checked by ParseRequest; these are checked here).
const int64_t* GroupOffsets(const py::handle& item, size_t tables, size_t n) {
  if (!py::isinstance<Keys>(item)) return nullptr;
  const Keys offsets = py::reinterpret_borrow<Keys>(item);
  if (offsets.ndim() != 1 || static_cast<size_t>(offsets.shape(0)) != tables + 1) return nullptr;
  const int64_t* o = offsets.data();
  if (o[0] != 0 || static_cast<size_t>(o[tables]) != n) return nullptr;
  for (size_t t = 0; t < tables; ++t) {
    if (o[t + 1] < o[t]) return nullptr;
  }
  return o;
}

// A group part (tables, offsets, keys, grads, first seq) of a push_pull's parts into `request` and `arrays`;
// false when it is not in the wire's types.
bool AddGroupPart(const py::tuple& part, PushPullRequest* request, py::list* arrays) {
  PushPullGroupPart p;
  if (part.size() != 5 || !TablesOf(part[0], &p.tables) || !py::isinstance<Keys>(part[2]) ||
      !py::isinstance<Floats>(part[3]) || !py::isinstance<py::int_>(part[4])) {
    return false;
  }
  const Keys keys = py::reinterpret_borrow<Keys>(part[2]);
  const Floats grads = py::reinterpret_borrow<Floats>(part[3]);
  if (keys.ndim() != 1 || grads.ndim() != 2 || grads.shape(0) != keys.shape(0)) return false;
  p.first_seq = part[4].cast<int64_t>();
  p.n = static_cast<size_t>(keys.shape(0));
  p.dim = static_cast<uint32_t>(grads.shape(1));
  p.offsets = GroupOffsets(part[1], p.tables.size(), p.n);
  if (p.offsets == nullptr) return false;
  p.keys = keys.data();
  p.grads = grads.data();
  arrays->append(part[1]);
  arrays->append(keys);
  arrays->append(grads);
  request->group_parts.push_back(std::move(p));
  return true;
}

// A group pull (tables, offsets, keys, dim) into `request` and `arrays`; false when not in the wire's types.
bool AddGroupPull(const py::tuple& pull, PushPullRequest* request, py::list* arrays) {
  PushPullGroupPull p;
  if (pull.size() != 4 || !TablesOf(pull[0], &p.tables) || !py::isinstance<Keys>(pull[2]) ||
      !py::isinstance<py::int_>(pull[3])) {
    return false;
  }
  const Keys keys = py::reinterpret_borrow<Keys>(pull[2]);
  const int64_t dim = pull[3].cast<int64_t>();
  if (keys.ndim() != 1 || dim < 1 || dim > static_cast<int64_t>(UINT32_MAX)) return false;
  p.n = static_cast<size_t>(keys.shape(0));
  p.dim = static_cast<uint32_t>(dim);
  p.offsets = GroupOffsets(pull[1], p.tables.size(), p.n);
  if (p.offsets == nullptr) return false;
  p.keys = keys.data();
  arrays->append(pull[1]);
  arrays->append(keys);
  request->group_pulls.push_back(std::move(p));
  return true;
}

// The request of push_pull's (or push_pull_stale's) arguments, its arrays pointing into theirs (alive while the
// arguments are), and those arrays in the wire's order into *arrays; false when the arguments are not already in
// the wire's types (int64 keys, float32 (n, dim) grads, uint32 repeats, C-contiguous; int seqs, str tables): the
// caller then sends them as a pickle (or serves them in Python), and the server's general path checks them. A part
// whose first item is a tuple of tables is a group part (tables, offsets, keys, grads, first seq), a pull's a group
// pull (tables, offsets, keys, dim); the wire applies group parts after parts and answers group pulls after pulls,
// so a plain part or pull after a group one is refused (the pickle keeps the caller's order).
bool BuildRequest(const py::sequence& parts, int64_t step, int32_t worker, int32_t participants,
                  const py::sequence& requests, const std::optional<py::sequence>& stale, int64_t epoch,
                  PushPullRequest& request, py::list& arrays) {
  request.step = step;
  request.worker = worker;
  request.participants = participants;
  request.stale_call = stale.has_value();
  request.epoch = epoch;
  py::list group_arrays, group_pull_arrays;
  for (const py::handle& item : parts) {
    if (!py::isinstance<py::tuple>(item)) return false;
    const py::tuple part = py::reinterpret_borrow<py::tuple>(item);
    if (part.size() > 0 && py::isinstance<py::tuple>(part[0])) {
      if (!AddGroupPart(part, &request, &group_arrays)) return false;
      continue;
    }
    if (!request.group_parts.empty()) return false;  // a part after a group part: see above
    if (part.size() != 4 && part.size() != 5) return false;
    const bool repeated = part.size() == 5 && !part[4].is_none();
    if (!py::isinstance<py::str>(part[0]) || !py::isinstance<py::int_>(part[3]) || !py::isinstance<Keys>(part[1]) ||
        !py::isinstance<Floats>(part[2]) || (repeated && !py::isinstance<Counts>(part[4]))) {
      return false;
    }
    const Keys keys = py::reinterpret_borrow<Keys>(part[1]);
    const Floats grads = py::reinterpret_borrow<Floats>(part[2]);
    if (keys.ndim() != 1 || grads.ndim() != 2 || grads.shape(0) != keys.shape(0)) return false;
    PushPullPart p;
    p.table = part[0].cast<std::string>();
    p.seq = part[3].cast<int64_t>();
    p.n = static_cast<size_t>(keys.shape(0));
    p.dim = static_cast<uint32_t>(grads.shape(1));
    p.keys = keys.data();
    p.grads = grads.data();
    arrays.append(keys);
    arrays.append(grads);
    if (repeated) {
      const Counts counts = py::reinterpret_borrow<Counts>(part[4]);
      if (counts.ndim() != 1 || counts.shape(0) != keys.shape(0)) return false;
      p.repeats = counts.data();
      arrays.append(counts);
    }
    request.parts.push_back(std::move(p));
  }
  for (const py::handle& item : requests) {
    if (!py::isinstance<py::tuple>(item)) return false;
    const py::tuple pull = py::reinterpret_borrow<py::tuple>(item);
    if (pull.size() > 0 && py::isinstance<py::tuple>(pull[0])) {
      if (!AddGroupPull(pull, &request, &group_pull_arrays)) return false;
      continue;
    }
    if (!request.group_pulls.empty()) return false;  // a pull after a group pull
    if (pull.size() != 2 || !py::isinstance<py::str>(pull[0]) || !py::isinstance<Keys>(pull[1])) return false;
    const Keys keys = py::reinterpret_borrow<Keys>(pull[1]);
    if (keys.ndim() != 1) return false;
    request.pulls.push_back({pull[0].cast<std::string>(), keys.data(), static_cast<size_t>(keys.shape(0))});
    arrays.append(keys);
  }
  for (const py::handle& item : stale.value_or(py::list())) {  // (table, keys, known clocks, staleness)
    if (!py::isinstance<py::tuple>(item)) return false;
    const py::tuple pull = py::reinterpret_borrow<py::tuple>(item);
    if (pull.size() != 4 || !py::isinstance<py::str>(pull[0]) || !py::isinstance<Keys>(pull[1]) ||
        !py::isinstance<Clocks>(pull[2]) || !py::isinstance<py::int_>(pull[3])) {
      return false;
    }
    const Keys keys = py::reinterpret_borrow<Keys>(pull[1]);
    const Clocks known = py::reinterpret_borrow<Clocks>(pull[2]);
    const int64_t staleness = pull[3].cast<int64_t>();
    if (keys.ndim() != 1 || known.ndim() != 1 || known.shape(0) != keys.shape(0) || staleness < 0 ||
        staleness > static_cast<int64_t>(UINT32_MAX)) {
      return false;
    }
    request.stale.push_back({pull[0].cast<std::string>(), keys.data(), static_cast<size_t>(keys.shape(0)), known.data(),
                             static_cast<uint32_t>(staleness)});
    arrays.append(keys);
    arrays.append(known);
  }
  for (const py::handle& a : group_arrays) arrays.append(a);
  for (const py::handle& a : group_pull_arrays) arrays.append(a);
  return true;
}

// (head bytes, [arrays]) of a push_pull request, or None when BuildRequest refuses its arguments or they are over
// the form's limits (parts, pulls, a name's bytes): the pickle carries them.
py::object RequestMessage(const py::sequence& parts, int64_t step, int32_t worker, int32_t participants,
                          const py::sequence& requests, const std::optional<py::sequence>& stale, int64_t epoch) {
  PushPullRequest request;
  py::list arrays;
  if (!BuildRequest(parts, step, worker, participants, requests, stale, epoch, request, arrays)) return py::none();
  try {
    return py::make_tuple(py::bytes(PushPullMessage::RequestHead(request)), arrays);
  } catch (const std::invalid_argument&) {
    return py::none();
  }
}

// A one-worker push_pull served by the core in this process (ShardServer::Serve, the GIL released), as a direct
// link's loop serves it: (ack (server, worker, seq, step, applied, durable) or None, [rows per pull, then per group
// pull]), or None when the arguments are not in the wire's types or the core declines them (nothing changed: the
// caller's Python path serves them). The one-process backend's servers take their steps' requests here.
py::object ServeCall(ShardServer& server, const py::sequence& parts, int64_t step, int32_t worker,
                     const py::sequence& requests) {
  PushPullRequest request;
  py::list arrays;  // keeps nothing alive beyond the arguments: their arrays are the request's
  if (!BuildRequest(parts, step, worker, 1, requests, std::nullopt, 0, request, arrays)) return py::none();
  PushPullAnswer answer;
  bool served;
  {
    py::gil_scoped_release release;
    served = server.Serve(request, &answer);
  }
  if (!served) return py::none();
  py::object ack = py::none();
  if (answer.has_ack) {
    ack = py::make_tuple(answer.server, answer.worker, answer.seq, answer.step, answer.applied, answer.durable);
  }
  py::list rows;
  for (PushPullAnswer::Rows& r : answer.rows) {
    const auto dim = static_cast<py::ssize_t>(r.dim);
    const auto n = static_cast<py::ssize_t>(dim == 0 ? 0 : r.floats / r.dim);
    float* data = r.data.release();
    const py::capsule owner(data, [](void* p) { delete[] static_cast<float*>(p); });
    rows.append(py::array_t<float>({n, dim}, data, owner));
  }
  return py::make_tuple(ack, rows);
}

// push_pull's arguments (parts, step, worker, participants, requests) from a request message, its arrays
// views of the message's buffers. ValueError when it is malformed.
py::tuple ParseRequest(const py::buffer& head, const std::vector<py::array>& buffers) {
  const py::buffer_info head_info = head.request();
  std::vector<MessagePart> parts;
  std::vector<py::buffer_info> infos;
  infos.reserve(buffers.size());
  for (const py::array& b : buffers) {
    infos.push_back(b.request());
    parts.push_back(PartOf(infos.back()));
  }
  const PushPullRequest request = PushPullMessage::ParseRequest(PartOf(head_info), parts);
  auto typed = [&](size_t b, const py::dtype& dtype) { return buffers[b].attr("view")(dtype); };
  py::list push_parts;
  size_t b = 0;
  for (const PushPullPart& p : request.parts) {
    py::object keys = typed(b++, py::dtype::of<int64_t>());
    py::object grads = typed(b++, py::dtype::of<float>())
                           .attr("reshape")(static_cast<py::ssize_t>(p.n), static_cast<py::ssize_t>(p.dim));
    if (p.repeats != nullptr) {
      push_parts.append(py::make_tuple(p.table, keys, grads, p.seq, typed(b++, py::dtype::of<uint32_t>())));
    } else {
      push_parts.append(py::make_tuple(p.table, keys, grads, p.seq));
    }
  }
  py::list pulls;
  for (const PushPullPull& p : request.pulls)
    pulls.append(py::make_tuple(p.table, typed(b++, py::dtype::of<int64_t>())));
  py::list stale;
  for (const PushPullStalePull& p : request.stale) {
    py::object keys = typed(b++, py::dtype::of<int64_t>());
    stale.append(py::make_tuple(p.table, keys, typed(b++, py::dtype::of<int32_t>()), p.staleness));
  }
  // group parts and pulls after the plain ones, in the forms RequestMessage takes
  for (const PushPullGroupPart& p : request.group_parts) {
    py::object offsets = typed(b++, py::dtype::of<int64_t>());
    py::object keys = typed(b++, py::dtype::of<int64_t>());
    py::object grads = typed(b++, py::dtype::of<float>())
                           .attr("reshape")(static_cast<py::ssize_t>(p.n), static_cast<py::ssize_t>(p.dim));
    push_parts.append(py::make_tuple(py::tuple(py::cast(p.tables)), offsets, keys, grads, p.first_seq));
  }
  for (const PushPullGroupPull& p : request.group_pulls) {
    py::object offsets = typed(b++, py::dtype::of<int64_t>());
    pulls.append(py::make_tuple(py::tuple(py::cast(p.tables)), offsets, typed(b++, py::dtype::of<int64_t>()), p.dim));
  }
  if (!request.stale_call) return py::make_tuple(push_parts, request.step, request.worker, request.participants, pulls);
  return py::make_tuple(push_parts, request.step, request.worker, request.participants, pulls, stale, request.epoch);
}

py::dict CountersDict(const ShardServer::Counters& c) {
  py::dict d;
  d["requests"] = c.requests;
  d["pushes"] = c.pushes;
  d["keys_pushed"] = c.keys_pushed;
  d["steps_applied"] = c.steps_applied;
  d["pulls"] = c.pulls;
  d["keys_pulled"] = c.keys_pulled;
  d["bytes_in"] = c.bytes_in;
  d["bytes_out"] = c.bytes_out;
  return d;
}

}  // namespace

void BindShardServer(py::module_& m) {
  py::class_<ServerLock>(m, "ServerLock", "A ShardServer's lock, used as threading.RLock (reentrant per thread)")
      .def("acquire", &ServerLock::Acquire, py::arg("blocking") = true)
      .def("release", &ServerLock::Release)
      .def("__enter__", [](ServerLock& l) { l.Acquire(true); })
      .def("__exit__", [](ServerLock& l, const py::args&) { l.Release(); });

  py::class_<ShardServer, std::shared_ptr<ShardServer>>(
      m, "ShardServer",
      "A parameter server's shards, per-worker push seqs, counters and lock, and the native path of a one-worker "
      "step's push_pull")
      .def(py::init<int>(), py::arg("index"))
      .def_property("index", Held(&ShardServer::index), Held(&ShardServer::set_index))
      .def_property_readonly("lock", [](const std::shared_ptr<ShardServer>& s) { return ServerLock{s}; })
      .def("set_table", Held(&ShardServer::SetTable), py::arg("name"), py::arg("shard"))
      .def("drop_tables", Held(&ShardServer::DropTables))
      .def("last_seq", Held(&ShardServer::LastSeq), py::arg("worker"))
      .def("note_seq", Held(&ShardServer::NoteSeq), py::arg("worker"), py::arg("seq"))
      .def("seqs", Held(&ShardServer::Seqs), "{worker: last push seq}")
      .def("set_native", Held(&ShardServer::SetNative), py::arg("enabled"), py::arg("forwarder") = nullptr,
           "Whether serve() may apply push_pull requests itself, reporting mutations to forwarder (None: none)")
      .def_property_readonly("native", Held(&ShardServer::native))
      .def("set_epoch", Held(&ShardServer::SetEpoch), py::arg("epoch"),
           "The server's epoch, which a push_pull_stale's copies must come from to be trusted")
      .def("counters", [](const ShardServer& s) { return CountersDict(Held(&ShardServer::counters)(s)); })
      .def("serve_call", &ServeCall, py::arg("parts"), py::arg("step"), py::arg("worker"), py::arg("requests"),
           "A one-worker push_pull(parts, step, worker, 1, requests) served natively in this process: (ack as "
           "(server, worker, seq, step, applied, durable) or None, [rows]), or None when the core declines it "
           "(nothing changed: serve it in Python)")
      .def("serve", &Serve, py::arg("session"), py::arg("fd"), py::arg("max_payload"),
           "Serves the push_pull requests arriving on socket fd over session (a LinkSession) until a message it "
           "does not serve arrives: returns (head, buffers, failure), that message as LinkSession.receive gives "
           "it and, when serving a request failed after changing state, the exception to answer it with (None "
           "otherwise: the message is for the caller to serve). Raises LinkSession.receive's errors");

  m.def("push_pull_request", &RequestMessage, py::arg("parts"), py::arg("step"), py::arg("worker"),
        py::arg("participants"), py::arg("requests"), py::arg("stale") = py::none(), py::arg("epoch") = 0,
        "(head, arrays) of push_pull(parts, step, worker, participants, requests), or with stale (a list) of "
        "push_pull_stale(..., stale, epoch), in its native wire form, or None when the arguments are not in the "
        "wire's types (send a pickle)");
  m.def("parse_push_pull_request", &ParseRequest, py::arg("head"), py::arg("buffers"),
        "push_pull's (parts, step, worker, participants, requests), or push_pull_stale's (..., stale, epoch), from a "
        "request in the native wire form");
  m.def(
      "is_push_pull_request", [](const py::buffer& head) { return PushPullMessage::IsRequest(PartOf(head.request())); },
      py::arg("head"));
  m.def(
      "is_push_pull_answer", [](const py::buffer& head) { return PushPullMessage::IsAnswer(PartOf(head.request())); },
      py::arg("head"));
  m.def(
      "parse_push_pull_answer",
      [](const py::buffer& head, size_t buffers) {
        const PushPullAnswer a = PushPullMessage::ParseAnswer(PartOf(head.request()), buffers);
        std::vector<uint32_t> dims;
        for (const PushPullAnswer::Rows& rows : a.rows) dims.push_back(rows.dim);
        py::object stale = py::none();
        if (a.has_stale) {
          py::list answers;
          for (const PushPullAnswer::StaleRows& s : a.stale) answers.append(py::make_tuple(s.rows.dim, s.table_rows));
          stale = py::make_tuple(a.epoch, answers);
        }
        return py::make_tuple(a.has_ack, a.server, a.worker, a.seq, a.step, a.applied, a.durable, a.has_rows, dims,
                              stale);
      },
      py::arg("head"), py::arg("buffers"),
      "(has_ack, server, worker, seq, step, applied, durable, has_rows, [dim per pull], stale) of an answer with "
      "`buffers` buffers; stale: None, or for a push_pull_stale call (the server's epoch, [(dim, rows the table "
      "holds) per stale pull]), whose buffers follow the pulls' three each (rows sent, clocks, sent mask)");
}

}  // namespace xdl_ec::python
