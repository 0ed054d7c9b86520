// braid::mirrored — model replicas kept in step the way TensorFlow's
// distribution strategies keep them, built only on braid's public API.
//
//   auto strategy = braid::mirrored::MultiWorkerMirrored::from_env();
//   braid::mirrored::MirroredVariable<float> w;
//   {
//     auto scope = strategy->scope();
//     w = strategy->create_variable<float>("dense/w", {16, 4}, initial);  // chief's value wins
//   }
//   braid::mirrored::Sgd sgd(0.1);
//   strategy->run([&](braid::mirrored::ReplicaContext& ctx) {
//     auto grad = ctx.gradients().of(w);      // this replica's gradient buffer
//     ...compute...; ctx.gradients().ready(w);  // its bucket may start all-reducing now
//     ctx.apply_gradients(sgd);               // aggregated over replicas, then applied everywhere
//   });
//
// Strategies: MultiWorkerMirrored (one replica per process), Mirrored
// (several replicas per process, one thread each, combined hierarchically),
// CentralStorage (variables updated on the chief and broadcast) and
// ParameterServer (asynchronous, bounded staleness, sharded variables). The
// Strategy base class documents what a strategy of your own overrides.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/braid.hpp"
#include "braid/mirrored/optimizer.hpp"
#include "braid/mirrored/sharding.hpp"
#include "braid/mirrored/variable.hpp"

namespace braid::mirrored {

class GradientBuckets;
struct CheckpointContents;

/// One replica's gradient buffers for the strategy's trainable variables. The
/// buffers are views into fused buckets: when every replica of this process
/// has marked all variables of a bucket ready, the bucket's all-reduce starts
/// in the background (with GradientOptions::overlap) while the replicas
/// compute the rest of the backward pass.
class Gradients {
 public:
  /// The gradient buffer of `variable` for this replica.
  std::span<std::byte> bytes_of(const Variable& variable);
  template <typename T>
  std::span<T> of(const MirroredVariable<T>& variable) {
    auto bytes = bytes_of(variable.variable());
    return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
  /// The gradient of `variable` is final for this step: do not write it again
  /// until the next step.
  void ready(const Variable& variable);
  template <typename T>
  void ready(const MirroredVariable<T>& variable) { ready(variable.variable()); }
  /// Marks every remaining gradient ready and waits until every bucket is
  /// aggregated over all replicas (GradientOptions::aggregation); the buffers
  /// then hold the aggregated gradients (CentralStorage: on the chief). Called
  /// by every replica; calling it again in the same step does nothing, and
  /// ready() after it is an error.
  void synchronize();
  /// Sets this replica's gradients to zero and ends the step (called by every
  /// replica; apply_gradients does it, as does the start of run()).
  void zero();

 private:
  friend class ReplicaContext;
  Gradients(Strategy* strategy, int local_replica) : strategy_(strategy), local_(local_replica) {}
  Strategy* strategy_;
  int local_;
};

/// The running replica's view, passed to the function given to Strategy::run.
/// Its collectives and updates must be called by every replica in the same
/// order (like every collective).
class ReplicaContext {
 public:
  /// This replica's id in [0, num_replicas_in_sync()): process rank x local replicas + local replica.
  int replica_id() const;
  int local_replica() const { return local_; }
  int num_replicas_in_sync() const;
  Strategy& strategy() const { return *strategy_; }

  /// values = op over all replicas of values (avg: the mean).
  void all_reduce(ReduceOp op, void* values, std::size_t count, DataType type);
  template <typename T>
  void all_reduce(ReduceOp op, std::span<T> values) { all_reduce(op, values.data(), values.size(), data_type_of<T>); }
  template <typename T>
  T all_reduce(ReduceOp op, T value) {
    all_reduce(op, &value, 1, data_type_of<T>);
    return value;
  }
  /// Every replica's values in replica-id order.
  template <typename T>
  std::vector<T> all_gather(std::span<const T> values) {
    std::vector<T> all(values.size() * static_cast<std::size_t>(num_replicas_in_sync()));
    all_gather(values.data(), all.data(), values.size(), data_type_of<T>);
    return all;
  }
  void all_gather(const void* values, void* all, std::size_t count, DataType type);

