// CommImpl: one communicator, a view over the process's Runtime
// (runtime.hpp): its ranks, its plan, one Link per connected peer (made
// through the transport context the plan chose for that pair, shared with
// every other communicator of the process), its matching state and its
// queue of operations, which the runtime's Engine drives (engine.hpp:
// operations of one communicator run one at a time, in the order they were
// submitted, so every rank posts messages on a link in the same order).
//
// Its life (docs/architecture.md): made by a rendezvous through a store, or
// split from a parent, it enrolls with every context before its address is
// published, so that no peer finds it unknown; its ring neighbours are
// connected at once, the other links when an operation first needs them
// (never waiting for the peer's engine). finalize() finishes what is
// queued, says goodbye on every link (a peer does not take that for a
// failure) and hands the links to their contexts, which keep what a peer
// may still read; a failure or abort() fails this communicator alone, never
// its parent or its split children.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "braid/braid.hpp"
#include "comm/engine.hpp"
#include "comm/failure.hpp"
#include "collectives/algorithms.hpp"
#include "collectives/executor.hpp"
#include "collectives/schedule.hpp"
#include "core/rank_info.hpp"
#include "core/settings.hpp"
#include "core/spin.hpp"
#include "flight_recorder.hpp"
#include "op_stats.hpp"
#include "trace_file.hpp"
#include "rendezvous.hpp"
#include "topology/plan.hpp"
#include "comm/runtime.hpp"
#include "comm/store_host.hpp"
#include "transport/registry.hpp"

namespace braid {

/// What every operation of one shape shares: its validated schedule, its
/// name for messages, the peers it talks to, and an executor, restarted for
/// each of them (operations run one at a time). The communicator keeps the
/// plans of recent shapes (plan cache), so a repeated small collective builds
/// nothing.
struct OpPlan {
  /// Identifies a shape: the descriptor (kind, type, operator, root, count,
  /// algorithm), the peer and direction of a point-to-point step, and the
  /// caller's buffer sizes (which differ between the root and the others).
  struct Key {
    OpDescriptor descriptor;
    std::int32_t peer = -1;
    bool sends = false;
    std::size_t input_bytes = 0;
    std::size_t output_bytes = 0;
    // Device buffers moved over the links themselves (make_op decides): the
    // schedule is built for that (CommImpl::shape), and they are never staged.
    bool device_direct = false;
    bool operator==(const Key&) const = default;
  };
  Key key;
  Schedule schedule;
  std::shared_ptr<const std::string> what;  // "all_reduce(f32 sum, 1024 elements)", for messages
  std::vector<int> peers;
  std::unique_ptr<Executor> executor;  // made by the first operation that runs
  std::vector<StepTag> step_tags;      // a group's: each step's own tag (Executor::set_step_tags)
  OpStatsTable::Row* stats_row = nullptr;         // its row of the communicator's statistics, once it finished
  std::size_t stats_bytes = 0;                    // its size there (count x element size)
  std::shared_ptr<const std::string> trace_args;  // its JSON in the trace, once traced (CommImpl::trace_args)
  bool traced = false;  // TraceFile holds it until its next flush (it has records of it)
};

/// One queued collective or point-to-point operation.
class Operation {
 public:
  std::shared_ptr<OpPlan> plan;
  const std::string& what() const { return *plan->what; }
  Buffers buffers;
  // Device buffers over links that take host memory only run on a pinned
  // host copy (stage_in/stage_out); these say which of the caller's buffers
  // are on a device.
  bool device_input = false;
  bool device_output = false;
  bool staged = false;         // running on the communicator's staging copy
  Buffers run_buffers;         // what the executor runs on (buffers, or the staging copy)
  std::uint32_t sequence = 0;  // the high half of every tag
  bool background = false;     // started with *_async
  bool recorded = false;       // run() put it in the flight recorder as started
  std::uint64_t record = 0;    // its entry in the flight recorder
  CommImpl* comm = nullptr;    // valid while not done

  // Written under the engine's mutex; `done` is also read without it (a Work
  // outliving its communicator), and `error` is final once done.
  std::atomic<bool> done{false};
  Failure error;

