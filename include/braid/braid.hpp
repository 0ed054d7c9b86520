// braid — the C++ API.
//
//   braid::Comm comm = braid::Comm::from_env();     // under braid-run, or from TF_CONFIG
//   std::vector<float> grad(n);
//   comm.all_reduce(std::span(grad), braid::ReduceOp::sum);
//
// Buffers may be host memory or, in a braid built with CUDA, CUDA device
// memory (told apart by braid; the call is synchronous with respect to the
// GPU). Every collective is called by all ranks of the communicator with the same
// type, count, operator and root. Calls block until the local part of the
// operation is complete or fail with a braid::Error; no wait is unbounded
// (see CommOptions::timeout and BRAID_TIMEOUT).
#pragma once

#include <array>
#include <chrono>
#include <exception>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/cluster.hpp"
#include "braid/store.hpp"
#include "braid/types.hpp"

namespace braid {

/// Opaque bytes that identify one communicator's rendezvous point, in the
/// manner of ncclUniqueId: one process creates it, hands it to every rank by
/// any means (a file, MPI_Bcast, a command line), and each rank passes it to
/// Comm::init. The creating process hosts the rendezvous store until the
/// communicator that uses it is destroyed or the process exits.
struct UniqueId {
  static constexpr std::size_t kBytes = 128;
  std::array<std::byte, kBytes> bytes{};

  /// Starts a rendezvous store in this process and returns its id. The store
  /// listens on the interface named by BRAID_SOCKET_IFNAME, else on the first
  /// non-loopback interface that is up, else on loopback.
  static UniqueId create();
  /// Hex text of the bytes, for command lines and files.
  std::string to_hex() const;
  static UniqueId from_hex(std::string_view hex);
};

/// Options for creating a communicator. Unset fields take their value from
/// the BRAID_* environment (docs/settings.md).
struct CommOptions {
  std::optional<std::chrono::milliseconds> timeout;  ///< bound on every wait (BRAID_TIMEOUT)
  /// Transports to use, in order of preference ("shm,tcp"; BRAID_TRANSPORT).
  std::optional<std::string> transport;
  /// Algorithms to force ("ring", or "all_reduce:tree,broadcast:binomial"; BRAID_ALGO).
  std::optional<std::string> algorithm;
  /// Settings of the TCP transport.
  struct Tcp {
    std::optional<int> streams;                ///< sockets per peer (BRAID_TCP_STREAMS)
    std::optional<std::string> socket_ifname;  ///< interface to advertise (BRAID_SOCKET_IFNAME)
  } tcp;
};

class CommImpl;
class Operation;

/// A collective or point-to-point operation started with one of the *_async
/// calls. Operations of one communicator run one after another in the order
/// they were started, in the background, while the caller computes. The
/// buffers must stay valid until the operation is done; destroying a Work
/// does not cancel it (the communicator finishes it).
class Work {
 public:
  Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();

  /// Waits until the operation is done or `timeout` passes (no argument: the
  /// communicator's timeout). Returns true when done; throws the operation's
  /// error if it failed.
  bool wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  /// True if the operation is done (throws its error if it failed). Never blocks.
  bool test();
  /// The error of a failed operation, or null.
  std::exception_ptr error() const;
  /// Calls `callback(error)` once the operation is done (error null on
  /// success, else what wait() would throw), on the thread that completes it
  /// (possibly just after wait() returns elsewhere), or at once on this thread
  /// if it is done already. Each callback runs once.
  /// It may start operations (the *_async calls) but must not wait for one of
  /// the same communicator: it may run on the thread driving it.
  void then(std::function<void(std::exception_ptr)> callback);

 private:
  friend class Comm;
  explicit Work(std::shared_ptr<Operation> op);

 public:
  /// For braid's own wrappers (the C ABI); not part of the stable API.
  static Work from_operation(std::shared_ptr<Operation> op);

