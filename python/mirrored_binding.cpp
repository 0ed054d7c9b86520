// braid.mirrored: braid::mirrored's strategies for Python, named and shaped
// after tf.distribute where the model allows.
//
//   strategy = braid.mirrored.MultiWorkerMirrored()          # braid-run's environment
//   with strategy.scope():
//       w = strategy.create_variable("dense/w", np.zeros((16, 4), np.float32))
//   sgd = braid.mirrored.Sgd(0.1)
//   def step(ctx):                                         # once per local replica
//       ctx.gradients.of(w)[...] = grad_of(w.value(ctx))   # numpy view of this replica's gradient
//       ctx.apply_gradients(sgd)                           # aggregated, applied on every replica
//   strategy.run(step)
//
// Variables and gradients are numpy views of the strategy's own memory (no
// copy); each view keeps its strategy alive. run() calls the Python function
// on the strategy's replica threads (Mirrored) holding the GIL, which every
// collective releases while it waits.
#include "mirrored_binding.hpp"
#include "errors.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "braid/mirrored.hpp"
#include "comm_binding.hpp"

namespace braid::python {

namespace mr = braid::mirrored;

namespace {

using StrategyPtr = std::shared_ptr<mr::Strategy>;

py::dtype dtype_of(DataType type) {
  switch (type) {
    case DataType::f16:
      return py::dtype("float16");
    case DataType::bf16:
      return py::dtype("uint16");  // numpy has no bfloat16: its bits
    case DataType::f32:
      return py::dtype("float32");
    case DataType::f64:
      return py::dtype("float64");
    case DataType::i8:
      return py::dtype("int8");
    case DataType::u8:
      return py::dtype("uint8");
    case DataType::i32:
      return py::dtype("int32");
    case DataType::u32:
      return py::dtype("uint32");
    case DataType::i64:
      return py::dtype("int64");
    case DataType::u64:
      return py::dtype("uint64");
  }
  return py::dtype("uint8");
}

// A numpy array over memory the strategy owns, which it keeps alive.
py::array view(const StrategyPtr& owner, DataType type, const mr::Shape& shape, std::span<std::byte> bytes) {
  if (bytes.empty() && mr::element_count(shape) != 0)
    throw InvalidArgument("this variable is not held on this rank (it lives on another one)");
  auto keep = new StrategyPtr(owner);
  py::capsule base(keep, [](void* p) { delete static_cast<StrategyPtr*>(p); });
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return py::array(dtype_of(type), dims, bytes.data(), base);
}

mr::Synchronization parse_synchronization(const std::string& text) {
  if (text == "on_write" || text == "ON_WRITE" || text == "auto" || text == "AUTO")
    return mr::Synchronization::on_write;
  if (text == "on_read" || text == "ON_READ") return mr::Synchronization::on_read;
  throw InvalidArgument("synchronization '" + text + "': use 'on_write' or 'on_read'");
}
mr::Aggregation parse_aggregation(const std::string& text) {
  if (text == "none" || text == "NONE") return mr::Aggregation::none;
  if (text == "sum" || text == "SUM") return mr::Aggregation::sum;
  if (text == "mean" || text == "MEAN") return mr::Aggregation::mean;
  if (text == "only_first_replica" || text == "ONLY_FIRST_REPLICA") return mr::Aggregation::only_first_replica;
  throw InvalidArgument("aggregation '" + text + "': use 'none', 'sum', 'mean' or 'only_first_replica'");
}
mr::Compression parse_compression(const std::string& text) {
  if (text == "none") return mr::Compression::none;
  if (text == "f16" || text == "float16") return mr::Compression::f16;
  if (text == "bf16" || text == "bfloat16") return mr::Compression::bf16;
  throw InvalidArgument("compression '" + text + "': use 'none', 'f16' or 'bf16'");
}

mr::StrategyOptions strategy_options(const py::object& timeout, std::size_t bucket_bytes, bool overlap,
                                     const std::string& aggregation, const std::string& compression) {
  mr::StrategyOptions o;
  if (auto t = to_millis(timeout, "strategy")) o.timeout = *t;
  o.gradients.bucket_bytes = bucket_bytes;
  o.gradients.overlap = overlap;
  o.gradients.aggregation = parse_aggregation(aggregation);
  if (o.gradients.aggregation != mr::Aggregation::mean && o.gradients.aggregation != mr::Aggregation::sum)
    throw InvalidArgument("gradient aggregation must be 'mean' or 'sum'");
  o.gradients.compression = parse_compression(compression);
  return o;
}

// The communicator a strategy is built on: the one given (the strategy takes
// it over; the Python object is closed) or, for None, from the environment.
Comm take_comm(const py::object& comm) {
  if (comm.is_none()) {
    py::gil_scoped_release release;
    return Comm::from_env();
  }
  if (!py::isinstance<PyComm>(comm))
    throw InvalidArgument("argument 'comm' must be a braid.Comm or None, not " + py::repr(comm).cast<std::string>());
  return comm.cast<PyComm&>().take();
}

struct PyVariable {
  StrategyPtr strategy;
  mr::Variable* variable;
};

// The running replica's context; valid only inside the function given to run().
struct PyReplicaContext {
  StrategyPtr strategy;
  mr::ReplicaContext* context;
  mr::ReplicaContext& get() const {
    if (context == nullptr) throw InvalidArgument("this ReplicaContext belongs to a run() that has returned");
    return *context;
  }
};

struct PyGradients {
  std::shared_ptr<PyReplicaContext> context;
};

struct PyScope {
  StrategyPtr strategy;
  std::optional<mr::Strategy::Scope> scope;
};

mr::Variable& owned_by(const PyVariable& v, const StrategyPtr& s) {
  if (v.strategy != s) throw InvalidArgument("variable '" + v.variable->name() + "' belongs to another strategy");
  return *v.variable;
}

py::object reduce_in_context(PyReplicaContext& self, const py::object& op_name, const py::object& value) {
  const ReduceOp op = to_reduce_op(op_name, "ReplicaContext.all_reduce");
  py::array a = py::module_::import("numpy").attr("array")(value, py::arg("copy") = true, py::arg("order") = "C");
  ArrayArg arg = output_array(a, {"ReplicaContext.all_reduce", "value"});
  mr::ReplicaContext& ctx = self.get();
  {
    py::gil_scoped_release release;
    ctx.all_reduce(op, arg.data, arg.count, arg.type);
  }
  if (a.ndim() == 0) return a.attr("item")();
  return a;
}

// strategy.reduce(op, value): value is one per local replica (a list) or,
// with one local replica, the value itself; numbers or numpy arrays.
py::object strategy_reduce(mr::Strategy& s, const py::object& op_name, const py::object& value) {
  const ReduceOp op = to_reduce_op(op_name, "Strategy.reduce");
  py::module_ np = py::module_::import("numpy");
  const int locals = s.local_replicas();
  py::list per_local;
  if (locals == 1 && !(py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)))
    per_local.append(value);
  else
    per_local = py::list(value);
  if (static_cast<int>(py::len(per_local)) != locals)
    throw InvalidArgument("Strategy.reduce: needs one value per local replica (" + std::to_string(locals) + "), got " +
                          std::to_string(py::len(per_local)));
  // Combine the local replicas' values in numpy, then across processes.
  py::object combined = np.attr("array")(per_local[0], py::arg("copy") = true);
  for (int i = 1; i < locals; ++i) {
    py::object v = np.attr("asarray")(per_local[i]);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        combined = np.attr("add")(combined, v);
        break;
      case ReduceOp::prod:
        combined = np.attr("multiply")(combined, v);
        break;
      case ReduceOp::min:
        combined = np.attr("minimum")(combined, v);
        break;
      case ReduceOp::max:
        combined = np.attr("maximum")(combined, v);
        break;
    }
  }
  // np.array, not ascontiguousarray: that makes a 0-d value 1-d.
  py::array a = np.attr("array")(combined, py::arg("order") = "C");
  const bool scalar = a.ndim() == 0;
  Comm* comm = s.comm();
  if (comm != nullptr) {
    if (!s.runs_replicas() || s.name() == "ParameterServer")
      throw Error(ErrorCode::unsupported, "Strategy.reduce: not available with ParameterServer");
    ArrayArg arg = output_array(a, {"Strategy.reduce", "value"});
    const ReduceOp wire = op == ReduceOp::avg ? ReduceOp::sum : op;
    py::gil_scoped_release release;
    comm->all_reduce(arg.data, arg.data, arg.count, arg.type, wire);
  }
  py::object out = a;
  if (op == ReduceOp::avg) {
    const char kind = a.dtype().kind();
    out = (kind == 'f') ? py::object(np.attr("true_divide")(a, s.num_replicas_in_sync()).attr("astype")(a.dtype()))
                        : py::object(np.attr("floor_divide")(a, s.num_replicas_in_sync()));
  }
  if (scalar) return py::array(out).attr("item")();
  return out;
}

