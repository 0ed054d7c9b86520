#include "comm_impl.hpp"

#include <algorithm>
#include <thread>

#include "braid/braid.hpp"
#include "collectives/algorithms.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

std::string rank_key(std::string_view what, int rank) { return cat("braid/", what, "/", rank); }

}  // namespace

CommImpl::CommImpl(Rendezvous rendezvous, int rank, int size, Settings settings)
    : settings_(std::move(settings)), rendezvous_(std::move(rendezvous)), rank_(rank), size_(size) {}

CommImpl::~CommImpl() = default;

std::unique_ptr<CommImpl> CommImpl::create(Rendezvous rendezvous, int rank, int size, Settings settings) {
  std::unique_ptr<CommImpl> comm(new CommImpl(std::move(rendezvous), rank, size, std::move(settings)));
  comm->join();
  return comm;
}

void CommImpl::join() {
  const Deadline deadline = Deadline::after(settings_.timeout);
  TcpOptions tcp;
  tcp.rank = rank_;
  tcp.world_size = size_;
  tcp.comm_id = rendezvous_.comm_id;
  tcp.streams = settings_.tcp_streams;
  tcp.buffer_bytes = settings_.tcp_buffer_bytes;
  tcp.timeout = settings_.timeout;
  tcp.listen_address = rendezvous_.advertise;
  transport_ = std::make_unique<TcpTransport>(tcp);

  Store& store = *rendezvous_.store;
  store.set(rank_key("info", rank_), RankInfo::local(rank_).encode());
  store.set(rank_key("tcp", rank_), transport_->local_address());

  // Wait for everyone; on timeout, say exactly who is missing.
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(rank_key("tcp", r));
  try {
    store.wait(keys, std::chrono::duration_cast<Millis>(deadline.remaining()));
  } catch (const Timeout&) {
    std::string missing;
    int count = 0;
    for (int r = 0; r < size_; ++r) {
      std::string key = rank_key("tcp", r);
      if (!store.check(std::span(&key, 1))) missing += cat(count++ ? ", " : "", r);
    }
    throw Timeout(cat("rank ", rank_, ": rank", count == 1 ? " " : "s ", missing, " of ", size_,
                      " did not join the communicator at the store ", rendezvous_.store_name, " within ",
                      seconds_of(settings_.timeout), " s"));
  }
  infos_.resize(size_);
  addresses_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    infos_[r] = RankInfo::decode(store.get(rank_key("info", r), settings_.timeout));
    if (infos_[r].rank != r)
      throw ProtocolMismatch(cat("rank ", rank_, ": the store holds rank info for rank ", infos_[r].rank, " under rank ", r));
    addresses_[r] = store.get(rank_key("tcp", r), settings_.timeout);
  }
  // Nobody (in particular not the rank hosting the store) leaves start-up
  // before every rank has read what it needs from the store.
  store.set(rank_key("fetched", rank_), std::string_view("1"));
  keys.clear();
  for (int r = 0; r < size_; ++r) keys.push_back(rank_key("fetched", r));
  store.wait(keys, std::chrono::duration_cast<Millis>(deadline.remaining()));

  plan_ = make_plan(infos_, settings_);
  int local = static_cast<int>(std::count_if(infos_.begin(), infos_.end(),
                                             [&](const RankInfo& i) { return i.host_id == infos_[rank_].host_id; }));
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // Busy-polling pays only where each rank owns a core. On this project's
  // 2-vCPU machines it lengthened an 8-byte all-reduce from 13 us to 100 us
  // (the two vCPUs are not independent), so auto spins only with 4 or more
  // cores per local rank.
  spin_us_ = settings_.spin_us.value_or(static_cast<unsigned>(local) * 4 <= cores ? 20 : 0);

  links_.resize(size_);
  link_ptrs_.assign(size_, nullptr);
  if (size_ > 1) {
    int pos = ring_position(plan_.ring, rank_);
    std::vector<int> neighbours = {plan_.ring[(pos + 1) % size_], plan_.ring[(pos + size_ - 1) % size_]};
    connect_peers(neighbours);
  }
  log_info("joined: ", describe());
}

void CommImpl::connect_peers(const std::vector<int>& peers) {
  std::vector<TcpTransport::PeerRef> wanted;
  for (int p : peers) {
    if (p == rank_ || link_ptrs_[p] != nullptr) continue;
    if (std::any_of(wanted.begin(), wanted.end(), [&](const auto& w) { return w.info->rank == p; })) continue;
    wanted.push_back({&infos_[p], addresses_[p]});
  }
  if (wanted.empty()) return;
  auto links = transport_->connect_all(wanted, Deadline::after(settings_.timeout));
  for (auto& link : links) {
    int p = link->peer();
    link->attach(poller_);
    link_ptrs_[p] = link.get();
    links_[p] = std::move(link);
  }
}