 private:
  std::shared_ptr<Operation> op_;
};

/// Ends braid in this process: finalizes every live communicator (as
/// Comm::finalize, errors logged), lets what lingers for slower peers finish
/// (bounded by BRAID_LINGER), and stops braid's threads. It runs by itself at
/// exit (before static objects made earlier are destroyed) and, in Python,
/// from an atexit hook before the interpreter finalizes; call it yourself to
/// end braid earlier, for example before a fork. Afterwards every call on a
/// communicator, and making a new one, fails with InvalidArgument saying so.
/// Idempotent; from one thread, while no other thread is in a braid call.
void shutdown();

/// Groups, as NCCL's ncclGroupStart/ncclGroupEnd: between the calling
/// thread's outermost group_start() and its group_end(), calls on any
/// communicator return at once without running. At the end, each
/// communicator's sends and receives run as one operation whose transfers
/// progress together (so a ring of receive-then-send, or an all-to-all made of
/// sends and receives, cannot deadlock), followed by its collectives in call
/// order; group_end() then waits for the calls that were blocking ones and
/// throws the first error. A Work from a grouped *_async call completes with
/// its group's operation and cannot be waited for before group_end(). Groups
/// nest; only the outermost end issues. Device buffers cannot be grouped yet.
/// A group is issued whole or not at all: a call in it that fails its
/// checks (it throws) marks the group failed, and the outermost end then
/// issues none of its calls (their Works fail, and their point-to-point and
/// collective numbers are given back, so a later call matches its peers
/// again) and throws that first error.
/// Destroying a communicator inside an open group drops its calls (an error
/// is logged and their Work fails).
void group_start();
void group_end();

/// Shared memory for buffers (as NCCL's ncclMemAlloc): `bytes` (rounded up
/// to whole pages) of zeroed host memory that the other ranks of this host
/// map, so that a message above 64K from it is copied or reduced by the
/// receiver straight out of it, instead of being copied into braid's shared
/// ring and out again (docs/transports.md, "Mapped messages"). Collectives
/// and point-to-point calls need nothing else: any buffer inside it is
/// recognised. Throws InvalidArgument for 0 bytes, SystemError when the
/// kernel refuses the memory. Free it with mem_free.
void* mem_alloc(std::size_t bytes);
/// Frees what mem_alloc returned (nullptr: nothing). Throws InvalidArgument
/// for any other pointer and for memory still registered with a communicator.
/// Peers that mapped it drop their mappings on their next new one.
void mem_free(void* pointer);
/// Ends one level of the calling thread's group after something in it
/// failed: the group issues nothing (see above) and this throws nothing.
void group_end_failed() noexcept;
/// group_start(), calls(), group_end(); if calls() throws, nothing of the
/// group is issued (group_end_failed) and the exception is passed on.
template <typename Calls>
void group(Calls&& calls) {
  group_start();
  try {
    calls();
  } catch (...) {
    group_end_failed();
    throw;
  }
  group_end();
}

/// One row of a communicator's statistics (Comm::stats): the operations of
/// one collective, size band and algorithm that completed so far. Sizes are
/// count x element size as passed to the call; a band holds the sizes in
/// [band_min_bytes, band_max_bytes] (powers of two). Times run from the
/// operation's start (its turn in the queue) to its completion on this rank.
struct OpStats {
  std::string collective;  ///< "all_reduce", "broadcast", ..., "send", "recv", "group"
  std::string algorithm;   ///< the schedule's algorithm ("ring", "tree", ...)
  std::size_t band_min_bytes = 0;
  std::size_t band_max_bytes = 0;
  std::uint64_t count = 0;  ///< operations
  std::uint64_t bytes = 0;  ///< their sizes, summed
  double total_us = 0, min_us = 0, max_us = 0;
  /// Percentiles from a histogram of 16 buckets per power of two (within 5%).
  double p50_us = 0, p99_us = 0;
};

/// Marks a stretch of the calling thread's work on the BRAID_TRACE timeline
/// (docs/tracing.md), from construction to destruction:
///   { braid::TraceSpan span("backward"); ...; }
/// `name` must outlive the span (a string literal). Without BRAID_TRACE it
/// costs one branch.
class TraceSpan {
 public:
  explicit TraceSpan(const char* name) noexcept;
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  const char* name_;
  std::int64_t begin_;  // when it began (a tick), 0 when tracing is off
};

/// A group of ranks that run collectives together. Movable, not copyable.
/// One thread at a time may call into a given communicator (a Work may be
/// waited for from any thread).
///
/// A Comm can also be empty (valid() is false): default-constructed, moved
/// from, or returned by split(kNoColor, ...) to a rank that is a member of no
/// new communicator. Every operation on an empty Comm throws InvalidArgument.
class Comm {
 public:
  /// The color that makes a rank take part in split() without joining any of
  /// the new communicators (MPI_UNDEFINED, NCCL_SPLIT_NOCOLOR).
  static constexpr int kNoColor = -1;