// Calls `call(ctx)` on a replica's thread with the GIL, ctx the Python view
// of `context`, which is invalid once the call returns (a ctx kept by the
// Python code then refuses every use).
template <typename Call>
py::object in_replica_context(const StrategyPtr& self, mr::ReplicaContext& context, Call&& call) {
  py::gil_scoped_acquire acquire;
  auto wrapper = std::make_shared<PyReplicaContext>(PyReplicaContext{self, &context});
  struct Invalidate {
    PyReplicaContext& c;
    ~Invalidate() { c.context = nullptr; }
  } invalidate{*wrapper};
  return call(py::cast(wrapper));
}

py::object run(const py::object& self_object, const py::function& fn, const py::tuple& args, const py::dict& kwargs) {
  const StrategyPtr self = self_object.cast<StrategyPtr>();
  const int locals = self->local_replicas();
  std::vector<py::object> results(static_cast<std::size_t>(locals));
  {
    py::gil_scoped_release release;
    self->run([&](mr::ReplicaContext& context) {
      py::object result = in_replica_context(self, context, [&](py::object ctx) { return fn(ctx, *args, **kwargs); });
      py::gil_scoped_acquire acquire;
      results[static_cast<std::size_t>(context.local_replica())] = std::move(result);
    });
  }
  if (locals == 1) return results[0];
  py::list out;
  for (auto& r : results) out.append(r);
  return out;
}

