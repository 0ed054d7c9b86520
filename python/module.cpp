// braid._braid: the extension module under the `braid` Python package
// (python/braid/). The package re-exports what is bound here; see
// python/braid/__init__.py for the Python-side API.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <vector>

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
  m.def(
      "mem_alloc",
      [](const std::vector<pybind11::ssize_t>& shape, const pybind11::object& dtype) {
        const pybind11::dtype type = pybind11::dtype::from_args(dtype);
        std::size_t bytes = static_cast<std::size_t>(type.itemsize());
        for (pybind11::ssize_t d : shape) {
          if (d < 0) throw braid::InvalidArgument("braid.mem_alloc: a negative dimension in the shape");
          bytes *= static_cast<std::size_t>(d);
        }
        void* memory = braid::mem_alloc(std::max<std::size_t>(bytes, 1));
        // Freed with the last array that views it (a registered one stays:
        // braid_mem_free refuses it, and the capsule cannot raise).
        pybind11::capsule owner(memory, [](void* p) {
          try {
            braid::mem_free(p);
          } catch (const braid::Error&) {
          }
        });
        return pybind11::array(type, shape, memory, owner);
      },
      pybind11::arg("shape"), pybind11::arg("dtype") = "float32",
      "A zeroed C-contiguous numpy array in braid's shared memory (braid_mem_alloc): the ranks of a host copy "
      "or reduce its messages above 64K straight out of it instead of through the shared ring. Freed with the "
      "last array viewing it; deregister it first if registered.");
  auto mirrored = m.def_submodule("mirrored", "TensorFlow-style distribution strategies (braid::mirrored).");
  braid::python::bind_mirrored(mirrored);
}