  /// Joins the communicator described by the environment of whichever
  /// launcher started this process, looked for in this order: braid's
  /// (BRAID_RANK, BRAID_WORLD_SIZE, BRAID_STORE_ADDR: braid-run), torchrun's
  /// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), TensorFlow's TF_CONFIG
  /// (see init(const ClusterSpec&)), Slurm's (SLURM_PROCID, SLURM_NTASKS,
  /// the first host of SLURM_JOB_NODELIST), Open MPI's
  /// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE) and PMIx's (PMIX_RANK),
  /// the last two with the store address from BRAID_STORE_ADDR. Rank 0 hosts
  /// the store. describe() names the source used.
  static Comm from_env(const CommOptions& options = {});
  /// Joins through a store the caller provides (braid/store.hpp): no rank
  /// hosts one. Every rank passes a client of the same store.
  static Comm init(std::shared_ptr<Store> store, int rank, int size, const CommOptions& options = {});
  /// Joins through a rendezvous store at host:port; rank 0 hosts it.
  static Comm init(std::string_view store_addr, int rank, int size, const CommOptions& options = {});
  /// Joins through a UniqueId made by UniqueId::create().
  static Comm init(const UniqueId& id, int rank, int size, const CommOptions& options = {});
  /// Joins as task cluster.rank() of cluster.size(), every task of the
  /// cluster taking part: init(cluster.store_address(), cluster.rank(),
  /// cluster.size(), options). Rank 0 (the chief, else worker 0) hosts the
  /// store at its own TF_CONFIG address, so that host:port must be one this
  /// process can listen on.
  static Comm init(const ClusterSpec& cluster, const CommOptions& options = {});

  /// An empty communicator (valid() is false), to move one into later.
  Comm() noexcept;
  Comm(Comm&&) noexcept;
  Comm& operator=(Comm&&) noexcept;
  /// finalize(), if it was not called; errors are logged, not thrown.
  ~Comm();

  /// False for an empty Comm: default-constructed, moved from, or made by
  /// split(kNoColor, ...).
  bool valid() const noexcept;

  int rank() const;
  int size() const;
  /// This rank's index among the ranks of its host (as the plan sees hosts:
  /// BRAID_HOST_ID when set), in rank order, and how many they are: what a
  /// program uses to pick its GPU or its share of the host.
  int local_rank() const;
  int local_size() const;
  /// One line naming the transport, the algorithms and the settings in use.
  std::string describe() const;
  /// The flight recorder: the last operations with their state (queued,
  /// running and whom it waits on, done, failed), oldest first.
  std::string dump_state() const;
  /// The statistics of the operations completed so far, one row per
  /// collective, size band and algorithm (BRAID_STATS=1 prints them at finalize).
  std::vector<OpStats> stats() const;
  /// The error that made this communicator unusable (for example in an
  /// asynchronous operation nobody waited for yet), or null.
  std::exception_ptr async_error() const;

  // Collectives. Every rank calls each one with the same type, count,
  // operator and root. Counts are in elements; n is size(). In place where the
  // output pointer equals the input (see each call).

