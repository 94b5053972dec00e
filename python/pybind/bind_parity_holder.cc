// xdl_ec._core.ParityHolder: a server's parity blocks and per-sender protocol state (the C++ port of
// xdl_ec/ps/parity_role.py), plus the wire form of forwarded batches for holders in other processes.
// Thin: parsing and applying stay in the core, with the GIL released.
#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "xdl_ec/forwarded_batch.h"
#include "xdl_ec/parity_holder.h"
#include "xdl_ec/parity_update.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

using Bytes = py::array_t<uint8_t, py::array::c_style>;

template <class T>
py::array_t<T> ToNumpy(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>({static_cast<py::ssize_t>(owned->size())}, owned->data(), base);
}

// The bytes of a 1-D contiguous uint8 buffer (numpy uint8 array, bytes, bytearray), viewed in place
// and kept alive (the buffer_info holds the view) while the GIL is released.
class ByteView {
 public:
  ByteView(const py::handle& obj, const std::string& what) {
    if (!PyObject_CheckBuffer(obj.ptr()))
      throw py::type_error(what + ": expected a 1-D uint8 numpy array or bytes, got " + Py_TYPE(obj.ptr())->tp_name);
    info_ = py::reinterpret_borrow<py::buffer>(obj).request();
    if (info_.itemsize != 1 || info_.format != py::format_descriptor<uint8_t>::format())
      throw py::type_error(what + ": expected uint8 bytes, got items of format '" + info_.format + "' (" +
                           std::to_string(info_.itemsize) + " bytes each); convert with np.asarray(x, np.uint8)");
    if (info_.ndim != 1 || (info_.shape[0] > 1 && info_.strides[0] != 1))
      throw py::value_error(what + ": expected a 1-D contiguous byte array, got " + std::to_string(info_.ndim) +
                            " dimensions; pass np.ascontiguousarray(x).ravel()");
  }
  const uint8_t* data() const { return static_cast<const uint8_t*>(info_.ptr); }
  size_t size() const { return static_cast<size_t>(info_.size); }

 private:
  py::buffer_info info_;
};

// `data` as one whole parity block of `table`: ValueError naming both sizes otherwise.
ByteView BlockView(const ParityHolder& holder, const std::string& table, const py::handle& data,
                   const std::string& what) {
  ByteView view(data, what + ": data");
  const size_t want = holder.block_bytes(table);
  if (view.size() != want)
    throw py::value_error(what + ": data has " + std::to_string(view.size()) + " bytes, a parity block of table '" +
                          table + "' has " + std::to_string(want));
  return view;
}

// The Python form of a batch: (seq, {table: ParityUpdate bytes}, {worker: seq}, first_seq).
py::tuple ToPython(const ForwardedBatch& batch) {
  py::dict updates;
  for (const auto& [table, update] : batch.updates) updates[py::str(table)] = ToNumpy(update.Serialize());
  return py::make_tuple(batch.seq, updates, py::cast(*batch.stamp), batch.first_seq);
}

std::vector<uint8_t> SerializePython(const py::list& batches) {
  struct Pending {
    int64_t first_seq, seq;
    std::shared_ptr<const WorkerSeqs> stamp;
    std::vector<std::pair<std::string, ByteView>> updates;
  };
  std::vector<Pending> pending;
  pending.reserve(batches.size());
  for (size_t b = 0; b < batches.size(); ++b) {
    const std::string at = "serialize_batches: batches[" + std::to_string(b) + "]";
    const py::handle item = batches[b];
    if (!py::isinstance<py::tuple>(item) || (py::len(item) != 3 && py::len(item) != 4))
      throw py::type_error(at + ": expected a (seq, {table: update bytes}, {worker: seq}[, first_seq]) tuple, got " +
                           std::string(Py_TYPE(item.ptr())->tp_name) +
                           (py::isinstance<py::tuple>(item) ? " of " + std::to_string(py::len(item)) : std::string()));
    const py::tuple t = py::reinterpret_borrow<py::tuple>(item);
    if (!py::isinstance<py::int_>(t[0]) || !py::isinstance<py::dict>(t[1]) || !py::isinstance<py::dict>(t[2]) ||
        (t.size() == 4 && !py::isinstance<py::int_>(t[3])))
      throw py::type_error(at +
                           ": expected (int seq, dict of table -> update bytes, dict of worker -> seq[, int "
                           "first_seq])");
    Pending p;
    p.seq = t[0].cast<int64_t>();
    p.first_seq = t.size() == 4 ? t[3].cast<int64_t>() : p.seq;  // a single mutation unless a range is given
    p.stamp = std::make_shared<const WorkerSeqs>(t[2].cast<WorkerSeqs>());
    for (const auto& [table, update] : py::reinterpret_borrow<py::dict>(t[1])) {
      if (!py::isinstance<py::str>(table)) throw py::type_error(at + ": table names must be str");
      std::string name = table.cast<std::string>();
      ByteView view(update, at + " table '" + name + "'");
      p.updates.emplace_back(std::move(name), std::move(view));
    }
    pending.push_back(std::move(p));
  }
  py::gil_scoped_release release;
  std::vector<BatchPtr> out;
  out.reserve(pending.size());
  for (size_t b = 0; b < pending.size(); ++b) {
    auto batch = std::make_shared<ForwardedBatch>();
    batch->first_seq = pending[b].first_seq;
    batch->seq = pending[b].seq;
    batch->stamp = pending[b].stamp;
    for (const auto& [table, view] : pending[b].updates) {
      try {
        batch->updates.emplace_back(table, ParityUpdate::Parse(view.data(), view.size()));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("serialize_batches: batches[" + std::to_string(b) + "] table '" + table +
                                    "': " + e.what());
      }
    }
    out.push_back(std::move(batch));
  }
  return SerializeBatches(out);
}

}  // namespace