  /// Work::then's callbacks: run once, by whoever completes the operation
  /// (after `done` is set), or at once by then() when it is done already.
  void add_callback(std::function<void(std::exception_ptr)> callback);
  void run_callbacks();
  /// Back to a fresh operation, for make_op to reuse: only for one that
  /// CommImpl::run finished unqueued (so no other thread ever saw it) and
  /// that nobody holds any more.
  void clear();
  bool has_callbacks() const { return has_callbacks_.load(std::memory_order_relaxed); }

  // Touched only by the driving thread.
  Executor* executor = nullptr;  // the plan's, while this operation runs
  Clock::time_point started;  // its first pass that found nothing to do (drive), zero until then
  Deadline deadline = Deadline::never();
  unsigned connect_skips = 0;  // passes since its links were last asked for (it waits for a peer to connect)
  std::int64_t begin_tick = 0;   // start_op's ticks(), for the statistics and the trace
  std::int64_t queued_tick = 0;  // when it was queued, while tracing (0: it never waited in the queue)

 private:
  std::mutex callbacks_mutex_;
  std::vector<std::function<void(std::exception_ptr)>> callbacks_;
  std::atomic<bool> has_callbacks_{false};
};

class Runtime;

class CommImpl {
 public:
  /// Publishes this rank through the store, waits for all others (naming any
  /// that never come), plans, and connects the ring neighbours.
  static std::unique_ptr<CommImpl> create(Rendezvous rendezvous, int rank, int size, Settings settings);
  /// finalize(), errors logged.
  ~CommImpl();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  /// Made by join_job: this process joined an elastic job that was running.
  bool joined_running_job() const { return joined_running_job_; }
  std::string describe() const;

  std::shared_ptr<Operation> all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  std::shared_ptr<Operation> broadcast(const void* send, void* recv, std::size_t count, DataType type, int root);
  std::shared_ptr<Operation> reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root);
  std::shared_ptr<Operation> all_gather(const void* send, void* recv, std::size_t count, DataType type);
  std::shared_ptr<Operation> reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  std::shared_ptr<Operation> all_to_all(const void* send, void* recv, std::size_t count, DataType type);
  std::shared_ptr<Operation> gather(const void* send, void* recv, std::size_t count, DataType type, int root);
  std::shared_ptr<Operation> scatter(const void* send, void* recv, std::size_t count, DataType type, int root);
  std::shared_ptr<Operation> send(const void* buffer, std::size_t count, DataType type, int peer);
  std::shared_ptr<Operation> recv(void* buffer, std::size_t count, DataType type, int peer);
  std::shared_ptr<Operation> barrier();
  // The uneven collectives (comm_uneven.cpp); empty displacements: blocks packed in rank order.
  std::shared_ptr<Operation> all_to_allv(const void* send, std::span<const std::size_t> send_counts,
                                         std::span<const std::size_t> send_displs, void* recv,
                                         std::span<const std::size_t> recv_counts,
                                         std::span<const std::size_t> recv_displs, DataType type);
  std::shared_ptr<Operation> all_gatherv(const void* send, std::size_t send_count, void* recv,
                                         std::span<const std::size_t> recv_counts,
                                         std::span<const std::size_t> recv_displs, DataType type);
  std::shared_ptr<Operation> reduce_scatterv(const void* send, void* recv, std::span<const std::size_t> recv_counts,
                                             DataType type, ReduceOp op);
  std::shared_ptr<Operation> gatherv(const void* send, std::size_t send_count, void* recv,
                                     std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                                     DataType type, int root);
  std::shared_ptr<Operation> scatterv(const void* send, std::span<const std::size_t> send_counts,
                                      std::span<const std::size_t> send_displs, void* recv, std::size_t recv_count,
                                      DataType type, int root);
  /// Makes `shell` one operation running the sends and receives `members`
  /// (made by send() and recv(), never submitted) concurrently, each with its
  /// own tag (group.cpp). Throws InvalidArgument when a receive overlaps
  /// another call's buffer.
  void fuse(Operation& shell, std::span<const std::shared_ptr<Operation>> members);
  /// Gives back the point-to-point numbers `members` took (made, never
  /// issued: a group whose call failed its checks), so the next sends and
  /// receives match the peers' again.
  void unnumber(std::span<const std::shared_ptr<Operation>> members);
  /// The same for the last `count` collectives made and never issued.
  void unnumber_collectives(std::size_t count);

