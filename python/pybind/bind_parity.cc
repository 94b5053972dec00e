#include "bindings.h"

namespace xdl_ec::python {

void BindParity(pybind11::module_& m) { (void)m; }  // filled in by its owner

}  // namespace xdl_ec::python
