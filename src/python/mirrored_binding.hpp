// braid.mirrored: the strategies of braid::mirrored for Python
// (mirrored_binding.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace braid::python {

void bind_mirrored(pybind11::module_& module);

}  // namespace braid::python