std::string CommImpl::describe() const {
  return cat("rank ", rank_, " of ", size_, " on ", infos_.empty() ? "?" : infos_[rank_].hostname, "; ",
             plan_.describe(), "; ", transport_->streams(), " TCP stream(s), slice ", human_bytes(settings_.slice_bytes),
             ", spin ", spin_us_, " us, timeout ", seconds_of(settings_.timeout), " s");
}

void CommImpl::check_usable(std::string_view op) const {
  if (!broken_.empty())
    throw Error(ErrorCode::aborted, cat("rank ", rank_, ": ", op, ": the communicator is unusable after an earlier error: ", broken_));
}

CollectiveShape CommImpl::shape(std::size_t count, DataType type, ReduceOp op, int root) const {
  CollectiveShape s;
  s.rank = rank_;
  s.ranks = size_;
  s.ring = plan_.ring;
  s.count = count;
  s.type = type;
  s.op = op;
  s.root = root;
  s.slice_bytes = settings_.slice_bytes;
  return s;
}

void CommImpl::run(const Schedule& schedule, Buffers buffers, std::string_view what) {
  validate(schedule, BufferSizes{buffers.input_bytes, buffers.output_bytes}, rank_);
  try {
    connect_peers(schedule.peers());
    Executor exec(schedule, buffers, link_ptrs_, ++sequence_);
    const Deadline deadline = Deadline::after(settings_.timeout);
    const auto spin = std::chrono::microseconds(spin_us_);
    auto spin_until = Clock::now() + spin;
    while (!exec.advance()) {
      if (exec.moved()) {
        spin_until = Clock::now() + spin;
        continue;
      }
      auto now = Clock::now();
      if (now < spin_until) continue;
      if (now >= deadline.at())
        throw Timeout(cat("rank ", rank_, ": ", what, " (op #", sequence_, ") timed out after ",
                          seconds_of(settings_.timeout), " s; ", exec.describe_pending()));
      poller_.wait(std::chrono::duration_cast<std::chrono::microseconds>(
          std::min<Clock::duration>(deadline.remaining(), std::chrono::milliseconds(100))));
    }
  } catch (const Error& e) {
    // Links may still hold requests that point into the caller's buffers:
    // the communicator must not move another byte.
    broken_ = e.what();
    if (e.code() == ErrorCode::internal) throw;
    log_warn(e.what());
    throw;
  }
}

void CommImpl::all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  check_usable("all_reduce");
  std::size_t element = size_of(type);
  name_of(op);  // validates the operator
  if (count > (std::size_t{1} << 62) / element)
    throw InvalidArgument(cat("rank ", rank_, ": all_reduce: count ", count, " is too large"));
  if (count > 0 && (send == nullptr || recv == nullptr))
    throw InvalidArgument(cat("rank ", rank_, ": all_reduce: ", send == nullptr ? "send" : "recv",
                              " buffer is null but count is ", count));
  std::size_t bytes = count * element;
  auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (in != out && in < out + bytes && out < in + bytes)
    throw InvalidArgument(cat("rank ", rank_, ": all_reduce: send and recv buffers overlap without being equal"));
  const CollectiveShape s = shape(count, type, op, 0);
  Schedule schedule = plan_.all_reduce_for(bytes, size_) == "direct" ? direct_all_reduce(s) : ring_all_reduce(s);
  run(schedule, Buffers{in, out, bytes, bytes},
      cat("all_reduce(", name_of(type), " ", name_of(op), ", ", count, " elements)"));
}

void CommImpl::broadcast(const void* send, void* recv, std::size_t count, DataType type, int root) {
  check_usable("broadcast");
  std::size_t element = size_of(type);
  if (root < 0 || root >= size_)
    throw InvalidArgument(cat("rank ", rank_, ": broadcast: root ", root, " is outside [0, ", size_, ")"));
  if (count > (std::size_t{1} << 62) / element)
    throw InvalidArgument(cat("rank ", rank_, ": broadcast: count ", count, " is too large"));
  if (count > 0 && recv == nullptr)
    throw InvalidArgument(cat("rank ", rank_, ": broadcast: recv buffer is null but count is ", count));
  if (count > 0 && rank_ == root && send == nullptr)
    throw InvalidArgument(cat("rank ", rank_, ": broadcast: the root's send buffer is null but count is ", count));
  std::size_t bytes = count * element;
  auto* in = rank_ == root ? static_cast<const std::byte*>(send) : nullptr;
  auto* out = static_cast<std::byte*>(recv);
  if (in != nullptr && in != out && in < out + bytes && out < in + bytes)
    throw InvalidArgument(cat("rank ", rank_, ": broadcast: send and recv buffers overlap without being equal"));
  Schedule schedule = chain_broadcast(shape(count, type, ReduceOp::sum, root));
  run(schedule, Buffers{in, out, in ? bytes : 0, bytes},
      cat("broadcast(", name_of(type), ", ", count, " elements, root ", root, ")"));
}

