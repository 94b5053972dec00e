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
  throw py::value_error("ErasureCode: matrix='" + name + "' is not one of 'auto', 'vandermonde', 'cauchy'");
}

std::string TypeName(const py::handle& obj) { return py::str(py::type::of(obj).attr("__name__")); }

// A uint8 numpy array of `ndim` dimensions, C-contiguous (inputs are copied to contiguous if needed:
// the dtype is checked first so that no silent cast happens).
ByteArray CheckedBytes(const py::handle& obj, const std::string& what, int ndim) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(what + " must be a numpy.ndarray of dtype uint8, got " + TypeName(obj));
  }
  auto array = py::reinterpret_borrow<py::array>(obj);
  if (!py::isinstance<py::array_t<uint8_t>>(array)) {  // equivalent dtype, not identity
    throw py::type_error(what + " must have dtype uint8, got " + std::string(py::str(array.dtype())) +
                         " (view other dtypes as bytes with .view(numpy.uint8))");
  }
  if (array.ndim() != ndim) {
    throw py::value_error(what + " must be " + std::to_string(ndim) + "-dimensional, got shape " +
                          std::string(py::str(py::tuple(
                              py::cast(std::vector<py::ssize_t>(array.shape(), array.shape() + array.ndim()))))));
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

// A fragment index: any integer (numpy's too) but bool, within 0..k+r-1.
int CheckedIndex(const ErasureCode& code, const py::handle& obj, const std::string& what) {
  if (!PyIndex_Check(obj.ptr()) || py::isinstance<py::bool_>(obj)) {
    throw py::type_error(what + " must be an int, got " + TypeName(obj));
  }
  auto value = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!value) throw py::error_already_set();
  int overflow = 0;
  const long long idx = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  const int m = code.k() + code.r();
  if (overflow != 0 || idx < 0 || idx >= m) {
    throw py::value_error(what + " " + std::string(py::str(value)) + " out of range; indices are 0.." +
                          std::to_string(m - 1) + " (k=" + std::to_string(code.k()) +
                          " data, then r=" + std::to_string(code.r()) + " parity)");
  }
  return static_cast<int>(idx);
}

// The surviving fragments of a {index: uint8[L]} dict, all of one length.
struct Survivors {
  std::vector<int> present;
  std::vector<ByteArray> arrays;  // keeps contiguous copies alive while the GIL is released
  std::vector<const uint8_t*> sources;
  py::ssize_t len = 0;
};

Survivors ParseFragments(const ErasureCode& code, const py::handle& fragments_obj, const std::string& verb) {
  if (!py::isinstance<py::dict>(fragments_obj)) {
    throw py::type_error(verb + ": fragments must be a dict {fragment index: uint8 array}, got " +
                         TypeName(fragments_obj));
  }
  Survivors survivors;
  int first = -1;
  for (auto item : py::reinterpret_borrow<py::dict>(fragments_obj)) {
    const int idx = CheckedIndex(code, item.first, verb + ": fragment index");
    ByteArray array = CheckedBytes(item.second, verb + ": fragment " + std::to_string(idx), 1);
    if (first >= 0 && array.shape(0) != survivors.len) {
      throw py::value_error(verb + ": fragments have unequal lengths: fragment " + std::to_string(first) + " has " +
                            std::to_string(survivors.len) + " bytes, fragment " + std::to_string(idx) + " has " +
                            std::to_string(array.shape(0)));
    }
    if (first < 0) first = idx;
    survivors.len = array.shape(0);
    survivors.present.push_back(idx);
    survivors.sources.push_back(array.data());
    survivors.arrays.push_back(std::move(array));
  }
  return survivors;
}

// Row pointers of a writeable uint8[rows, len] array whose rows are contiguous (written in place).
std::vector<uint8_t*> WritableRows(const py::handle& obj, const std::string& what, py::ssize_t rows,
                                   const std::string& rows_name, py::ssize_t len) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(what + " must be a numpy.ndarray of dtype uint8 (written in place), got " + TypeName(obj));
  }
  auto array = py::reinterpret_borrow<py::array>(obj);
  if (!py::isinstance<py::array_t<uint8_t>>(array)) {  // equivalent dtype, not identity
    throw py::type_error(what + " must have dtype uint8, got " + std::string(py::str(array.dtype())));
  }
  if (array.ndim() != 2 || array.shape(0) != rows || (len >= 0 && array.shape(1) != len)) {
    std::string shape = "(";
    for (py::ssize_t d = 0; d < array.ndim(); ++d) shape += (d ? ", " : "") + std::to_string(array.shape(d));
    throw py::value_error(what + " must have shape (" + rows_name + "=" + std::to_string(rows) + ", " +
                          (len >= 0 ? std::to_string(len) : std::string("L")) + "), got " + shape +
                          (array.ndim() == 1 ? ",)" : ")"));
  }
  if (!array.writeable()) {
    throw py::value_error(what + " is read-only; it is written in place, pass a writeable array");
  }
  if (array.shape(1) > 1 && array.strides(1) != 1) {
    throw py::value_error(what +
                          " rows must be contiguous (strides[1] == 1) to be written in place; "
                          "use numpy.ascontiguousarray and keep that array");
  }
  std::vector<uint8_t*> out(static_cast<size_t>(rows));
  auto* base = static_cast<uint8_t*>(array.mutable_data());
  for (py::ssize_t j = 0; j < rows; ++j) out[j] = base + j * array.strides(0);
  return out;
}