  /// Queues `op`; a background op gets the engine's progress thread going.
  void submit(const std::shared_ptr<Operation>& op, bool background);
  /// Drives or waits until `op` is done or `until` passes; true when done.
  /// Throws the operation's error.
  bool wait(const std::shared_ptr<Operation>& op, Deadline until);
  /// One non-blocking pass; true when done. Throws the operation's error.
  bool test(const std::shared_ptr<Operation>& op);
  /// A blocking call (Engine::run): at once on this thread when the engine
  /// is idle, without queueing or recording `op` unless it must wait.
  void run(std::shared_ptr<Operation> op);

  /// Waits until every queued operation is done; throws the last one's
  /// error (an earlier failure fails every later operation).
  void flush();
  std::unique_ptr<CommImpl> split(int color, int key);
  /// A communicator of this one's ranks less `excluded` (Comm::shrink): no
  /// exchange with the others, so it works after a rank died; every member
  /// passes the same list and derives the same child. `abort_parent` aborts
  /// this one first, else what is queued here finishes first (errors stay
  /// with those operations).
  std::unique_ptr<CommImpl> shrink(std::span<const int> excluded, bool abort_parent);
  /// Before a shrink: aborts this communicator, or finishes what is queued
  /// (its errors stay with its operations).
  void settle_before_shrink(bool abort_parent);
  // Elastic membership (comm/elastic.cpp, docs/elastic.md).
  /// Comm::shrink_lost: the members that come forward agree through the
  /// store which ranks are gone, then shrink() without them.
  std::unique_ptr<CommImpl> shrink_lost(bool abort_parent);
  /// Before shrink_lost agrees: the store in use when it answers, else the
  /// next of BRAID_STORE_STANDBY that does, which this communicator uses
  /// from then on. True when it moved; PeerLost when none answers.
  bool reach_live_store();
  /// Comm::grow: admits the processes waiting in Comm::join (null when none).
  std::unique_ptr<CommImpl> grow();
  /// Comm::join: waits at the store until a grow admits this process.
  static std::unique_ptr<CommImpl> join_job(Rendezvous rendezvous, Settings settings);
  /// Finishes what is queued (each operation bounded by the timeout), says
  /// goodbye to every peer and lets the links go to their contexts (which
  /// keep, bounded, what a peer may still read). Later calls fail saying the
  /// communicator was finalized. Idempotent; throws the error of a queued
  /// operation that failed (after finalizing anyway).
  void finalize();
  bool finalized() const { return finalized_.load(std::memory_order_acquire); }
  /// The flight recorder's text: recent operations and who waits on whom.
  std::string dump_state() const { return recorder_.dump(); }
  /// The statistics of the operations completed so far (op_stats.hpp).
  std::vector<OpStats> stats() const;
  /// The error that made this communicator unusable, if any.
  std::exception_ptr async_error() const;
  /// Fails every queued and later operation here and tells the peers; safe
  /// from any thread, and returns within milliseconds.
  void abort();
  /// Throws InvalidArgument when the communicator was finalized (or the
  /// runtime cannot run here: a forked child): every entry point calls it.
  void check_open() const {
    Runtime::check_usable();
    if (finalized_.load(std::memory_order_relaxed)) [[unlikely]] throw_finalized();
  }

