// xdl_ec._core.ErasureCode: numpy in/out over xdl_ec::ErasureCode. Checks shapes and dtypes here (the
// core takes raw pointers), then releases the GIL around the byte work.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "bindings.h"
#include "xdl_ec/erasure_code.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

using ByteArray = py::array_t<uint8_t, py::array::c_style>;

CodeMatrix ParseMatrix(int k, int r, const std::string& name) {
  if (name == "auto") return ErasureCode::DefaultMatrix(k, r);
  if (name == "vandermonde") return CodeMatrix::kVandermonde;
  if (name == "cauchy") return CodeMatrix::kCauchy;
  throw py::value_error("ErasureCode: matrix='" + name +
                        "' is not one of 'auto', 'vandermonde', 'cauchy'");
}

// A uint8 numpy array of `ndim` dimensions, C-contiguous (inputs are copied to contiguous if needed:
// the dtype is checked first so that no silent cast happens).
ByteArray CheckedBytes(const py::handle& obj, const std::string& what, int ndim) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(what + " must be a numpy.ndarray of dtype uint8, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  auto array = py::reinterpret_borrow<py::array>(obj);
  if (!array.dtype().is(py::dtype::of<uint8_t>())) {
    throw py::type_error(what + " must have dtype uint8, got " + std::string(py::str(array.dtype())) +
                         " (view other dtypes as bytes with .view(numpy.uint8))");
  }
  if (array.ndim() != ndim) {
    throw py::value_error(what + " must be " + std::to_string(ndim) + "-dimensional, got shape " +
                          std::string(py::str(py::tuple(py::cast(std::vector<py::ssize_t>(
                              array.shape(), array.shape() + array.ndim()))))));
  }
  return ByteArray::ensure(array);
}

py::array_t<uint8_t> Encode(const ErasureCode& code, const py::handle& data_obj) {
  ByteArray data = CheckedBytes(data_obj, "encode: data", 2);
  if (data.shape(0) != code.k()) {
    throw py::value_error("encode: data must have k=" + std::to_string(code.k()) +
                          " rows (one per data fragment), got " + std::to_string(data.shape(0)));
  }
  const size_t len = static_cast<size_t>(data.shape(1));
  py::array_t<uint8_t> parity({static_cast<py::ssize_t>(code.r()), static_cast<py::ssize_t>(len)});
  std::vector<const uint8_t*> in(code.k());
  std::vector<uint8_t*> out(code.r());
  // Row pointers from strides: data(i, 0) would reject L = 0.
  for (int i = 0; i < code.k(); ++i) in[i] = data.data() + i * data.strides(0);
  for (int j = 0; j < code.r(); ++j) out[j] = parity.mutable_data() + j * parity.strides(0);
  {
    py::gil_scoped_release release;
    code.Encode(len, in.data(), out.data());
  }
  return parity;
}

py::array_t<uint8_t> Decode(const ErasureCode& code, const py::handle& fragments_obj) {
  if (!py::isinstance<py::dict>(fragments_obj)) {
    throw py::type_error("decode: fragments must be a dict {fragment index: uint8 array}, got " +
                         std::string(py::str(py::type::of(fragments_obj).attr("__name__"))));
  }
  const int m = code.k() + code.r();
  std::vector<int> present;
  std::vector<ByteArray> arrays;  // keeps contiguous copies alive
  py::ssize_t len = -1;
  int len_index = -1;
  for (auto item : py::reinterpret_borrow<py::dict>(fragments_obj)) {
    // Any integer (also numpy's) but bool; out-of-range huge values fall into the range error below.
    if (!PyIndex_Check(item.first.ptr()) || py::isinstance<py::bool_>(item.first)) {
      throw py::type_error("decode: fragment keys must be int indices, got " +
                           std::string(py::str(py::type::of(item.first).attr("__name__"))));
    }
    auto key = py::reinterpret_steal<py::object>(PyNumber_Index(item.first.ptr()));
    if (!key) throw py::error_already_set();
    int overflow = 0;
    const long long idx = PyLong_AsLongLongAndOverflow(key.ptr(), &overflow);
    if (overflow != 0 || idx < 0 || idx >= m) {
      throw py::value_error("decode: fragment index " + std::string(py::str(key)) +
                            " out of range; indices are 0.." + std::to_string(m - 1) + " (k=" +
                            std::to_string(code.k()) + " data, then r=" + std::to_string(code.r()) +
                            " parity)");
    }
    ByteArray array = CheckedBytes(item.second, "decode: fragment " + std::to_string(idx), 1);
    if (len >= 0 && array.shape(0) != len) {
      throw py::value_error("decode: fragments have unequal lengths: fragment " +
                            std::to_string(len_index) + " has " + std::to_string(len) +
                            " bytes, fragment " + std::to_string(idx) + " has " +
                            std::to_string(array.shape(0)));
    }
    len = array.shape(0);
    len_index = static_cast<int>(idx);
    present.push_back(static_cast<int>(idx));
    arrays.push_back(std::move(array));
  }
  std::vector<bool> have(m, false);
  for (int idx : present) have[idx] = true;
  std::vector<int> wanted;
  for (int i = 0; i < code.k(); ++i) {
    if (!have[i]) wanted.push_back(i);
  }
  py::array_t<uint8_t> data({static_cast<py::ssize_t>(code.k()), std::max<py::ssize_t>(len, 0)});
  std::vector<const uint8_t*> sources;
  for (const auto& array : arrays) sources.push_back(array.data());
  std::vector<uint8_t*> outputs;
  uint8_t* rows = data.mutable_data();
  const py::ssize_t row_stride = data.strides(0);
  for (int i : wanted) outputs.push_back(rows + i * row_stride);
  {
    py::gil_scoped_release release;
    // Validates first (fewer than k present -> "unrecoverable"), then writes only the missing rows.
    code.Decode(static_cast<size_t>(std::max<py::ssize_t>(len, 0)), present, sources.data(), wanted,
                outputs.data());
    for (size_t p = 0; p < present.size(); ++p) {
      if (present[p] < code.k() && len > 0) {
        std::memcpy(rows + present[p] * row_stride, sources[p], static_cast<size_t>(len));
      }
    }
  }
  return data;
}

