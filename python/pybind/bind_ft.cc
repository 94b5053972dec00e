// xdl_ec._core.AccessCounter: numpy in/out over xdl_ec::AccessCounter (fault-tolerance bookkeeping beside a
// shard); the GIL is released around every batch call.
#include <pybind11/numpy.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "xdl_ec/access_counter.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

using Keys = py::array_t<int64_t, py::array::c_style>;

void RequireKeys(const Keys& keys, const char* where) {
  if (keys.ndim() != 1) {
    throw std::invalid_argument(std::string(where) + ": keys must be 1-D, got " + std::to_string(keys.ndim()) +
                                " dimensions");
  }
}

// Hands a std::vector to numpy without copying: the array's base owns the vector.
py::array_t<int64_t> ToNumpy(std::vector<int64_t>&& v) {
  auto* owned = new std::vector<int64_t>(std::move(v));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<int64_t>*>(p); });
  return py::array_t<int64_t>({static_cast<py::ssize_t>(owned->size())}, owned->data(), base);
}

}  // namespace

void BindFt(py::module_& m) {
  py::class_<AccessCounter, std::shared_ptr<AccessCounter>>(
      m, "AccessCounter", "int64 key -> count, kept beside a shard (CPR's MFU counters, lost-update ledgers)")
      .def(py::init<>())
      .def(
          "add",
          [](AccessCounter& c, const Keys& keys, bool once) {
            RequireKeys(keys, "add");
            py::gil_scoped_release release;
            c.Add(keys.data(), static_cast<size_t>(keys.shape(0)), once);
          },
          py::arg("keys"), py::arg("once") = true,
          "Adds one per key; with once, a key repeated in this call counts once.")
      .def(
          "get",
          [](const AccessCounter& c, const Keys& keys) {
            RequireKeys(keys, "get");
            py::array_t<int64_t> out(keys.shape(0));
            {
              py::gil_scoped_release release;
              c.Get(keys.data(), static_cast<size_t>(keys.shape(0)), out.mutable_data());
            }
            return out;
          },
          py::arg("keys"), "int64 counts of keys (0 when never counted)")
      .def(
          "set",
          [](AccessCounter& c, const Keys& keys, const Keys& counts) {
            RequireKeys(keys, "set");
            if (counts.ndim() != 1 || counts.shape(0) != keys.shape(0)) {
              throw std::invalid_argument("set: counts must be 1-D with len(keys) = " + std::to_string(keys.shape(0)) +
                                          " entries");
            }
            py::gil_scoped_release release;
            c.Set(keys.data(), counts.data(), static_cast<size_t>(keys.shape(0)));
          },
          py::arg("keys"), py::arg("counts"), "Sets the counts of unique keys (0 forgets a key)")
      .def(
          "discard",
          [](AccessCounter& c, const Keys& keys) {
            RequireKeys(keys, "discard");
            py::gil_scoped_release release;
            return c.Discard(keys.data(), static_cast<size_t>(keys.shape(0)));
          },
          py::arg("keys"), "Forgets keys; returns how many were counted")
      .def("clear", &AccessCounter::Clear, py::call_guard<py::gil_scoped_release>())
      .def("size", &AccessCounter::size, py::call_guard<py::gil_scoped_release>())
      .def("total", &AccessCounter::total, py::call_guard<py::gil_scoped_release>())
      .def(
          "items",
          [](const AccessCounter& c) {
            std::vector<int64_t> keys, counts;
            {
              py::gil_scoped_release release;
              c.Items(&keys, &counts);
            }
            return py::make_tuple(ToNumpy(std::move(keys)), ToNumpy(std::move(counts)));
          },
          "(keys, counts) sorted by key");
}

}  // namespace xdl_ec::python
