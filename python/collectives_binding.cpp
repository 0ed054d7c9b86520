// The collectives of braid.Comm on numpy arrays, blocking and *_async.
//
// Conventions, the same for every collective: `array` is this rank's input;
// without `out` the result goes back into `array` where the collective's
// input and output have the same size (all_reduce, broadcast, reduce,
// all_to_all), and into a new array otherwise (all_gather, reduce_scatter,
// gather), which is returned; with `out` it goes there. A view of `out` as
// `array` at the place braid's C++ API calls "in place" (all_gather:
// out[rank]) is in place. Arrays are used where they are (no copy) and must
// be C-contiguous, of a braid type, and writable where braid writes.
// `dtype` overrides the element type, for types numpy lacks (a uint16
// array with dtype='bf16'). The *_async forms return a braid.Work that holds
// the arrays until the operation is done.
#include <pybind11/pybind11.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "comm_binding.hpp"

namespace braid::python {

namespace {

using Call = std::function<std::optional<Work>(Comm&, bool async)>;
using Sizes = std::vector<std::size_t>;

// Runs `call` blocking (returns `result`) or starts it (returns a Work that
// keeps `keep` and `extra` alive until it is done), the GIL released.
py::object issue(PyComm& self, bool async, const Call& call, std::vector<py::object> keep, py::object result,
                 std::shared_ptr<void> extra = {}) {
  PyComm::Call in_call(self);
  Comm& comm = self.get();
  if (async) {
    std::optional<Work> work;
    {
      py::gil_scoped_release release;
      work = call(comm, true);
    }
    return py::cast(std::make_unique<PyWork>(std::move(*work), std::move(keep), std::move(result), std::move(extra)));
  }
  {
    py::gil_scoped_release release;
    call(comm, false);
  }
  return result;
}

std::vector<py::ssize_t> shape_of(const py::array& a) { return {a.shape(), a.shape() + a.ndim()}; }

std::string ranks_text(int n) { return std::to_string(n) + " ranks"; }

py::object all_reduce(PyComm& self, bool async, const py::object& array, const py::object& op_name,
                      const py::object& out, const py::object& dtype) {
  const char* op = async ? "all_reduce_async" : "all_reduce";
  const ReduceOp rop = to_reduce_op(op_name, op);
  const auto type = parse_type_override(dtype, op);
  if (out.is_none()) {
    ArrayArg a = output_array(array, {op, "array"}, type);
    Call call = [=](Comm& c, bool as) -> std::optional<Work> {
      if (as) return c.all_reduce_async(a.data, a.data, a.count, a.type, rop);
      c.all_reduce(a.data, a.data, a.count, a.type, rop);
      return std::nullopt;
    };
    return issue(self, async, call, {a.array}, a.array);
  }
  ArrayArg in = input_array(array, {op, "array"}, type);
  ArrayArg o = output_array(out, {op, "out"}, type);
  check_same_type(in, {op, "array"}, o, {op, "out"});
  check_count(o, {op, "out"}, in.count, "as many as 'array'");
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.all_reduce_async(in.data, o.data, in.count, in.type, rop);
    c.all_reduce(in.data, o.data, in.count, in.type, rop);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array);
}

py::object broadcast(PyComm& self, bool async, const py::object& array, int root, const py::object& out,
                     const py::object& dtype) {
  const char* op = async ? "broadcast_async" : "broadcast";
  const auto type = parse_type_override(dtype, op);
  ArrayArg in = out.is_none() ? output_array(array, {op, "array"}, type) : input_array(array, {op, "array"}, type);
  ArrayArg o = in;
  if (!out.is_none()) {
    o = output_array(out, {op, "out"}, type);
    check_same_type(in, {op, "array"}, o, {op, "out"});
    check_count(o, {op, "out"}, in.count, "as many as 'array'");
  }
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.broadcast_async(in.data, o.data, in.count, in.type, root);
    c.broadcast(in.data, o.data, in.count, in.type, root);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array);
}

py::object reduce(PyComm& self, bool async, const py::object& array, const py::object& op_name, int root,
                  const py::object& out, const py::object& dtype) {
  const char* op = async ? "reduce_async" : "reduce";
  const ReduceOp rop = to_reduce_op(op_name, op);
  const auto type = parse_type_override(dtype, op);
  const bool at_root = self.get().rank() == root;
  ArrayArg in =
      out.is_none() && at_root ? output_array(array, {op, "array"}, type) : input_array(array, {op, "array"}, type);
  ArrayArg o = in;
  if (!out.is_none() && at_root) {
    o = output_array(out, {op, "out"}, type);
    check_same_type(in, {op, "array"}, o, {op, "out"});
    check_count(o, {op, "out"}, in.count, "as many as 'array'");
  }
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.reduce_async(in.data, o.data, in.count, in.type, rop, root);
    c.reduce(in.data, o.data, in.count, in.type, rop, root);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, at_root ? py::object(o.array) : py::none());
}

