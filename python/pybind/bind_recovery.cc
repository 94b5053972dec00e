// xdl_ec._core.Recovery and Scrubber: decoding lost blocks and checking parity over fragments read through
// Python callables read(server, block, offset, width) -> uint8[block_slots * width] (each read is a call to a
// surviving server). Thin: decoding and encoding stay in the C++ core; the GIL is released around them and
// taken back only inside a read.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "xdl_ec/erasure_code.h"
#include "xdl_ec/recovery.h"
#include "xdl_ec/scrubber.h"
#include "xdl_ec/stripe_layout.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

using Bytes = py::array_t<uint8_t, py::array::c_style>;
using ReadFn = std::function<py::object(int, size_t, size_t, size_t)>;

template <class T>
py::array_t<T> ToNumpy(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>({static_cast<py::ssize_t>(owned->size())}, owned->data(), base);
}

// A FragmentReadFn over a Python callable read(server, block, offset, width) -> uint8[block_slots * width].
FragmentReadFn Wrap(const ReadFn& fn, uint32_t block_slots, const char* who, const char* what) {
  return [fn, block_slots, who, what](int server, size_t block, size_t offset, size_t width, uint8_t* out) {
    py::gil_scoped_acquire acquire;
    Bytes bytes = Bytes::ensure(fn(server, block, offset, width));
    const size_t want = static_cast<size_t>(block_slots) * width;
    if (!bytes || static_cast<size_t>(bytes.size()) != want)
      throw std::invalid_argument(std::string(who) + ": " + what + "(" + std::to_string(server) + ", " +
                                  std::to_string(block) + ") must return uint8[" + std::to_string(want) + "]");
    std::memcpy(out, bytes.data(), want);
  };
}

struct RemoteRecovery {
  RemoteRecovery(int n, int k, int r, uint32_t block_slots, size_t record_bytes)
      : layout(n, k, r),
        block_slots(block_slots),
        recovery(layout, std::make_shared<ErasureCode>(k, r), block_slots, record_bytes) {}
  FragmentReader Reader(const ReadFn& data, const ReadFn& parity) const {
    return FragmentReader{Wrap(data, block_slots, "Recovery", "read_data"),
                          Wrap(parity, block_slots, "Recovery", "read_parity")};
  }
  StripeLayout layout;
  uint32_t block_slots;
  Recovery recovery;
};

}  // namespace

void BindRecovery(py::module_& m) {
  py::class_<RemoteRecovery>(m, "Recovery", "Rebuilds lost servers' blocks from fragments read through callbacks")
      .def(py::init<int, int, int, uint32_t, size_t>(), py::arg("n"), py::arg("k"), py::arg("r"),
           py::arg("block_slots"), py::arg("record_bytes"))
      .def(
          "recover_key_index",
          [](const RemoteRecovery& rr, int server, size_t data_blocks, const std::vector<int>& unavailable,
             const ReadFn& data, const ReadFn& parity) {
            RecoveredKeyIndex index;
            {
              const FragmentReader reader = rr.Reader(data, parity);
              py::gil_scoped_release release;
              index = rr.recovery.RecoverKeyIndex(server, data_blocks, unavailable, reader);
            }
            const size_t high_water = index.high_water;
            return py::make_tuple(ToNumpy(std::move(index.keys)), ToNumpy(std::move(index.slots)), high_water);
          },
          py::arg("server"), py::arg("data_blocks"), py::arg("unavailable"), py::arg("read_data"),
          py::arg("read_parity"), "(keys, slots, high_water) of a lost server's shard")
      .def(
          "decode_stripe",
          [](const RemoteRecovery& rr, size_t stripe, const std::vector<int>& wanted,
             const std::vector<int>& unavailable, const ReadFn& data, const ReadFn& parity) {
            const size_t bytes = rr.recovery.block_bytes();
            std::vector<std::vector<uint8_t>> blocks(wanted.size(), std::vector<uint8_t>(bytes));
            std::vector<uint8_t*> outputs;
            outputs.reserve(blocks.size());
            for (auto& b : blocks) outputs.push_back(b.data());
            {
              const FragmentReader reader = rr.Reader(data, parity);
              py::gil_scoped_release release;
              rr.recovery.DecodeStripe(stripe, wanted, outputs.data(), unavailable, reader);
            }
            py::list out;
            for (auto& b : blocks) out.append(ToNumpy(std::move(b)));
            return out;
          },
          py::arg("stripe"), py::arg("wanted"), py::arg("unavailable"), py::arg("read_data"), py::arg("read_parity"),
          "Blocks of `stripe` at positions `wanted` (0..k-1 data, k.. parity)")
      .def(
          "stripe_reads",
          [](const RemoteRecovery& rr, size_t stripe, const std::vector<int>& unavailable) {
            py::list out;
            for (const FragmentRef& f : rr.recovery.StripeReads(stripe, unavailable))
              out.append(py::make_tuple(f.parity ? "read_parity" : "read_data", f.ref.server, f.ref.block));
            return out;
          },
          py::arg("stripe"), py::arg("unavailable"),
          "[(\"read_data\" | \"read_parity\", server, block)]: the fragments decode_stripe(stripe, ...) reads, "
          "whole records, in read order")
      .def(
          "decode_data_block",
          [](const RemoteRecovery& rr, int server, size_t block, const std::vector<int>& unavailable,
             const ReadFn& data, const ReadFn& parity) {
            Bytes out(static_cast<py::ssize_t>(rr.recovery.block_bytes()));
            uint8_t* o = out.mutable_data();
            const FragmentReader reader = rr.Reader(data, parity);
            py::gil_scoped_release release;
            rr.recovery.DecodeDataBlock(server, block, o, unavailable, reader);
            return out;
          },
          py::arg("server"), py::arg("block"), py::arg("unavailable"), py::arg("read_data"), py::arg("read_parity"),
          "Degraded read: one lost data block decoded from the survivors");

  py::class_<Scrubber>(m, "Scrubber", "Checks every stripe's parity against the encoding of its data blocks")
      .def(py::init([](int n, int k, int r, uint32_t block_slots, size_t record_bytes) {
             return new Scrubber(StripeLayout(n, k, r), std::make_shared<ErasureCode>(k, r), block_slots, record_bytes);
           }),
           py::arg("n"), py::arg("k"), py::arg("r"), py::arg("block_slots"), py::arg("record_bytes"))
      .def(
          "scrub",
          [](const Scrubber& s, size_t stripes, const ReadFn& data, const ReadFn& parity) {
            const FragmentReader reader{Wrap(data, s.block_slots(), "Scrubber", "read_data"),
                                        Wrap(parity, s.block_slots(), "Scrubber", "read_parity")};
            std::vector<ScrubMismatch> bad;
            {
              py::gil_scoped_release release;
              bad = s.Scrub(stripes, reader);
            }
            py::list out;
            for (const ScrubMismatch& m : bad) out.append(py::make_tuple(m.stripe, m.parity_member, m.server, m.block));
            return out;
          },
          py::arg("stripes"), py::arg("read_data"), py::arg("read_parity"),
          "[(stripe, parity member i, server, its local parity block)] of every parity block in stripes "
          "[0, stripes) that differs from the encoding of the stripe's data blocks (empty: consistent)");
}

}  // namespace xdl_ec::python
