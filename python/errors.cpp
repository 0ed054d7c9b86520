// braid::Error -> Python (see errors.hpp). The classes also derive from the
// built-in exception a Python program would catch for the same trouble
// (InvalidArgument is a ValueError, Timeout a TimeoutError, PeerLost a
// ConnectionError), so generic handlers work too.
#include "errors.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "braid/types.hpp"

namespace braid::python {

namespace py = pybind11;

namespace {

// braid.Error, then the class of each ErrorCode. Owned by the module (one
// reference each, kept for the life of the process, as CPython's own
// exception types are).
PyObject* error_class = nullptr;
std::vector<std::pair<ErrorCode, PyObject*>> classes;

PyObject* make_class(py::module_& module, const char* name, PyObject* base, PyObject* builtin, const char* doc) {
  const std::string qualified = std::string("braid.") + name;
  py::tuple bases = builtin ? py::make_tuple(py::handle(base), py::handle(builtin)) : py::make_tuple(py::handle(base));
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  module.add_object(name, py::handle(cls));  // takes its own reference; ours stays for `classes`
  return cls;
}

void raise(const Error& error) {
  PyObject* cls = error_class;
  for (auto [code, c] : classes)
    if (code == error.code()) cls = c;
  py::object instance = py::reinterpret_borrow<py::object>(cls)(py::str(error.what()));
  std::string code(name_of(error.code()));  // "peer lost" -> "peer_lost"
  std::replace(code.begin(), code.end(), ' ', '_');
  instance.attr("code") = py::str(code);
  PyErr_SetObject(cls, instance.ptr());
}

}  // namespace

void rethrow_lost_peer_as_braid_error(py::error_already_set& error) {
  for (auto [code, cls] : classes) {
    if (!error.matches(cls)) continue;
    const std::string message = py::str(error.value());
    if (code == ErrorCode::peer_lost) throw PeerLost(message);
    if (code == ErrorCode::timeout) throw Timeout(message);
    if (code == ErrorCode::aborted) throw Aborted(message);
  }
  throw;
}

void bind_errors(py::module_& module) {
  error_class = make_class(module, "Error", PyExc_RuntimeError, nullptr,
                           "Base of every error braid raises; `code` names its kind ('timeout', 'peer_lost', ...).");
  auto add = [&](ErrorCode code, const char* name, PyObject* builtin, const char* doc, PyObject* base = nullptr) {
    PyObject* cls = make_class(module, name, base ? base : error_class, builtin, doc);
    classes.emplace_back(code, cls);
    return cls;
  };
  PyObject* invalid_argument =
      add(ErrorCode::invalid_argument, "InvalidArgument", PyExc_ValueError, "The caller passed something wrong.");
  add(ErrorCode::invalid_usage, "InvalidUsage", nullptr,
      "A call in a state where it cannot be made (an empty communicator, a group not open); an InvalidArgument.",
      invalid_argument);
  add(ErrorCode::timeout, "Timeout", PyExc_TimeoutError, "A wait passed its deadline (BRAID_TIMEOUT).");
  add(ErrorCode::peer_lost, "PeerLost", PyExc_ConnectionError, "A peer closed, reset or stopped answering.");
  add(ErrorCode::protocol, "ProtocolMismatch", nullptr, "Bytes that are not braid's, or another job's.");
  add(ErrorCode::system, "SystemError", PyExc_OSError, "An operating-system call failed.");
  add(ErrorCode::aborted, "Aborted", nullptr, "The communicator was aborted.");
  add(ErrorCode::internal, "InternalError", nullptr, "A broken invariant inside braid (a bug: please report it).");
  add(ErrorCode::unsupported, "Unsupported", PyExc_NotImplementedError,
      "Valid, but not built or not implemented here.");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(e);
    }
  });
}

}  // namespace braid::python
