#include "bindings.h"

namespace xdl_ec::python {

void BindShard(pybind11::module_& m) { (void)m; }  // filled in by its owner

}  // namespace xdl_ec::python