 private:
  friend class Engine;
  friend class Runtime;
  CommImpl(int rank, int size, Settings settings);
  [[noreturn]] void throw_finalized() const;
  void join(Rendezvous rendezvous);
  /// Waits until every rank has set braid/<what>/<rank> in the store. At the
  /// deadline it names the missing ranks and publishes that, so ranks still
  /// waiting fail with the same reason; a reason published by another rank
  /// ends the wait at once. Polls in short slices to notice either.
  void wait_for_ranks(Store& store, std::string_view what, Deadline deadline);
  /// The loop under wait_for_ranks: waits for `keys`, failing at once on a
  /// start-up failure any rank published or (for rank keys) a refusal of a
  /// missing rank; at the deadline publishes and throws late(missing indices).
  void wait_for_keys(Store& store, const std::vector<std::string>& keys, Deadline deadline,
                     const std::function<std::string(const std::vector<int>&)>& late);
  /// Claims this rank's number in the store; a second claimant fails every
  /// member at once (two jobs at one address, a restarted rank).
  void claim_rank(Store& store);
  /// Publishes why start-up failed (with its error code) where every waiting
  /// rank reads it, and throws it here.
  [[noreturn]] void fail_join(Store& store, ErrorCode code, const std::string& why);
  /// Throws the start-up failure another rank published, if there is one.
  void check_join_failure(Store& store);
  /// <job scope><what>/<rank>: the store keys of start-up.
  std::string rank_key(std::string_view what, int rank) const;
  /// Where a rank that gives up publishes why, for peers not connected to it.
  std::string failure_key(int rank) const;
  /// Throws PeerLost when `peer` published a failure.
  void check_peer_failure(int peer);
  /// `peer`'s published failure, if the store has one (nothing when the
  /// store is busy or gone).
  std::optional<std::string> peer_failure_notice(int peer);
  /// A link lost to a peer that gave up and closed before its notice was
  /// read on the link (it exited at once, and a reset drops what this side
  /// had not read): the failure names the cause the peer published in the
  /// store for `op`'s peers, so it still leads to the rank that failed first.
  Failure with_peer_notice(Failure failure, const Operation& op);
  /// Publishes this rank's failure for the peers it has no link to, and
  /// withdraws from the contexts, so a rank that dials learns at once.
  void announce_failure(const std::string& why);
  static constexpr Millis kJoinPoll{200};
  // How often a rank waiting for the others at start-up says so at INFO.
  static constexpr std::chrono::seconds kJoinProgress{5};
  /// How long abort() waits for the engine to fail this communicator.
  static constexpr Millis kAbortWait{200};
  /// While connecting: how often the store is asked about the peer, and the
  /// bound on each question (and on publishing a failure).
  static constexpr Millis kFailureLook{50};
  /// An operation waiting for a peer to connect asks its contexts again
  /// every this many idle passes while the engine spins (each time it wakes).
  static constexpr unsigned kConnectEvery = 64;
  /// Ranks sharing a GPU: the smallest collective moved GPU to GPU is this
  /// times (ranks per GPU) squared; below it staging through host memory won
  /// (H200, 2 ranks: 1.5 against 2.8 GB/s at 1 MiB, 5.2 against 3.4 at 4 MiB;
  /// 4 ranks: 0.95 against 3.0 at 4 MiB, 3.7 against 2.6 at 16 MiB).
  static constexpr std::size_t kSharedGpuDirectUnit = 1024 * 1024;
  static constexpr Millis kJoinFailureGrace{1000};
  /// Every transport's address, by kind (index of kinds_) and rank.
  using Addresses = std::vector<std::vector<std::vector<std::byte>>>;
  /// The runtime's contexts of kinds_, enrolling this communicator (whose
  /// rank may be -1 yet: a split child being counted) with each.
  void enroll();
  /// A child (split, shrink) not enrolled yet: its id a keyed hash of this
  /// one's and `derivation` (what the members agree on), its contexts this one's.
  std::unique_ptr<CommImpl> new_child(std::span<const std::byte> derivation) const;
  /// A child of this communicator (split, shrink) whose members are these
  /// ranks here, in its rank order: its ranks, infos and addresses from
  /// this one's, the store shared; enrolls it and starts it.
  void adopt_members(CommImpl& child, const std::vector<int>& members, std::string name);
  /// BRAID_TRACE: opens the process's trace file (the first communicator)
  /// and adds this communicator's track.
  void open_trace();
  /// Measures, through the store, the offset from this rank's clock to rank
  /// 0's (for the trace): every rank takes part, rank 0 answering each
  /// in turn. `shares_clock`: this rank runs on rank 0's kernel.
  void measure_clock_offset(Store& store, bool shares_clock);
  /// A finished operation's row of statistics and its trace record.
  void account(Operation& op, std::int64_t end_tick);
  /// The operation's arguments in the trace (collective, size, type,
  /// algorithm, transports), formatted once per plan.
  const std::shared_ptr<const std::string>& trace_args(OpPlan& plan) const;
  /// Everything after the addresses are known: plan (`plan` when given, from
  /// a topology file; else made from `infos`), spin policy, ring links.
  void start(std::vector<RankInfo> infos, Addresses addresses, std::optional<Plan> plan = std::nullopt);
  /// Makes what links to `peers` it can now (never waiting for a peer's
  /// engine); true once each has one. `starting`: the operation that needs
  /// them, whose mismatch with a message a linked peer already sent ends
  /// the wait (check_arrived).
  bool connect_peers(const std::vector<int>& peers, const Operation* starting = nullptr);
  /// The checks an operation waiting for a peer to connect makes while it
  /// waits (an abort, a linked peer that gave up or runs another operation,
  /// a failure the peer published); throws to end the wait.
  void watch_connecting(int peer, bool urgent, const Operation* starting);
  /// Throws ProtocolMismatch, naming both collectives, if a linked peer's
  /// waiting message belongs to `op`'s sequence number but another
  /// collective: that peer will never make the link `op` waits for (its
  /// operation does not need it), so the wait would end only at the timeout.
  void check_arrived(const Operation& op);
  /// The index in kinds_ of the transport the plan picks for ranks a and b.
  int kind_between(int a, int b) const;
  /// "shm (8 x 256 KiB slots per direction) between all ranks", or per kind
  /// the pairs it connects ("shm: 0-1 2-3; tcp: 0-2 0-3 1-2 1-3").
  std::string describe_transports() const;