  /// Writes `values` to a variable from replica context. on_write: the
  /// replicas' values are combined by the variable's aggregation (none is an
  /// error) and every replica gets the result; on_read: this replica's copy.
  void assign(const Variable& variable, const void* values, std::size_t count, DataType type);
  /// variable += values, with the same rules as assign.
  void assign_add(const Variable& variable, const void* values, std::size_t count, DataType type);
  template <typename T>
  void assign(const MirroredVariable<T>& v, std::span<const T> values) {
    assign(v.variable(), values.data(), values.size(), data_type_of<T>);
  }
  template <typename T>
  void assign_add(const MirroredVariable<T>& v, std::span<const T> values) {
    assign_add(v.variable(), values.data(), values.size(), data_type_of<T>);
  }

  /// This replica's gradient buffers.
  Gradients& gradients() { return gradients_; }
  /// Synchronizes the gradients and applies `optimizer` as the strategy does
  /// (see each strategy), then starts the next step with zero gradients.
  void apply_gradients(Optimizer& optimizer);

 private:
  friend class Strategy;
  ReplicaContext(Strategy* strategy, int local_replica)
      : strategy_(strategy), local_(local_replica), gradients_(strategy, local_replica) {}
  Strategy* strategy_;
  int local_;
  Gradients gradients_;
};

template <typename T>
std::span<T> MirroredVariable<T>::value(const ReplicaContext& context) const {
  return value(context.local_replica());
}

/// How gradients are aggregated.
struct GradientOptions {
  /// Gradients are fused into buckets of about this many bytes (in reverse
  /// creation order, the order a backward pass produces them).
  std::size_t bucket_bytes = 25u << 20;
  /// Start a bucket's all-reduce as soon as it is ready (overlapping the rest
  /// of the backward pass), rather than all of them at synchronize().
  bool overlap = true;
  /// mean (divide by num_replicas_in_sync) or sum.
  Aggregation aggregation = Aggregation::mean;
  Compression compression = Compression::none;
};

/// Elastic training (docs/elastic.md): MultiWorkerMirrored in a job started
/// with BRAID_ELASTIC=1 (braid-run --elastic), trained with elastic_step().
struct ElasticOptions {
  bool enabled = false;
  /// Processes waiting to join are admitted (Comm::grow) every this many steps.
  int grow_every = 1;
};

/// What elastic_step() or recover() changed.
struct MembershipChange {
  int replicas_before = 0;  ///< 0 on a process that was admitted into a running job
  int replicas_after = 0;
  bool lost = false;      ///< replicas were lost: the survivors went on without them
  bool joined = false;    ///< processes joined (on the newcomer: it was admitted)
  /// Whether the step at the position given back is done (advance past it);
  /// false: run it (again).
  bool step_done = true;
  bool changed() const { return lost || joined; }
  /// "replicas 4 -> 3 (lost)", "replicas 0 -> 4 (joined: this process)",
  /// "" when nothing changed.
  std::string describe() const;
};

struct StrategyOptions {
  GradientOptions gradients;
  ElasticOptions elastic;
  /// Bound on every wait between the replicas of one process (those between
  /// processes are bounded by the communicator's timeout).
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

/// Where a training run stands; saved with a checkpoint.
struct TrainingPosition {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t batch_in_epoch = 0;
};

/// What restore() found.
struct RestoredCheckpoint {
  TrainingPosition position;
  int replicas_when_saved = 0;
  std::string model;
};

/// What inspect_checkpoint() found in a checkpoint file.
struct CheckpointInfo {
  TrainingPosition position;
  int replicas_when_saved = 0;
  std::string model;
  std::vector<std::string> variables;  ///< names, in the file's order (optimizer slots included)
};

/// Reads a checkpoint file that Strategy::save() wrote and checks it whole
/// (structure and checksum), without a strategy or any collective: to tell
/// whether a checkpoint is intact, and where it stands, before restoring it.
/// Throws braid::Error naming the path and what is wrong.
CheckpointInfo inspect_checkpoint(const std::string& path);

/// The result of verify_replicas().
struct ReplicaReport {
  struct Divergence {
    std::string variable;
    std::vector<int> replicas;  ///< replica ids whose value differs from the majority
    std::vector<int> ranks;     ///< their processes' ranks
  };
  std::vector<Divergence> divergences;
  std::size_t variables_checked = 0;
  bool consistent() const { return divergences.empty(); }
  /// "replicas consistent (12 variables)" or one line per diverged variable.
  std::string describe() const;
};

/// What the last apply_gradients of this process spent.
struct StepStats {
  double wait_seconds = 0;     ///< blocked in synchronize() waiting for communication
  std::size_t buckets = 0;
  std::size_t bytes = 0;       ///< gradient bytes on the wire per replica per step
};

/// The base of every strategy. A strategy owns its variables, runs the
/// replicas, and decides how replicas agree. To write your own, derive from
/// it and override the hooks below (the mirrored strategies use the
/// defaults): where gradients go (start_bucket), how they are applied
/// (apply_gradients), how a new variable gets its first value
/// (initialize_variable) and over which communicator replicas talk
/// (replica_comm).
class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  virtual std::string_view name() const = 0;
  /// Replicas over all processes that train in step.
  int num_replicas_in_sync() const;
  /// Replicas in this process (threads run by run()).
  int local_replicas() const { return local_replicas_; }
  /// Global id of this process's first replica.
  int first_replica_id() const;
  /// Rank 0 of the strategy's communicator: writes checkpoints, its initial values win.
  bool is_chief() const;
  /// The communicator of every process (null for a single-process Mirrored).
  Comm* comm() { return comm_ ? &*comm_ : nullptr; }
  /// Whether this process runs replicas (a parameter server does not).
  virtual bool runs_replicas() const { return true; }