py::object all_gather(PyComm& self, bool async, const py::object& array, const py::object& out,
                      const py::object& dtype) {
  const char* op = async ? "all_gather_async" : "all_gather";
  const auto type = parse_type_override(dtype, op);
  const int n = self.get().size();
  ArrayArg in = input_array(array, {op, "array"}, type);
  py::object target = out;
  if (target.is_none()) {
    auto shape = shape_of(in.array);
    shape.insert(shape.begin(), n);
    target = new_array_like(in, shape);
  }
  ArrayArg o = output_array(target, {op, "out"}, type);
  check_same_type(in, {op, "array"}, o, {op, "out"});
  check_count(o, {op, "out"}, in.count * static_cast<std::size_t>(n), ranks_text(n) + " x the elements of 'array'");
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.all_gather_async(in.data, o.data, in.count, in.type);
    c.all_gather(in.data, o.data, in.count, in.type);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array);
}

// The shape of one rank's block of `a` (n blocks): its first dimension cut
// by n where it divides, else flat.
std::vector<py::ssize_t> block_shape(const ArrayArg& a, int n) {
  auto shape = shape_of(a.array);
  if (!shape.empty() && shape[0] % n == 0) {
    shape[0] /= n;
    return shape;
  }
  return {static_cast<py::ssize_t>(a.count / static_cast<std::size_t>(n))};
}

void check_divisible(const ArrayArg& a, ArgName name, int n) {
  if (a.count % static_cast<std::size_t>(n) != 0)
    invalid(name, std::string("argument '") + name.arg + "' has " + std::to_string(a.count) +
                      " elements, which do not divide into one block per rank (" + ranks_text(n) + ")");
}

py::object reduce_scatter(PyComm& self, bool async, const py::object& array, const py::object& op_name,
                          const py::object& out, const py::object& dtype) {
  const char* op = async ? "reduce_scatter_async" : "reduce_scatter";
  const ReduceOp rop = to_reduce_op(op_name, op);
  const auto type = parse_type_override(dtype, op);
  const int n = self.get().size();
  ArrayArg in = input_array(array, {op, "array"}, type);
  check_divisible(in, {op, "array"}, n);
  py::object target = out.is_none() ? py::object(new_array_like(in, block_shape(in, n))) : out;
  ArrayArg o = output_array(target, {op, "out"}, type);
  check_same_type(in, {op, "array"}, o, {op, "out"});
  check_count(o, {op, "out"}, in.count / static_cast<std::size_t>(n), "the elements of 'array' / " + ranks_text(n));
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.reduce_scatter_async(in.data, o.data, o.count, in.type, rop);
    c.reduce_scatter(in.data, o.data, o.count, in.type, rop);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array);
}

py::object all_to_all(PyComm& self, bool async, const py::object& array, const py::object& out,
                      const py::object& dtype) {
  const char* op = async ? "all_to_all_async" : "all_to_all";
  const auto type = parse_type_override(dtype, op);
  const int n = self.get().size();
  ArrayArg in = input_array(array, {op, "array"}, type);
  check_divisible(in, {op, "array"}, n);
  py::object target = out.is_none() ? py::object(new_array_like(in, shape_of(in.array))) : out;
  ArrayArg o = output_array(target, {op, "out"}, type);
  check_same_type(in, {op, "array"}, o, {op, "out"});
  check_count(o, {op, "out"}, in.count, "as many as 'array'");
  const std::size_t block = in.count / static_cast<std::size_t>(n);
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.all_to_all_async(in.data, o.data, block, in.type);
    c.all_to_all(in.data, o.data, block, in.type);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array);
}

py::object gather(PyComm& self, bool async, const py::object& array, const py::object& out, int root,
                  const py::object& dtype) {
  const char* op = async ? "gather_async" : "gather";
  const auto type = parse_type_override(dtype, op);
  const int n = self.get().size();
  const bool at_root = self.get().rank() == root;
  ArrayArg in = input_array(array, {op, "array"}, type);
  ArrayArg o;
  if (at_root) {
    py::object target = out;
    if (target.is_none()) {
      auto shape = shape_of(in.array);
      shape.insert(shape.begin(), n);
      target = new_array_like(in, shape);
    }
    o = output_array(target, {op, "out"}, type);
    check_same_type(in, {op, "array"}, o, {op, "out"});
    check_count(o, {op, "out"}, in.count * static_cast<std::size_t>(n), ranks_text(n) + " x the elements of 'array'");
  }
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.gather_async(in.data, o.data, in.count, in.type, root);
    c.gather(in.data, o.data, in.count, in.type, root);
    return std::nullopt;
  };
  py::object result = at_root ? py::object(o.array) : py::none();
  return issue(self, async, call, {in.array, result}, result);
}

