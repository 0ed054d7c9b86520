// braid._braid: the extension module under the `braid` Python package
// (python/braid/). The package re-exports what is bound here; see
// python/braid/__init__.py for the Python-side API.
#include <pybind11/pybind11.h>

#include "braid/braid.hpp"
#include "comm_binding.hpp"
#include "errors.hpp"
#include "mirrored_binding.hpp"

PYBIND11_MODULE(_braid, m) {
  m.doc() = "braid's C++ API for Python: communicators and collectives on numpy arrays, and braid::mirrored.";
  m.attr("__version__") = BRAID_PYTHON_VERSION;
  braid::python::bind_errors(m);
  braid::python::bind_comm(m);
  // braid/__init__.py registers it with atexit: braid's threads stop, with the
  // GIL released, before the interpreter finalizes (which would unwind a
  // thread that waits for the GIL through braid's frames).
  m.def(
      "_shutdown", [] { braid::shutdown(); }, pybind11::call_guard<pybind11::gil_scoped_release>(),
      "Finalizes every communicator of this process and stops braid's threads (braid.shutdown).");
  auto mirrored = m.def_submodule("mirrored", "TensorFlow-style distribution strategies (braid::mirrored).");
  braid::python::bind_mirrored(mirrored);
}
