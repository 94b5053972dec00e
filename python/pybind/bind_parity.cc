// xdl_ec._core: StripeLayout, KeyRouter, ParityStore and ParityGroup, 1:1 with the C++ API (numpy in/out).
// Shapes are checked here (the core takes raw pointers); every call that may take a lock or decode
// releases the GIL. The group's fault handler is C++ only, so it never needs the GIL.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "xdl_ec/key_router.h"
#include "xdl_ec/parity_group.h"
#include "xdl_ec/parity_store.h"
#include "xdl_ec/stripe_layout.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

using Keys = py::array_t<int64_t, py::array::c_style>;
using Floats = py::array_t<float, py::array::c_style>;
using Bytes = py::array_t<uint8_t, py::array::c_style>;
using Release = py::call_guard<py::gil_scoped_release>;

size_t CheckKeys(const Keys& keys, const char* where) {
  if (keys.ndim() != 1)
    throw std::invalid_argument(std::string(where) + ": keys must be 1-D, got " + std::to_string(keys.ndim()) + " dims");
  return static_cast<size_t>(keys.shape(0));
}

void CheckRows(const Floats& a, size_t n, size_t width, const char* where, const char* name) {
  if (a.ndim() != 2 || static_cast<size_t>(a.shape(0)) != n || static_cast<size_t>(a.shape(1)) != width)
    throw std::invalid_argument(std::string(where) + ": " + name + " must have shape (" + std::to_string(n) + ", " +
                                std::to_string(width) + ")");
}

Bytes CheckBlock(const Bytes& bytes, size_t block_bytes, const char* where) {
  if (bytes.ndim() != 1 || static_cast<size_t>(bytes.shape(0)) != block_bytes)
    throw std::invalid_argument(std::string(where) + ": bytes must be uint8[" + std::to_string(block_bytes) + "]");
  return bytes;
}

int StateFloats(const ParityGroup& g) {
  return static_cast<int>((g.record_bytes() - RecordLayout::kValueOffset) / sizeof(float)) - g.config().dim;
}

py::dict StatsDict(const ParityGroupStats& st) {
  py::dict d;
  d["data_bytes"] = st.data_bytes;
  d["parity_bytes"] = st.parity_bytes;
  d["delta_bytes_received"] = st.delta_bytes_received;
  d["rows"] = st.rows;
  d["total_data_bytes"] = st.total_data_bytes;
  d["total_parity_bytes"] = st.total_parity_bytes;
  return d;
}

}  // namespace