py::object scatter(PyComm& self, bool async, const py::object& array, const py::object& out, int root,
                   const py::object& dtype) {
  const char* op = async ? "scatter_async" : "scatter";
  const auto type = parse_type_override(dtype, op);
  const int n = self.get().size();
  ArrayArg o = output_array(out, {op, "out"}, type);
  ArrayArg in;
  in.type = o.type;
  if (self.get().rank() == root) {
    in = input_array(array, {op, "array"}, type);
    check_same_type(o, {op, "out"}, in, {op, "array"});
    check_count(in, {op, "array"}, o.count * static_cast<std::size_t>(n), ranks_text(n) + " x the elements of 'out'");
  }
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.scatter_async(in.data, o.data, o.count, o.type, root);
    c.scatter(in.data, o.data, o.count, o.type, root);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array);
}

py::object send(PyComm& self, bool async, const py::object& array, int peer, const py::object& dtype) {
  const char* op = async ? "send_async" : "send";
  ArrayArg in = input_array(array, {op, "array"}, parse_type_override(dtype, op));
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.send_async(in.data, in.count, in.type, peer);
    c.send(in.data, in.count, in.type, peer);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array}, py::none());
}

py::object recv(PyComm& self, bool async, const py::object& array, int peer, const py::object& dtype) {
  const char* op = async ? "recv_async" : "recv";
  ArrayArg o = output_array(array, {op, "array"}, parse_type_override(dtype, op));
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.recv_async(o.data, o.count, o.type, peer);
    c.recv(o.data, o.count, o.type, peer);
    return std::nullopt;
  };
  return issue(self, async, call, {o.array}, o.array);
}

// Blocking only, as in C++: a group of the send and the receive.
py::object sendrecv(PyComm& self, const py::object& array, int dest, const py::object& out, int source,
                    const py::object& dtype) {
  const char* op = "sendrecv";
  const auto type = parse_type_override(dtype, op);
  ArrayArg in = input_array(array, {op, "array"}, type);
  ArrayArg o = output_array(out, {op, "out"}, type);
  check_same_type(in, {op, "array"}, o, {op, "out"});
  Call call = [=](Comm& c, bool) -> std::optional<Work> {
    c.sendrecv(in.data, in.count, dest, o.data, o.count, source, in.type);
    return std::nullopt;
  };
  return issue(self, false, call, {in.array, o.array}, o.array);
}

py::object barrier(PyComm& self, bool async) {
  Call call = [](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.barrier_async();
    c.barrier();
    return std::nullopt;
  };
  return issue(self, async, call, {}, py::none());
}

// ---- uneven (v) forms ---------------------------------------------------------

std::shared_ptr<void> hold(std::vector<Sizes> lists) { return std::make_shared<std::vector<Sizes>>(std::move(lists)); }

py::object all_to_allv(PyComm& self, bool async, const py::object& array, const py::object& send_counts_,
                       const py::object& out, const py::object& recv_counts_, const py::object& send_displs_,
                       const py::object& recv_displs_, const py::object& dtype) {
  const char* op = async ? "all_to_allv_async" : "all_to_allv";
  const auto type = parse_type_override(dtype, op);
  ArrayArg in = input_array(array, {op, "array"}, type);
  ArrayArg o = output_array(out, {op, "out"}, type);
  check_same_type(in, {op, "array"}, o, {op, "out"});
  const Sizes sc = size_list(send_counts_, {op, "send_counts"}), rc = size_list(recv_counts_, {op, "recv_counts"});
  const Sizes sd = size_list(send_displs_, {op, "send_displs"}), rd = size_list(recv_displs_, {op, "recv_displs"});
  check_blocks_fit(in, {op, "array"}, sc, sd);
  check_blocks_fit(o, {op, "out"}, rc, rd);
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.all_to_allv_async(in.data, sc, sd, o.data, rc, rd, in.type);
    c.all_to_allv(in.data, sc, sd, o.data, rc, rd, in.type);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array, hold({sc, rc, sd, rd}));
}