void BindParityHolder(py::module_& m) {
  // A RuntimeError, so callers that catch the server's loss as RuntimeError keep working.
  py::register_exception<HolderClosed>(m, "HolderClosed", PyExc_RuntimeError);
  // A ValueError, as every other bad batch is: a batch that does not agree with the stripe layout.
  py::register_exception<BatchRefused>(m, "BatchRefused", PyExc_ValueError);

  py::class_<ParityHolder, std::shared_ptr<ParityHolder>>(
      m, "ParityHolder", "A server's parity blocks per table and, per sender, its applied seq, stamp and undo log")
      .def(py::init([](int index, int n, int k, int r, const std::map<std::string, size_t>& tables,
                       const std::map<std::string, std::pair<size_t, size_t>>& spill, const std::string& spill_dir) {
             std::map<std::string, ParitySpill> spills;
             for (const auto& [name, tier] : spill) spills[name] = ParitySpill{tier.first, tier.second, spill_dir};
             return std::make_shared<ParityHolder>(index, n, k, r, tables, spills);
           }),
           py::arg("index"), py::arg("n"), py::arg("k"), py::arg("r"), py::arg("tables"),
           py::arg("spill") = std::map<std::string, std::pair<size_t, size_t>>{}, py::arg("spill_dir") = "",
           "Server index of n under a (k, r) code; tables: {name: bytes of one parity block (block_slots * "
           "record_bytes)}; spill: {name: (record_bytes, budget_bytes)} of the tables whose parity keeps at most "
           "budget_bytes in RAM and the rest in a file under spill_dir")
      .def_property_readonly("index", &ParityHolder::index)
      .def_property_readonly("n", [](const ParityHolder& holder) { return holder.layout().n(); })
      .def("protects", &ParityHolder::Protects, py::arg("sender"),
           "Whether sender is a data member of a stripe this holder protects (the only servers it takes batches from)")
      .def("set_extent", &ParityHolder::SetExtent, py::arg("table"), py::arg("parity_blocks"),
           "The table's extent in this holder's parity blocks as measured elsewhere (a replacement holder, before "
           "its senders' batches arrive); never shrinks")
      .def(
          "apply",
          [](ParityHolder& holder, int sender, const py::object& batches, int64_t durable) {
            const ByteView view(batches, "ParityHolder.apply: batches");
            py::gil_scoped_release release;
            return holder.Apply(sender, ParseBatches(view.data(), view.size()), durable);
          },
          py::arg("sender"), py::arg("batches"), py::arg("durable"),
          "Applies serialize_batches bytes of `sender` in seq order (resends skipped, a gap is a ValueError, a batch "
          "that disagrees with the stripe layout a BatchRefused, changing nothing), trims the undo log at "
          "`durable`; returns applied(sender)")
      .def("applied", &ParityHolder::Applied, py::arg("sender"))
      .def("applied_all", &ParityHolder::AppliedAll, "{sender: applied seq}")
      .def("worker_seqs", &ParityHolder::WorkerSeqsOf, py::arg("sender"),
           "{worker: push seq} stamped on the sender's last applied batch")
      .def("rollback", &ParityHolder::Rollback, py::arg("sender"), py::arg("to_seq"),
           py::call_guard<py::gil_scoped_release>(),
           "Undoes the sender's batches above to_seq; returns the worker seqs at to_seq (ValueError, nothing "
           "changed, when the undo log does not reach back)")
      .def("reset_sender", &ParityHolder::ResetSender, py::arg("sender"), py::arg("seq"), py::arg("worker_seqs"),
           "After the blocks were recomputed from data: they hold the sender's stream up to seq")
      .def(
          "read_block",
          [](const ParityHolder& holder, const std::string& table, size_t c, size_t record_bytes, size_t offset,
             size_t width) {
            Bytes out(static_cast<py::ssize_t>(holder.ReadBlockBytes(table, record_bytes, offset, width)));
            uint8_t* o = out.mutable_data();
            std::map<int32_t, int64_t> applied;
            {
              py::gil_scoped_release release;
              applied = holder.ReadBlock(table, c, record_bytes, offset, width, o);
            }
            return py::make_tuple(out, applied);
          },
          py::arg("table"), py::arg("c"), py::arg("record_bytes"), py::arg("offset"), py::arg("width"),
          "(bytes [offset, offset + width) of every record of parity block c, {sender: applied}) read atomically")
      .def(
          "write_block_if",
          [](ParityHolder& holder, const std::string& table, size_t c, const py::object& data,
             const std::map<int32_t, int64_t>& expected) {
            const ByteView view = BlockView(holder, table, data, "ParityHolder.write_block_if");
            py::gil_scoped_release release;
            return holder.WriteBlockIf(table, c, view.data(), expected);
          },
          py::arg("table"), py::arg("c"), py::arg("data"), py::arg("expected"),
          "Overwrites block c only when applied == expected for every sender in it (missing: 0); returns whether")
      .def(
          "write_block",
          [](ParityHolder& holder, const std::string& table, size_t c, const py::object& data) {
            const ByteView view = BlockView(holder, table, data, "ParityHolder.write_block");
            py::gil_scoped_release release;
            holder.WriteBlock(table, c, view.data());
          },
          py::arg("table"), py::arg("c"), py::arg("data"))
      .def("num_blocks", &ParityHolder::NumBlocks, py::arg("table"))
      .def("block_bytes", &ParityHolder::block_bytes, py::arg("table"))
      .def_property_readonly("bytes", &ParityHolder::Bytes, "parity bytes allocated over all tables")
      .def(
          "spill_stats",
          [](const ParityHolder& holder) {
            py::dict out;
            for (const auto& [name, st] : holder.SpillStatsAll()) {
              py::dict d;
              d["rows_in_memory"] = st.rows_in_memory;
              d["rows_on_disk"] = st.rows_on_disk;
              d["disk_bytes"] = st.disk_bytes;
              d["disk_read_bytes"] = st.disk_read_bytes;
              d["disk_write_bytes"] = st.disk_write_bytes;
              d["memory_hits"] = st.hits;
              d["memory_misses"] = st.misses;
              out[py::str(name)] = d;
            }
            return out;
          },
          "{table: the parity tier's counts (as a shard's memory stats name them)} of the tiered tables")
      .def("close", &ParityHolder::Close, "The server died: every later apply raises HolderClosed")
      .def_property_readonly("closed", &ParityHolder::closed);

  m.def(
      "serialize_batches", [](const py::list& batches) { return ToNumpy(SerializePython(batches)); },
      py::arg("batches"),
      "[(seq, {table: ParityUpdate bytes}, {worker: seq}[, first_seq]), ...] -> uint8 bytes for "
      "ParityHolder.apply (first_seq: a coalesced range first_seq..seq; seq alone when omitted)");
  m.def(
      "parse_batches",
      [](const py::object& bytes) {
        const ByteView view(bytes, "parse_batches: bytes");
        std::vector<BatchPtr> batches;
        {
          py::gil_scoped_release release;
          batches = ParseBatches(view.data(), view.size());
        }
        py::list out;
        for (const BatchPtr& batch : batches) out.append(ToPython(*batch));
        return out;
      },
      py::arg("bytes"), "serialize_batches bytes -> [(seq, {table: update bytes}, {worker: seq}, first_seq), ...]");
}

}  // namespace xdl_ec::python