  /// recv[i] = op over ranks of send[i], i < count. In place: send == recv.
  void all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  /// Copies root's send into every rank's recv. send is read on the root only.
  void broadcast(const void* send, void* recv, std::size_t count, DataType type, int root);
  /// recv[i] on the root = op over ranks of send[i]; recv is ignored elsewhere.
  void reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root);
  /// recv (n x count) = every rank's send (count) in rank order. In place:
  /// send == recv + rank() x count elements.
  void all_gather(const void* send, void* recv, std::size_t count, DataType type);
  /// recv (count) = block rank() of op over ranks of send (n x count). In
  /// place: recv == send + rank() x count elements.
  void reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  /// Block p (count elements) of send goes to rank p; block p of recv comes
  /// from rank p. Both hold n x count. In place: send == recv.
  void all_to_all(const void* send, void* recv, std::size_t count, DataType type);
  /// The root's recv (n x count) = every rank's send (count) in rank order.
  void gather(const void* send, void* recv, std::size_t count, DataType type, int root);
  /// Every rank's recv (count) = block rank() of the root's send (n x count).
  void scatter(const void* send, void* recv, std::size_t count, DataType type, int root);
  /// Sends count elements to `peer`, which must call recv for them. Point-to-
  /// point operations with one peer match in the order they are issued.
  void send(const void* buffer, std::size_t count, DataType type, int peer);
  void recv(void* buffer, std::size_t count, DataType type, int peer);
  /// Returns once every rank has entered the barrier.
  void barrier();
  /// Sends send_count elements to `dest` and receives recv_count from
  /// `source` at once (a group of the two), so a ring shift cannot deadlock.
  void sendrecv(const void* send, std::size_t send_count, int dest, void* recv, std::size_t recv_count, int source,
                DataType type);

  // Uneven collectives: counts and displacements in elements, one entry per
  // rank (MPI's and c10d's *v forms). Empty displacements mean blocks packed
  // in rank order. Blocks written by different ranks must not overlap; any
  // count may be 0. Each rank's counts must match its peers' (what rank a
  // sends to b is what b receives from a), else the call fails on both with a
  // size mismatch naming them.

  /// send_counts[p] elements at send_displs[p] go to rank p; recv_counts[p]
  /// from rank p land at recv_displs[p]. Not in place.
  void all_to_allv(const void* send, std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                   void* recv, std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                   DataType type);
  /// Block p of recv (recv_counts[p] at recv_displs[p]) = rank p's send
  /// (send_count == recv_counts[rank()]). In place: send == recv + recv_displs[rank()].
  void all_gatherv(const void* send, std::size_t send_count, void* recv, std::span<const std::size_t> recv_counts,
                   std::span<const std::size_t> recv_displs, DataType type);
  /// recv (recv_counts[rank()]) = op over ranks of their block rank() of
  /// send, whose blocks are packed in rank order (MPI_Reduce_scatter). In
  /// place: recv == send + (recv_counts[0] + ... + recv_counts[rank()-1]).
  void reduce_scatterv(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType type,
                       ReduceOp op);
  /// The root's recv block p (recv_counts[p] at recv_displs[p]) = rank p's
  /// send (send_count). recv, recv_counts and recv_displs are read at the root only.
  void gatherv(const void* send, std::size_t send_count, void* recv, std::span<const std::size_t> recv_counts,
               std::span<const std::size_t> recv_displs, DataType type, int root);
  /// Rank p's recv (recv_count) = the root's send block p (send_counts[p] at
  /// send_displs[p]), which are read at the root only.
  void scatterv(const void* send, std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                void* recv, std::size_t recv_count, DataType type, int root);

