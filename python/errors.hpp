// braid's errors as Python exceptions: braid.Error and one subclass per
// ErrorCode (braid.Timeout, braid.PeerLost, ...), with braid's message and
// the code's name in `code`.
#pragma once

#include <pybind11/pybind11.h>

namespace braid::python {

/// Creates the exception classes in `module` and registers the translator
/// from braid::Error (any subclass, any code) to them.
void bind_errors(pybind11::module_& module);

/// Inside a `catch (pybind11::error_already_set&)`, with the GIL: a braid
/// error that lost a peer (braid.PeerLost, braid.Timeout, braid.Aborted),
/// raised by Python code that braid called back, goes on as the braid::Error
/// it was, so that braid's C++ (the elastic strategy) can tell it; anything
/// else is rethrown as it is.
[[noreturn]] void rethrow_lost_peer_as_braid_error(pybind11::error_already_set& error);

}  // namespace braid::python
