// The public C++ API (include/braid/braid.hpp): thin wrappers over CommImpl.
#include <algorithm>

#include "braid/braid.hpp"
#include "bootstrap/launch_env.hpp"
#include "comm_impl.hpp"
#include "group.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "transport/shm/shared_memory.hpp"

namespace braid {

// ---- the public C++ API -------------------------------------------------------

namespace {

Settings settings_with(const CommOptions& options) {
  Settings s = Settings::from_env();
  if (options.timeout) {
    if (options.timeout->count() <= 0) throw InvalidArgument("CommOptions::timeout must be positive");
    s.timeout = *options.timeout;
  }
  if (options.transport) s.transport = *options.transport;
  if (options.algorithm) s.algo = *options.algorithm;
  if (options.tcp.streams) {
    if (*options.tcp.streams < 1 || *options.tcp.streams > 16)
      throw InvalidArgument(cat("CommOptions::tcp.streams=", *options.tcp.streams, " is outside [1, 16]"));
    s.tcp_streams = *options.tcp.streams;
  }
  if (options.tcp.socket_ifname) s.socket_ifname = *options.tcp.socket_ifname;
  set_log_level(s.log_level);
  return s;
}

void check_rank(int rank, int size) {
  if (size < 1) throw InvalidArgument(cat("communicator size ", size, " must be at least 1"));
  if (rank < 0 || rank >= size) throw InvalidArgument(cat("rank ", rank, " is outside [0, ", size, ")"));
}

std::unique_ptr<CommImpl> join_at_store(std::string_view store_addr, int rank, int size, Settings s) {
  check_rank(rank, size);
  set_log_rank(rank);
  s.store_addr = std::string(store_addr);  // the first of the job's stores (CommImpl::reach_live_store)
  // A rank of an elastic job started again (the same command as before)
  // finds its job running without it, and joins it as a newcomer.
  // Its store may have moved to a standby (BRAID_STORE_STANDBY) when the
  // first one's host left: the first store in order that holds the running
  // job is where it joins. A standby that does not answer at once is passed.
  if (s.elastic && (rank != 0 || s.store_external)) {
    const std::vector<std::string> stores = job_stores(s);
    for (std::size_t i = 0; i < stores.size(); ++i) {
      Rendezvous probe;
      try {
        probe = rendezvous_to_join(stores[i], s, i == 0 ? s.timeout : std::min<Millis>(s.timeout, kStoreProbe));
      } catch (const Error& e) {
        if (i == 0) throw;
        log_info("rank ", rank, ": the standby store at ", stores[i], " does not answer (", e.what(), ")");
        continue;
      }
      const std::string formed = probe.scope + "formed";
      if (probe.store->check(std::span(&formed, 1))) {
        log_warn("rank ", rank, ": the elastic job at ", stores[i], " runs already: joining it (Comm::join), to be "
                 "admitted at its members' next grow");
        return CommImpl::join_job(std::move(probe), std::move(s));
      }
    }
  }
  Rendezvous rv = rendezvous_at_store(std::string(store_addr), rank, size, s);
  return CommImpl::create(std::move(rv), rank, size, std::move(s));
}

}  // namespace

void shutdown() { Runtime::shutdown(); }

Comm::Comm() noexcept = default;
Comm::Comm(std::unique_ptr<CommImpl> impl) : impl_(std::move(impl)) {}
Comm::Comm(Comm&&) noexcept = default;
Comm& Comm::operator=(Comm&&) noexcept = default;
Comm::~Comm() = default;

bool Comm::valid() const noexcept { return impl_ != nullptr; }

CommImpl& Comm::impl() const {
  if (!impl_)
    throw InvalidUsage("this braid::Comm is empty: it is not a member of any communicator (it was made by "
                          "split(Comm::kNoColor, ...) or default-constructed) or it was moved from");
  impl_->check_open();
  return *impl_;
}

Comm Comm::from_env(const CommOptions& options) {
  Settings s = settings_with(options);
  std::optional<LaunchIdentity> id = launch_identity([](std::string_view name) { return Settings::raw(name); });
  if (!id)
    throw InvalidArgument(
        "BRAID_RANK is not set, nor the rank of another launcher (RANK, TF_CONFIG, SLURM_PROCID, "
        "OMPI_COMM_WORLD_RANK, PMIX_RANK): start the program with braid-run, torchrun, srun or mpirun (with "
        "BRAID_STORE_ADDR), set BRAID_RANK, BRAID_WORLD_SIZE and BRAID_STORE_ADDR, or set TensorFlow's TF_CONFIG "
        "(docs/launchers.md)");
  if (id->tf_config) {
    ClusterSpec cluster = ClusterSpec::parse(*Settings::raw("TF_CONFIG"));
    log_info("joining as TF_CONFIG's ", cluster.task_type, " ", cluster.task_index, " (rank ", cluster.rank(),
             " of ", cluster.size(), ", store at ", cluster.store_address(), ")");
    s.launch_source = "TF_CONFIG";
    return Comm(join_at_store(cluster.store_address(), cluster.rank(), cluster.size(), std::move(s)));
  }
  s.rank = id->rank;
  s.world_size = id->size;
  s.local_rank = id->local_rank;
  s.local_size = id->local_size;
  s.launch_source = id->source;
  return Comm(join_at_store(id->store_addr, id->rank, id->size, std::move(s)));
}

Comm Comm::init(std::shared_ptr<Store> store, int rank, int size, const CommOptions& options) {
  if (!store) throw InvalidArgument("Comm::init: the store is null");
  check_rank(rank, size);
  Settings s = settings_with(options);
  s.launch_source = "Comm::init with the caller's store";
  set_log_rank(rank);
  Rendezvous rv = rendezvous_with_store(std::move(store), rank, size, s);
  return Comm(CommImpl::create(std::move(rv), rank, size, std::move(s)));
}

Comm Comm::init(std::string_view store_addr, int rank, int size, const CommOptions& options) {
  Settings s = settings_with(options);
  s.launch_source = "Comm::init with a store address";
  return Comm(join_at_store(store_addr, rank, size, std::move(s)));
}

Comm Comm::init(const ClusterSpec& cluster, const CommOptions& options) {
  return init(cluster.store_address(), cluster.rank(), cluster.size(), options);
}

Comm Comm::init(const UniqueId& id, int rank, int size, const CommOptions& options) {
  check_rank(rank, size);
  Settings s = settings_with(options);
  set_log_rank(rank);
  s.launch_source = "Comm::init with a UniqueId";
  Rendezvous rv = rendezvous_by_id(id.bytes, rank, size, s);
  return Comm(CommImpl::create(std::move(rv), rank, size, std::move(s)));
}

int Comm::rank() const { return impl().rank(); }
int Comm::size() const { return impl().size(); }
int Comm::local_rank() const { return impl().local_rank(); }
int Comm::local_size() const { return impl().local_size(); }
std::string Comm::describe() const { return impl().describe(); }
std::string Comm::dump_state() const { return impl().dump_state(); }
std::vector<OpStats> Comm::stats() const { return impl().stats(); }
std::exception_ptr Comm::async_error() const { return impl().async_error(); }

namespace {

// The operation `make` makes (checking its arguments): on an open group a
// call that fails its checks marks the group failed, so that nothing of it
// is issued (group.cpp), and a call is never half issued.
template <typename Make>
std::shared_ptr<Operation> made(Make&& make) {
  try {
    return make();
  } catch (...) {
    if (group_open()) group_fail(std::current_exception());
    throw;
  }
}

// Runs an operation to completion on the calling thread (or waits for the
// thread that drives). Inside a group, the operation is deferred to the
// group's end instead.
template <typename Make>
void run(CommImpl& comm, Make&& make) {
  std::shared_ptr<Operation> op = made(make);
  if (group_open()) group_defer(comm, std::move(op), true);
  else comm.run(std::move(op));
}

// Starts an operation in the background (or defers it to the group's end).
template <typename Make>
Work start(CommImpl& comm, Make&& make) {
  std::shared_ptr<Operation> op = made(make);
  if (group_open()) return Work::from_operation(group_defer(comm, std::move(op), false));
  comm.submit(op, true);
  return Work::from_operation(std::move(op));
}

}  // namespace

void Comm::all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  run(impl(), [&] { return impl().all_reduce(send, recv, count, type, op); });
}
void Comm::broadcast(const void* send, void* recv, std::size_t count, DataType type, int root) {
  run(impl(), [&] { return impl().broadcast(send, recv, count, type, root); });
}
void Comm::reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root) {
  run(impl(), [&] { return impl().reduce(send, recv, count, type, op, root); });
}
void Comm::all_gather(const void* send, void* recv, std::size_t count, DataType type) {
  run(impl(), [&] { return impl().all_gather(send, recv, count, type); });
}
void Comm::reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  run(impl(), [&] { return impl().reduce_scatter(send, recv, count, type, op); });
}
void Comm::all_to_all(const void* send, void* recv, std::size_t count, DataType type) {
  run(impl(), [&] { return impl().all_to_all(send, recv, count, type); });
}
void Comm::gather(const void* send, void* recv, std::size_t count, DataType type, int root) {
  run(impl(), [&] { return impl().gather(send, recv, count, type, root); });
}
void Comm::scatter(const void* send, void* recv, std::size_t count, DataType type, int root) {
  run(impl(), [&] { return impl().scatter(send, recv, count, type, root); });
}
void Comm::send(const void* buffer, std::size_t count, DataType type, int peer) {
  run(impl(), [&] { return impl().send(buffer, count, type, peer); });
}
void Comm::recv(void* buffer, std::size_t count, DataType type, int peer) {
  run(impl(), [&] { return impl().recv(buffer, count, type, peer); });
}
void Comm::barrier() { run(impl(), [&] { return impl().barrier(); }); }
void Comm::sendrecv(const void* send, std::size_t send_count, int dest, void* recv, std::size_t recv_count, int source,
                    DataType type) {
  group([&] {
    run(impl(), [&] { return impl().send(send, send_count, type, dest); });
    run(impl(), [&] { return impl().recv(recv, recv_count, type, source); });
  });
}
void Comm::all_to_allv(const void* send, std::span<const std::size_t> send_counts,
                       std::span<const std::size_t> send_displs, void* recv, std::span<const std::size_t> recv_counts,
                       std::span<const std::size_t> recv_displs, DataType type) {
  run(impl(), [&] { return impl().all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, type); });
}
void Comm::all_gatherv(const void* send, std::size_t send_count, void* recv, std::span<const std::size_t> recv_counts,
                       std::span<const std::size_t> recv_displs, DataType type) {
  run(impl(), [&] { return impl().all_gatherv(send, send_count, recv, recv_counts, recv_displs, type); });
}
void Comm::reduce_scatterv(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType type,
                           ReduceOp op) {
  run(impl(), [&] { return impl().reduce_scatterv(send, recv, recv_counts, type, op); });
}
void Comm::gatherv(const void* send, std::size_t send_count, void* recv, std::span<const std::size_t> recv_counts,
                   std::span<const std::size_t> recv_displs, DataType type, int root) {
  run(impl(), [&] { return impl().gatherv(send, send_count, recv, recv_counts, recv_displs, type, root); });
}
void Comm::scatterv(const void* send, std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                    void* recv, std::size_t recv_count, DataType type, int root) {
  run(impl(), [&] { return impl().scatterv(send, send_counts, send_displs, recv, recv_count, type, root); });
}