py::array_t<uint8_t> Decode(const ErasureCode& code, const py::handle& fragments_obj) {
  Survivors survivors = ParseFragments(code, fragments_obj, "decode");
  std::vector<bool> have(code.k() + code.r(), false);
  for (int idx : survivors.present) have[idx] = true;
  std::vector<int> wanted;
  for (int i = 0; i < code.k(); ++i) {
    if (!have[i]) wanted.push_back(i);
  }
  const py::ssize_t len = survivors.len;
  py::array_t<uint8_t> data({static_cast<py::ssize_t>(code.k()), len});
  uint8_t* rows = data.mutable_data();
  const py::ssize_t row_stride = data.strides(0);
  std::vector<uint8_t*> outputs;
  outputs.reserve(wanted.size());
  for (int i : wanted) outputs.push_back(rows + i * row_stride);
  {
    py::gil_scoped_release release;
    // Validates first (fewer than k present -> "unrecoverable"), then writes only the missing rows.
    code.Decode(static_cast<size_t>(len), survivors.present, survivors.sources.data(), wanted, outputs.data());
    for (size_t p = 0; p < survivors.present.size(); ++p) {
      if (survivors.present[p] < code.k() && len > 0) {
        std::memcpy(rows + survivors.present[p] * row_stride, survivors.sources[p], static_cast<size_t>(len));
      }
    }
  }
  return data;
}

py::array_t<uint8_t> Reconstruct(const ErasureCode& code, const py::handle& fragments_obj, const py::handle& lost_obj,
                                 const py::handle& out_obj) {
  Survivors survivors = ParseFragments(code, fragments_obj, "reconstruct");
  if (!py::isinstance<py::sequence>(lost_obj) || py::isinstance<py::str>(lost_obj)) {
    throw py::type_error("reconstruct: lost must be a sequence of fragment indices, got " + TypeName(lost_obj));
  }
  std::vector<int> wanted;
  for (auto item : py::reinterpret_borrow<py::sequence>(lost_obj)) {
    wanted.push_back(CheckedIndex(code, item, "reconstruct: lost index"));
  }
  const auto n_out = static_cast<py::ssize_t>(wanted.size());
  py::array_t<uint8_t> result;
  std::vector<uint8_t*> outputs;
  if (out_obj.is_none()) {
    result = py::array_t<uint8_t>({n_out, survivors.len});
    for (py::ssize_t w = 0; w < n_out; ++w) outputs.push_back(result.mutable_data() + w * result.strides(0));
  } else {
    outputs = WritableRows(out_obj, "reconstruct: out", n_out, "len(lost)", survivors.len);
    result = py::reinterpret_borrow<py::array_t<uint8_t>>(out_obj);
  }
  {
    py::gil_scoped_release release;
    code.Decode(static_cast<size_t>(survivors.len), survivors.present, survivors.sources.data(), wanted,
                outputs.data());
  }
  return result;
}

void Update(const ErasureCode& code, const py::handle& parity_obj, const py::handle& index_obj,
            const py::handle& delta_obj) {
  const int index = CheckedIndex(code, index_obj, "update: index");
  if (index >= code.k()) {
    throw py::value_error("update: index " + std::to_string(index) +
                          " is a parity fragment; update takes the "
                          "data fragment index 0.." +
                          std::to_string(code.k() - 1) + " whose bytes changed");
  }
  std::vector<uint8_t*> rows = WritableRows(parity_obj, "update: parity", code.r(), "r", -1);
  ByteArray delta = CheckedBytes(delta_obj, "update: delta", 1);
  const auto len = static_cast<size_t>(py::reinterpret_borrow<py::array>(parity_obj).shape(1));
  if (static_cast<size_t>(delta.shape(0)) != len) {
    throw py::value_error("update: delta has " + std::to_string(delta.shape(0)) + " bytes but parity rows have " +
                          std::to_string(len));
  }
  const uint8_t* delta_ptr = delta.data();
  py::gil_scoped_release release;
  code.UpdateRows(len, index, delta_ptr, rows.data());
}

}  // namespace

void BindCodec(py::module_& m) {
  py::class_<ErasureCode>(m, "ErasureCode",
                          "Systematic MDS erasure code over GF(2^8) on ISA-L (k data, r parity fragments).")
      .def(py::init(
               [](int k, int r, const std::string& matrix) { return ErasureCode(k, r, ParseMatrix(k, r, matrix)); }),
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
      .def("reconstruct", &Reconstruct, py::arg("fragments"), py::arg("lost"), py::arg("out") = py::none())
      .def("update", &Update, py::arg("parity"), py::arg("index"), py::arg("delta"))
      .def_static("vandermonde_is_mds", &ErasureCode::VandermondeIsMds, py::arg("k"), py::arg("r"));
}

}  // namespace xdl_ec::python