  /// An operation of the plan for `key` (from the plan cache, or made with
  /// build() and describe() and validated); the key's descriptor names the
  /// algorithm build() uses, and its buffer sizes are taken from `buffers`.
  /// Without `cache` the plan is built for this operation only (shapes the
  /// key cannot tell apart: the uneven collectives, groups).
  template <typename Build, typename Describe>
  std::shared_ptr<Operation> make_op(OpPlan::Key key, Buffers buffers, std::uint32_t sequence, Build&& build,
                                     Describe&& describe, bool cache = true);
  /// The descriptor of a collective whose schedule comes from `algorithm`.
  static OpDescriptor descriptor_of(OpDescriptor::Kind kind, DataType type, ReduceOp op, int root, std::size_t count,
                                    std::string_view algorithm);
  /// A one-step send or receive, tagged apart from collectives by a per-peer count.
  std::shared_ptr<Operation> point_to_point(StepKind kind, int peer, Buffers buffers, DataType type, std::size_t count);
  /// Plans of recent shapes, most recently used first.
  static constexpr std::size_t kPlanCache = 16;
  std::vector<std::shared_ptr<OpPlan>> plans_;
  /// The last blocking operation that run() finished unqueued and without
  /// error: the next make_op reuses it once its caller has let it go, so a
  /// repeated small collective allocates nothing. Touched, as plans_, only by
  /// the thread that issues operations (run() and make_op, never the
  /// engine), and only handed out while use_count() is 1: every other holder
  /// (a queue, a group, a Work) would have made it queued, which run() never
  /// keeps.
  std::shared_ptr<Operation> spare_op_;
  CollectiveShape shape(std::size_t count, DataType type, ReduceOp op, int root) const;
  std::string_view algorithm_for(std::string_view collective, std::size_t bytes) const;
  void check_buffer(const void* p, std::size_t count, std::string_view op, std::string_view which) const {
    if (count > 0 && p == nullptr) [[unlikely]] null_buffer(count, op, which);
  }
  [[noreturn]] void null_buffer(std::size_t count, std::string_view op, std::string_view which) const;
  /// What all_reduce derived from its last (count, type, operator): the
  /// checked size, the plan's algorithm and the descriptor naming it. A call
  /// of the same shape (the common case: a training loop's small all-reduce)
  /// takes them from here instead of checking and looking them up again.
  struct RecentShape {
    bool valid = false;
    std::size_t count = 0;
    DataType type{};
    ReduceOp op{};
    std::size_t bytes = 0;
    std::string_view algorithm;
    OpDescriptor descriptor;
  };
  RecentShape recent_all_reduce_;
  void check_root(int root, std::string_view op) const;
  /// Runs `checks` of what only the root reads. On the root a failure also
  /// fails this communicator (refuse()), since its peers would otherwise wait
  /// for the root until their timeout: every rank refuses, or none does.
  template <typename Checks>
  void checks_at_root(int root, Checks&& checks) {
    if (rank_ != root) return;
    try {
      checks();
    } catch (const InvalidArgument& e) {
      refuse(Failure::of(e));
      throw;
    }
  }
  /// Fails this communicator with `error` and tells every peer why (as
  /// abort(), within milliseconds, from any thread).
  void refuse(Failure error);
  std::size_t checked_bytes(std::size_t count, DataType type, std::size_t blocks, std::string_view op) const;
  /// The bytes of `counts` at `displs` (elements, by rank; empty displs: packed
  /// in rank order), checked: one entry per rank, no overflow, and for an
  /// output no two blocks overlapping. `what` is "send" or "recv".
  BlockLayout layout_of(std::string_view op, std::string_view what, std::span<const std::size_t> counts,
                        std::span<const std::size_t> displs, DataType type, bool output) const;