  /// Variables may be created while a Scope lives (as under TensorFlow's strategy.scope()).
  class Scope {
   public:
    Scope(Scope&& other) noexcept : strategy_(other.strategy_) { other.strategy_ = nullptr; }
    Scope& operator=(Scope&&) = delete;
    ~Scope();

   private:
    friend class Strategy;
    explicit Scope(Strategy* strategy) : strategy_(strategy) {}
    Strategy* strategy_;
  };
  [[nodiscard]] Scope scope();

  /// Creates a variable on every replica (a collective: every process creates
  /// the same variables in the same order). Every process passes a value; the
  /// chief's wins. Throws InvalidArgument outside scope(), for a duplicate
  /// name, when `initial` does not hold the shape's elements, or when ranks
  /// disagree on name, type or shape (naming the ranks and both shapes).
  Variable& create_variable(std::string name, DataType type, Shape shape, std::span<const std::byte> initial,
                            VariableOptions options = {});
  template <typename T>
  MirroredVariable<T> create_variable(std::string name, Shape shape, std::span<const T> initial,
                                      VariableOptions options = {}) {
    return MirroredVariable<T>(create_variable(std::move(name), data_type_of<T>, std::move(shape),
                                               std::as_bytes(initial), options));
  }
  /// Every variable (including optimizer slots) in creation order.
  std::span<Variable* const> variables() const { return variable_list_; }
  /// The variable called `name`; throws InvalidArgument naming it if absent.
  Variable& variable(std::string_view name) const;

  /// Runs `fn` once per local replica (each on its own thread when there are
  /// several) and returns when all are done; rethrows the first failure.
  void run(const std::function<void(ReplicaContext&)>& fn);