void Update(const ErasureCode& code, const py::handle& parity_obj, int index, const py::handle& delta_obj) {
  if (!py::isinstance<py::array>(parity_obj)) {
    throw py::type_error("update: parity must be a numpy.ndarray of dtype uint8 (updated in place), got " +
                         std::string(py::str(py::type::of(parity_obj).attr("__name__"))));
  }
  auto parity = py::reinterpret_borrow<py::array>(parity_obj);
  if (!parity.dtype().is(py::dtype::of<uint8_t>())) {
    throw py::type_error("update: parity must have dtype uint8, got " + std::string(py::str(parity.dtype())));
  }
  if (parity.ndim() != 2 || parity.shape(0) != code.r()) {
    throw py::value_error("update: parity must have shape (r=" + std::to_string(code.r()) +
                          ", L), got ndim " + std::to_string(parity.ndim()) +
                          (parity.ndim() >= 1 ? " with " + std::to_string(parity.shape(0)) + " rows" : ""));
  }
  if (!parity.writeable()) {
    throw py::value_error("update: parity is read-only; it is updated in place, pass a writeable array");
  }
  if (parity.shape(1) > 1 && parity.strides(1) != 1) {
    throw py::value_error("update: parity rows must be contiguous (strides[1] == 1) to be updated in place; "
                          "use numpy.ascontiguousarray and keep that array");
  }
  ByteArray delta = CheckedBytes(delta_obj, "update: delta", 1);
  const size_t len = static_cast<size_t>(parity.shape(1));
  if (static_cast<size_t>(delta.shape(0)) != len) {
    throw py::value_error("update: delta has " + std::to_string(delta.shape(0)) +
                          " bytes but parity rows have " + std::to_string(len));
  }
  std::vector<uint8_t*> rows(code.r());
  auto* base = static_cast<uint8_t*>(parity.mutable_data());
  for (int j = 0; j < code.r(); ++j) rows[j] = base + j * parity.strides(0);
  const uint8_t* delta_ptr = delta.data();
  py::gil_scoped_release release;
  code.UpdateRows(len, index, delta_ptr, rows.data());
}

}  // namespace

void BindCodec(py::module_& m) {
  py::class_<ErasureCode>(m, "ErasureCode",
                          "Systematic MDS erasure code over GF(2^8) on ISA-L (k data, r parity fragments).")
      .def(py::init([](int k, int r, const std::string& matrix) {
             return ErasureCode(k, r, ParseMatrix(k, r, matrix));
           }),
           py::arg("k"), py::arg("r"), py::arg("matrix") = "auto")
      .def_property_readonly("k", &ErasureCode::k)
      .def_property_readonly("r", &ErasureCode::r)
      .def_property_readonly("matrix", [](const ErasureCode& code) { return CodeMatrixName(code.matrix()); })
      .def_property_readonly("coefficients",
                             [](const ErasureCode& code) {
                               py::array_t<uint8_t> g({code.r(), code.k()});
                               for (int j = 0; j < code.r(); ++j) {
                                 for (int i = 0; i < code.k(); ++i) *g.mutable_data(j, i) = code.coefficient(j, i);
                               }
                               return g;
                             })
      .def("encode", &Encode, py::arg("data"))
      .def("decode", &Decode, py::arg("fragments"))
      .def("update", &Update, py::arg("parity"), py::arg("index"), py::arg("delta"))
      .def_static("vandermonde_is_mds", &ErasureCode::VandermondeIsMds, py::arg("k"), py::arg("r"));
}

}  // namespace xdl_ec::python
