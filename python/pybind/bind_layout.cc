// xdl_ec._core: StripeLayout (where each block of a stripe lives), server_of (which server of 0..n-1 owns a key)
// and RouteTable (the owner of each key's bucket for any set of live server ids), pure arithmetic 1:1 with the
// C++ API.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "xdl_ec/key_router.h"
#include "xdl_ec/route_table.h"
#include "xdl_ec/stripe_layout.h"

namespace py = pybind11;

namespace xdl_ec::python {

void BindLayout(py::module_& m) {
  py::class_<StripeLayout>(m, "StripeLayout", "Rotated stripe geometry of n servers under a (k, r) code")
      .def(py::init<int, int, int>(), py::arg("n"), py::arg("k"), py::arg("r"))
      .def_property_readonly("n", &StripeLayout::n)
      .def_property_readonly("k", &StripeLayout::k)
      .def_property_readonly("r", &StripeLayout::r)
      .def(
          "data_slot",
          [](const StripeLayout& l, int server, size_t block) {
            StripeSlot s = l.DataSlot(server, block);
            return py::make_tuple(s.stripe, s.member);
          },
          py::arg("server"), py::arg("block"), "Server's local data block -> (stripe, data member j)")
      .def(
          "parity_slot",
          [](const StripeLayout& l, int server, size_t block) {
            StripeSlot s = l.ParitySlot(server, block);
            return py::make_tuple(s.stripe, s.member);
          },
          py::arg("server"), py::arg("block"), "Server's local parity block -> (stripe, parity member i)")
      .def(
          "data_member",
          [](const StripeLayout& l, size_t stripe, int j) {
            BlockRef b = l.DataMember(stripe, j);
            return py::make_tuple(b.server, b.block);
          },
          py::arg("stripe"), py::arg("j"), "Stripe's data member j -> (server, local data block)")
      .def(
          "parity_member",
          [](const StripeLayout& l, size_t stripe, int i) {
            BlockRef b = l.ParityMember(stripe, i);
            return py::make_tuple(b.server, b.block);
          },
          py::arg("stripe"), py::arg("i"), "Stripe's parity member i -> (server, local parity block)")
      .def("server_at", &StripeLayout::ServerAt, py::arg("stripe"), py::arg("position"));

  m.def(
      "server_of",
      [](const py::array_t<int64_t, py::array::c_style>& keys, int n) {
        if (keys.ndim() != 1)
          throw std::invalid_argument("server_of: keys must be 1-D, got " + std::to_string(keys.ndim()) + " dims");
        const size_t count = static_cast<size_t>(keys.shape(0));
        py::array_t<int32_t> out(static_cast<py::ssize_t>(count));
        const int64_t* k = keys.data();
        int32_t* o = out.mutable_data();
        {
          py::gil_scoped_release release;
          KeyRouter::ServersOf(k, count, n, o);
        }
        return out;
      },
      py::arg("keys"), py::arg("n"), "The owning server of each key (KeyRouter::ServerOf): int32[len(keys)]");

  m.def(
      "bucket_of",
      [](const py::array_t<int64_t, py::array::c_style>& keys) {
        if (keys.ndim() != 1)
          throw std::invalid_argument("bucket_of: keys must be 1-D, got " + std::to_string(keys.ndim()) + " dims");
        const size_t count = static_cast<size_t>(keys.shape(0));
        py::array_t<int32_t> out(static_cast<py::ssize_t>(count));
        const int64_t* k = keys.data();
        int32_t* o = out.mutable_data();
        for (size_t i = 0; i < count; ++i) o[i] = static_cast<int32_t>(RouteTable::BucketOf(k[i]));
        return out;
      },
      py::arg("keys"), "Each key's virtual bucket (RouteTable::BucketOf): int32[len(keys)] in [0, RouteTable.buckets)");

  py::class_<RouteTable>(m, "RouteTable",
                         "Owner of each virtual bucket among a set of live server ids (rendezvous hashing)")
      .def(py::init<std::vector<int>>(), py::arg("server_ids"))
      .def_property_readonly_static("buckets", [](const py::object&) { return RouteTable::kBuckets; })
      .def_property_readonly("server_ids", &RouteTable::server_ids, "Live server ids, ascending")
      .def_property_readonly(
          "owners",
          [](const RouteTable& t) {
            py::array_t<int32_t> out(static_cast<py::ssize_t>(RouteTable::kBuckets));
            int32_t* o = out.mutable_data();
            for (size_t b = 0; b < RouteTable::kBuckets; ++b) o[b] = t.owners()[b];
            return out;
          },
          "owners[b] is bucket b's server id: int32[buckets]")
      .def(
          "servers_of",
          [](const RouteTable& t, const py::array_t<int64_t, py::array::c_style>& keys) {
            if (keys.ndim() != 1)
              throw std::invalid_argument("servers_of: keys must be 1-D, got " + std::to_string(keys.ndim()) + " dims");
            const size_t count = static_cast<size_t>(keys.shape(0));
            py::array_t<int32_t> out(static_cast<py::ssize_t>(count));
            const int64_t* k = keys.data();
            int32_t* o = out.mutable_data();
            {
              py::gil_scoped_release release;
              t.ServersOf(k, count, o);
            }
            return out;
          },
          py::arg("keys"), "The owning server id of each key: int32[len(keys)]");
}

}  // namespace xdl_ec::python
