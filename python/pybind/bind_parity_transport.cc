// xdl_ec._core pieces the networked parameter servers use to keep parity across processes: ParityRouter
// (a shard's deltas -> one serialised ParityUpdate per holder), applying such bytes to a ParityStore, and
// Recovery driven by Python fragment readers (each read is a call to a surviving server). Thin: routing,
// parsing, applying and decoding all stay in the C++ core; the GIL is released around them.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "xdl_ec/delta_batch.h"
#include "xdl_ec/erasure_code.h"
#include "xdl_ec/parity_router.h"
#include "xdl_ec/parity_store.h"
#include "xdl_ec/parity_update.h"
#include "xdl_ec/recovery.h"
#include "xdl_ec/stripe_layout.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

using Bytes = py::array_t<uint8_t, py::array::c_style>;
using Slots = py::array_t<uint32_t, py::array::c_style>;
using ReadFn = std::function<py::object(int, size_t, size_t, size_t)>;

template <class T>
py::array_t<T> ToNumpy(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>({static_cast<py::ssize_t>(owned->size())}, owned->data(), base);
}

// A FragmentReadFn over a Python callable read(server, block, offset, width) -> uint8[block_slots * width].
FragmentReadFn Wrap(const ReadFn& fn, uint32_t block_slots, const char* what) {
  return [fn, block_slots, what](int server, size_t block, size_t offset, size_t width, uint8_t* out) {
    py::gil_scoped_acquire acquire;
    Bytes bytes = Bytes::ensure(fn(server, block, offset, width));
    const size_t want = static_cast<size_t>(block_slots) * width;
    if (!bytes || static_cast<size_t>(bytes.size()) != want)
      throw std::invalid_argument(std::string("Recovery: ") + what + "(" + std::to_string(server) + ", " +
                                  std::to_string(block) + ") must return uint8[" + std::to_string(want) + "]");
    std::memcpy(out, bytes.data(), want);
  };
}

struct RemoteRecovery {
  RemoteRecovery(int n, int k, int r, uint32_t block_slots, size_t record_bytes)
      : layout(n, k, r), block_slots(block_slots),
        recovery(layout, std::make_shared<ErasureCode>(k, r), block_slots, record_bytes) {}
  FragmentReader Reader(const ReadFn& data, const ReadFn& parity) const {
    return FragmentReader{Wrap(data, block_slots, "read_data"), Wrap(parity, block_slots, "read_parity")};
  }
  StripeLayout layout;
  uint32_t block_slots;
  Recovery recovery;
};

}  // namespace