py::object all_gatherv(PyComm& self, bool async, const py::object& array, const py::object& out,
                       const py::object& recv_counts_, const py::object& recv_displs_, const py::object& dtype) {
  const char* op = async ? "all_gatherv_async" : "all_gatherv";
  const auto type = parse_type_override(dtype, op);
  ArrayArg in = input_array(array, {op, "array"}, type);
  ArrayArg o = output_array(out, {op, "out"}, type);
  check_same_type(in, {op, "array"}, o, {op, "out"});
  const Sizes rc = size_list(recv_counts_, {op, "recv_counts"}), rd = size_list(recv_displs_, {op, "recv_displs"});
  check_blocks_fit(o, {op, "out"}, rc, rd);
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.all_gatherv_async(in.data, in.count, o.data, rc, rd, in.type);
    c.all_gatherv(in.data, in.count, o.data, rc, rd, in.type);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array, hold({rc, rd}));
}

py::object reduce_scatterv(PyComm& self, bool async, const py::object& array, const py::object& out,
                           const py::object& recv_counts_, const py::object& op_name, const py::object& dtype) {
  const char* op = async ? "reduce_scatterv_async" : "reduce_scatterv";
  const ReduceOp rop = to_reduce_op(op_name, op);
  const auto type = parse_type_override(dtype, op);
  ArrayArg in = input_array(array, {op, "array"}, type);
  ArrayArg o = output_array(out, {op, "out"}, type);
  check_same_type(in, {op, "array"}, o, {op, "out"});
  const Sizes rc = size_list(recv_counts_, {op, "recv_counts"});
  check_blocks_fit(in, {op, "array"}, rc, {});
  const auto rank = static_cast<std::size_t>(self.get().rank());
  if (rank < rc.size()) check_count(o, {op, "out"}, rc[rank], "recv_counts[rank]");
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.reduce_scatterv_async(in.data, o.data, rc, in.type, rop);
    c.reduce_scatterv(in.data, o.data, rc, in.type, rop);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array, hold({rc}));
}

py::object gatherv(PyComm& self, bool async, const py::object& array, const py::object& out,
                   const py::object& recv_counts_, const py::object& recv_displs_, int root, const py::object& dtype) {
  const char* op = async ? "gatherv_async" : "gatherv";
  const auto type = parse_type_override(dtype, op);
  const bool at_root = self.get().rank() == root;
  ArrayArg in = input_array(array, {op, "array"}, type);
  ArrayArg o;
  Sizes rc, rd;
  if (at_root) {
    o = output_array(out, {op, "out"}, type);
    check_same_type(in, {op, "array"}, o, {op, "out"});
    rc = size_list(recv_counts_, {op, "recv_counts"});
    rd = size_list(recv_displs_, {op, "recv_displs"});
    check_blocks_fit(o, {op, "out"}, rc, rd);
  }
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.gatherv_async(in.data, in.count, o.data, rc, rd, in.type, root);
    c.gatherv(in.data, in.count, o.data, rc, rd, in.type, root);
    return std::nullopt;
  };
  py::object result = at_root ? py::object(o.array) : py::none();
  return issue(self, async, call, {in.array, result}, result, hold({rc, rd}));
}

py::object scatterv(PyComm& self, bool async, const py::object& array, const py::object& send_counts_,
                    const py::object& out, const py::object& send_displs_, int root, const py::object& dtype) {
  const char* op = async ? "scatterv_async" : "scatterv";
  const auto type = parse_type_override(dtype, op);
  ArrayArg o = output_array(out, {op, "out"}, type);
  ArrayArg in;
  in.type = o.type;
  Sizes sc, sd;
  if (self.get().rank() == root) {
    in = input_array(array, {op, "array"}, type);
    check_same_type(o, {op, "out"}, in, {op, "array"});
    sc = size_list(send_counts_, {op, "send_counts"});
    sd = size_list(send_displs_, {op, "send_displs"});
    check_blocks_fit(in, {op, "array"}, sc, sd);
  }
  Call call = [=](Comm& c, bool as) -> std::optional<Work> {
    if (as) return c.scatterv_async(in.data, sc, sd, o.data, o.count, o.type, root);
    c.scatterv(in.data, sc, sd, o.data, o.count, o.type, root);
    return std::nullopt;
  };
  return issue(self, async, call, {in.array, o.array}, o.array, hold({sc, sd}));
}

