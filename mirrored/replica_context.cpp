// Replica context: the collectives, variable updates and gradient steps that
// every replica calls in the same order. With several replicas per process
// each one enters the LocalGroup; the last to arrive combines the replicas'
// buffers in memory, runs the cross-process collective once, and hands every
// replica the result (the hierarchical scheme of MirroredStrategy over
// devices, with threads for devices).
#include <cstring>

#include "braid/mirrored.hpp"
#include "elementwise.hpp"
#include "gradient_buckets.hpp"
#include "local_group.hpp"

namespace braid::mirrored {

int ReplicaContext::replica_id() const { return strategy_->first_replica_id() + local_; }
int ReplicaContext::num_replicas_in_sync() const { return strategy_->num_replicas_in_sync(); }

void ReplicaContext::all_reduce(ReduceOp op, void* values, std::size_t count, DataType type) {
  strategy_->replica_all_reduce(*this, values, count, type, op);
}

void ReplicaContext::all_gather(const void* values, void* all, std::size_t count, DataType type) {
  struct Pair {
    const void* in;
    void* out;
  } mine{values, all};
  Strategy& s = *strategy_;
  s.group_->collective(local_, &mine, [&](std::span<void* const> pairs) {
    const std::size_t bytes = count * size_of(type);
    const std::size_t locals = pairs.size();
    std::vector<std::byte> packed(bytes * locals);
    for (std::size_t r = 0; r < locals; ++r)
      if (bytes) std::memcpy(packed.data() + r * bytes, static_cast<Pair*>(pairs[r])->in, bytes);
    auto* first = static_cast<std::byte*>(static_cast<Pair*>(pairs[0])->out);
    Comm* c = s.replica_comm();
    if (c && c->size() > 1) {
      std::lock_guard lock(s.comm_mutex_);
      c->all_gather(packed.data(), first, count * locals, type);
    } else if (bytes) {
      std::memcpy(first, packed.data(), packed.size());
    }
    const std::size_t total = bytes * static_cast<std::size_t>(s.num_replicas_in_sync());
    for (std::size_t r = 1; r < locals; ++r)
      if (total) std::memcpy(static_cast<Pair*>(pairs[r])->out, first, total);
  }, "all_gather");
}

void ReplicaContext::assign(const Variable& variable, const void* values, std::size_t count, DataType type) {
  strategy_->update_on_write(*this, variable, values, count, type, false);
}

void ReplicaContext::assign_add(const Variable& variable, const void* values, std::size_t count, DataType type) {
  strategy_->update_on_write(*this, variable, values, count, type, true);
}

void ReplicaContext::apply_gradients(Optimizer& optimizer) { strategy_->apply_gradients(*this, optimizer); }

// ---- Gradients ---------------------------------------------------------------------

std::span<std::byte> Gradients::bytes_of(const Variable& variable) {
  return strategy_->buckets_->gradient(local_, strategy_->owned(variable, "gradients"));
}

void Gradients::ready(const Variable& variable) {
  strategy_->buckets_->ready(local_, strategy_->owned(variable, "gradients().ready"),
                             [s = strategy_](void* data, std::size_t count, DataType type) {
                               return s->start_bucket_locked(data, count, type);
                             });
}

void Gradients::synchronize() { strategy_->synchronize_gradients(local_); }

void Gradients::zero() {
  strategy_->buckets_->zero(local_);
  // The step is over for every replica once all have zeroed: then ready()
  // and synchronize() belong to the next one.
  strategy_->group_->collective(local_, nullptr, [s = strategy_](std::span<void* const>) { s->buckets_->end_step(); },
                                "gradients().zero");
}

// ---- the strategy's replica-context machinery ------------------------------------------

std::optional<Work> Strategy::start_bucket_locked(void* data, std::size_t count, DataType type) {
  std::lock_guard lock(comm_mutex_);
  return start_bucket(data, count, type);
}

std::optional<Work> Strategy::start_bucket(void* data, std::size_t count, DataType type) {
  Comm* c = replica_comm();
  if (!c || c->size() == 1) return std::nullopt;
  return c->all_reduce_async(data, data, count, type, ReduceOp::sum);
}

void Strategy::synchronize_gradients(int local_replica) {
  auto start = [this](void* data, std::size_t count, DataType type) { return start_bucket_locked(data, count, type); };
  buckets_->ready_all(local_replica, start);
  group_->collective(local_replica, nullptr, [&](std::span<void* const>) { buckets_->finish(start, options_.timeout); },
                     "gradients().synchronize");
}

void Strategy::replica_all_reduce(const ReplicaContext& context, void* values, std::size_t count, DataType type,
                                  ReduceOp op) {
  group_->collective(context.local_replica(), values, [&](std::span<void* const> buffers) {
    void* first = buffers[0];
    for (std::size_t r = 1; r < buffers.size(); ++r) combine(first, buffers[r], count, type, op);
    reduce_across_processes(first, count, type, op);
    for (std::size_t r = 1; r < buffers.size(); ++r) std::memcpy(buffers[r], first, count * size_of(type));
  }, "all_reduce");
}

void Strategy::update_on_write(const ReplicaContext& context, const Variable& v, const void* values, std::size_t count,
                               DataType type, bool add) {
  const char* operation = add ? "assign_add" : "assign";
  Variable& variable = owned(v, operation);
  if (type != variable.type() || count != variable.count())
    throw InvalidArgument(std::string(operation) + ": variable '" + variable.name() + "' holds " +
                          std::to_string(variable.count()) + " x " + std::string(braid::name_of(variable.type())) +
                          ", the value is " + std::to_string(count) + " x " + std::string(braid::name_of(type)));
  auto mine = variable.replica_bytes(context.local_replica());
  auto apply = [&](const void* update) {
    if (add) combine(mine.data(), update, count, type, ReduceOp::sum);
    else if (count) std::memcpy(mine.data(), update, count * size_of(type));
  };
  if (variable.options().synchronization == Synchronization::on_read) {
    apply(values);  // each replica keeps its own copy
    return;
  }
  const Aggregation agg = variable.options().aggregation;
  if (agg == Aggregation::none)
    throw InvalidArgument(std::string(operation) + ": variable '" + variable.name() +
                          "' is on_write with aggregation none, so replicas cannot update it in replica context "
                          "(create it with aggregation sum, mean or only_first_replica, or assign in cross-replica "
                          "context)");
  std::vector<std::byte> update(static_cast<const std::byte*>(values),
                                static_cast<const std::byte*>(values) + count * size_of(type));
  if (agg == Aggregation::only_first_replica) {
    // Replica 0 of the chief decides: broadcast its value to everyone.
    group_->collective(context.local_replica(), update.data(), [&](std::span<void* const> buffers) {
      broadcast_first_replica(buffers[0], update.size());
      for (std::size_t r = 1; r < buffers.size(); ++r) std::memcpy(buffers[r], buffers[0], update.size());
    }, operation);
  } else {
    replica_all_reduce(context, update.data(), count, type, agg == Aggregation::mean ? ReduceOp::avg : ReduceOp::sum);
  }
  apply(update.data());
}

// The mirrored default: every replica applies the same aggregated gradient
// to its own copy, in the same order, so the copies stay bit-identical.
void Strategy::apply_gradients(ReplicaContext& context, Optimizer& optimizer) {
  context.gradients().synchronize();
  on_one_replica(context, [&] {
    create_slots(optimizer);
    ++optimizer_step_;
  });
  update_replica(context.local_replica(), optimizer, optimizer_step_);
  context.gradients().zero();
  step_applied_ = true;
}

void Strategy::update_replica(int local_replica, Optimizer& optimizer, std::int64_t step) {
  for (Variable* v : trainable_variables()) {
    std::vector<void*> slots;
    for (Variable* s : slots_of(*v, optimizer)) slots.push_back(s->replica_bytes(local_replica).data());
    optimizer.update(v->type(), v->replica_bytes(local_replica).data(), buckets_->gradient(local_replica, *v).data(),
                     slots, v->count(), step);
  }
}

}  // namespace braid::mirrored
