// braid.Comm (creation, identity, split, abort) and braid.Work; the
// collectives are in collectives_binding.cpp. Every call that can wait on a
// peer runs with the GIL released.
#include "comm_binding.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "arrays.hpp"

namespace braid::python {

namespace {

using Millis = std::chrono::milliseconds;

CommOptions options_of(const py::object& timeout, const std::optional<std::string>& transport,
                       const std::optional<std::string>& algorithm, std::optional<int> tcp_streams,
                       const std::optional<std::string>& socket_ifname) {
  CommOptions options;
  options.timeout = to_millis(timeout, "Comm");
  options.transport = transport;
  options.algorithm = algorithm;
  options.tcp.streams = tcp_streams;
  options.tcp.socket_ifname = socket_ifname;
  return options;
}

// How long one slice of a Python-side wait lasts: between slices the wait
// takes the GIL to let Ctrl-C (KeyboardInterrupt) through.
constexpr Millis kWaitSlice{100};

// A Comm method that waits (abort, flush, finalize), called with the GIL
// released so that other Python threads, and the callbacks of operations it
// waits on, run meanwhile.
template <void (Comm::*Method)()>
void without_gil(PyComm& c) {
  Comm& self = c.get();
  py::gil_scoped_release release;
  (self.*Method)();
}

// A communicator made from this one (split, shrink): `make(self)` runs with
// the GIL released, inside a call that keeps this one from being closed.
template <typename Make>
Comm child_without_gil(PyComm& c, Make make) {
  PyComm::Call in_call(c);
  Comm& self = c.get();
  py::gil_scoped_release release;
  return make(self);
}

}  // namespace

PyComm::~PyComm() {
  if (!comm_) return;
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release release;
    comm_.reset();
  } else {
    comm_.reset();
  }
}

Comm& PyComm::get() {
  if (!comm_) throw InvalidUsage("this braid.Comm is closed");
  if (!comm_->valid()) throw InvalidArgument("this braid.Comm is empty");
  return *comm_;
}

void PyComm::close() {
  if (!comm_) return;
  py::gil_scoped_release release;
  comm_.reset();
}

PyComm::Call::Call(PyComm& comm) : comm_(comm) {
  if (comm_.busy_.exchange(true))
    throw InvalidArgument(
        "another Python thread is in a call on this braid.Comm (one thread at a time may call a communicator; "
        "abort() from any)");
}

Comm PyComm::take() {
  get();
  Comm out = std::move(*comm_);
  comm_.reset();
  return out;
}

PyWork::~PyWork() {
  if (!done_ && !keep_.empty()) {
    // The operation may still write into the arrays: let it finish first.
    py::gil_scoped_release release;
    try {
      work_.wait();
    } catch (...) {
      // Its error belongs to whoever waits for it; nobody will now.
    }
  }
}

void PyWork::release() {
  done_ = true;
  keep_.clear();
  extra_.reset();
}

bool PyWork::wait(std::optional<Millis> timeout) {
  if (done_) {
    work_.wait(Millis(0));  // raises a stored error again
    return true;
  }
  const auto until =
      timeout ? std::chrono::steady_clock::now() + *timeout : std::chrono::steady_clock::time_point::max();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    Millis slice = kWaitSlice;
    if (timeout) slice = std::clamp(std::chrono::duration_cast<Millis>(until - now), Millis(0), kWaitSlice);
    bool finished = false;
    try {
      py::gil_scoped_release unlocked;
      finished = work_.wait(slice);
    } catch (...) {
      release();
      throw;
    }
    if (finished) {
      release();
      return true;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (timeout && std::chrono::steady_clock::now() >= until) return false;
  }
}

bool PyWork::is_completed() {
  bool finished = false;
  try {
    finished = work_.test();
  } catch (...) {
    release();
    throw;
  }
  if (finished) release();
  return finished;
}

py::object PyWork::result() {
  wait(std::nullopt);
  return result_;
}

