// braid.Comm and braid.Work: the communicator and its collectives on numpy
// arrays (comm_binding.cpp, collectives_binding.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "braid/braid.hpp"

namespace braid::python {

namespace py = pybind11;

/// A communicator as Python holds it. Closing (or destroying) it finishes
/// its queued operations with the GIL released, so threads that Python code
/// runs on meanwhile are not blocked.
class PyComm {
 public:
  explicit PyComm(Comm comm) : comm_(std::move(comm)) {}
  ~PyComm();
  /// The communicator; throws InvalidArgument once closed.
  Comm& get();
  void close();
  /// Hands the communicator over (to a strategy); this one is closed after.
  Comm take();
  bool closed() const { return !comm_.has_value(); }

  /// Marks the communicator busy for one call: a second Python thread
  /// calling it meanwhile gets InvalidArgument rather than undefined
  /// behaviour (one thread at a time may call a braid::Comm; abort() is
  /// exempt).
  class Call {
   public:
    explicit Call(PyComm& comm);
    ~Call() { comm_.busy_.store(false); }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    PyComm& comm_;
  };

 private:
  std::optional<Comm> comm_;
  std::atomic<bool> busy_{false};
};

/// An operation started by one of the *_async calls. It holds the arrays the
/// operation reads and writes until it is done; dropping it before then
/// waits for the operation (bounded by the communicator's timeout), so a
/// buffer is never freed under a running operation.
class PyWork {
 public:
  PyWork(Work work, std::vector<py::object> keep, py::object result, std::shared_ptr<void> extra)
      : work_(std::move(work)), keep_(std::move(keep)), result_(std::move(result)), extra_(std::move(extra)) {}
  ~PyWork();
  PyWork(const PyWork&) = delete;
  PyWork& operator=(const PyWork&) = delete;

  /// True when done (raises the operation's error); false when `timeout` passed first.
  bool wait(std::optional<std::chrono::milliseconds> timeout);
  bool is_completed();
  /// Waits, then returns the operation's output array (None for those without one).
  py::object result();

 private:
  void release();
  Work work_;
  std::vector<py::object> keep_;
  py::object result_;
  std::shared_ptr<void> extra_;
  bool done_ = false;
};

/// A timeout given from Python: None, seconds (int or float) or a datetime.timedelta.
std::optional<std::chrono::milliseconds> to_millis(const py::object& value, const char* op);
/// ReduceOp from "sum" (any case) or braid.ReduceOp.
ReduceOp to_reduce_op(const py::object& value, const char* op);

void bind_comm(py::module_& module);
/// The collectives, as methods of the braid.Comm class.
void bind_collectives(py::class_<PyComm>& comm);

}  // namespace braid::python