// Strategy.elastic_step(fn, position): the position a dict {step, epoch,
// batch_in_epoch}, updated in place to the chief's after a change.
py::dict elastic_step(const py::object& self_object, const py::function& fn, py::dict position) {
  const StrategyPtr self = self_object.cast<StrategyPtr>();
  mr::TrainingPosition at{.step = position.contains("step") ? position["step"].cast<std::int64_t>() : 0,
                          .epoch = position.contains("epoch") ? position["epoch"].cast<std::int64_t>() : 0,
                          .batch_in_epoch = position.contains("batch_in_epoch")
                                                ? position["batch_in_epoch"].cast<std::int64_t>()
                                                : 0};
  auto give_back = [&] {  // with the GIL
    position["step"] = at.step;
    position["epoch"] = at.epoch;
    position["batch_in_epoch"] = at.batch_in_epoch;
  };
  mr::MembershipChange change;
  {
    py::gil_scoped_release release;
    change = self->elastic_step(at, [&](mr::ReplicaContext& context) {
      in_replica_context(self, context, [&](py::object ctx) {
        give_back();  // the chief's, when a process was admitted before the step
        try {
          return fn(ctx, position);
        } catch (py::error_already_set& e) {
          rethrow_lost_peer_as_braid_error(e);
        }
      });
    });
  }
  give_back();
  py::dict d;
  d["changed"] = change.changed();
  d["lost"] = change.lost;
  d["joined"] = change.joined;
  d["step_done"] = change.step_done;
  d["replicas_before"] = change.replicas_before;
  d["replicas_after"] = change.replicas_after;
  d["describe"] = change.describe();
  return d;
}

py::dict restored_dict(const mr::RestoredCheckpoint& r) {
  py::dict d;
  d["step"] = r.position.step;
  d["epoch"] = r.position.epoch;
  d["batch_in_epoch"] = r.position.batch_in_epoch;
  d["replicas_when_saved"] = r.replicas_when_saved;
  d["model"] = r.model;
  return d;
}

}  // namespace

