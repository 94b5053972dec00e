// xdl_ec._core: the thin pybind11 layer over the C++ core. Logic lives in cpp/; this only translates.
#include "bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() =
      "xdl-ec native core: embedding shards, sparse optimizers, erasure codes, parity forwarding and recovery, "
      "worker row caches, direct links' messages";
  // Classes before the functions that take them: a signature names a type by its Python name only once the type is
  // bound (the docstrings, and the stub scripts/stubgen writes from them, read these names).
  xdl_ec::python::BindCodec(m);
  xdl_ec::python::BindLayout(m);
  xdl_ec::python::BindParityHolder(m);
  xdl_ec::python::BindDeltaForwarder(m);
  xdl_ec::python::BindShard(m);
  xdl_ec::python::BindFt(m);
  xdl_ec::python::BindRecovery(m);
  xdl_ec::python::BindRowCache(m);
  xdl_ec::python::BindLinkSession(m);
  xdl_ec::python::BindShardServer(m);
  xdl_ec::python::BindParityLink(m);
  xdl_ec::python::BindSortedUnique(m);
  xdl_ec::python::BindDelimitedFields(m);
  xdl_ec::python::BindShardGroup(m);
}