  // The same, started in the background.
  Work all_reduce_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  Work broadcast_async(const void* send, void* recv, std::size_t count, DataType type, int root);
  Work reduce_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root);
  Work all_gather_async(const void* send, void* recv, std::size_t count, DataType type);
  Work reduce_scatter_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  Work all_to_all_async(const void* send, void* recv, std::size_t count, DataType type);
  Work gather_async(const void* send, void* recv, std::size_t count, DataType type, int root);
  Work scatter_async(const void* send, void* recv, std::size_t count, DataType type, int root);
  Work send_async(const void* buffer, std::size_t count, DataType type, int peer);
  Work recv_async(void* buffer, std::size_t count, DataType type, int peer);
  Work barrier_async();
  Work all_to_allv_async(const void* send, std::span<const std::size_t> send_counts,
                         std::span<const std::size_t> send_displs, void* recv, std::span<const std::size_t> recv_counts,
                         std::span<const std::size_t> recv_displs, DataType type);
  Work all_gatherv_async(const void* send, std::size_t send_count, void* recv, std::span<const std::size_t> recv_counts,
                         std::span<const std::size_t> recv_displs, DataType type);
  Work reduce_scatterv_async(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType type,
                             ReduceOp op);
  Work gatherv_async(const void* send, std::size_t send_count, void* recv, std::span<const std::size_t> recv_counts,
                     std::span<const std::size_t> recv_displs, DataType type, int root);
  Work scatterv_async(const void* send, std::span<const std::size_t> send_counts,
                      std::span<const std::size_t> send_displs, void* recv, std::size_t recv_count, DataType type,
                      int root);

  /// Gives up on this communicator, from any thread, within milliseconds (it
  /// never waits for a peer or a connection in progress): every pending and
  /// later operation here fails with Aborted (never success, never Timeout).
  /// The notice reaches every rank, linked to this one or not: a peer's next
  /// operation that needs this rank fails promptly with PeerLost naming it; a
  /// peer's operation that had already received all it needed from this rank
  /// may complete. A new communicator can be created afterwards.
  void abort();
  /// Waits until every operation started here (the *_async ones included) is
  /// done, each bounded by the timeout; throws the error of a failed one.
  void flush();
  /// Registers `bytes` at `buffer` with this communicator (as NCCL's
  /// ncclCommRegister) and returns the registration's handle. The range must
  /// lie in memory from mem_alloc (InvalidArgument otherwise, saying so),
  /// which stays allocated until deregistered: mem_free refuses it. Memory
  /// from mem_alloc is read in place registered or not; registering is how
  /// code written for NCCL, which needs it, says that the buffer stays.
  /// Destroying the communicator ends its registrations.
  void* register_buffer(void* buffer, std::size_t bytes);
  /// Ends a registration register_buffer returned here (InvalidArgument for
  /// any other handle).
  void deregister_buffer(void* handle);
  /// Ends this rank's part in the communicator in order: finishes every
  /// operation started here (each bounded by the timeout), tells every peer
  /// it linked to that it finalized (a peer does not take that for a
  /// failure, and one that still expects a message from this rank fails
  /// saying so), and lets its links go. It never waits for a peer: what a
  /// slower peer may still need from this rank (a shared-memory segment it
  /// has not opened yet, the store this process hosts) stays for it, up to
  /// BRAID_LINGER past the process's exit. Every later call on this Comm
  /// fails with InvalidArgument saying it was finalized; abort() and a
  /// second finalize() do nothing. Throws the error of an operation that
  /// failed (the communicator is finalized all the same).
  void finalize();

  /// Splits this communicator (a collective call: every rank calls it):
  /// ranks passing the same color form a new communicator, ordered by key
  /// then by rank here. The new one has its own connections and runs
  /// independently of this one. A rank passing kNoColor takes part in the
  /// call but joins no new communicator and gets an empty Comm back. A color
  /// used by one rank only makes a communicator of size 1. Any other negative
  /// color fails on the ranks that passed it (after the exchange, so the
  /// others do not wait for them).
  Comm split(int color, int key);

  /// What shrink() does with this communicator's operations first.
  enum class Shrink {
    finish,  // waits for what was started here (each bounded by the timeout); this one stays usable
    abort,   // aborts this one first (its pending operations fail Aborted): after a failure (NCCL_SHRINK_ABORT)
  };
  /// A new communicator of this one's ranks less `excluded` (ranks here),
  /// in the same order, as NCCL's ncclCommShrink: every rank that is not
  /// excluded calls it with the same list; an excluded rank does not call
  /// it (it may be dead). No message goes to the excluded ranks, so it works
  /// after one of them died or left: pass Shrink::abort once an operation
  /// failed with PeerLost. A rank that passes another list makes another
  /// communicator, and its peers say so at their timeout. Throws
  /// InvalidArgument for a rank out of range or listed twice, or for this
  /// rank in the list.
  Comm shrink(std::span<const int> excluded, Shrink mode = Shrink::finish);

  // Elastic jobs (BRAID_ELASTIC=1, braid-run --elastic; docs/elastic.md).

  /// shrink() without knowing whom to exclude, after an operation failed
  /// because a rank died or became unreachable (PeerLost, Timeout): every
  /// member still alive calls it, and they agree through the job's store on
  /// who came forward within BRAID_ELASTIC_GRACE of the first; the others
  /// are left out. Needs the store (the process that hosts it, rank 0 at
  /// the start, must be among the survivors). Throws PeerLost on a member
  /// that came too late (the others went on without it: it may join()
  /// again) and when the store is gone.
  Comm shrink_lost(Shrink mode = Shrink::abort);
  /// Admits the processes waiting in join() (a collective of this
  /// communicator's members, at a point every member reaches, such as a
  /// step boundary): returns the grown communicator, whose first size()
  /// ranks are this one's in order and the newcomers after them, or an
  /// empty Comm when nobody waits. This one stays usable.
  Comm grow();
  /// Joins an elastic job that is already running: registers at its store
  /// (BRAID_STORE_ADDR, braid-run's --master) and waits, bounded by the
  /// timeout, until its members' next grow() admits this process, which
  /// gets the next free ranks.
  static Comm join(std::string_view store_addr, const CommOptions& options = {});
  /// True when this communicator was made by join(), or by from_env() in an
  /// elastic job that was running already: its peers are mid-way, and this
  /// process takes its state from them (the elastic mirrored strategy does).
  bool joined_running_job() const;

  template <typename T>
  void all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_span_sizes(send.size(), recv.size(), 1, "all_reduce");
    all_reduce(send.data(), recv.data(), recv.size(), data_type_of<T>, op);
  }
  template <typename T>
  void all_reduce(std::span<T> buffer, ReduceOp op) {
    all_reduce(buffer.data(), buffer.data(), buffer.size(), data_type_of<T>, op);
  }
  template <typename T>
  Work all_reduce_async(std::span<T> buffer, ReduceOp op) {
    return all_reduce_async(buffer.data(), buffer.data(), buffer.size(), data_type_of<T>, op);
  }
  template <typename T>
  void broadcast(std::span<T> buffer, int root) {
    broadcast(buffer.data(), buffer.data(), buffer.size(), data_type_of<T>, root);
  }
  /// recv must hold size() x send.size() elements.
  template <typename T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    check_span_sizes(send.size(), recv.size(), size(), "all_gather");
    all_gather(send.data(), recv.data(), send.size(), data_type_of<T>);
  }
  /// send must hold size() x recv.size() elements.
  template <typename T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_span_sizes(recv.size(), send.size(), size(), "reduce_scatter");
    reduce_scatter(send.data(), recv.data(), recv.size(), data_type_of<T>, op);
  }
  /// Both hold size() x block elements.
  template <typename T>
  void all_to_all(std::span<const T> send, std::span<T> recv) {
    check_span_sizes(send.size(), recv.size(), 1, "all_to_all");
    check_divisible(send.size(), size(), "all_to_all");
    all_to_all(send.data(), recv.data(), send.size() / static_cast<std::size_t>(size()), data_type_of<T>);
  }

 private:
  explicit Comm(std::unique_ptr<CommImpl> impl);
  /// Throws InvalidArgument unless big == small x factor.
  static void check_span_sizes(std::size_t small, std::size_t big, int factor, const char* op);
  /// Throws InvalidArgument unless elements is a multiple of ranks.
  static void check_divisible(std::size_t elements, int ranks, const char* op);
  CommImpl& impl() const;
  std::unique_ptr<CommImpl> impl_;
};

}  // namespace braid
