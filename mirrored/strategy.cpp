// The Strategy base: variable ownership and creation, running the replicas,
// and the cross-replica (outside run) reads, assignments and reductions. The
// replica-context side is in replica_context.cpp, consistency checks in
// replica_check.cpp, checkpoints in checkpoint.cpp.
#include <algorithm>
#include <cstring>
#include <thread>

#include "braid/mirrored.hpp"
#include "content_hash.hpp"
#include "elementwise.hpp"
#include "gradient_buckets.hpp"
#include "local_group.hpp"

namespace braid::mirrored {

std::string_view name_of(Synchronization s) { return s == Synchronization::on_write ? "on_write" : "on_read"; }

std::string_view name_of(Aggregation a) {
  switch (a) {
    case Aggregation::none: return "none";
    case Aggregation::sum: return "sum";
    case Aggregation::mean: return "mean";
    case Aggregation::only_first_replica: return "only_first_replica";
  }
  return "?";
}

std::string_view name_of(Compression c) {
  switch (c) {
    case Compression::none: return "none";
    case Compression::f16: return "f16";
    case Compression::bf16: return "bf16";
  }
  return "?";
}

std::size_t element_count(const Shape& shape) {
  std::size_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw InvalidArgument("shape " + shape_text(shape) + " has a negative dimension");
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

std::string shape_text(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// ---- Variable ---------------------------------------------------------------------

Variable::Variable(Strategy* strategy, int index, std::string name, DataType type, Shape shape, VariableOptions options,
                   bool mirrored, int copies, bool held)
    : strategy_(strategy),
      index_(index),
      name_(std::move(name)),
      type_(type),
      shape_(std::move(shape)),
      count_(element_count(shape_)),
      options_(options),
      mirrored_(mirrored),
      copies_(static_cast<std::size_t>(copies)) {
  if (held)
    for (auto& c : copies_) c.assign(bytes(), std::byte{0});
}

std::span<std::byte> Variable::replica_bytes(int local_replica) {
  if (local_replica < 0 || local_replica >= static_cast<int>(copies_.size()))
    throw InvalidArgument("variable '" + name_ + "': local replica " + std::to_string(local_replica) + " is outside [0, " +
                          std::to_string(copies_.size()) + ")");
  return copies_[static_cast<std::size_t>(local_replica)];
}

std::span<const std::byte> Variable::replica_bytes(int local_replica) const {
  return const_cast<Variable*>(this)->replica_bytes(local_replica);
}

// ---- Strategy ---------------------------------------------------------------------

Strategy::Strategy(std::optional<Comm> comm, int local_replicas, StrategyOptions options)
    : comm_(std::move(comm)), local_replicas_(local_replicas), options_(options) {
  if (local_replicas < 1) throw InvalidArgument("a strategy needs at least 1 local replica, not " + std::to_string(local_replicas));
  if (options_.timeout.count() <= 0) throw InvalidArgument("StrategyOptions::timeout must be positive");
  group_ = std::make_unique<LocalGroup>(local_replicas, options_.timeout);
  buckets_ = std::make_unique<GradientBuckets>(local_replicas, options_.gradients);
  joining_ = options_.elastic.enabled && comm_ && comm_->joined_running_job();
}

Strategy::~Strategy() = default;

Strategy::Scope::~Scope() {
  if (strategy_ != nullptr) --strategy_->scopes_;
}

Strategy::Scope Strategy::scope() {
  ++scopes_;
  return Scope(this);
}

int Strategy::num_replicas_in_sync() const {
  Comm* c = const_cast<Strategy*>(this)->replica_comm();
  return (c ? c->size() : 1) * local_replicas_;
}

int Strategy::first_replica_id() const {
  Comm* c = const_cast<Strategy*>(this)->replica_comm();
  return (c ? c->rank() : 0) * local_replicas_;
}

bool Strategy::is_chief() const { return !comm_ || comm_->rank() == 0; }

void Strategy::check_in_scope(std::string_view name) const {
  if (scopes_ == 0)
    throw InvalidArgument(std::string(this->name()) + ": variable '" + std::string(name) +
                          "' created outside the strategy's scope (create variables while `auto scope = "
                          "strategy.scope();` lives)");
  if (running_)
    throw InvalidArgument(std::string(this->name()) + ": variable '" + std::string(name) +
                          "' created inside run(); create variables in cross-replica context, before run()");
}

Variable& Strategy::create_variable(std::string name, DataType type, Shape shape, std::span<const std::byte> initial,
                                    VariableOptions options) {
  check_in_scope(name);
  if (name.empty()) throw InvalidArgument("create_variable: a variable needs a name");
  if (by_name_.count(name)) throw InvalidArgument("create_variable: a variable called '" + name + "' exists already");
  const std::size_t count = element_count(shape);
  if (initial.size() != count * size_of(type))
    throw InvalidArgument("create_variable: '" + name + "' has shape " + shape_text(shape) + " (" +
                          std::to_string(count) + " x " + std::string(braid::name_of(type)) + " = " +
                          std::to_string(count * size_of(type)) + " bytes) but its initial value holds " +
                          std::to_string(initial.size()) + " bytes");
  if (options.trainable && options.synchronization == Synchronization::on_read)
    throw InvalidArgument("create_variable: '" + name +
                          "' is on_read and trainable; on_read variables (metrics, statistics) must be created with "
                          "trainable = false");
  if (options.trainable && !is_floating(type))
    throw InvalidArgument("create_variable: '" + name + "' holds " + std::string(braid::name_of(type)) +
                          " and is trainable; trainable variables hold f16, bf16, f32 or f64 (or set trainable = false)");
  if (options.synchronization == Synchronization::on_read && options.aggregation == Aggregation::none)
    throw InvalidArgument("create_variable: '" + name +
                          "' is on_read with aggregation none: say how replicas' copies combine when it is read "
                          "(sum, mean or only_first_replica)");
  // A process that joined a running job gets every value from the chief at
  // its first elastic_step; its peers are training and make no variables.
  if (!joining_) check_same_everywhere(name, type, shape);
  auto v = std::unique_ptr<Variable>(new Variable(this, static_cast<int>(variables_.size()), name, type,
                                                  std::move(shape), options,
                                                  options.synchronization == Synchronization::on_write,
                                                  local_replicas_, true));
  initialize_variable(*v, initial);
  Variable& ref = *v;
  by_name_[ref.name()] = &ref;
  variable_list_.push_back(&ref);
  variables_.push_back(std::move(v));
  return ref;
}

// Every rank sends a fixed record describing the variable it is creating;
// every rank compares all of them with the chief's, so all fail alike.
void Strategy::check_same_everywhere(const std::string& name, DataType type, const Shape& shape) {
  if (!comm_ || comm_->size() == 1) return;
  constexpr std::size_t kRecord = 192, kMaxDims = 8, kNameBytes = 112;
  struct Described {
    std::uint64_t name_hash;
    std::string name;
    DataType type;
    Shape shape;
    bool too_many_dims;
  };
  std::vector<std::byte> mine(kRecord);
  const std::uint64_t name_hash = content_hash(std::as_bytes(std::span(name.data(), name.size())));
  std::memcpy(mine.data(), &name_hash, 8);
  mine[8] = static_cast<std::byte>(type);
  mine[9] = static_cast<std::byte>(std::min(shape.size(), kMaxDims + 1));
  for (std::size_t d = 0; d < std::min(shape.size(), kMaxDims); ++d) std::memcpy(&mine[16 + 8 * d], &shape[d], 8);
  std::memcpy(&mine[80], name.data(), std::min(name.size(), kNameBytes));
  std::vector<std::byte> all(kRecord * static_cast<std::size_t>(comm_->size()));
  {
    std::lock_guard lock(comm_mutex_);
    comm_->all_gather(mine.data(), all.data(), kRecord, DataType::u8);
  }
  auto describe = [&](int rank) {
    const std::byte* r = &all[kRecord * static_cast<std::size_t>(rank)];
    Described d;
    std::memcpy(&d.name_hash, r, 8);
    d.type = static_cast<DataType>(r[8]);
    std::size_t dims = static_cast<std::size_t>(r[9]);
    d.too_many_dims = dims > kMaxDims;
    for (std::size_t i = 0; i < std::min(dims, kMaxDims); ++i) {
      std::int64_t v;
      std::memcpy(&v, &r[16 + 8 * i], 8);
      d.shape.push_back(v);
    }
    const char* text = reinterpret_cast<const char*>(&r[80]);
    d.name.assign(text, strnlen(text, kNameBytes));
    return d;
  };
  auto text = [](const Described& d) {
    return "'" + d.name + "' " + std::string(braid::name_of(d.type)) + " " + shape_text(d.shape);
  };
  Described chief = describe(0);
  std::string problems;
  for (int r = 0; r < comm_->size(); ++r) {
    Described d = describe(r);
    if (d.too_many_dims) problems += "; rank " + std::to_string(r) + " passed more than 8 dimensions";
    if (d.name_hash != chief.name_hash || d.type != chief.type || d.shape != chief.shape)
      problems += "; rank " + std::to_string(r) + " has " + text(d);
  }
  if (!problems.empty())
    throw InvalidArgument("rank " + std::to_string(comm_->rank()) + ": create_variable #" +
                          std::to_string(variables_.size()) + ": ranks disagree: the chief (rank 0) has " + text(chief) +
                          problems);
}

void Strategy::initialize_variable(Variable& variable, std::span<const std::byte> initial) {
  std::vector<std::byte> value(initial.begin(), initial.end());
  if (!joining_) broadcast_from_chief(value.data(), value.size());
  for (int r = 0; r < local_replicas_; ++r) {
    auto copy = variable.replica_bytes(r);
    if (!copy.empty()) std::memcpy(copy.data(), value.data(), value.size());
  }
}

Variable& Strategy::variable(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw InvalidArgument(std::string(this->name()) + " has no variable '" + std::string(name) + "'");
  return *it->second;
}

Variable& Strategy::owned(const Variable& variable, std::string_view operation) const {
  if (&variable.strategy() != this)
    throw InvalidArgument(std::string(operation) + ": variable '" + variable.name() +
                          "' belongs to another strategy, not to this " + std::string(name()));
  return const_cast<Variable&>(variable);
}

void Strategy::create_slots(const Optimizer& optimizer) {
  // Per (variable, slot), so that a variable created later, or a second
  // optimizer of the same name with more slots, still gets its own.
  const SlotPlacement placement = slot_placement();
  if (placement == SlotPlacement::elsewhere) return;
  const bool held = placement == SlotPlacement::every_replica || is_chief();
  for (Variable* v : trainable_variables()) {
    for (const std::string& slot : optimizer.slot_names()) {
      std::string slot_name = v->name() + "/" + optimizer.name() + "/" + slot;
      if (by_name_.count(slot_name)) continue;
      auto s = std::unique_ptr<Variable>(new Variable(
          this, static_cast<int>(variables_.size()), std::move(slot_name), v->type(), v->shape(),
          VariableOptions{.synchronization = Synchronization::on_write, .aggregation = Aggregation::none, .trainable = false},
          placement == SlotPlacement::every_replica, local_replicas_, held));
      by_name_[s->name()] = s.get();
      variable_list_.push_back(s.get());
      variables_.push_back(std::move(s));
    }
  }
}

std::vector<Variable*> Strategy::trainable_variables() const {
  std::vector<Variable*> trainable;
  for (Variable* v : variable_list_)
    if (v->options().trainable) trainable.push_back(v);
  return trainable;
}

std::vector<Variable*> Strategy::slots_of(const Variable& variable, const Optimizer& optimizer) const {
  std::vector<Variable*> slots;
  for (const std::string& slot : optimizer.slot_names())
    slots.push_back(&this->variable(variable.name() + "/" + optimizer.name() + "/" + slot));
  return slots;
}

void Strategy::run(const std::function<void(ReplicaContext&)>& fn) {
  if (running_) throw InvalidArgument(std::string(this->name()) + "::run: run() does not nest");
  if (!runs_replicas())
    throw InvalidArgument(std::string(this->name()) + "::run: this rank serves variables and runs no replicas");
  buckets_->layout(trainable_variables(), num_replicas_in_sync());
  buckets_->end_step();  // a new run() starts a new step
  running_ = true;
  struct Done {
    bool& running;
    ~Done() { running = false; }
  } done{running_};
  if (local_replicas_ == 1) {
    ReplicaContext context(this, 0);
    fn(context);
    return;
  }
  std::mutex first_error_mutex;
  std::exception_ptr first_error;
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < local_replicas_; ++r) {
      threads.emplace_back([&, r] {
        ReplicaContext context(this, r);
        try {
          fn(context);
        } catch (...) {
          {
            std::lock_guard lock(first_error_mutex);
            if (!first_error) first_error = std::current_exception();
          }
          group_->fail(std::current_exception());
        }
      });
    }
  }
  if (first_error) {
    group_->reset();
    std::rethrow_exception(first_error);
  }
}

void Strategy::on_one_replica(const ReplicaContext& context, const std::function<void()>& fn) {
  group_->collective(context.local_replica(), nullptr, [&](std::span<void* const>) { fn(); }, "on_one_replica");
}

// ---- cross-replica context -----------------------------------------------------

void Strategy::check_cross_replica(std::string_view operation) const {
  if (running_)
    throw InvalidArgument(std::string(this->name()) + "::" + std::string(operation) +
                          " is for cross-replica context (outside run()); inside run() use the ReplicaContext");
}

std::vector<std::byte> Strategy::read(const Variable& v) {
  Variable& variable = owned(v, "read");
  check_cross_replica("read");
  auto first = variable.replica_bytes(0);
  if (first.empty() && variable.count() > 0)
    throw InvalidArgument("read: variable '" + variable.name() + "' is not held on this rank");
  std::vector<std::byte> value(first.begin(), first.end());
  if (variable.options().synchronization == Synchronization::on_write) return value;
  const Aggregation agg = variable.options().aggregation;
  if (agg == Aggregation::only_first_replica) {
    broadcast_first_replica(value.data(), value.size());
    return value;
  }
  for (int r = 1; r < local_replicas_; ++r)
    combine(value.data(), variable.replica_bytes(r).data(), variable.count(), variable.type(), ReduceOp::sum);
  reduce_across_processes(value.data(), variable.count(), variable.type(),
                          agg == Aggregation::mean ? ReduceOp::avg : ReduceOp::sum);
  return value;
}

void Strategy::assign(const Variable& v, std::span<const std::byte> values) {
  Variable& variable = owned(v, "assign");
  check_cross_replica("assign");
  if (values.size() != variable.bytes())
    throw InvalidArgument("assign: variable '" + variable.name() + "' holds " + std::to_string(variable.bytes()) +
                          " bytes, the value " + std::to_string(values.size()));
  const bool split_sum = variable.options().synchronization == Synchronization::on_read &&
                         variable.options().aggregation == Aggregation::sum;
  for (int r = 0; r < local_replicas_; ++r) {
    auto copy = variable.replica_bytes(r);
    if (copy.empty()) continue;
    if (split_sum && first_replica_id() + r != 0) std::fill(copy.begin(), copy.end(), std::byte{0});
    else std::memcpy(copy.data(), values.data(), values.size());
  }
}

void Strategy::reduce_values(ReduceOp op, const void* per_local, std::size_t locals, void* out, DataType type) {
  check_cross_replica("reduce");
  if (locals != static_cast<std::size_t>(local_replicas_))
    throw InvalidArgument("reduce: " + std::to_string(locals) + " values for " + std::to_string(local_replicas_) +
                          " local replicas (pass one per local replica)");
  const std::size_t element = size_of(type);
  std::memcpy(out, per_local, element);
  for (std::size_t r = 1; r < locals; ++r)
    combine(out, static_cast<const std::byte*>(per_local) + r * element, 1, type, op);
  reduce_across_processes(out, 1, type, op);
}

void Strategy::reduce_across_processes(void* values, std::size_t count, DataType type, ReduceOp op) {
  Comm* c = replica_comm();
  if (c && c->size() > 1) {
    std::lock_guard lock(comm_mutex_);
    c->all_reduce(values, values, count, type, op == ReduceOp::avg ? ReduceOp::sum : op);
  }
  if (op == ReduceOp::avg) divide(values, count, type, num_replicas_in_sync());
}

void Strategy::broadcast_first_replica(void* data, std::size_t bytes) {
  Comm* c = replica_comm();
  if (!c || c->size() == 1 || bytes == 0) return;
  std::lock_guard lock(comm_mutex_);
  c->broadcast(data, data, bytes, DataType::u8, 0);
}

void Strategy::broadcast_from_chief(void* data, std::size_t bytes) {
  if (!comm_ || comm_->size() == 1 || bytes == 0) return;
  std::lock_guard lock(comm_mutex_);
  comm_->broadcast(data, data, bytes, DataType::u8, 0);
}

void Strategy::gather_values(const void* per_local, std::size_t locals, void* all, DataType type) {
  check_cross_replica("gather");
  if (locals != static_cast<std::size_t>(local_replicas_))
    throw InvalidArgument("gather: " + std::to_string(locals) + " values for " + std::to_string(local_replicas_) +
                          " local replicas (pass one per local replica)");
  Comm* c = replica_comm();
  if (c && c->size() > 1) {
    std::lock_guard lock(comm_mutex_);
    c->all_gather(per_local, all, locals, type);
  } else {
    std::memcpy(all, per_local, locals * size_of(type));
  }
}

DataShard Strategy::shard(const ShardOptions& options, const ReplicaContext& context) const {
  return DataShard(options, context.replica_id(), num_replicas_in_sync());
}

StepStats Strategy::last_step_stats() const { return buckets_->stats(); }

}  // namespace braid::mirrored