  // Progress (comm_progress.cpp), called by the Engine's driving thread.
  enum class StepResult { idle, moved, finished, failed };
  /// One pass on `op`: the head of the queue, or (`unqueued`) a blocking
  /// call's operation not queued yet. Starts it once its links exist,
  /// advances its executor, and completes it when done (with `release`,
  /// letting the engine's driver role go in the same lock). A failure fails
  /// this communicator's queue (`op` joins it first when unqueued).
  StepResult step(Operation& op, const std::shared_ptr<Operation>* unqueued, bool release);
  /// The head of the queue (looked up under the lock only when it changed).
  Operation* queued_head();
  /// Starts the clock of an operation that found nothing to do.
  void note_idle(Operation& op, Clock::time_point now);
  /// "; rank 2 (vm, pid 811) is stopped ..." for each rank of this host whose
  /// process is stopped, for a timeout's message; empty when none is.
  std::string stopped_ranks() const;
  void note_idle(Clock::time_point now) {
    if (Operation* head = queued_head()) note_idle(*head, now);
  }
  /// Before the engine sleeps: the head's receives posted (so news wakes
  /// it), its timeout and its peers' health looked at (failing the queue
  /// when one is up). Returns when the head wants to be looked at again.
  Clock::time_point before_sleep(Clock::time_point now);
  /// An operation run unqueued that must wait (or failed): puts it at the
  /// head of the queue and in the flight recorder, as if run() had queued it.
  void enqueue_running(const std::shared_ptr<Operation>& op);
  /// Under the engine's mutex: records and queues `op`, or fails it at once
  /// (false) on a communicator that is unusable after an earlier error.
  bool accept_locked(const std::shared_ptr<Operation>& op);
  bool usable_locked() const { return broken_.empty(); }
  const SpinPolicy& spin_policy() const { return policy_; }
  /// Starts `op` once its peers are linked: false while it waits for one.
  bool start_op(Operation& op);
  /// Completes `op`, done (error null) or failed: bookkeeping under the lock,
  /// callbacks outside it.
  void finish(Operation& op, bool unqueued, bool release);
  /// For an operation on device buffers whose links take host memory only:
  /// copies the device input into pinned staging and returns the buffers to
  /// run on; stage_out copies the output back once it is done.
  Buffers stage_in(Operation& op);
  void stage_out(Operation& op);
  void fail_queue(Failure error);
  /// An operation that only carries abort()'s request to the engine, and its plan.
  std::shared_ptr<Operation> abort_marker();
  static const std::shared_ptr<OpPlan>& abort_plan();