Work Comm::all_reduce_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  return start(impl(), [&] { return impl().all_reduce(send, recv, count, type, op); });
}
Work Comm::broadcast_async(const void* send, void* recv, std::size_t count, DataType type, int root) {
  return start(impl(), [&] { return impl().broadcast(send, recv, count, type, root); });
}
Work Comm::reduce_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root) {
  return start(impl(), [&] { return impl().reduce(send, recv, count, type, op, root); });
}
Work Comm::all_gather_async(const void* send, void* recv, std::size_t count, DataType type) {
  return start(impl(), [&] { return impl().all_gather(send, recv, count, type); });
}
Work Comm::reduce_scatter_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  return start(impl(), [&] { return impl().reduce_scatter(send, recv, count, type, op); });
}
Work Comm::all_to_all_async(const void* send, void* recv, std::size_t count, DataType type) {
  return start(impl(), [&] { return impl().all_to_all(send, recv, count, type); });
}
Work Comm::gather_async(const void* send, void* recv, std::size_t count, DataType type, int root) {
  return start(impl(), [&] { return impl().gather(send, recv, count, type, root); });
}
Work Comm::scatter_async(const void* send, void* recv, std::size_t count, DataType type, int root) {
  return start(impl(), [&] { return impl().scatter(send, recv, count, type, root); });
}
Work Comm::send_async(const void* buffer, std::size_t count, DataType type, int peer) {
  return start(impl(), [&] { return impl().send(buffer, count, type, peer); });
}
Work Comm::recv_async(void* buffer, std::size_t count, DataType type, int peer) {
  return start(impl(), [&] { return impl().recv(buffer, count, type, peer); });
}
Work Comm::barrier_async() { return start(impl(), [&] { return impl().barrier(); }); }
Work Comm::all_to_allv_async(const void* send, std::span<const std::size_t> send_counts,
                             std::span<const std::size_t> send_displs, void* recv,
                             std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                             DataType type) {
  return start(impl(), [&] { return impl().all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, type); });
}
Work Comm::all_gatherv_async(const void* send, std::size_t send_count, void* recv,
                             std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                             DataType type) {
  return start(impl(), [&] { return impl().all_gatherv(send, send_count, recv, recv_counts, recv_displs, type); });
}
Work Comm::reduce_scatterv_async(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType type,
                                 ReduceOp op) {
  return start(impl(), [&] { return impl().reduce_scatterv(send, recv, recv_counts, type, op); });
}
Work Comm::gatherv_async(const void* send, std::size_t send_count, void* recv, std::span<const std::size_t> recv_counts,
                         std::span<const std::size_t> recv_displs, DataType type, int root) {
  return start(impl(), [&] { return impl().gatherv(send, send_count, recv, recv_counts, recv_displs, type, root); });
}
Work Comm::scatterv_async(const void* send, std::span<const std::size_t> send_counts,
                          std::span<const std::size_t> send_displs, void* recv, std::size_t recv_count, DataType type,
                          int root) {
  return start(impl(), [&] { return impl().scatterv(send, send_counts, send_displs, recv, recv_count, type, root); });
}