void bind_mirrored(py::module_& m) {
  using py::arg;

  py::class_<mr::Optimizer, std::shared_ptr<mr::Optimizer>>(m, "Optimizer", "An update rule (braid's C++ optimizers).")
      .def_property_readonly("name", &mr::Optimizer::name)
      .def_property_readonly("slot_names", &mr::Optimizer::slot_names);
  py::class_<mr::Sgd, mr::Optimizer, std::shared_ptr<mr::Sgd>>(
      m, "Sgd", "SGD with heavy-ball momentum: v = momentum*v + g; w -= lr*v.")
      .def(py::init<double, double>(), arg("learning_rate"), arg("momentum") = 0.0);

  py::class_<PyVariable>(m, "Variable", "A strategy's variable; one copy per local replica.")
      .def_property_readonly("name", [](const PyVariable& v) { return v.variable->name(); })
      .def_property_readonly("shape",
                             [](const PyVariable& v) {
                               py::tuple t(v.variable->shape().size());
                               for (std::size_t i = 0; i < v.variable->shape().size(); ++i)
                                 t[i] = v.variable->shape()[i];
                               return t;
                             })
      .def_property_readonly("dtype", [](const PyVariable& v) { return dtype_of(v.variable->type()); })
      .def_property_readonly("trainable", [](const PyVariable& v) { return v.variable->options().trainable; })
      .def_property_readonly(
          "synchronization",
          [](const PyVariable& v) { return std::string(mr::name_of(v.variable->options().synchronization)); })
      .def_property_readonly(
          "aggregation",
          [](const PyVariable& v) { return std::string(mr::name_of(v.variable->options().aggregation)); })
      .def(
          "value",
          [](const PyVariable& v, const py::object& where) {
            int local = 0;
            if (py::isinstance<PyReplicaContext>(where))
              local = where.cast<PyReplicaContext&>().get().local_replica();
            else if (!where.is_none())
              local = where.cast<int>();
            if (local < 0 || local >= v.strategy->local_replicas())
              throw InvalidArgument("Variable.value: local replica " + std::to_string(local) + " is not in [0, " +
                                    std::to_string(v.strategy->local_replicas()) + ")");
            return view(v.strategy, v.variable->type(), v.variable->shape(), v.variable->replica_bytes(local));
          },
          arg("replica") = py::none(),
          "A numpy view (no copy) of one local replica's copy: value(ctx) inside run(), value(i) or value() outside.")
      .def(
          "numpy",
          [](const PyVariable& v) {
            std::vector<std::byte> bytes;
            {
              py::gil_scoped_release release;
              bytes = v.strategy->read(*v.variable);
            }
            std::vector<py::ssize_t> dims(v.variable->shape().begin(), v.variable->shape().end());
            py::array out(dtype_of(v.variable->type()), dims);
            std::memcpy(out.mutable_data(), bytes.data(), bytes.size());
            return out;
          },
          "The value as a cross-replica read sees it (a copy; on_read variables aggregated: a collective).")
      .def(
          "assign",
          [](const PyVariable& v, const py::object& value) {
            py::array a = py::module_::import("numpy").attr("asarray")(
                value, py::arg("dtype") = dtype_of(v.variable->type()), py::arg("order") = "C");
            if (static_cast<std::size_t>(a.size()) != v.variable->count())
              throw InvalidArgument("Variable.assign: '" + v.variable->name() + "' has " +
                                    std::to_string(v.variable->count()) + " elements, the value " +
                                    std::to_string(a.size()));
            std::span<const std::byte> bytes(static_cast<const std::byte*>(a.data()), v.variable->bytes());
            py::gil_scoped_release release;
            v.strategy->assign(*v.variable, bytes);
          },
          arg("value"), "Sets every replica's copy (cross-replica context).")
      .def("__repr__", [](const PyVariable& v) {
        return "<braid.mirrored.Variable '" + v.variable->name() + "' shape=" + mr::shape_text(v.variable->shape()) +
               " dtype=" + std::string(braid::name_of(v.variable->type())) + ">";
      });

  py::class_<PyGradients>(m, "Gradients", "One replica's gradient buffers (views into fused buckets).")
      .def(
          "of",
          [](const PyGradients& g, const PyVariable& v) {
            mr::ReplicaContext& ctx = g.context->get();
            mr::Variable& var = owned_by(v, g.context->strategy);
            return view(g.context->strategy, var.type(), var.shape(), ctx.gradients().bytes_of(var));
          },
          arg("variable"), "This replica's gradient buffer of a variable, as a writable numpy view.")
      .def(
          "ready",
          [](const PyGradients& g, const PyVariable& v) {
            mr::ReplicaContext& ctx = g.context->get();
            mr::Variable& var = owned_by(v, g.context->strategy);
            py::gil_scoped_release release;
            ctx.gradients().ready(var);
          },
          arg("variable"), "The gradient is final for this step: its bucket may start all-reducing.")
      .def(
          "synchronize",
          [](const PyGradients& g) {
            mr::ReplicaContext& ctx = g.context->get();
            py::gil_scoped_release release;
            ctx.gradients().synchronize();
          },
          "Waits until every bucket is aggregated over all replicas.")
      .def("zero", [](const PyGradients& g) {
        mr::ReplicaContext& ctx = g.context->get();
        py::gil_scoped_release release;
        ctx.gradients().zero();
      });

  py::class_<PyReplicaContext, std::shared_ptr<PyReplicaContext>>(
      m, "ReplicaContext", "The running replica's view, passed to run()'s function.")
      .def_property_readonly("replica_id_in_sync_group", [](const PyReplicaContext& c) { return c.get().replica_id(); })
      .def_property_readonly("replica_id", [](const PyReplicaContext& c) { return c.get().replica_id(); })
      .def_property_readonly("local_replica", [](const PyReplicaContext& c) { return c.get().local_replica(); })
      .def_property_readonly("num_replicas_in_sync",
                             [](const PyReplicaContext& c) { return c.get().num_replicas_in_sync(); })
      .def_property_readonly("gradients", [](const std::shared_ptr<PyReplicaContext>& c) { return PyGradients{c}; })
      .def("all_reduce", &reduce_in_context, arg("reduce_op"), arg("value"),
           "op over every replica of value (a number or array; 'mean'/'avg' the mean); returns a new value.")
      .def(
          "all_gather",
          [](const PyReplicaContext& c, const py::object& value) {
            py::array a =
                py::module_::import("numpy").attr("array")(value, py::arg("copy") = true, py::arg("order") = "C");
            ArrayArg in = input_array(a, {"ReplicaContext.all_gather", "value"});
            mr::ReplicaContext& ctx = c.get();
            std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
            if (shape.empty()) shape.push_back(1);
            shape[0] *= ctx.num_replicas_in_sync();
            py::array out(a.dtype(), shape);
            void* dst = out.mutable_data();
            {
              py::gil_scoped_release release;
              ctx.all_gather(in.data, dst, in.count, in.type);
            }
            return out;
          },
          arg("value"), "Every replica's value concatenated along axis 0, in replica order.")
      .def(
          "assign",
          [](const PyReplicaContext& c, const PyVariable& v, const py::object& value) {
            mr::Variable& var = owned_by(v, c.strategy);
            ArrayArg a = input_array(py::module_::import("numpy").attr("asarray")(
                                         value, py::arg("dtype") = dtype_of(var.type()), py::arg("order") = "C"),
                                     {"ReplicaContext.assign", "value"});
            mr::ReplicaContext& ctx = c.get();
            py::gil_scoped_release release;
            ctx.assign(var, a.data, a.count, var.type());
          },
          arg("variable"), arg("value"), "Writes a variable from replica context (on_write: aggregated).")
      .def(
          "assign_add",
          [](const PyReplicaContext& c, const PyVariable& v, const py::object& value) {
            mr::Variable& var = owned_by(v, c.strategy);
            ArrayArg a = input_array(py::module_::import("numpy").attr("asarray")(
                                         value, py::arg("dtype") = dtype_of(var.type()), py::arg("order") = "C"),
                                     {"ReplicaContext.assign_add", "value"});
            mr::ReplicaContext& ctx = c.get();
            py::gil_scoped_release release;
            ctx.assign_add(var, a.data, a.count, var.type());
          },
          arg("variable"), arg("value"))
      .def(
          "apply_gradients",
          [](const PyReplicaContext& c, mr::Optimizer& optimizer) {
            mr::ReplicaContext& ctx = c.get();
            py::gil_scoped_release release;
            ctx.apply_gradients(optimizer);
          },
          arg("optimizer"), "Aggregates the gradients over replicas and applies the optimizer as the strategy does.");

  py::class_<PyScope>(m, "Scope", "Variables may be created while a scope is entered (`with strategy.scope():`).")
      .def("__enter__",
           [](PyScope& s) {
             if (!s.scope) s.scope.emplace(s.strategy->scope());
             return s.strategy;
           })
      .def("__exit__", [](PyScope& s, py::args) { s.scope.reset(); });

  py::class_<mr::ReplicaReport::Divergence>(m, "Divergence")
      .def_readonly("variable", &mr::ReplicaReport::Divergence::variable)
      .def_readonly("replicas", &mr::ReplicaReport::Divergence::replicas)
      .def_readonly("ranks", &mr::ReplicaReport::Divergence::ranks);
  py::class_<mr::ReplicaReport>(m, "ReplicaReport")
      .def_property_readonly("consistent", &mr::ReplicaReport::consistent)
      .def_readonly("variables_checked", &mr::ReplicaReport::variables_checked)
      .def_readonly("divergences", &mr::ReplicaReport::divergences)
      .def("describe", &mr::ReplicaReport::describe)
      .def("__bool__", &mr::ReplicaReport::consistent)
      .def("__str__", &mr::ReplicaReport::describe);

  bind_data_shard(m);

  py::class_<mr::Strategy, StrategyPtr> strategy(m, "Strategy", "The base of every strategy.");
  strategy.def_property_readonly("name", [](mr::Strategy& s) { return std::string(s.name()); })
      .def_property_readonly("num_replicas_in_sync", &mr::Strategy::num_replicas_in_sync)
      .def_property_readonly("local_replicas", &mr::Strategy::local_replicas)
      .def_property_readonly("first_replica_id", &mr::Strategy::first_replica_id)
      .def_property_readonly("is_chief", &mr::Strategy::is_chief)
      .def_property_readonly("rank", [](mr::Strategy& s) { return s.comm() ? s.comm()->rank() : 0; })
      .def_property_readonly("runs_replicas", &mr::Strategy::runs_replicas)
      .def(
          "scope",
          [](const StrategyPtr& s) {
            return PyScope{s, std::nullopt};
          },
          "A context manager inside which variables are created.")
      .def(
          "create_variable",
          [](const StrategyPtr& s, std::string name, const py::object& initial, bool trainable,
             const std::string& synchronization, const std::string& aggregation, const py::object& dtype) {
            py::array a = py::module_::import("numpy").attr("asarray")(initial, py::arg("order") = "C");
            auto type = parse_type_override(dtype, "create_variable");
            ArrayArg in = input_array(a, {"create_variable", "initial"}, type);
            mr::Shape shape(a.shape(), a.shape() + a.ndim());
            mr::VariableOptions options{.synchronization = parse_synchronization(synchronization),
                                        .aggregation = parse_aggregation(aggregation),
                                        .trainable = trainable};
            std::span<const std::byte> bytes(static_cast<const std::byte*>(in.data), in.bytes());
            mr::Variable* v = nullptr;
            {
              py::gil_scoped_release release;
              v = &s->create_variable(std::move(name), in.type, std::move(shape), bytes, options);
            }
            return PyVariable{s, v};
          },
          arg("name"), arg("initial"), py::kw_only(), arg("trainable") = true, arg("synchronization") = "on_write",
          arg("aggregation") = "none", arg("dtype") = py::none(),
          "Creates a variable on every replica (a collective, inside scope()); the chief's initial value wins.")
      .def_property_readonly("variables",
                             [](const StrategyPtr& s) {
                               py::list out;
                               for (mr::Variable* v : s->variables()) out.append(PyVariable{s, v});
                               return out;
                             })
      .def(
          "variable",
          [](const StrategyPtr& s, const std::string& name) {
            return PyVariable{s, &s->variable(name)};
          },
          arg("name"))
      .def("run", &run, arg("fn"), arg("args") = py::tuple(), arg("kwargs") = py::dict(),
           "Calls fn(ctx, *args, **kwargs) once per local replica; returns its result (a list of them with "
           "several local replicas).")
      .def("elastic_step", &elastic_step, arg("fn"), arg("position"),
           "Elastic training (MultiWorkerMirrored(elastic=True)): one step, fn(ctx, position); admits processes "
           "waiting to join before it, goes on without a replica lost during it. position (a dict: step, epoch, "
           "batch_in_epoch) becomes the chief's after a change; returns {changed, lost, joined, step_done, "
           "replicas_before, replicas_after, describe}: advance position when step_done, else run that step.")
      .def(
          "reduce",
          [](mr::Strategy& s, const py::object& op, const py::object& value) { return strategy_reduce(s, op, value); },
          arg("reduce_op"), arg("value"),
          "op over every replica of value (one per local replica; a number or array); a collective.")
      .def(
          "verify_replicas",
          [](mr::Strategy& s) {
            py::gil_scoped_release release;
            return s.verify_replicas();
          },
          "Compares every mirrored variable across all replicas (a collective).")
      .def("replica_hash", &mr::Strategy::replica_hash, arg("local_replica") = 0)
      .def("create_slots", &mr::Strategy::create_slots, arg("optimizer"))
      .def(
          "save",
          [](mr::Strategy& s, const std::string& path, std::int64_t step, std::int64_t epoch,
             std::int64_t batch_in_epoch) {
            py::gil_scoped_release release;
            s.save(path, {.step = step, .epoch = epoch, .batch_in_epoch = batch_in_epoch});
          },
          arg("path"), py::kw_only(), arg("step") = 0, arg("epoch") = 0, arg("batch_in_epoch") = 0,
          "Writes every variable and optimizer slot to path on the chief (a collective).")
      .def(
          "restore",
          [](mr::Strategy& s, const std::string& path) {
            mr::RestoredCheckpoint r;
            {
              py::gil_scoped_release release;
              r = s.restore(path);
            }
            return restored_dict(r);
          },
          arg("path"), "Reads path on the chief and gives every replica its values (a collective).")
      .def(
          "shard",
          [](const mr::Strategy& s, const PyReplicaContext& ctx, std::int64_t dataset_size,
             std::int64_t global_batch_size, std::uint64_t seed, bool shuffle, const std::string& remainder) {
            return s.shard(shard_options(dataset_size, global_batch_size, seed, shuffle, remainder), ctx.get());
          },
          arg("ctx"), arg("dataset_size"), arg("global_batch_size"), py::kw_only(), arg("seed") = 0,
          arg("shuffle") = true, arg("remainder") = "drop", "This replica's DataShard.")
      .def("__repr__", [](mr::Strategy& s) {
        return "<braid.mirrored." + std::string(s.name()) + " " + std::to_string(s.num_replicas_in_sync()) +
               " replicas>";
      });

#define BRAID_STRATEGY_OPTIONS                                                                                    \
  py::kw_only(), arg("timeout") = py::none(), arg("bucket_bytes") = std::size_t(25) << 20, arg("overlap") = true, \
                 arg("aggregation") = "mean", arg("compression") = "none"
  py::class_<mr::MultiWorkerMirrored, mr::Strategy, std::shared_ptr<mr::MultiWorkerMirrored>>(
      m, "MultiWorkerMirrored", "One replica per process (tf.distribute.MultiWorkerMirroredStrategy).")
      .def(py::init([](const py::object& comm, const py::object& timeout, std::size_t bucket_bytes, bool overlap,
                       const std::string& aggregation, const std::string& compression, bool elastic, int grow_every) {
             auto options = strategy_options(timeout, bucket_bytes, overlap, aggregation, compression);
             if (grow_every < 1) throw InvalidArgument("grow_every must be at least 1 (steps)");
             options.elastic = mr::ElasticOptions{.enabled = elastic, .grow_every = grow_every};
             Comm c = take_comm(comm);
             py::gil_scoped_release release;
             return std::make_shared<mr::MultiWorkerMirrored>(std::move(c), options);
           }),
           arg("comm") = py::none(), BRAID_STRATEGY_OPTIONS, arg("elastic") = false, arg("grow_every") = 1);
  py::class_<mr::Mirrored, mr::Strategy, std::shared_ptr<mr::Mirrored>>(
      m, "Mirrored", "Several replicas per process, one thread each (tf.distribute.MirroredStrategy).")
      .def(py::init([](int local_replicas, const py::object& comm, const py::object& timeout, std::size_t bucket_bytes,
                       bool overlap, const std::string& aggregation, const std::string& compression) {
             auto options = strategy_options(timeout, bucket_bytes, overlap, aggregation, compression);
             if (comm.is_none()) return std::make_shared<mr::Mirrored>(local_replicas, options);
             Comm c = take_comm(comm);
             py::gil_scoped_release release;
             return std::make_shared<mr::Mirrored>(std::move(c), local_replicas, options);
           }),
           arg("local_replicas"), arg("comm") = py::none(), BRAID_STRATEGY_OPTIONS);
  py::class_<mr::CentralStorage, mr::Strategy, std::shared_ptr<mr::CentralStorage>>(
      m, "CentralStorage",
      "Variables updated on the chief and broadcast (tf.distribute.experimental.CentralStorageStrategy).")
      .def(py::init([](const py::object& comm, const py::object& timeout, std::size_t bucket_bytes, bool overlap,
                       const std::string& aggregation, const std::string& compression) {
             auto options = strategy_options(timeout, bucket_bytes, overlap, aggregation, compression);
             Comm c = take_comm(comm);
             py::gil_scoped_release release;
             return std::make_shared<mr::CentralStorage>(std::move(c), options);
           }),
           arg("comm") = py::none(), BRAID_STRATEGY_OPTIONS);
#undef BRAID_STRATEGY_OPTIONS
  py::class_<mr::ParameterServer, mr::Strategy, std::shared_ptr<mr::ParameterServer>>(
      m, "ParameterServer",
      "Asynchronous training with sharded variables on server ranks, bounded staleness "
      "(tf.distribute.experimental.ParameterServerStrategy).")
      .def(py::init([](const py::object& comm, std::shared_ptr<mr::Optimizer> optimizer, int servers, int staleness,
                       const py::object& timeout) {
             mr::ParameterServerOptions options{
                 .servers = servers, .staleness = staleness, .optimizer = std::move(optimizer), .strategy = {}};
             if (auto t = to_millis(timeout, "ParameterServer")) options.strategy.timeout = *t;
             Comm c = take_comm(comm);
             py::gil_scoped_release release;
             return std::make_shared<mr::ParameterServer>(std::move(c), options);
           }),
           arg("comm") = py::none(), py::kw_only(), arg("optimizer"), arg("servers") = 1, arg("staleness") = 2,
           arg("timeout") = py::none())
      .def_property_readonly("is_server", &mr::ParameterServer::is_server)
      .def_property_readonly("workers", &mr::ParameterServer::workers)
      .def(
          "serve",
          [](mr::ParameterServer& s) {
            py::gil_scoped_release release;
            s.serve();
          },
          "Serves pulls and pushes until every worker called finish(). Servers only.")
      .def(
          "pull",
          [](mr::ParameterServer& s) {
            py::gil_scoped_release release;
            s.pull();
          },
          "Fetches the current values of every variable. Workers only.")
      .def(
          "finish",
          [](mr::ParameterServer& s) {
            py::gil_scoped_release release;
            s.finish();
          },
          "Waits for every worker, pulls the final values, tells the servers. Workers only.")
      .def_property_readonly("max_staleness_seen", &mr::ParameterServer::max_staleness_seen)
      .def_property_readonly("updates_applied", &mr::ParameterServer::updates_applied);
}

}  // namespace braid::python
