// What the bindings that move a direct link's messages share (bind_link_session.cc defines them): the
// interruption hook LinkSession calls while waiting, and the Python form of a received message.
#pragma once

#include <pybind11/pybind11.h>

#include "xdl_ec/link_session.h"

namespace xdl_ec::python {

// Runs Python's signal handlers (a KeyboardInterrupt raises out of the call); takes the GIL.
void CheckSignals();

// A received message as LinkSession.receive answers it: (head, [buffers]), numpy uint8 views of its one
// allocation, which the views keep alive. Call with the GIL held.
pybind11::tuple MessageViews(const LinkSession::Message& m);

}  // namespace xdl_ec::python