void BindParity(py::module_& m) {
  py::class_<StripeLayout>(m, "StripeLayout", "Rotated stripe geometry of a parity group (pure arithmetic)")
      .def(py::init<int, int, int>(), py::arg("n"), py::arg("k"), py::arg("r"))
      .def_property_readonly("n", &StripeLayout::n)
      .def_property_readonly("k", &StripeLayout::k)
      .def_property_readonly("r", &StripeLayout::r)
      .def("data_slot", [](const StripeLayout& l, int server, size_t block) {
             StripeSlot s = l.DataSlot(server, block);
             return py::make_tuple(s.stripe, s.member);
           }, py::arg("server"), py::arg("block"), "Server's local data block -> (stripe, data member j)")
      .def("parity_slot", [](const StripeLayout& l, int server, size_t block) {
             StripeSlot s = l.ParitySlot(server, block);
             return py::make_tuple(s.stripe, s.member);
           }, py::arg("server"), py::arg("block"), "Server's local parity block -> (stripe, parity member i)")
      .def("data_member", [](const StripeLayout& l, size_t stripe, int j) {
             BlockRef b = l.DataMember(stripe, j);
             return py::make_tuple(b.server, b.block);
           }, py::arg("stripe"), py::arg("j"), "Stripe's data member j -> (server, local data block)")
      .def("parity_member", [](const StripeLayout& l, size_t stripe, int i) {
             BlockRef b = l.ParityMember(stripe, i);
             return py::make_tuple(b.server, b.block);
           }, py::arg("stripe"), py::arg("i"), "Stripe's parity member i -> (server, local parity block)")
      .def("server_at", &StripeLayout::ServerAt, py::arg("stripe"), py::arg("position"));

  m.def("server_of", [](const Keys& keys, int n) {
          const size_t count = CheckKeys(keys, "server_of");
          py::array_t<int32_t> out(static_cast<py::ssize_t>(count));
          const int64_t* k = keys.data();
          int32_t* o = out.mutable_data();
          {
            py::gil_scoped_release release;
            KeyRouter::ServersOf(k, count, n, o);
          }
          return out;
        }, py::arg("keys"), py::arg("n"), "The owning server of each key (KeyRouter::ServerOf): int32[len(keys)]");

  py::enum_<ServerState>(m, "ServerState")
      .value("HEALTHY", ServerState::kHealthy)
      .value("LOST", ServerState::kLost)
      .value("RESTORING", ServerState::kRestoring);

  py::class_<ParityStore, std::shared_ptr<ParityStore>>(m, "ParityStore", "One server's parity blocks")
      .def_property_readonly("block_bytes", &ParityStore::block_bytes)
      .def_property_readonly("num_blocks", &ParityStore::num_blocks)
      .def_property_readonly("allocated_blocks", &ParityStore::allocated_blocks)
      .def_property_readonly("bytes", &ParityStore::bytes)
      .def_property_readonly("delta_bytes_received", &ParityStore::delta_bytes_received)
      .def("read_block", [](const ParityStore& s, size_t c) {
             Bytes out(static_cast<py::ssize_t>(s.block_bytes()));
             uint8_t* o = out.mutable_data();
             py::gil_scoped_release release;
             s.ReadBlock(c, o);
             return out;
           }, py::arg("c"), "Bytes of parity block c (zeros when never written)")
      .def("write_block", [](ParityStore& s, size_t c, const Bytes& bytes) {
             CheckBlock(bytes, s.block_bytes(), "ParityStore.write_block");
             const uint8_t* b = bytes.data();
             py::gil_scoped_release release;
             s.WriteBlock(c, b);
           }, py::arg("c"), py::arg("bytes"), "Overwrites parity block c (bypasses parity maintenance)");

  py::class_<ParityGroup>(m, "ParityGroup", "N embedding shards protected by an erasure code over their record bytes")
      .def(py::init<int, int, int, const ShardConfig&>(), py::arg("n"), py::arg("k"), py::arg("r"), py::arg("config"))
      .def_property_readonly("n", &ParityGroup::n)
      .def_property_readonly("k", &ParityGroup::k)
      .def_property_readonly("r", &ParityGroup::r)
      .def_property_readonly("layout", &ParityGroup::layout)
      .def_property_readonly("config", &ParityGroup::config)
      .def_property_readonly("record_bytes", &ParityGroup::record_bytes)
      .def_property_readonly("block_bytes", &ParityGroup::block_bytes)
      .def_property_readonly("state_floats", &StateFloats)
      .def_property("background_apply", &ParityGroup::background_apply,
                    [](ParityGroup& g, bool on) {
                      py::gil_scoped_release release;
                      g.SetBackgroundApply(on);
                    },
                    "Parity updates applied by a background thread (default) or before each call returns")
      .def("pull", [](ParityGroup& g, int server, const Keys& keys) {
             const size_t n = CheckKeys(keys, "ParityGroup.pull");
             Floats out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(g.config().dim)});
             const int64_t* k = keys.data();
             float* o = out.mutable_data();
             {
               py::gil_scoped_release release;
               g.Pull(server, k, n, o);
             }
             return out;
           }, py::arg("server"), py::arg("keys"))
      .def("find", [](ParityGroup& g, int server, const Keys& keys) {
             const size_t n = CheckKeys(keys, "ParityGroup.find");
             Floats out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(g.config().dim)});
             py::array_t<bool> found(static_cast<py::ssize_t>(n));
             const int64_t* k = keys.data();
             float* o = out.mutable_data();
             std::fill(o, o + n * g.config().dim, 0.0f);
             uint8_t* f = reinterpret_cast<uint8_t*>(found.mutable_data());
             {
               py::gil_scoped_release release;
               g.Find(server, k, n, o, f);
             }
             return py::make_tuple(out, found);
           }, py::arg("server"), py::arg("keys"))
      .def("push", [](ParityGroup& g, int server, const Keys& keys, const Floats& grads, int64_t step) {
             const size_t n = CheckKeys(keys, "ParityGroup.push");
             CheckRows(grads, n, g.config().dim, "ParityGroup.push", "grads");
             const int64_t* k = keys.data();
             const float* gr = grads.data();
             py::gil_scoped_release release;
             g.Push(server, k, gr, n, step);
           }, py::arg("server"), py::arg("keys"), py::arg("grads"), py::arg("step"))
      .def("erase", [](ParityGroup& g, int server, const Keys& keys) {
             const size_t n = CheckKeys(keys, "ParityGroup.erase");
             const int64_t* k = keys.data();
             py::gil_scoped_release release;
             return g.Erase(server, k, n);
           }, py::arg("server"), py::arg("keys"))
      .def("load", [](ParityGroup& g, int server, const Keys& keys, const Floats& values, std::optional<Floats> state) {
             const size_t n = CheckKeys(keys, "ParityGroup.load");
             CheckRows(values, n, g.config().dim, "ParityGroup.load", "values");
             if (state) CheckRows(*state, n, StateFloats(g), "ParityGroup.load", "state");
             const int64_t* k = keys.data();
             const float* v = values.data();
             const float* s = state ? state->data() : nullptr;
             py::gil_scoped_release release;
             g.Load(server, k, v, s, n);
           }, py::arg("server"), py::arg("keys"), py::arg("values"), py::arg("state") = py::none())
      .def("kill", &ParityGroup::Kill, py::arg("servers"), Release())
      .def("begin_rebuild", &ParityGroup::BeginRebuild, Release())
      .def("rebuild_step", &ParityGroup::RebuildStep, py::arg("max_stripes"), Release())
      .def("finish_rebuild", &ParityGroup::FinishRebuild, Release())
      .def_property_readonly("rebuild_remaining", py::cpp_function(&ParityGroup::rebuild_remaining, Release()))
      .def("state", &ParityGroup::state, py::arg("server"), Release())
      .def("unavailable_servers", &ParityGroup::unavailable_servers, Release())
      .def("scrub", [](const ParityGroup& g) {
             std::vector<ScrubMismatch> bad;
             {
               py::gil_scoped_release release;
               bad = g.Scrub();
             }
             py::list out;
             for (const auto& b : bad) out.append(py::make_tuple(b.stripe, b.parity_member, b.server, b.block));
             return out;
           }, "[(stripe, parity_member, server, block)] of every stored parity block that disagrees")
      .def("stats", [](const ParityGroup& g) {
             ParityGroupStats st;
             {
               py::gil_scoped_release release;
               st = g.stats();
             }
             return StatsDict(st);
           })
      .def("num_data_blocks", &ParityGroup::num_data_blocks, py::arg("server"), Release())
      .def("num_parity_blocks", &ParityGroup::num_parity_blocks, py::arg("server"), Release())
      .def("read_data_block", [](ParityGroup& g, int server, size_t block) {
             Bytes out(static_cast<py::ssize_t>(g.block_bytes()));
             uint8_t* o = out.mutable_data();
             py::gil_scoped_release release;
             g.ReadDataBlock(server, block, o);
             return out;
           }, py::arg("server"), py::arg("block"))
      .def("read_parity_block", [](const ParityGroup& g, int server, size_t block) {
             Bytes out(static_cast<py::ssize_t>(g.block_bytes()));
             uint8_t* o = out.mutable_data();
             py::gil_scoped_release release;
             g.ReadParityBlock(server, block, o);
             return out;
           }, py::arg("server"), py::arg("block"))
      .def("shard", &ParityGroup::shard, py::arg("server"), "The server's EmbeddingShard (None when lost)")
      .def("parity_store", &ParityGroup::parity_store, py::arg("server"), "The server's ParityStore (None when lost)");
}

}  // namespace xdl_ec::python
