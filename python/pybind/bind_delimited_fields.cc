// xdl_ec._core.parse_delimited_fields: bytes in, an int64 array out, over xdl_ec::ParseDelimitedFields
// (delimited_fields.h), the GIL released around the parse so that a reader thread parses beside the step.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "xdl_ec/delimited_fields.h"

namespace py = pybind11;

namespace xdl_ec::python {
namespace {

FieldKind KindOf(const std::string& name, size_t column) {
  if (name == "bit") return FieldKind::kBit;
  if (name == "decimal") return FieldKind::kDecimal;
  if (name == "hex") return FieldKind::kHex;
  throw std::invalid_argument("parse_delimited_fields: column " + std::to_string(column) + ": kind must be 'bit', " +
                              "'decimal' or 'hex', got '" + name + "'");
}

py::object Parse(const py::bytes& text, size_t rows, const std::vector<std::tuple<std::string, int, int64_t>>& columns,
                 const std::string& sep) {
  if (sep.size() != 1) throw std::invalid_argument("parse_delimited_fields: sep must be one character");
  if (columns.empty()) throw std::invalid_argument("parse_delimited_fields: no columns");
  std::vector<FieldSpec> specs;
  for (size_t j = 0; j < columns.size(); ++j) {
    const auto& [kind, max_digits, empty] = columns[j];
    specs.push_back(FieldSpec{KindOf(kind, j), max_digits, empty});
  }
  char* data = nullptr;
  py::ssize_t size = 0;
  if (PYBIND11_BYTES_AS_STRING_AND_SIZE(text.ptr(), &data, &size) != 0) throw py::error_already_set();
  py::array_t<int64_t> values({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(columns.size())});
  bool parsed;
  {
    py::gil_scoped_release release;
    parsed = ParseDelimitedFields(data, static_cast<size_t>(size), sep[0], specs.data(), specs.size(), rows,
                                  values.mutable_data());
  }
  if (!parsed) return py::none();
  return std::move(values);
}

}  // namespace

void BindDelimitedFields(py::module_& m) {
  m.def("parse_delimited_fields", &Parse, py::arg("text"), py::arg("rows"), py::arg("columns"), py::arg("sep") = "\t",
        "int64[rows, len(columns)] of ``text`` (bytes): exactly ``rows`` rows ended by newlines (carriage returns "
        "before a row's end dropped), fields separated by ``sep``, column j read as ``columns[j]`` = (kind, "
        "max_digits, empty): 'bit' (exactly 0 or 1), 'decimal' (an optional sign and 1..max_digits digits, <= 18) "
        "or 'hex' (1..max_digits hex digits, <= 16, as uint64 bits), an empty field giving ``empty``. None when any "
        "row or field is out of form (parse those lines one by one to say why). The GIL is released.");
}

}  // namespace xdl_ec::python
