// xdl_ec._core.sorted_unique: numpy in/out over xdl_ec::SortedUnique (sorted_unique.h), the GIL released around
// the work so that the input thread's unique runs beside the step's TensorFlow call.
#include <pybind11/numpy.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.h"
#include "xdl_ec/sorted_unique.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

py::tuple Unique(const py::array& given) {
  // int64 exactly, or an integer dtype that converts safely (int32 ids); a float array is a mix-up, not rounded
  if (!py::isinstance<py::array_t<int64_t>>(given) && !py::isinstance<py::array_t<int32_t>>(given)) {
    throw std::invalid_argument("sorted_unique: keys must be an int64 (or int32) array, got dtype " +
                                py::str(given.dtype()).cast<std::string>());
  }
  if (given.ndim() != 1) {
    throw std::invalid_argument("sorted_unique: keys must be 1-D, got " + std::to_string(given.ndim()) +
                                " dimensions: flatten them first");
  }
  const auto keys = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(given);
  const size_t n = static_cast<size_t>(keys.shape(0));
  auto* unique = new std::vector<int64_t>();
  py::capsule owner(unique, [](void* p) { delete static_cast<std::vector<int64_t>*>(p); });
  py::array_t<int32_t> inverse(static_cast<py::ssize_t>(n));
  {
    py::gil_scoped_release release;
    SortedUnique(keys.data(), n, unique, inverse.mutable_data());
  }
  py::array_t<int64_t> unique_array({static_cast<py::ssize_t>(unique->size())}, unique->data(), owner);
  return py::make_tuple(unique_array, inverse);
}

}  // namespace

void BindSortedUnique(py::module_& m) {
  m.def("sorted_unique", &Unique, py::arg("keys"),
        "(unique, inverse) of 1-D int64 ``keys``, as ``numpy.unique(keys, return_inverse=True)`` gives them (unique "
        "ascending; inverse int32, ``unique[inverse] == keys``), by a radix sort in C++ with the GIL released.");
}

}  // namespace xdl_ec::python