Comm Comm::shrink_lost(Shrink mode) { return Comm(impl().shrink_lost(mode == Shrink::abort)); }
bool Comm::joined_running_job() const { return impl().joined_running_job(); }
Comm Comm::grow() { return Comm(impl().grow()); }  // empty when nobody waits
Comm Comm::join(std::string_view store_addr, const CommOptions& options) {
  Settings s = settings_with(options);
  s.launch_source = "Comm::join";
  s.store_addr = std::string(store_addr);
  Rendezvous rv = rendezvous_to_join(std::string(store_addr), s);
  return Comm(CommImpl::join_job(std::move(rv), std::move(s)));
}
Comm Comm::split(int color, int key) { return Comm(impl().split(color, key)); }  // empty for kNoColor
Comm Comm::shrink(std::span<const int> excluded, Shrink mode) {
  return Comm(impl().shrink(excluded, mode == Shrink::abort));
}
void Comm::abort() {
  if (!impl_) impl();  // the empty Comm's message
  impl_->abort();
}
void Comm::finalize() {
  if (!impl_) impl();
  Runtime::check_usable();
  impl_->finalize();
}
void Comm::flush() { impl().flush(); }
void* Comm::register_buffer(void* buffer, std::size_t bytes) {
  CommImpl& c = impl();
  return shared_register(&c, buffer, bytes, cat("rank ", c.rank(), ": register_buffer"));
}
void Comm::deregister_buffer(void* handle) {
  CommImpl& c = impl();
  shared_deregister(&c, handle, cat("rank ", c.rank(), ": deregister_buffer"));
}

