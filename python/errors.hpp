// braid's errors as Python exceptions: braid.Error and one subclass per
// ErrorCode (braid.Timeout, braid.PeerLost, ...), with braid's message and
// the code's name in `code`.
#pragma once

#include <pybind11/pybind11.h>

namespace braid::python {

/// Creates the exception classes in `module` and registers the translator
/// from braid::Error (any subclass, any code) to them.
void bind_errors(pybind11::module_& module);

}  // namespace braid::python