  // ---- cross-replica context (outside run) --------------------------------
  /// The value as a cross-replica read sees it: on_write variables are the
  /// same everywhere; on_read ones are aggregated over every replica (a
  /// collective). Returns raw bytes of count() elements.
  std::vector<std::byte> read(const Variable& variable);
  template <typename T>
  std::vector<T> read(const MirroredVariable<T>& v) {
    auto bytes = read(v.variable());
    std::vector<T> out(v.count());
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  /// Sets every replica's copy (on_read sum variables: the first replica gets
  /// the value and the others zero, so that a read returns it).
  void assign(const Variable& variable, std::span<const std::byte> values);
  /// op over every replica of per_local_replica[local replica] (one value per
  /// local replica); a collective.
  template <typename T>
  T reduce(ReduceOp op, std::span<const T> per_local_replica) {
    T out{};
    reduce_values(op, per_local_replica.data(), per_local_replica.size(), &out, data_type_of<T>);
    return out;
  }
  template <typename T>
  T reduce(ReduceOp op, T value) { return reduce(op, std::span<const T>(&value, 1)); }
  /// Every replica's value in replica-id order, from one value per local replica; a collective.
  template <typename T>
  std::vector<T> gather(std::span<const T> per_local_replica) {
    std::vector<T> all(static_cast<std::size_t>(num_replicas_in_sync()));
    gather_values(per_local_replica.data(), per_local_replica.size(), all.data(), data_type_of<T>);
    return all;
  }

  /// A content hash of every mirrored variable of one local replica.
  std::uint64_t replica_hash(int local_replica = 0) const;
  /// Compares a hash of every mirrored variable across all replicas (a
  /// collective) and names the variables and replicas that diverged.
  virtual ReplicaReport verify_replicas();

  /// Writes every variable and optimizer slot to `path` on the chief, with a
  /// checksum (a collective; every rank learns whether it worked).
  virtual void save(const std::string& path, const TrainingPosition& position = {});
  /// Reads `path` on the chief, checks it against this model (names, types,
  /// shapes) and gives every replica the same values (a collective). The
  /// replica count may differ from the one that saved it.
  virtual RestoredCheckpoint restore(const std::string& path);

  /// Creates `optimizer`'s slots ("<variable>/<optimizer>/<slot>", zero) for
  /// every trainable variable, once; apply_gradients does it on first use.
  /// Call it before restore() so that a checkpoint's slots are restored too.
  void create_slots(const Optimizer& optimizer);

  // ---- elastic training (StrategyOptions::elastic) ---------------------------
  /// Runs one training step, as run(), in an elastic job. Before it, every
  /// grow_every steps, the processes waiting to join are admitted
  /// (Comm::grow); a process that joined takes the chief's variables,
  /// optimizer state and `position` at its first call. When a replica is
  /// lost during the step (an operation fails with PeerLost, Timeout or
  /// Aborted), the survivors go on without it (Comm::shrink_lost; the first
  /// rank left becomes the chief) and take the new chief's variables,
  /// optimizer state and position. Every member gets the same `position`
  /// back: advance past it when step_done, else run that step. The global
  /// batch stays what ShardOptions says: DataShard re-divides it over the
  /// replicas now in sync, so the loss follows the same course. Replica
  /// hashes stay identical among the members. MultiWorkerMirrored only.
  MembershipChange elastic_step(TrainingPosition& position, const std::function<void(ReplicaContext&)>& step);
  /// The same recovery after a cross-replica call of this strategy failed
  /// because a replica was lost (read, verify_replicas, save).
  MembershipChange recover(TrainingPosition& position);

  /// This replica's part of every global batch (see DataShard).
  DataShard shard(const ShardOptions& options, const ReplicaContext& context) const;
  /// The last apply_gradients' communication wait.
  StepStats last_step_stats() const;

 protected:
  Strategy(std::optional<Comm> comm, int local_replicas, StrategyOptions options);

  // ---- hooks ----------------------------------------------------------------
  /// The communicator over which replicas aggregate (a parameter server's
  /// workers use one without the servers). Default: comm().
  virtual Comm* replica_comm() { return comm(); }
  /// The trainable variables, in creation order.
  std::vector<Variable*> trainable_variables() const;
  /// Applies `optimizer` to every trainable variable's copy on `local_replica`
  /// from that replica's (aggregated) gradient.
  void update_replica(int local_replica, Optimizer& optimizer, std::int64_t step);
  /// Starts the cross-process aggregation of one fused bucket (already
  /// combined over the local replicas, in the wire type); the default
  /// all-reduces it (sum) over replica_comm().
  virtual std::optional<Work> start_bucket(void* data, std::size_t count, DataType type);
  /// Gives a new variable its first value on every local replica; the default
  /// broadcasts the chief's from rank 0 of comm().
  virtual void initialize_variable(Variable& variable, std::span<const std::byte> initial);
  /// Where optimizer slots live: with every replica (mirrored strategies),
  /// on the chief only (CentralStorage), or outside the strategy's variables
  /// (ParameterServer: on the servers, with the shards).
  enum class SlotPlacement { every_replica, chief, elsewhere };
  virtual SlotPlacement slot_placement() const { return SlotPlacement::every_replica; }
  /// Synchronizes gradients and applies the optimizer; the default (mirrored)
  /// updates every replica's copy from the same aggregated gradient, so they
  /// stay bit-identical. Called by every replica.
  virtual void apply_gradients(ReplicaContext& context, Optimizer& optimizer);
  /// The slots of `variable` for `optimizer`, in slot_names() order.
  std::vector<Variable*> slots_of(const Variable& variable, const Optimizer& optimizer) const;
  /// Runs fn on one thread while every local replica waits (it runs at once
  /// with one local replica). Called by every replica.
  void on_one_replica(const ReplicaContext& context, const std::function<void()>& fn);
  /// Gradients::synchronize for one replica: every bucket aggregated.
  void synchronize_gradients(int local_replica);
  GradientBuckets& buckets() const { return *buckets_; }
  const StrategyOptions& options() const { return options_; }
  std::int64_t& optimizer_step() { return optimizer_step_; }
  /// Every rank learns the chief's outcome of `operation`: when it failed,
  /// every rank throws an error with the chief's code and message.
  void broadcast_status(const std::string& failure, ErrorCode code, std::string_view operation);
  // The steps every strategy's save() and restore() share (checkpoint.cpp):
  /// A checkpoint's metadata for this strategy and `position`.
  CheckpointContents checkpoint_of(const TrainingPosition& position, int replicas) const;
  /// The chief writes `contents` (with its fingerprint); every rank learns how it went.
  void write_on_chief(const std::string& path, CheckpointContents& contents);
  /// The chief reads `path` and checks it with `check` (empty: it fits);
  /// every rank learns how it went. Only the chief's result holds entries.
  CheckpointContents read_on_chief(const std::string& path,
                                   const std::function<std::string(const CheckpointContents&)>& check);
  /// Every rank gets the chief's position and replica count; the optimizer's
  /// step continues from the checkpoint's.
  RestoredCheckpoint finish_restore(const CheckpointContents& contents);

 private:
  friend class ReplicaContext;
  friend class Gradients;
  class LocalGroup;
  void check_in_scope(std::string_view name) const;
  void check_cross_replica(std::string_view operation) const;
  /// Empty when `contents` fits this model, else what differs.
  std::string check_checkpoint(const std::string& path, const CheckpointContents& contents) const;
  /// The variable, after checking that this strategy owns it.
  Variable& owned(const Variable& variable, std::string_view operation) const;
  /// Starts a bucket's aggregation through start_bucket(), one caller at a time.
  std::optional<Work> start_bucket_locked(void* data, std::size_t count, DataType type);
  void check_same_everywhere(const std::string& name, DataType type, const Shape& shape);
  void reduce_values(ReduceOp op, const void* per_local, std::size_t locals, void* out, DataType type);
  void gather_values(const void* per_local, std::size_t locals, void* all, DataType type);
  // The hierarchical all-reduce under every replica-context collective:
  // combine the local replicas' buffers, all-reduce across processes, copy back.
  void replica_all_reduce(const ReplicaContext& context, void* values, std::size_t count, DataType type, ReduceOp op);
  void update_on_write(const ReplicaContext& context, const Variable& variable, const void* values, std::size_t count,
                       DataType type, bool add);
  /// `values`, already combined over this process's replicas, combined over
  /// every process with `op` (avg: the sum divided by num_replicas_in_sync()).
  void reduce_across_processes(void* values, std::size_t count, DataType type, ReduceOp op);
  /// Global replica 0's bytes to every process of replica_comm().
  void broadcast_first_replica(void* data, std::size_t bytes);
  /// The chief's bytes to every rank of comm().
  void broadcast_from_chief(void* data, std::size_t bytes);

  std::optional<Comm> comm_;
  int local_replicas_;
  StrategyOptions options_;
  std::unique_ptr<LocalGroup> group_;
  std::unique_ptr<GradientBuckets> buckets_;
  std::vector<std::unique_ptr<Variable>> variables_;
  std::vector<Variable*> variable_list_;
  std::map<std::string, Variable*, std::less<>> by_name_;
  int scopes_ = 0;
  bool running_ = false;
  std::int64_t optimizer_step_ = 0;
  mutable std::mutex comm_mutex_;
  // Elastic training (mirrored/elastic.cpp).
  bool joining_ = false;      // joined a running job: variables come from the chief at the first elastic_step
  // This step's apply_gradients finished here; every local replica's thread sets it.
  std::atomic<bool> step_applied_ = false;
  int steps_since_grow_ = 0;
  void check_elastic(std::string_view operation) const;
  /// Every member takes the chief's variables, optimizer step and position.
  bool resync(TrainingPosition& position);
  /// Goes on without the lost replicas and resyncs; fills in `change`
  /// (lost, step_done, replicas_after).
  void recover_from_loss(TrainingPosition& position, MembershipChange& change);

 protected:
  /// Serializes calls into the communicators from replica threads.
  std::mutex& comm_mutex() const { return comm_mutex_; }
};

}  // namespace braid::mirrored

#include "braid/mirrored/strategies.hpp"