void BindParityTransport(py::module_& m) {
  py::class_<ParityRouter>(m, "ParityRouter", "A data server's slot deltas -> one ParityUpdate per parity holder")
      .def(py::init([](int n, int k, int r, uint32_t block_slots, size_t record_bytes) {
             return new ParityRouter(StripeLayout(n, k, r), block_slots, record_bytes);
           }), py::arg("n"), py::arg("k"), py::arg("r"), py::arg("block_slots"), py::arg("record_bytes"))
      .def("route", [](const ParityRouter& router, int source, const Slots& slots, const Bytes& xor_bytes) {
             const size_t rb = router.record_bytes();
             if (slots.ndim() != 1 || xor_bytes.ndim() != 2 || xor_bytes.shape(0) != slots.shape(0) ||
                 static_cast<size_t>(xor_bytes.shape(1)) != rb)
               throw std::invalid_argument("ParityRouter.route: need slots uint32[m] and xor uint8[m, " +
                                           std::to_string(rb) + "] (a shard's return_deltas output)");
             DeltaBatch batch;
             batch.record_bytes = rb;
             batch.slots.assign(slots.data(), slots.data() + slots.shape(0));
             batch.xor_bytes.assign(xor_bytes.data(), xor_bytes.data() + xor_bytes.size());
             std::vector<std::vector<uint8_t>> wire(router.layout().n());
             {
               py::gil_scoped_release release;
               std::vector<ParityUpdate> updates;
               router.Route(source, batch, &updates);
               for (size_t h = 0; h < updates.size(); ++h)
                 if (!updates[h].empty()) wire[h] = updates[h].Serialize();
             }
             py::dict out;
             for (size_t h = 0; h < wire.size(); ++h)
               if (!wire[h].empty()) out[py::int_(h)] = ToNumpy(std::move(wire[h]));
             return out;
           }, py::arg("source"), py::arg("slots"), py::arg("xor"),
           "{holder: serialised ParityUpdate bytes} for every holder these deltas touch");

  m.def("new_parity_store", [](int k, int r, size_t block_bytes) {
          return std::make_shared<ParityStore>(std::make_shared<ErasureCode>(k, r), block_bytes);
        }, py::arg("k"), py::arg("r"), py::arg("block_bytes"), "An empty ParityStore for a (k, r) code");
  m.def("parity_store_apply", [](ParityStore& store, const Bytes& update) {
          if (update.ndim() != 1) throw std::invalid_argument("parity_store_apply: update must be 1-D uint8 bytes");
          const uint8_t* b = update.data();
          const size_t n = static_cast<size_t>(update.size());
          py::gil_scoped_release release;
          store.Apply(ParityUpdate::Parse(b, n));  // applying the same update twice undoes it (XOR)
        }, py::arg("store"), py::arg("update"), "Applies a serialised ParityUpdate in place");
  m.def("parity_store_read_columns", [](const ParityStore& store, size_t c, size_t record_bytes, size_t offset,
                                        size_t width) {
          if (record_bytes == 0 || store.block_bytes() % record_bytes != 0 || offset + width > record_bytes)
            throw std::invalid_argument("parity_store_read_columns: bad record_bytes/offset/width");
          Bytes out(static_cast<py::ssize_t>(store.block_bytes() / record_bytes * width));
          uint8_t* o = out.mutable_data();
          py::gil_scoped_release release;
          store.ReadColumns(c, record_bytes, offset, width, o);
          return out;
        }, py::arg("store"), py::arg("c"), py::arg("record_bytes"), py::arg("offset"), py::arg("width"));
  m.def("check_recoverable", [](int n, int k, int r, const std::vector<int>& lost) {
          Recovery::CheckRecoverable(StripeLayout(n, k, r), lost);
        }, py::arg("n"), py::arg("k"), py::arg("r"), py::arg("lost"),
        "ValueError('unrecoverable: lost servers {..}, ...') when more than r servers are lost");

  py::class_<RemoteRecovery>(m, "Recovery", "Rebuilds lost servers' blocks from fragments read through callbacks")
      .def(py::init<int, int, int, uint32_t, size_t>(), py::arg("n"), py::arg("k"), py::arg("r"),
           py::arg("block_slots"), py::arg("record_bytes"))
      .def("recover_key_index", [](const RemoteRecovery& rr, int server, size_t data_blocks,
                                   const std::vector<int>& unavailable, const ReadFn& data, const ReadFn& parity) {
             RecoveredKeyIndex index;
             {
               const FragmentReader reader = rr.Reader(data, parity);
               py::gil_scoped_release release;
               index = rr.recovery.RecoverKeyIndex(server, data_blocks, unavailable, reader);
             }
             const size_t high_water = index.high_water;
             return py::make_tuple(ToNumpy(std::move(index.keys)), ToNumpy(std::move(index.slots)), high_water);
           }, py::arg("server"), py::arg("data_blocks"), py::arg("unavailable"), py::arg("read_data"),
           py::arg("read_parity"), "(keys, slots, high_water) of a lost server's shard")
      .def("decode_stripe", [](const RemoteRecovery& rr, size_t stripe, const std::vector<int>& wanted,
                               const std::vector<int>& unavailable, const ReadFn& data, const ReadFn& parity) {
             const size_t bytes = rr.recovery.block_bytes();
             std::vector<std::vector<uint8_t>> blocks(wanted.size(), std::vector<uint8_t>(bytes));
             std::vector<uint8_t*> outputs;
             for (auto& b : blocks) outputs.push_back(b.data());
             {
               const FragmentReader reader = rr.Reader(data, parity);
               py::gil_scoped_release release;
               rr.recovery.DecodeStripe(stripe, wanted, outputs.data(), unavailable, reader);
             }
             py::list out;
             for (auto& b : blocks) out.append(ToNumpy(std::move(b)));
             return out;
           }, py::arg("stripe"), py::arg("wanted"), py::arg("unavailable"), py::arg("read_data"),
           py::arg("read_parity"), "Blocks of `stripe` at positions `wanted` (0..k-1 data, k.. parity)")
      .def("decode_data_block", [](const RemoteRecovery& rr, int server, size_t block,
                                   const std::vector<int>& unavailable, const ReadFn& data, const ReadFn& parity) {
             Bytes out(static_cast<py::ssize_t>(rr.recovery.block_bytes()));
             uint8_t* o = out.mutable_data();
             const FragmentReader reader = rr.Reader(data, parity);
             py::gil_scoped_release release;
             rr.recovery.DecodeDataBlock(server, block, o, unavailable, reader);
             return out;
           }, py::arg("server"), py::arg("block"), py::arg("unavailable"), py::arg("read_data"),
           py::arg("read_parity"), "Degraded read: one lost data block decoded from the survivors");
}

}  // namespace xdl_ec::python
