// braid::mirrored — the strategies braid ships: MultiWorkerMirrored,
// Mirrored, CentralStorage and ParameterServer. Include braid/mirrored.hpp.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "braid/mirrored.hpp"

namespace braid::mirrored {

/// One replica per process, across hosts (TensorFlow's
/// MultiWorkerMirroredStrategy): gradients are all-reduced in fused buckets
/// and every replica applies the same update.
class MultiWorkerMirrored final : public Strategy {
 public:
  explicit MultiWorkerMirrored(Comm comm, StrategyOptions options = {});
  /// From braid-run's environment or TF_CONFIG (chief and workers).
  static std::unique_ptr<MultiWorkerMirrored> from_env(StrategyOptions options = {});
  std::string_view name() const override { return "MultiWorkerMirrored"; }
};

/// Several replicas in one process, one thread each (TensorFlow's
/// MirroredStrategy over local devices), optionally across processes too:
/// the local replicas are combined in memory first, then across processes
/// (hierarchical). Every process must run the same number of replicas.
class Mirrored final : public Strategy {
 public:
  /// Local replicas only (one process).
  explicit Mirrored(int local_replicas, StrategyOptions options = {});
  /// local_replicas per process, times comm.size() processes.
  Mirrored(Comm comm, int local_replicas, StrategyOptions options = {});
  std::string_view name() const override { return "Mirrored"; }
};

/// Variables live on the chief (TensorFlow's CentralStorageStrategy): every
/// replica computes gradients on its read copy, gradients are reduced to the
/// chief in buckets, the chief applies the optimizer (its slots exist only
/// there) and broadcasts the new values.
class CentralStorage final : public Strategy {
 public:
  explicit CentralStorage(Comm comm, StrategyOptions options = {});
  std::string_view name() const override { return "CentralStorage"; }

 protected:
  std::optional<Work> start_bucket(void* data, std::size_t count, DataType type) override;
  SlotPlacement slot_placement() const override { return SlotPlacement::chief; }
  void apply_gradients(ReplicaContext& context, Optimizer& optimizer) override;
};

struct ParameterServerOptions {
  /// Ranks that serve variables: the last `servers` ranks (TF_CONFIG's "ps" tasks when started from it).
  int servers = 1;
  /// A worker's update for step s waits until every worker has finished step
  /// s - staleness (stale-synchronous parallel); 0 is lockstep.
  int staleness = 2;
  /// Optimizer applied on the servers (required on every rank, same settings).
  std::shared_ptr<Optimizer> optimizer;
  StrategyOptions strategy;
};

/// Asynchronous training (TensorFlow's ParameterServerStrategy): variables
/// are sharded element-wise over the server ranks; workers push gradients
/// and pull values without a global barrier, each update bounded in
/// staleness. Every rank creates the variables; servers then call serve(),
/// workers train and call finish().
class ParameterServer final : public Strategy {
 public:
  ParameterServer(Comm comm, ParameterServerOptions options);
  static std::unique_ptr<ParameterServer> from_env(ParameterServerOptions options);
  ~ParameterServer() override;
  std::string_view name() const override { return "ParameterServer"; }
  bool runs_replicas() const override { return !is_server(); }
  bool is_server() const;
  /// Workers' count and this worker's index.
  int workers() const;
  /// Serves pulls and pushes until every worker called finish(). Servers only.
  void serve();
  /// Fetches the current values of every variable from the servers. Workers only.
  void pull();
  /// Waits for every worker, pulls the final values and tells the servers this
  /// worker is done. Workers only; a collective over the workers.
  void finish();
  /// The largest staleness a server accepted (servers; after serve()).
  int max_staleness_seen() const;
  /// Updates the servers applied (servers; after serve()).
  std::int64_t updates_applied() const;

  ReplicaReport verify_replicas() override;
  void save(const std::string& path, const TrainingPosition& position = {}) override;
  RestoredCheckpoint restore(const std::string& path) override;

 protected:
  Comm* replica_comm() override;
  void initialize_variable(Variable& variable, std::span<const std::byte> initial) override;
  SlotPlacement slot_placement() const override { return SlotPlacement::elsewhere; }
  /// Workers do not aggregate gradients with each other: each pushes its own.
  std::optional<Work> start_bucket(void*, std::size_t, DataType) override { return std::nullopt; }
  void apply_gradients(ReplicaContext& context, Optimizer& optimizer) override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::mirrored