void* mem_alloc(std::size_t bytes) { return shared_alloc(bytes); }
void mem_free(void* pointer) { shared_free(pointer); }

void Comm::check_span_sizes(std::size_t small, std::size_t big, int factor, const char* op) {
  if (big != small * static_cast<std::size_t>(factor)) {
    if (factor == 1) throw InvalidArgument(cat(op, ": send span has ", small, " elements but recv span has ", big));
    throw InvalidArgument(cat(op, ": the larger span has ", big, " elements but must hold ", factor, " x ", small));
  }
}

void Comm::check_divisible(std::size_t elements, int ranks, const char* op) {
  if (elements % static_cast<std::size_t>(ranks) != 0)
    throw InvalidArgument(cat(op, ": ", elements, " elements do not split into ", ranks, " equal blocks"));
}

// ---- Work ---------------------------------------------------------------------------

constexpr const char* kInOpenGroup =
    "this operation belongs to a group that is still open on this thread: it starts at group_end() "
    "(braid_group_end), so wait for it after that";
Work::Work() = default;
Work::Work(std::shared_ptr<Operation> op) : op_(std::move(op)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;
Work::~Work() = default;

Work Work::from_operation(std::shared_ptr<Operation> op) { return Work(std::move(op)); }

bool Work::wait(std::optional<std::chrono::milliseconds> timeout) {
  if (!op_) throw InvalidUsage("Work::wait on an empty Work");
  if (op_->done.load()) {
    if (op_->error) op_->error.raise();
    return true;
  }
  CommImpl* comm = op_->comm;
  if (comm == nullptr) throw InvalidUsage(kInOpenGroup);
  Deadline until = timeout ? Deadline::after(*timeout) : Deadline::never();
  return comm->wait(op_, until);
}

bool Work::test() {
  if (!op_) throw InvalidUsage("Work::test on an empty Work");
  if (op_->done.load()) {
    if (op_->error) op_->error.raise();
    return true;
  }
  if (op_->comm == nullptr) throw InvalidUsage(kInOpenGroup);
  return op_->comm->test(op_);
}
void Work::then(std::function<void(std::exception_ptr)> callback) {
  if (!op_) throw InvalidUsage("Work::then on an empty Work");
  if (!callback) throw InvalidArgument("Work::then: the callback is empty");
  op_->add_callback(std::move(callback));
}

std::exception_ptr Work::error() const { return op_ && op_->done.load() ? op_->error.ptr() : nullptr; }

}  // namespace braid