std::optional<Millis> to_millis(const py::object& value, const char* op) {
  if (value.is_none()) return std::nullopt;
  double seconds = 0;
  if (py::hasattr(value, "total_seconds")) {
    seconds = value.attr("total_seconds")().cast<double>();
  } else if (py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) {
    seconds = value.cast<double>();
  } else {
    invalid({op, "timeout"},
            "argument 'timeout' must be seconds or a datetime.timedelta, not " + py::repr(value).cast<std::string>());
  }
  if (!(seconds >= 0)) invalid({op, "timeout"}, "argument 'timeout' must not be negative");
  return Millis(static_cast<long long>(seconds * 1000.0 + 0.5));
}

ReduceOp to_reduce_op(const py::object& value, const char* op) {
  if (py::isinstance<ReduceOp>(value)) return value.cast<ReduceOp>();
  if (py::isinstance<py::str>(value)) {
    auto text = value.cast<std::string>();
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    if (text == "mean") return ReduceOp::avg;  // tf.distribute's name
    try {
      return parse_reduce_op(text);
    } catch (const InvalidArgument&) {
    }
  }
  invalid({op, "op"}, "argument 'op' is " + py::repr(value).cast<std::string>() +
                          "; use 'sum', 'prod', 'min', 'max', 'avg' ('mean') or braid.ReduceOp");
}