// Binds f as `name` (blocking) and `name_async`; pybind11 keeps pointers to
// the names, so they live as long as the process.
template <typename... Args, typename... Extra>
void def_pair(py::class_<PyComm>& cls, const char* name, py::object (*f)(PyComm&, bool, Args...), const char* doc,
              const Extra&... extra) {
  static std::deque<std::string> names;
  const std::string& async_name = names.emplace_back(std::string(name) + "_async");
  cls.def(
      name, [f](PyComm& self, Args... args) { return f(self, false, args...); }, extra..., doc);
  cls.def(
      async_name.c_str(), [f](PyComm& self, Args... args) { return f(self, true, args...); }, extra...,
      (std::string(doc) + " Returns a braid.Work at once.").c_str());
}

}  // namespace

void bind_collectives(py::class_<PyComm>& c) {
  using py::arg;
  const auto none = py::none();
  const auto kw = py::kw_only();
  def_pair(c, "all_reduce", &all_reduce, "out (default: array, in place) = op over ranks of array.", arg("array"),
           arg("op") = "sum", kw, arg("out") = none, arg("dtype") = none);
  def_pair(c, "broadcast", &broadcast, "out (default: array) = array of rank root.", arg("array"), arg("root") = 0, kw,
           arg("out") = none, arg("dtype") = none);
  def_pair(c, "reduce", &reduce, "On root, out (default: array) = op over ranks of array; returns None elsewhere.",
           arg("array"), arg("op") = "sum", arg("root") = 0, kw, arg("out") = none, arg("dtype") = none);
  def_pair(c, "all_gather", &all_gather, "out[r] = array of rank r; out defaults to a new (size, *array.shape) array.",
           arg("array"), kw, arg("out") = none, arg("dtype") = none);
  def_pair(c, "reduce_scatter", &reduce_scatter,
           "out = block rank of op over ranks of array (size blocks); out defaults to a new array of one block.",
           arg("array"), arg("op") = "sum", kw, arg("out") = none, arg("dtype") = none);
  def_pair(c, "all_to_all", &all_to_all, "Block p of array goes to rank p; block p of out comes from rank p.",
           arg("array"), kw, arg("out") = none, arg("dtype") = none);
  def_pair(c, "gather", &gather, "On root, out[r] = array of rank r (out defaults to a new array); None elsewhere.",
           arg("array"), kw, arg("out") = none, arg("root") = 0, arg("dtype") = none);
  def_pair(c, "scatter", &scatter, "out = block rank of root's array (size blocks; array is read at root only).",
           arg("array"), arg("out"), kw, arg("root") = 0, arg("dtype") = none);
  def_pair(c, "send", &send, "Sends array to rank peer, which receives it with recv.", arg("array"), arg("peer"), kw,
           arg("dtype") = none);
  def_pair(c, "recv", &recv, "Receives into array from rank peer.", arg("array"), arg("peer"), kw, arg("dtype") = none);
  c.def("sendrecv", &sendrecv,
        "Sends array to rank dest and receives out from rank source at once (a ring "
        "shift cannot deadlock). Blocking only.",
        arg("array"), arg("dest"), arg("out"), arg("source"), kw, arg("dtype") = none);
  def_pair(c, "barrier", &barrier, "Returns once every rank has entered the barrier.");
  def_pair(c, "all_to_allv", &all_to_allv,
           "send_counts[p] elements at send_displs[p] of array go to rank p; recv_counts[p] from rank p land at "
           "recv_displs[p] of out (displacements default to packed blocks).",
           arg("array"), arg("send_counts"), arg("out"), arg("recv_counts"), kw, arg("send_displs") = none,
           arg("recv_displs") = none, arg("dtype") = none);
  def_pair(c, "all_gatherv", &all_gatherv, "Block p of out (recv_counts[p] at recv_displs[p]) = array of rank p.",
           arg("array"), arg("out"), arg("recv_counts"), kw, arg("recv_displs") = none, arg("dtype") = none);
  def_pair(c, "reduce_scatterv", &reduce_scatterv,
           "out (recv_counts[rank]) = op over ranks of their block rank of array (blocks packed in rank order).",
           arg("array"), arg("out"), arg("recv_counts"), arg("op") = "sum", kw, arg("dtype") = none);
  def_pair(c, "gatherv", &gatherv,
           "On root, block p of out (recv_counts[p] at recv_displs[p]) = array of rank p; out and recv_counts are "
           "read at root only.",
           arg("array"), kw, arg("out") = none, arg("recv_counts") = none, arg("recv_displs") = none, arg("root") = 0,
           arg("dtype") = none);
  def_pair(c, "scatterv", &scatterv,
           "out = root's block rank of array (send_counts[p] at send_displs[p]; read at root only).", arg("array"),
           arg("send_counts"), arg("out"), kw, arg("send_displs") = none, arg("root") = 0, arg("dtype") = none);
}

}  // namespace braid::python
