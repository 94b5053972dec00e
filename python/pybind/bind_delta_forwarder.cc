// xdl_ec._core.DeltaForwarder: a data server's parity forwarding (cpp/include/xdl_ec/delta_forwarder.h).
// Mutations reach it from the shard's pull/push (bind_shard.cc, `forwarder=`); holders in this process are
// served by its C++ thread, holders in other processes by a Python transport through take/ack/fail. Every
// blocking call releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "xdl_ec/delta_forwarder.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_holder.h"

namespace py = pybind11;

namespace xdl_ec::python {

void BindDeltaForwarder(py::module_& m) {
  py::class_<DeltaForwarder, std::shared_ptr<DeltaForwarder>>(
      m, "DeltaForwarder", "Sequence-numbered parity deltas of one data server, delivered to its parity holders")
      .def(py::init([](int index, int n, int k, int r, const std::map<std::string, std::pair<uint32_t, size_t>>& tables,
                       int64_t seq, const WorkerSeqs& worker_seqs) {
             std::vector<DeltaForwarder::Table> specs;
             specs.reserve(tables.size());
             for (const auto& [name, geometry] : tables) specs.push_back({name, geometry.first, geometry.second});
             return std::make_shared<DeltaForwarder>(index, n, k, r, specs, seq, worker_seqs);
           }),
           py::arg("index"), py::arg("n"), py::arg("k"), py::arg("r"), py::arg("tables"), py::arg("seq") = 0,
           py::arg("worker_seqs") = WorkerSeqs{},
           "tables: {name: (block_slots, record_bytes)}; continues after delta seq `seq`, whose state included "
           "the pushes worker_seqs {worker: seq}")
      .def_property_readonly("index", &DeltaForwarder::index)
      .def_property_readonly("holders", &DeltaForwarder::holders)
      .def("durable_seq", &DeltaForwarder::DurableSeq, py::arg("worker"),
           "The highest push seq of `worker` every parity holder applied")
      .def("set_holder", &DeltaForwarder::SetHolder, py::arg("holder"), py::arg("local"),
           py::call_guard<py::gil_scoped_release>(),
           "(Re)connects a holder whose parity reflects this server's stream up to now: `local` its "
           "ParityHolder in this process, or None for one served through take/ack/fail; returns the link "
           "generation to quote in those")
      .def(
          "take",
          [](DeltaForwarder& f, int holder, uint64_t link, double timeout) -> py::object {
            DeltaForwarder::Delivery delivery;
            bool got;
            std::vector<uint8_t> wire;
            {
              py::gil_scoped_release release;
              got = f.Take(holder, link, static_cast<int>(timeout * 1000.0), &delivery);
              if (got) wire = SerializeBatches(delivery.batches);
            }
            if (!got) return py::none();
            // the serialised bytes become the array's buffer (no copy: a send may carry megabytes)
            auto* owned = new std::vector<uint8_t>(std::move(wire));
            py::capsule base(owned, [](void* p) { delete static_cast<std::vector<uint8_t>*>(p); });
            py::array_t<uint8_t> bytes({static_cast<py::ssize_t>(owned->size())}, owned->data(), base);
            return py::make_tuple(bytes, delivery.durable, delivery.link, delivery.batches.back()->seq);
          },
          py::arg("holder"), py::arg("link"), py::arg("timeout"),
          "Remote transport of link generation `link` (from set_holder): (batches bytes, durable, link, last "
          "seq) for `holder`, moved in flight; None after `timeout` seconds with nothing to send, once closed, "
          "or once the link was replaced")
      .def("ack", &DeltaForwarder::Ack, py::arg("holder"), py::arg("link"), py::arg("applied"))
      .def("fail", &DeltaForwarder::Fail, py::arg("holder"), py::arg("link"), py::arg("error"), py::arg("lost"))
      .def(
          "progress",
          [](const DeltaForwarder& f) {
            const DeltaForwarder::Progress p = f.progress();
            py::dict out;
            out["seq"] = p.seq;
            out["live_applied"] = p.live_applied;
            out["pending"] = p.pending;
            out["worker_seqs"] = p.worker_seqs;
            out["down"] = p.down;
            out["lag_waits"] = p.lag_waits;
            out["lag_catchups"] = p.lag_catchups;
            out["coalesced"] = p.coalesced;
            out["lifts"] = p.lifts;
            return out;
          },
          "seq, the least seq the live holders applied, whether anything is queued or in flight, worker "
          "seqs, holders down, records that waited for the in-process delivery to catch up, mutations coalesced "
          "into an earlier one's seq range, flushes that lifted the thread out of the idle time")
      .def_property_readonly("seq", &DeltaForwarder::seq)
      .def_property_readonly("bytes_sent", &DeltaForwarder::bytes_sent)
      .def_property_readonly("errors", &DeltaForwarder::errors)
      .def("flush", &DeltaForwarder::Flush, py::call_guard<py::gil_scoped_release>(),
           "Someone waits for parity: route what is recorded now instead of waiting for a fuller range, and "
           "deliver it to in-process holders on this thread")
      .def("drop_pending", &DeltaForwarder::DropPending,
           "Failure injection: loses every batch not yet delivered; nothing more goes out")
      .def("close", &DeltaForwarder::Close, py::call_guard<py::gil_scoped_release>());
}

}  // namespace xdl_ec::python