void CommImpl::barrier() {
  check_usable("barrier");
  Schedule schedule = ring_barrier(shape(0, DataType::u8, ReduceOp::sum, 0));
  run(schedule, Buffers{}, "barrier");
}

// ---- the public C++ API -------------------------------------------------------

namespace {

Settings settings_with(const CommOptions& options) {
  Settings s = Settings::from_env();
  if (options.timeout) {
    if (options.timeout->count() <= 0) throw InvalidArgument("CommOptions::timeout must be positive");
    s.timeout = *options.timeout;
  }
  if (options.tcp_streams) {
    if (*options.tcp_streams < 1 || *options.tcp_streams > 16)
      throw InvalidArgument(cat("CommOptions::tcp_streams=", *options.tcp_streams, " is outside [1, 16]"));
    s.tcp_streams = *options.tcp_streams;
  }
  if (options.socket_ifname) s.socket_ifname = *options.socket_ifname;
  set_log_level(s.log_level);
  return s;
}

void check_rank(int rank, int size) {
  if (size < 1) throw InvalidArgument(cat("communicator size ", size, " must be at least 1"));
  if (rank < 0 || rank >= size) throw InvalidArgument(cat("rank ", rank, " is outside [0, ", size, ")"));
}

}  // namespace

Comm::Comm(std::unique_ptr<CommImpl> impl) : impl_(std::move(impl)) {}
Comm::Comm(Comm&&) noexcept = default;
Comm& Comm::operator=(Comm&&) noexcept = default;
Comm::~Comm() = default;

CommImpl& Comm::impl() const {
  if (!impl_) throw InvalidArgument("this braid::Comm was moved from");
  return *impl_;
}

Comm Comm::from_env(const CommOptions& options) {
  Settings s = settings_with(options);
  const char* hint = " (start the program with braid-run, or set BRAID_RANK, BRAID_WORLD_SIZE and BRAID_STORE_ADDR)";
  if (!s.rank) throw InvalidArgument(cat("BRAID_RANK is not set", hint));
  if (!s.world_size) throw InvalidArgument(cat("BRAID_WORLD_SIZE is not set", hint));
  if (s.store_addr.empty()) throw InvalidArgument(cat("BRAID_STORE_ADDR is not set", hint));
  if (*s.rank >= *s.world_size)
    throw InvalidArgument(cat("BRAID_RANK=", *s.rank, " is outside [0, BRAID_WORLD_SIZE=", *s.world_size, ")"));
  std::string where = s.store_addr;
  int rank = *s.rank, size = *s.world_size;
  return init(where, rank, size, options);
}

Comm Comm::init(std::string_view store_addr, int rank, int size, const CommOptions& options) {
  check_rank(rank, size);
  Settings s = settings_with(options);
  set_log_rank(rank);
  Rendezvous rv = rendezvous_at_store(std::string(store_addr), rank, size, s);
  return Comm(CommImpl::create(std::move(rv), rank, size, std::move(s)));
}

Comm Comm::init(const UniqueId& id, int rank, int size, const CommOptions& options) {
  check_rank(rank, size);
  Settings s = settings_with(options);
  set_log_rank(rank);
  Rendezvous rv = rendezvous_by_id(id.bytes, rank, size, s);
  return Comm(CommImpl::create(std::move(rv), rank, size, std::move(s)));
}

int Comm::rank() const { return impl().rank(); }
int Comm::size() const { return impl().size(); }
std::string Comm::describe() const { return impl().describe(); }

void Comm::all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  impl().all_reduce(send, recv, count, type, op);
}
void Comm::broadcast(const void* send, void* recv, std::size_t count, DataType type, int root) {
  impl().broadcast(send, recv, count, type, root);
}
void Comm::barrier() { impl().barrier(); }

void Comm::check_span_sizes(std::size_t send, std::size_t recv, const char* op) {
  if (send != recv)
    throw InvalidArgument(cat(op, ": send span has ", send, " elements but recv span has ", recv));
}

}  // namespace braid