void bind_comm(py::module_& m) {
  py::enum_<ReduceOp>(m, "ReduceOp", "Reductions; collectives also take their names as strings ('sum').")
      .value("SUM", ReduceOp::sum)
      .value("PROD", ReduceOp::prod)
      .value("MIN", ReduceOp::min)
      .value("MAX", ReduceOp::max)
      .value("AVG", ReduceOp::avg)
      .value("MEAN", ReduceOp::avg);  // tf.distribute's name for it
  py::enum_<DataType>(m, "DataType", "braid's element types; numpy arrays map to them by dtype.")
      .value("F16", DataType::f16)
      .value("BF16", DataType::bf16)
      .value("F32", DataType::f32)
      .value("F64", DataType::f64)
      .value("I8", DataType::i8)
      .value("U8", DataType::u8)
      .value("I32", DataType::i32)
      .value("U32", DataType::u32)
      .value("I64", DataType::i64)
      .value("U64", DataType::u64);

  py::class_<UniqueId>(m, "UniqueId", "A rendezvous point made by one process, handed to every rank (as ncclUniqueId).")
      .def_static(
          "create",
          [] {
            py::gil_scoped_release release;
            return UniqueId::create();
          },
          "Starts a rendezvous store in this process and returns its id.")
      .def("hex", &UniqueId::to_hex)
      .def_static("from_hex", &UniqueId::from_hex, py::arg("text"))
      .def("__repr__", [](const UniqueId& id) { return "braid.UniqueId.from_hex('" + id.to_hex() + "')"; });

  py::class_<PyWork>(m, "Work", "An operation started by a *_async call.")
      .def(
          "wait", [](PyWork& w, const py::object& timeout) { return w.wait(to_millis(timeout, "Work.wait")); },
          py::arg("timeout") = py::none(),
          "Waits until done (True; raises the operation's error) or until `timeout` seconds passed (False).")
      .def("is_completed", &PyWork::is_completed, "True when done (raises the operation's error); never blocks.")
      .def("result", &PyWork::result, "Waits, then returns the output array (None where the operation has none).");

  py::class_<PyComm> comm(m, "Comm", R"(A group of ranks that run collectives together.

    comm = braid.Comm.from_env()          # under braid-run, torchrun, TF_CONFIG, Slurm, Open MPI
    comm.all_reduce(grad, op="avg")      # in place; out=... for out of place

One thread at a time may call a communicator (abort() from any).)");
  comm.def_static(
          "from_env",
          [](const py::object& timeout, std::optional<std::string> transport, std::optional<std::string> algorithm,
             std::optional<int> tcp_streams, std::optional<std::string> socket_ifname) {
            CommOptions options = options_of(timeout, transport, algorithm, tcp_streams, socket_ifname);
            py::gil_scoped_release release;
            return std::make_unique<PyComm>(Comm::from_env(options));
          },
          py::kw_only(), py::arg("timeout") = py::none(), py::arg("transport") = py::none(),
          py::arg("algorithm") = py::none(), py::arg("tcp_streams") = py::none(), py::arg("socket_ifname") = py::none(),
          "Joins the communicator the launcher's environment describes (BRAID_*, torchrun, TF_CONFIG, ...).")
      .def_static(
          "join",
          [](const std::string& store, const py::object& timeout) {
            CommOptions options = options_of(timeout, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
            py::gil_scoped_release release;
            return std::make_unique<PyComm>(Comm::join(store, options));
          },
          py::arg("store"), py::kw_only(), py::arg("timeout") = py::none(),
          "Joins a running elastic job at its store ('host:port'), once its members' next grow() admits this "
          "process (BRAID_ELASTIC; docs/elastic.md).")
      .def_static(
          "init",
          [](const py::object& where, int rank, int size, const py::object& timeout,
             std::optional<std::string> transport, std::optional<std::string> algorithm, std::optional<int> tcp_streams,
             std::optional<std::string> socket_ifname) {
            CommOptions options = options_of(timeout, transport, algorithm, tcp_streams, socket_ifname);
            if (py::isinstance<UniqueId>(where)) {
              UniqueId id = where.cast<UniqueId>();
              py::gil_scoped_release release;
              return std::make_unique<PyComm>(Comm::init(id, rank, size, options));
            }
            if (!py::isinstance<py::str>(where))
              invalid({"Comm.init", "store"}, "argument 'store' must be 'host:port' or a braid.UniqueId, not " +
                                                  py::repr(where).cast<std::string>());
            std::string address = where.cast<std::string>();
            py::gil_scoped_release release;
            return std::make_unique<PyComm>(Comm::init(address, rank, size, options));
          },
          py::arg("store"), py::arg("rank"), py::arg("size"), py::kw_only(), py::arg("timeout") = py::none(),
          py::arg("transport") = py::none(), py::arg("algorithm") = py::none(), py::arg("tcp_streams") = py::none(),
          py::arg("socket_ifname") = py::none(),
          "Joins through a store at 'host:port' (rank 0 hosts it) or a braid.UniqueId.")
      .def_property_readonly("rank", [](PyComm& c) { return c.get().rank(); })
      .def_property_readonly("size", [](PyComm& c) { return c.get().size(); })
      .def_property_readonly("local_rank", [](PyComm& c) { return c.get().local_rank(); })
      .def_property_readonly("local_size", [](PyComm& c) { return c.get().local_size(); })
      .def_property_readonly("closed", &PyComm::closed)
      .def(
          "describe", [](PyComm& c) { return c.get().describe(); }, "One line: transport, algorithms, settings.")
      .def(
          "dump_state", [](PyComm& c) { return c.get().dump_state(); }, "The last operations and their state.")
      .def(
          "stats",
          [](PyComm& c) {
            std::vector<OpStats> rows;
            {
              py::gil_scoped_release release;
              rows = c.get().stats();
            }
            py::dict out;
            for (const OpStats& s : rows) {
              py::dict row;
              row["algorithm"] = s.algorithm;
              row["band_min_bytes"] = s.band_min_bytes;
              row["band_max_bytes"] = s.band_max_bytes;
              row["count"] = s.count;
              row["bytes"] = s.bytes;
              row["total_us"] = s.total_us;
              row["min_us"] = s.min_us;
              row["max_us"] = s.max_us;
              row["p50_us"] = s.p50_us;
              row["p99_us"] = s.p99_us;
              py::str key(s.collective);
              if (!out.contains(key)) out[key] = py::list();
              out[key].cast<py::list>().append(row);
            }
            return out;
          },
          "Statistics of the operations completed so far: {collective: [row, ...]}, a row per size band and "
          "algorithm with count, bytes, total_us, min_us, max_us, p50_us, p99_us.")
      .def(
          "abort",
          &without_gil<&Comm::abort>,
          "Gives up on this communicator, from any thread: pending and later operations raise braid.Aborted.")
      .def(
          "flush",
          &without_gil<&Comm::flush>,
          "Waits for every operation started here; raises the error of a failed one.")
      .def(
          "register_buffer",
          [](PyComm& c, const py::array& array) {
            if (!(array.flags() & py::array::c_style))
              throw InvalidArgument("register_buffer: the array is not C-contiguous");
            return reinterpret_cast<std::uintptr_t>(
                c.get().register_buffer(const_cast<void*>(array.data()), static_cast<std::size_t>(array.nbytes())));
          },
          py::arg("array"),
          "Registers an array from braid.mem_alloc with this communicator (NCCL's ncclCommRegister) and returns "
          "the handle for deregister_buffer; its memory cannot be freed until then. Raises braid.InvalidArgument "
          "for an array whose memory braid.mem_alloc did not give.")
      .def(
          "deregister_buffer",
          [](PyComm& c, std::uintptr_t handle) { c.get().deregister_buffer(reinterpret_cast<void*>(handle)); },
          py::arg("handle"), "Ends a registration register_buffer returned.")
      .def(
          "split",
          [](PyComm& c, const py::object& color, int key) -> py::object {
            const int chosen = color.is_none() ? Comm::kNoColor : color.cast<int>();
            Comm part = child_without_gil(c, [&](Comm& self) { return self.split(chosen, key); });
            if (!part.valid()) return py::none();
            return py::cast(std::make_unique<PyComm>(std::move(part)));
          },
          py::arg("color"), py::arg("key") = 0,
          "Collective: ranks passing the same color form a new Comm, ordered by key then rank; color None joins none "
          "(returns None).")
      .def(
          "shrink",
          [](PyComm& c, const std::vector<int>& excluded, bool abort) {
            return std::make_unique<PyComm>(child_without_gil(c, [&](Comm& self) {
              return self.shrink(excluded, abort ? Comm::Shrink::abort : Comm::Shrink::finish);
            }));
          },
          py::arg("excluded"), py::arg("abort") = false,
          "A new Comm of this one's ranks less `excluded`, in the same order (NCCL's ncclCommShrink): every rank not "
          "excluded calls it with the same list, an excluded rank does not (it may be dead). abort=True aborts this "
          "one first, after an operation raised braid.PeerLost; else what was started here finishes first.")
      .def(
          "shrink_lost",
          [](PyComm& c, bool abort) {
            return std::make_unique<PyComm>(child_without_gil(c, [&](Comm& self) {
              return self.shrink_lost(abort ? Comm::Shrink::abort : Comm::Shrink::finish);
            }));
          },
          py::arg("abort") = true,
          "Elastic jobs: shrink() without a list after a rank was lost; the members still alive agree through the "
          "store which ranks came forward (BRAID_ELASTIC_GRACE). Raises braid.PeerLost on a member that came too "
          "late (it may Comm.join again) and when the store is gone.")
      .def(
          "grow",
          [](PyComm& c) -> py::object {
            Comm grown = child_without_gil(c, [](Comm& self) { return self.grow(); });
            if (!grown.valid()) return py::none();
            return py::cast(std::make_unique<PyComm>(std::move(grown)));
          },
          "Elastic jobs, a collective of the members: admits the processes waiting in Comm.join and returns the "
          "grown Comm (this one's ranks first), or None when nobody waits.")
      .def_property_readonly(
          "joined_running_job", [](PyComm& c) { return c.get().joined_running_job(); },
          "True when this Comm was made by Comm.join, or by from_env in an elastic job that was running already.")
      .def(
          "finalize",
          &without_gil<&Comm::finalize>,
          "Ends this rank's part in order: finishes what was started, tells every peer, lets the links go (a slower "
          "peer is never made to fail); later calls raise braid.InvalidArgument.")
      .def("close", &PyComm::close, "Finishes queued operations and releases the communicator.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyComm& c, py::args) { c.close(); })
      .def("__repr__", [](PyComm& c) {
        if (c.closed()) return std::string("<braid.Comm closed>");
        return "<braid.Comm rank " + std::to_string(c.get().rank()) + " of " + std::to_string(c.get().size()) + ">";
      });
  comm.attr("NO_COLOR") = py::none();
  bind_collectives(comm);
}

}  // namespace braid::python
