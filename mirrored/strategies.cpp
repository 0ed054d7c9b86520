// The synchronous strategies. MultiWorkerMirrored and Mirrored are the base
// class's defaults with one or several replicas per process; CentralStorage
// reduces gradients to the chief instead of all-reducing them, and only the
// chief applies the optimizer.
#include <cstring>

#include "braid/mirrored.hpp"
#include "gradient_buckets.hpp"

namespace braid::mirrored {

MultiWorkerMirrored::MultiWorkerMirrored(Comm comm, StrategyOptions options)
    : Strategy(std::move(comm), 1, options) {}

std::unique_ptr<MultiWorkerMirrored> MultiWorkerMirrored::from_env(StrategyOptions options) {
  return std::make_unique<MultiWorkerMirrored>(Comm::from_env(), options);
}

Mirrored::Mirrored(int local_replicas, StrategyOptions options) : Strategy(std::nullopt, local_replicas, options) {}

Mirrored::Mirrored(Comm comm, int local_replicas, StrategyOptions options)
    : Strategy(std::move(comm), local_replicas, options) {
  Comm& c = *this->comm();
  std::vector<std::int32_t> counts(static_cast<std::size_t>(c.size()));
  std::int32_t mine = local_replicas;
  c.all_gather(&mine, counts.data(), 1, DataType::i32);
  for (int r = 0; r < c.size(); ++r)
    if (counts[static_cast<std::size_t>(r)] != counts[0])
      throw InvalidArgument("rank " + std::to_string(c.rank()) + ": Mirrored: rank " + std::to_string(r) + " runs " +
                            std::to_string(counts[static_cast<std::size_t>(r)]) + " local replicas and rank 0 runs " +
                            std::to_string(counts[0]) + "; every process must run the same number");
}

CentralStorage::CentralStorage(Comm comm, StrategyOptions options) : Strategy(std::move(comm), 1, options) {}

std::optional<Work> CentralStorage::start_bucket(void* data, std::size_t count, DataType type) {
  Comm* c = comm();
  if (c->size() == 1) return std::nullopt;
  return c->reduce_async(data, data, count, type, ReduceOp::sum, 0);
}

void CentralStorage::apply_gradients(ReplicaContext& context, Optimizer& optimizer) {
  context.gradients().synchronize();  // the chief's buffers hold the aggregate
  create_slots(optimizer);
  const std::int64_t step = ++optimizer_step();
  if (is_chief()) update_replica(0, optimizer, step);
  const std::vector<Variable*> trainable = trainable_variables();
  Comm* c = comm();
  if (c->size() > 1) {
    std::vector<Work> sent;
    {
      std::lock_guard lock(comm_mutex());
      for (Variable* v : trainable)
        sent.push_back(c->broadcast_async(v->replica_bytes(0).data(), v->replica_bytes(0).data(), v->bytes(),
                                          DataType::u8, 0));
    }
    for (Work& w : sent) w.wait();
  }
  context.gradients().zero();
}

}  // namespace braid::mirrored