  Settings settings_;
  Runtime& runtime_;
  Engine& engine_;
  int rank_;
  int size_;
  SpinPolicy policy_;
  bool oversubscribed_ = false; // more ranks on this kernel than cores
  bool device_links_ = false;    // every pair's link moves device memory (cuda_ipc)
  std::size_t device_direct_min_ = 0;  // device_links_: smaller collectives are staged (BRAID_DEVICE_DIRECT_BYTES)
  bool shaping_direct_ = false;  // make_op is building a schedule for device buffers moved directly
  std::size_t slice_floor_ = 0;  // the largest TransportContext::min_slice_bytes() of the pairs' transports
  int local_rank_ = 0;          // among the ranks of this host (host_id), in rank order
  int local_size_ = 1;
  static constexpr std::chrono::microseconds kOversubscribedYield{1000};
  std::shared_ptr<TcpStoreServer> store_server_;  // on the rank that hosts the store, while it joins
  std::shared_ptr<StoreHost> hosted_;             // that store, shared with split children (store_host.hpp)
  bool root_ = false;                             // joined through the store (not split): says "left" there
  std::shared_ptr<Store> store_;                  // kept for failure notices (shared with split children)
  std::string scope_;                             // the job's key prefix
  std::string job_scope_;  // the job's keys (scope_ of the first communicator; a grown one's scope_ is below it)
  int store_host_ = -1;                           // the rank whose process hosts the store, if one does
  bool store_lost_ = false;                       // the store stopped answering (touched by the driver only)
  std::string store_name_;
  std::string store_addr_;  // the store's address as the job names it (store_name_ may add which child)
  CommId comm_id_;
  SockAddr advertise_;
  LinkOwner owner_;                                     // what this communicator's links speak for
  std::vector<const TransportKind*> kinds_;             // BRAID_TRANSPORT's order
  std::vector<TransportContext*> contexts_;             // by kind: the runtime's
  std::vector<RankInfo> infos_;
  Addresses addresses_;
  std::vector<int> link_kind_;  // by rank: which transport connects it (-1: none, self)
  Plan plan_;
  ScratchPool scratch_;  // the running operation's scratch (operations run one at a time)
  device::Memory staging_;  // pinned host copy of a staged operation's device buffers
  std::vector<std::unique_ptr<Link>> links_;  // by rank
  std::vector<Link*> link_ptrs_;              // by rank, null where none
  std::uint32_t collective_sequence_ = 0;     // identical on every rank
  std::vector<std::uint32_t> p2p_sent_;       // per peer: sends to it
  std::vector<std::uint32_t> p2p_received_;   // per peer: receives from it
  std::uint32_t splits_ = 0;
  std::uint32_t shrinks_ = 0;
  std::uint32_t recoveries_ = 0;  // shrink_lost calls, numbering their agreements at the store
  bool derived_ = false;  // made by shrink(): its members made it without an exchange
  bool joined_running_job_ = false;  // made by join_job

  FlightRecorder recorder_;
  OpStatsTable stats_;                 // under the engine's mutex
  std::shared_ptr<TraceFile> trace_;   // BRAID_TRACE: the process's timeline, else null
  int trace_track_ = -1;               // this communicator's track in it
  bool timed_ = false;                 // statistics or trace: operations read the clock
  std::uint64_t records_ = 0;

  // Under the engine's mutex.
  std::deque<std::shared_ptr<Operation>> queue_;
  Failure first_error_;
  std::string broken_;  // why the communicator is unusable, if it is

  // The driving thread's.
  std::shared_ptr<Operation> held_;  // the head being driven (the queue may let it go first)
  Operation* head_ = nullptr;
  Clock::time_point last_failure_look_{};
  Clock::time_point last_connect_look_{};
  Clock::time_point last_note_{};

  std::atomic<bool> aborted_{false};  // abort() or refuse() asked the engine to fail this communicator
  Failure refusal_;        // refuse()'s error, set before aborted_
  std::atomic<bool> finalized_{false};
};

}  // namespace braid
