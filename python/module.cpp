// braid._braid: the extension module under the `braid` Python package
// (python/braid/). The package re-exports what is bound here; see
// python/braid/__init__.py for the Python-side API.
#include <pybind11/pybind11.h>

#include "comm_binding.hpp"
#include "errors.hpp"
#include "mirrored_binding.hpp"

PYBIND11_MODULE(_braid, m) {
  m.doc() = "braid's C++ API for Python: communicators and collectives on numpy arrays, and braid::mirrored.";
  m.attr("__version__") = BRAID_PYTHON_VERSION;
  braid::python::bind_errors(m);
  braid::python::bind_comm(m);
  auto mirrored = m.def_submodule("mirrored", "TensorFlow-style distribution strategies (braid::mirrored).");
  braid::python::bind_mirrored(mirrored);
}
