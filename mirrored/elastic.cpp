// Elastic training (docs/elastic.md): MultiWorkerMirrored goes on without a
// lost replica and takes in a process that joins, at step boundaries, over
// the communicator's shrink_lost and grow (comm/elastic.cpp). After either,
// every member takes the chief's variables, optimizer step and training
// position (resync), so replicas stay bit-identical: a survivor whose step
// failed half-way, or a newcomer, holds exactly what the chief holds.
#include <cstring>

#include "braid/mirrored.hpp"
#include "content_hash.hpp"
#include "gradient_buckets.hpp"

namespace braid::mirrored {
namespace {

bool membership_lost(const Error& e) {
  return e.code() == ErrorCode::peer_lost || e.code() == ErrorCode::timeout || e.code() == ErrorCode::aborted;
}

}  // namespace

std::string MembershipChange::describe() const {
  if (!changed()) return {};
  if (replicas_before == 0) return "replicas 0 -> " + std::to_string(replicas_after) + " (joined: this process)";
  return "replicas " + std::to_string(replicas_before) + " -> " + std::to_string(replicas_after) + " (" +
         (lost && joined ? "lost and joined" : lost ? "lost" : "joined") + ")";
}

void Strategy::check_elastic(std::string_view operation) const {
  if (!options_.elastic.enabled || !comm_)
    throw InvalidArgument(std::string(name()) + "::" + std::string(operation) +
                          ": the strategy is not elastic (StrategyOptions::elastic.enabled, with a communicator)");
  if (local_replicas_ != 1 || slot_placement() != SlotPlacement::every_replica)
    throw InvalidArgument(std::string(name()) + "::" + std::string(operation) +
                          ": elastic training is for MultiWorkerMirrored (one replica per process, every replica "
                          "holding the optimizer's slots)");
  check_cross_replica(operation);
}

bool Strategy::resync(TrainingPosition& position) {
  // What the chief holds: its position, whether its step was applied, and a
  // fingerprint of its variables' names, so that a process of another model
  // says so instead of reading the wrong bytes.
  struct Header {
    std::int64_t optimizer_step, step, epoch, batch_in_epoch, variables, step_applied;
    std::uint64_t names;
  } header{};
  std::uint64_t names = 0;
  for (const Variable* v : variable_list_)
    names = names * 1099511628211ull ^ content_hash(std::as_bytes(std::span(v->name().data(), v->name().size())));
  if (is_chief())
    header = Header{optimizer_step_, position.step, position.epoch, position.batch_in_epoch,
                    static_cast<std::int64_t>(variable_list_.size()), step_applied_ ? 1 : 0, names};
  broadcast_from_chief(&header, sizeof header);
  if (header.variables != static_cast<std::int64_t>(variable_list_.size()) || header.names != names)
    throw InvalidArgument("rank " + std::to_string(comm_->rank()) + ": elastic: the chief's model has " +
                          std::to_string(header.variables) + " variables and this process's " +
                          std::to_string(variable_list_.size()) + (header.names != names ? ", named otherwise" : "") +
                          ": every process must build the same model (and create the optimizer's slots) before "
                          "its first elastic_step");
  // Variables written in step (on_write: weights, slots) come from the
  // chief; on_read ones (metrics) are each replica's own.
  for (Variable* v : variable_list_) {
    if (v->options().synchronization != Synchronization::on_write) continue;
    auto bytes = v->replica_bytes(0);
    broadcast_from_chief(bytes.data(), bytes.size());
  }
  optimizer_step_ = header.optimizer_step;
  position = TrainingPosition{.step = header.step, .epoch = header.epoch, .batch_in_epoch = header.batch_in_epoch};
  return header.step_applied != 0;
}

void Strategy::recover_from_loss(TrainingPosition& position, MembershipChange& change) {
  change.lost = true;
  {
    std::lock_guard lock(comm_mutex_);
    comm_ = comm_->shrink_lost(Comm::Shrink::abort);
  }
  buckets_->abandon_step();
  change.step_done = resync(position);
  change.replicas_after = num_replicas_in_sync();
}

MembershipChange Strategy::recover(TrainingPosition& position) {
  check_elastic("recover");
  step_applied_ = false;
  MembershipChange change{.replicas_before = num_replicas_in_sync()};
  recover_from_loss(position, change);
  return change;
}

MembershipChange Strategy::elastic_step(TrainingPosition& position,
                                        const std::function<void(ReplicaContext&)>& step) {
  check_elastic("elastic_step");
  MembershipChange change;
  change.replicas_before = num_replicas_in_sync();
  step_applied_ = false;
  try {
    if (joining_) {
      // Admitted into a running job: the chief's state first.
      resync(position);
      joining_ = false;
      change.joined = true;
      change.replicas_before = 0;  // this process was in no group before
    } else if (++steps_since_grow_ >= options_.elastic.grow_every) {
      steps_since_grow_ = 0;
      Comm grown;
      {
        std::lock_guard lock(comm_mutex_);
        grown = comm_->grow();
      }
      if (grown.valid()) {
        comm_ = std::move(grown);
        resync(position);
        change.joined = true;
      }
    }
    run(step);
  } catch (const Error& e) {
    if (!membership_lost(e)) throw;
    recover_from_loss(position, change);
    return change;
  }
  change.replicas_after = num_replicas_in_sync();
  change.step_done = true;
  return change;
}

}  // namespace braid::mirrored
