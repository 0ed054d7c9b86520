#include "comm_impl.hpp"
#include "group.hpp"
#include "make_op.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "collectives/algorithms.hpp"
#include "collectives/registry.hpp"
#include "core/auth.hpp"
#include "core/check.hpp"
#include "core/interfaces.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "core/wire.hpp"
#include "topo_inputs.hpp"
#include "topology/machine.hpp"
#include "topology/topo_plan.hpp"
#include "transport/shm/shared_memory.hpp"

namespace braid {

std::string CommImpl::rank_key(std::string_view what, int rank) const { return cat(scope_, what, "/", rank); }

CommImpl::CommImpl(int rank, int size, Settings settings)
    : settings_(std::move(settings)), runtime_(Runtime::get()), engine_(runtime_.engine()), rank_(rank), size_(size),
      p2p_sent_(static_cast<std::size_t>(size)), p2p_received_(static_cast<std::size_t>(size)),
      recorder_(cat("rank ", rank, " of ", size)) {
  if (!settings_.dump_on_signal.empty()) FlightRecorder::dump_on_signal(parse_signal(settings_.dump_on_signal));
  runtime_.add(*this);
}

CommImpl::~CommImpl() {
  group_forget(*this);
  try {
    finalize();
  } catch (const Error& e) {
    log_info("rank ", rank_, ": the communicator ended after an error: ", e.what());
  }
  runtime_.remove(*this);
  shared_deregister_all(this);
}

std::unique_ptr<CommImpl> CommImpl::create(Rendezvous rendezvous, int rank, int size, Settings settings) {
  std::unique_ptr<CommImpl> comm(new CommImpl(rank, size, std::move(settings)));
  try {
    comm->join(std::move(rendezvous));
  } catch (const Error&) {
    // The rank hosting the store keeps it up a moment, so the ranks still
    // waiting read why start-up failed instead of losing the store.
    if (comm->store_server_) std::this_thread::sleep_for(std::min<Clock::duration>(kJoinFailureGrace, comm->settings_.timeout));
    throw;
  }
  return comm;
}

void CommImpl::wait_for_ranks(Store& store, std::string_view what, Deadline deadline) {
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(rank_key(what, r));
  wait_for_keys(store, keys, deadline, [&](const std::vector<int>& missing) {
    return cat(describe_ranks(missing), " of ", size_, " did not join the communicator at the store ", store_name_,
               " within ", seconds_of(settings_.timeout), " s");
  });
}

void CommImpl::wait_for_keys(Store& store, const std::vector<std::string>& keys, Deadline deadline,
                             const std::function<std::string(const std::vector<int>&)>& late) {
  std::int64_t refusals_seen = 0;
  const auto started = Clock::now();
  std::chrono::seconds next_progress = kJoinProgress;
  // The indices of the keys not set yet (for ranks: the ranks missing).
  auto missing_of = [&] {
    std::vector<std::string> absent = store.missing(keys);
    std::vector<int> missing;
    std::size_t next = 0;  // both lists are in the keys' order
    for (std::size_t i = 0; i < keys.size() && next < absent.size(); ++i)
      if (keys[i] == absent[next]) {
        missing.push_back(static_cast<int>(i));
        ++next;
      }
    return missing;
  };
  // A failure another rank published is looked for before and after every
  // wait, so a rank whose keys are all there still hears of it (a duplicate
  // claim) before it goes on.
  try {
    check_join_failure(store);
    while (true) {
      try {
        store.wait(keys, std::chrono::duration_cast<Millis>(std::min<Clock::duration>(deadline.remaining(), kJoinPoll)));
        check_join_failure(store);
        return;
      } catch (const Timeout&) {
      }
      check_join_failure(store);
      // A rank the store refused (another key) will not come: say so now.
      std::int64_t refusals = store.add(scope_ + "refusals", 0);
      if (refusals > refusals_seen) {
        auto missing = missing_of();
        for (std::int64_t i = refusals_seen + 1; i <= refusals; ++i) {
          std::string entry = store.get_string(cat(scope_, "refusal/", i), kJoinPoll);
          int claimed = -1;
          std::sscanf(entry.c_str(), "rank %d:", &claimed);
          if (keys.size() == static_cast<std::size_t>(size_) &&
              std::binary_search(missing.begin(), missing.end(), claimed))
            fail_join(store, ErrorCode::protocol,
                      cat("rank ", claimed, " of ", size_, " cannot join: ", entry.substr(entry.find(':') + 2)));
        }
        refusals_seen = refusals;
      }
      if (!deadline.expired()) {
        // A person starting the job on two machines sees what it waits for.
        const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started);
        if (waited >= next_progress) {
          next_progress = waited + kJoinProgress;
          auto missing = missing_of();
          const bool ranks = keys.size() == static_cast<std::size_t>(size_);
          log_info("rank ", rank_, ": waiting for ",
                   ranks ? describe_ranks(missing) : cat(missing.size(), " of ", keys.size(), " keys"), " at ",
                   store_name_, " (", waited.count(), " s of ", seconds_of(settings_.timeout), " s)");
        }
        continue;
      }
      fail_join(store, ErrorCode::timeout, late(missing_of()));
    }
  } catch (const PeerLost& e) {
    throw PeerLost(cat("rank ", rank_, ": lost the braid store at ", store_name_,
                       " (hosted by rank 0) while waiting for the other ranks to join; rank 0 probably failed or gave "
                       "up first: ", e.what()));
  }
}

void CommImpl::claim_rank(Store& store) {
  // The first claim of a rank number wins; a second one (another job at this
  // address, or a restarted rank) fails every member at once instead of
  // overwriting the first one's keys.
  const std::string claim = rank_key("claim", rank_);
  const std::string me = cat(store.endpoint().empty() ? std::string(hostname()) : store.endpoint(), " pid ", ::getpid());
  const std::int64_t n = store.add(claim, 1);
  store.set(cat(claim, "/", n), me);
  if (n == 1) return;
  std::string first = store.get_string(cat(claim, "/1"), settings_.timeout);
  std::string why = cat("rank ", rank_, " joined twice (from ", first, " and ", me,
                        "): two jobs share the store address ", store_name_,
                        ", or a rank was restarted; give each job its own address or BRAID_JOB_ID");
  fail_join(store, ErrorCode::protocol, why);
}

void CommImpl::fail_join(Store& store, ErrorCode code, const std::string& why) {
  store.set(scope_ + "join_failed", cat(static_cast<int>(code), ":", why));
  throw_error(code, cat("rank ", rank_, ": ", why));
}

void CommImpl::check_join_failure(Store& store) {
  const std::string key = scope_ + "join_failed";
  if (!store.check(std::span(&key, 1))) return;
  std::string text = store.get_string(key, kJoinPoll);
  int code = static_cast<int>(ErrorCode::timeout);
  auto colon = text.find(':');
  if (colon != std::string::npos && std::sscanf(text.c_str(), "%d:", &code) == 1) text.erase(0, colon + 1);
  if (code < 1 || code > static_cast<int>(ErrorCode::unsupported)) code = static_cast<int>(ErrorCode::timeout);
  throw_error(static_cast<ErrorCode>(code), cat("rank ", rank_, ": start-up failed: ", text));
}

void CommImpl::join(Rendezvous rendezvous) {
  const Deadline deadline = Deadline::after(settings_.timeout);
  store_server_ = rendezvous.server;
  store_name_ = rendezvous.store_name;
  store_addr_ = rendezvous.store_name;
  root_ = true;
  comm_id_ = rendezvous.comm_id;
  advertise_ = rendezvous.advertise;
  store_ = rendezvous.store;
  scope_ = rendezvous.scope;
  job_scope_ = rendezvous.job_scope.empty() ? scope_ : rendezvous.job_scope;
  store_host_ = rendezvous.store_host;
  kinds_ = transport_order(settings_.transport);
  enroll();

  Store& store = *store_;
  claim_rank(store);
  // Each transport publishes its own address; the rank info comes last, so
  // a rank that sees it finds the addresses too.
  for (std::size_t k = 0; k < kinds_.size(); ++k)
    store.set(rank_key(cat("address/", kinds_[k]->name), rank_), contexts_[k]->local_address(advertise_));
  RankInfo info = RankInfo::local(rank_);
  info.rdma = transports_see_rdma();
  info.cache_kib = Machine::private_cache_kib();
  info.link_mbps = Machine::link_speed_mbps(interface_of(list_interfaces(), advertise_));
  store.set(rank_key("info", rank_), info.encode());

  wait_for_ranks(store, "info", deadline);
  std::vector<RankInfo> infos(static_cast<std::size_t>(size_));
  Addresses addresses(kinds_.size(), std::vector<std::vector<std::byte>>(static_cast<std::size_t>(size_)));
  for (int r = 0; r < size_; ++r) {
    infos[r] = RankInfo::decode(store.get(rank_key("info", r), settings_.timeout));
    if (infos[r].rank != r)
      throw ProtocolMismatch(cat("rank ", rank_, ": the store holds rank info for rank ", infos[r].rank, " under rank ", r));
    for (std::size_t k = 0; k < kinds_.size(); ++k)
      addresses[k][r] = store.get(rank_key(cat("address/", kinds_[k]->name), r), settings_.timeout);
  }
  // With BRAID_TOPO_FILE or BRAID_TOPO_DUMP_FILE the plan comes from the
  // file, or from the inputs being dumped (hosts' XML through the store).
  std::optional<Plan> planned =
      plan_from_topology_settings(settings_, rank_, infos, store, [&](int r) { return rank_key("topo_xml", r); });
  // Nobody (in particular not the rank hosting the store) leaves start-up
  // before every rank has read what it needs from the store.
  store.set(rank_key("fetched", rank_), std::string_view("1"));
  wait_for_ranks(store, "fetched", deadline);
  // Every rank is here now, so rank 0 answers the clock exchange at once.
  if (!settings_.trace_file.empty()) {
    open_trace();
    measure_clock_offset(store, infos[static_cast<std::size_t>(rank_)].kernel_id == infos[0].kernel_id);
  }
  // Rank 0 declares the communicator formed, once, after a last look for a
  // failure (a duplicate claim): either every rank hears of that failure, or
  // the members formed without the latecomer, which then fails alone.
  const std::string formed = scope_ + "formed";
  if (rank_ == 0) {
    check_join_failure(store);
    store.set(formed, std::string_view("1"));
  } else {
    wait_for_keys(store, {formed}, deadline, [&](const std::vector<int>&) {
      return cat("rank 0 did not declare the communicator formed within ", seconds_of(settings_.timeout), " s");
    });
  }
  // Whoever reaches this store now (a second job, a restarted rank, the next
  // communicator of a loop that re-creates one at this address) is told the
  // communicator formed already, instead of joining.
  // A member whose connection to the store drops (a late reply) reconnects
  // past the seal with the communicator's id, which only members know.
  const Bytes member(comm_id_.bytes.begin(), comm_id_.bytes.end());
  if (store_server_) {
    store_server_->seal(member);
    if (settings_.elastic) store_server_->admit_joiners();
    hosted_ = std::make_shared<StoreHost>(runtime_, store_server_, scope_, comm_id_, rank_, size_, settings_.linger);
  }
  set_store_member(store, member);
  start(std::move(infos), std::move(addresses), std::move(planned));
}

void CommImpl::enroll() {
  owner_ = LinkOwner{.comm_id = comm_id_,
                     .rank = rank_,
                     .size = size_,
                     .tcp_streams = settings_.tcp_streams,
                     .tcp_buffer_bytes = settings_.tcp_buffer_bytes,
                     .timeout = settings_.timeout,
                     .derived = derived_};
  if (contexts_.empty()) {
    SockAddr bind = advertise_;
    bind.set_port(0);
    for (const TransportKind* kind : kinds_) contexts_.push_back(&runtime_.context(*kind, settings_, bind));
  }
  for (TransportContext* context : contexts_) context->enroll(owner_);
}

void CommImpl::start(std::vector<RankInfo> infos, Addresses addresses, std::optional<Plan> plan) {
  infos_ = std::move(infos);
  addresses_ = std::move(addresses);
  open_trace();
  // BRAID_HOST_ID on some ranks only would plan some ranks of one machine as
  // apart and others as together: every rank refuses it alike.
  check_host_id_overrides(infos_, cat("rank ", rank_));
  // The registry's costs go down to the planner (collectives/registry.hpp
  // says why the planner cannot read them itself).
  plan_ = plan ? std::move(*plan) : make_plan(infos_, settings_, algorithm_costs());
  // Every pair is reached by the first transport of the order that can
  // (InvalidArgument naming the pair when none can).
  link_kind_.assign(static_cast<std::size_t>(size_), -1);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) link_kind_[p] = kind_between(rank_, p);
  // Device buffers travel over the links themselves only when every pair of
  // ranks has a link that moves device memory; otherwise every rank stages
  // them through host memory, so that peers always agree on the protocol.
  device_links_ = true;
  for (int a = 0; a < size_ && device_links_; ++a)
    for (int b = a + 1; b < size_ && device_links_; ++b)
      device_links_ = kinds_[static_cast<std::size_t>(kind_between(a, b))]->device_memory;
  if (device_links_) {
    // Ranks that share a GPU take turns on it, which costs each message
    // about half a millisecond: small collectives go faster staged through
    // host memory. Every rank computes the same bound from the same infos.
    std::size_t per_gpu = 1;
    for (const RankInfo& i : infos_) {
      const auto local = static_cast<std::size_t>(std::count_if(
          infos_.begin(), infos_.end(), [&](const RankInfo& j) { return j.host_id == i.host_id; }));
      const std::size_t gpus = std::max<std::size_t>(i.gpus, 1);
      per_gpu = std::max(per_gpu, (local + gpus - 1) / gpus);
    }
    device_direct_min_ = settings_.device_direct_bytes.value_or(per_gpu > 1 ? kSharedGpuDirectUnit * per_gpu * per_gpu : 0);
  }
  // The finest slice any pair's transport takes (the same on every rank:
  // the plan decides every pair alike everywhere).
  slice_floor_ = 0;
  for (int a = 0; a < size_; ++a)
    for (int b = a + 1; b < size_; ++b)
      slice_floor_ = std::max(slice_floor_, contexts_[static_cast<std::size_t>(kind_between(a, b))]->min_slice_bytes());
  plan_.slice_floor = slice_floor_;  // the cost model prices the slices as cut
  local_rank_ = static_cast<int>(std::count_if(infos_.begin(), infos_.begin() + rank_, [&](const RankInfo& i) {
    return i.host_id == infos_[rank_].host_id;
  }));
  local_size_ = static_cast<int>(std::count_if(infos_.begin(), infos_.end(), [&](const RankInfo& i) {
    return i.host_id == infos_[rank_].host_id;
  }));
  // Ranks that share this kernel share its cores, whatever BRAID_HOST_ID says.
  int local = static_cast<int>(std::count_if(infos_.begin(), infos_.end(),
                                             [&](const RankInfo& i) { return i.kernel_id == infos_[rank_].kernel_id; }));
  // The CPUs those ranks may run on together (their affinities), not the
  // machine's: taskset, a cgroup or braid-run's binding narrow them.
  const int shared = RankInfo::shared_cpus(infos_, infos_[rank_].kernel_id);
  const unsigned cores = static_cast<unsigned>(shared > 0 ? shared : std::max(1u, std::thread::hardware_concurrency()));
  // Spinning pays only while each local rank has a core: then a waiting
  // rank spins for a SpinBudget (up to 20 us, shorter while spins keep
  // failing), which brings an 8-byte shared-memory all-reduce on 2 ranks
  // from the futex's wake-up time down to the copy's. With more ranks than
  // cores a spinning rank holds the core its peer needs, so it sleeps at
  // once. BRAID_SPIN_US fixes the spin instead.
  oversubscribed_ = static_cast<unsigned>(local) > cores;
  policy_.adaptive = !settings_.spin_us && !oversubscribed_;
  // Oversubscribed, a waiting rank polls and hands its core over with
  // sched_yield() for a while before it sleeps: the rank it waits for often
  // shares its core and runs at once, with no futex wake-up on either side
  // (as Open MPI does when oversubscribed). 4 ranks on 2 cores, 8 bytes:
  // 9-18 us against 35-42 us sleeping at once; 64 KiB 46-71 us against
  // 112-125.
  if (oversubscribed_ && !settings_.spin_us) policy_.yield_us = static_cast<int>(kOversubscribedYield.count());
  policy_.spin_us = settings_.spin_us.value_or(0);

  links_.resize(static_cast<std::size_t>(size_));
  link_ptrs_.assign(static_cast<std::size_t>(size_), nullptr);
  if (size_ > 1) {
    // The ring neighbours, at once: a dial now, and what the neighbour dials
    // is taken at the first operation. Best effort: what failed is tried
    // again when an operation needs it, and its error is that operation's
    // (a neighbour that already gave up in this communicator, a split child
    // whose faster members ran and failed before this one was made, is no
    // reason for the split itself to fail).
    const int pos = ring_position(plan_.ring, rank_);
    try {
      connect_peers({plan_.ring[(pos + 1) % size_], plan_.ring[(pos + size_ - 1) % size_]});
    } catch (const Error& e) {
      log_info("rank ", rank_, ": connecting the ring neighbours at start: ", e.what(), " (tried again when an "
               "operation needs them)");
    }
  }
  log_info("joined: ", describe());
  // Whether device buffers can be used, said once per process.
  static std::once_flag gpu_said;
  std::call_once(gpu_said, [] { log_info("gpu: ", device::status()); });
}

bool CommImpl::connect_peers(const std::vector<int>& peers, const Operation* starting) {
  // Every rank asks its kinds in the order of kinds_. Nothing here waits for
  // a peer's engine (transport.hpp), so the order matters for no deadlock.
  bool all = true;
  const Deadline deadline = starting != nullptr && starting->deadline.at() != Clock::time_point::max()
                                ? starting->deadline
                                : Deadline::after(settings_.timeout);
  for (std::size_t k = 0; k < kinds_.size(); ++k) {
    std::vector<PeerRef> wanted;
    for (int p : peers) {
      if (p == rank_ || link_ptrs_[p] != nullptr || link_kind_[p] != static_cast<int>(k)) continue;
      if (std::any_of(wanted.begin(), wanted.end(), [&](const auto& w) { return w.info->rank == p; })) continue;
      wanted.push_back({&infos_[p], addresses_[k][p]});
    }
    if (wanted.empty()) continue;
    auto links = contexts_[k]->connect(owner_, wanted, deadline,
                                       [&](int peer, bool urgent) { watch_connecting(peer, urgent, starting); });
    for (auto& link : links) {
      int p = link->peer();
      link->attach(engine_.poller());
      link_ptrs_[p] = link.get();
      links_[p] = std::move(link);
    }
    all = all && links.size() == wanted.size();
  }
  return all;
}

void CommImpl::watch_connecting(int peer, bool urgent, const Operation* starting) {
  if (aborted_.load(std::memory_order_relaxed))
    throw Aborted(cat("rank ", rank_, ": the communicator was aborted by the application (Comm::abort) while "
                      "connecting to rank ", peer));
  // A peer this rank is linked to may have given up meanwhile: its notice
  // waits unread on the idle link, and it is news for this wait too.
  for (auto& link : links_)
    if (link)
      if (auto why = link->departed())
        throw PeerLost(cat("rank ", rank_, ": while connecting to rank ", peer, ", learnt that ", *why));
  if (starting != nullptr) check_arrived(*starting);
  auto now = Clock::now();
  if (!urgent && now < last_connect_look_ + kFailureLook) return;
  last_connect_look_ = now;
  check_peer_failure(peer);
}

void CommImpl::check_arrived(const Operation& op) {
  const OpPlan& plan = *op.plan;
  if (!plan.step_tags.empty()) return;  // a group's steps carry tags of their own
  const OpDescriptor& mine = plan.schedule.descriptor;
  const auto context = mine.encode();
  for (const auto& link : links_) {
    if (!link) continue;
    std::optional<Tag> tag = link->waiting_tag();
    if (!tag || static_cast<std::uint32_t>(tag->id >> 32) != op.sequence || tag->context == context) continue;
    const std::uint32_t number = op.sequence & 0x7fffffffu;
    throw_other_collective(cat("rank ", rank_, ": ", link->describe_peer()), OpDescriptor::decode(tag->context), number,
                           mine, number);
  }
}

void CommImpl::check_peer_failure(int peer) {
  if (auto why = peer_failure_notice(peer))
    throw PeerLost(cat("rank ", rank_, ": rank ", peer, " (", infos_[peer].hostname, ") left the communicator: ", *why));
}

Failure CommImpl::with_peer_notice(Failure failure, const Operation& op) {
  // A notice read on the link is in the text already ("gave up").
  if (failure.code != ErrorCode::peer_lost || !op.plan || failure.what.find(" gave up") != std::string::npos)
    return failure;
  // Bounded as a whole: a busy store costs each question kFailureLook.
  const Deadline deadline = Deadline::after(4 * kFailureLook);
  for (int p : op.plan->peers) {
    if (deadline.expired()) break;
    if (auto why = peer_failure_notice(p)) {
      failure.what += cat("; rank ", p, " had published why it failed: ", *why);
      break;
    }
  }
  return failure;
}

std::optional<std::string> CommImpl::peer_failure_notice(int peer) {
  if (!store_ || store_lost_) return std::nullopt;
  std::optional<Bytes> why;
  try {
    why = store_->peek(failure_key(peer), kFailureLook);
  } catch (const Timeout&) {
    return std::nullopt;  // busy: look again next time
  } catch (const Error& e) {
    // The store went with the process hosting it, which finished (its
    // communicators finalized and its linger ended) or failed: the store only
    // carried news, and the connections themselves tell whether a peer is
    // gone (its process, its listener, its goodbye).
    store_lost_ = true;
    log_info("rank ", rank_, ": the braid store at ", store_name_, " is gone (rank ", store_host_, "'s process finished "
             "or failed); failures of peers are now learnt from the connections alone (", e.what(), ")");
    return std::nullopt;
  }
  if (!why) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(why->data()), why->size());
}

std::string CommImpl::failure_key(int rank) const { return StoreHost::failure_key(scope_, comm_id_, rank); }

int CommImpl::kind_between(int a, int b) const {
  std::string_view kind = plan_.transport_between(infos_[a], infos_[b]);
  auto it = std::find_if(kinds_.begin(), kinds_.end(), [&](const TransportKind* k) { return k->name == kind; });
  BRAID_CHECK(it != kinds_.end(), "rank ", rank_, ": the plan chose transport ", kind, " between ranks ", a, " and ",
              b, ", which this communicator did not make");
  return static_cast<int>(it - kinds_.begin());
}

std::string CommImpl::describe_transports() const {
  if (size_ == 1 || kinds_.empty()) return "no peers";
  std::vector<std::vector<std::string>> pairs(kinds_.size());
  for (int a = 0; a < size_; ++a)
    for (int b = a + 1; b < size_; ++b) pairs[static_cast<std::size_t>(kind_between(a, b))].push_back(cat(a, "-", b));
  const std::size_t all = static_cast<std::size_t>(size_) * static_cast<std::size_t>(size_ - 1) / 2;
  std::string out;
  for (std::size_t k = 0; k < kinds_.size(); ++k) {
    if (pairs[k].empty()) continue;
    if (pairs[k].size() == all) return cat(contexts_[k]->describe(owner_), " between all ranks");
    out += cat(out.empty() ? "" : "; ", contexts_[k]->describe(owner_), ": ");
    for (std::size_t i = 0; i < pairs[k].size() && i < 16; ++i) out += cat(i ? " " : "", pairs[k][i]);
    if (pairs[k].size() > 16) out += cat(" and ", pairs[k].size() - 16, " more pairs");
  }
  return out;
}

std::string CommImpl::describe() const {
  return cat("rank ", rank_, " of ", size_, " on ", infos_.empty() ? "?" : infos_[rank_].hostname, "; ",
             plan_.describe(), "; ", describe_transports(),
             device_links_ ? cat("; device buffers GPU to GPU from ", human_bytes(device_direct_min_), ", staged below")
                           : std::string(),
             "; slice ", human_bytes(settings_.slice_bytes),
             plan_.flow_window.bytes > 0
                 ? cat(", flow window ", human_bytes(plan_.flow_window.bytes), " between hosts",
                       settings_.flow_window ? "" : " of one kernel")
                 : std::string(),
             ", spin ",
             policy_.adaptive        ? std::string("adaptive")
             : policy_.yield_us > 0  ? cat("yield ", policy_.yield_us, " us")
                                     : cat(policy_.spin_us, " us"),
             ", timeout ",
             seconds_of(settings_.timeout), " s, tls ", settings_.tls.enabled() ? "on" : "off",
             settings_.launch_source.empty() ? std::string() : cat("; identity from ", settings_.launch_source));
}

CollectiveShape CommImpl::shape(std::size_t count, DataType type, ReduceOp op, int root) const {
  CollectiveShape s;
  s.rank = rank_;
  s.ranks = size_;
  s.ring = plan_.ring;
  s.hosts = plan_.hosts;
  s.count = count;
  s.type = type;
  s.op = op;
  s.root = root;
  s.window_groups = plan_.flow_window.groups;
  s.flow_window = plan_.flow_window.bytes;
  // The slice of the pipelined schedules: topology's pipeline_slice, the
  // rule the cost model prices, above the transports' floor (slice_floor_).
  const std::size_t bytes = count * size_of(type);
  // Device buffers moved directly: each message is a copy or kernel on the
  // GPU that completes before the next (measured on an H200, 2 ranks on its
  // one GPU: about 0.5 ms a message whatever its size, so a 16-slice 1 MiB
  // ring took 17 ms). Slicing buys no overlap there, so one slice per share.
  if (shaping_direct_) {
    s.slice_bytes = std::max(bytes / static_cast<std::size_t>(size_), kMinPipelineSlice);
    return s;
  }
  s.slice_bytes = pipeline_slice(bytes, size_, oversubscribed_, slice_floor_, settings_.slice_bytes);
  return s;
}

std::string_view CommImpl::algorithm_for(std::string_view collective, std::size_t bytes) const {
  return plan_.algorithm_for(collective, bytes);
}

OpDescriptor CommImpl::descriptor_of(OpDescriptor::Kind kind, DataType type, ReduceOp op, int root, std::size_t count,
                                     std::string_view algorithm) {
  return OpDescriptor{kind, type, op, OpDescriptor::algorithm_id(algorithm), root, count};
}

// ---- argument checks -------------------------------------------------------------

void CommImpl::null_buffer(std::size_t count, std::string_view op, std::string_view which) const {
  throw InvalidArgument(cat("rank ", rank_, ": ", op, ": ", which, " buffer is null but count is ", count));
}

void CommImpl::check_root(int root, std::string_view op) const {
  if (root < 0 || root >= size_)
    throw InvalidArgument(cat("rank ", rank_, ": ", op, ": root ", root, " is outside [0, ", size_, ")"));
}

std::size_t CommImpl::checked_bytes(std::size_t count, DataType type, std::size_t blocks, std::string_view op) const {
  std::size_t element = size_of(type);  // throws on an unknown type
  if (count > (std::size_t{1} << 62) / element / blocks)
    throw InvalidArgument(cat("rank ", rank_, ": ", op, ": count ", count, " is too large"));
  return count * element;
}


// ---- collectives ------------------------------------------------------------------

std::shared_ptr<Operation> CommImpl::all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  RecentShape& recent = recent_all_reduce_;
  if (!recent.valid || recent.count != count || recent.type != type || recent.op != op) {
    recent.valid = false;
    const std::size_t checked = checked_bytes(count, type, 1, "all_reduce");
    name_of(op);
    const std::string_view chosen = algorithm_for("all_reduce", checked);
    recent = RecentShape{true, count, type, op, checked, chosen,
                         descriptor_of(OpDescriptor::Kind::all_reduce, type, op, -1, count, chosen)};
  }
  const std::size_t bytes = recent.bytes;
  const std::string_view algo = recent.algorithm;
  check_buffer(send, count, "all_reduce", "send");
  check_buffer(recv, count, "all_reduce", "recv");
  check_overlap(rank_, "all_reduce", send, bytes, recv, bytes, recv);
  return make_op(
      {.descriptor = recent.descriptor},
      Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), bytes, bytes}, ++collective_sequence_,
      [&] {
        return build_schedule("all_reduce", algo, shape(count, type, op, 0));
      },
      [&] { return shape_text("all_reduce", type, name_of(op), count); });
}

std::shared_ptr<Operation> CommImpl::broadcast(const void* send, void* recv, std::size_t count, DataType type, int root) {
  const std::size_t bytes = checked_bytes(count, type, 1, "broadcast");
  check_root(root, "broadcast");
  check_buffer(recv, count, "broadcast", "recv");
  const void* in = rank_ == root ? send : nullptr;
  checks_at_root(root, [&] {
    check_buffer(send, count, "broadcast", "the root's send");
    check_overlap(rank_, "broadcast", in, bytes, recv, bytes, recv);
  });
  const std::string_view algo = algorithm_for("broadcast", bytes);
  const Buffers buffers{static_cast<const std::byte*>(in), static_cast<std::byte*>(recv), in ? bytes : 0, bytes};
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::broadcast, type, ReduceOp::sum, root, count, algo)},
      buffers, ++collective_sequence_,
      [&] {
        return build_schedule("broadcast", algo, shape(count, type, ReduceOp::sum, root));
      },
      [&] { return shape_text("broadcast", type, cat("root ", root), count); });
}

std::shared_ptr<Operation> CommImpl::reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                                            int root) {
  const std::size_t bytes = checked_bytes(count, type, 1, "reduce");
  name_of(op);
  check_root(root, "reduce");
  check_buffer(send, count, "reduce", "send");
  void* out = rank_ == root ? recv : nullptr;
  checks_at_root(root, [&] {
    check_buffer(recv, count, "reduce", "the root's recv");
    check_overlap(rank_, "reduce", send, bytes, out, bytes, out);
  });
  const Buffers buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(out), bytes, out ? bytes : 0};
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::reduce, type, op, root, count, "binomial")},
      buffers, ++collective_sequence_, [&] { return binomial_reduce(shape(count, type, op, root)); },
      [&] { return shape_text("reduce", type, cat(name_of(op), ", root ", root), count); });
}

std::shared_ptr<Operation> CommImpl::all_gather(const void* send, void* recv, std::size_t count, DataType type) {
  const std::size_t block = checked_bytes(count, type, static_cast<std::size_t>(size_), "all_gather");
  const std::size_t total = block * static_cast<std::size_t>(size_);
  check_buffer(send, count, "all_gather", "send");
  check_buffer(recv, count, "all_gather", "recv");
  check_overlap(rank_, "all_gather", send, block, recv, total,
                recv ? static_cast<std::byte*>(recv) + block * static_cast<std::size_t>(rank_) : nullptr);
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::all_gather, type, ReduceOp::sum, -1, count, "ring")},
      Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), block, total}, ++collective_sequence_,
      [&] { return ring_all_gather(shape(count, type, ReduceOp::sum, 0)); },
      [&] { return shape_text("all_gather", type, "", count); });
}

std::shared_ptr<Operation> CommImpl::reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                                    ReduceOp op) {
  const std::size_t block = checked_bytes(count, type, static_cast<std::size_t>(size_), "reduce_scatter");
  const std::size_t total = block * static_cast<std::size_t>(size_);
  name_of(op);
  check_buffer(send, count, "reduce_scatter", "send");
  check_buffer(recv, count, "reduce_scatter", "recv");
  check_overlap(rank_, "reduce_scatter", recv, block, send, total,
                send ? static_cast<const std::byte*>(send) + block * static_cast<std::size_t>(rank_) : nullptr);
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::reduce_scatter, type, op, -1, count, "ring")},
      Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), total, block}, ++collective_sequence_,
      [&] { return ring_reduce_scatter(shape(count, type, op, 0)); },
      [&] { return shape_text("reduce_scatter", type, name_of(op), count); });
}

std::shared_ptr<Operation> CommImpl::all_to_all(const void* send, void* recv, std::size_t count, DataType type) {
  const std::size_t block = checked_bytes(count, type, static_cast<std::size_t>(size_), "all_to_all");
  const std::size_t total = block * static_cast<std::size_t>(size_);
  check_buffer(send, count, "all_to_all", "send");
  check_buffer(recv, count, "all_to_all", "recv");
  check_overlap(rank_, "all_to_all", send, total, recv, total, recv);
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::all_to_all, type, ReduceOp::sum, -1, count, "pairwise")},
      Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), total, total}, ++collective_sequence_,
      [&] { return pairwise_all_to_all(shape(count, type, ReduceOp::sum, 0)); },
      [&] { return shape_text("all_to_all", type, "", count); });
}

std::shared_ptr<Operation> CommImpl::gather(const void* send, void* recv, std::size_t count, DataType type, int root) {
  const std::size_t block = checked_bytes(count, type, static_cast<std::size_t>(size_), "gather");
  const std::size_t total = block * static_cast<std::size_t>(size_);
  check_root(root, "gather");
  check_buffer(send, count, "gather", "send");
  void* out = rank_ == root ? recv : nullptr;
  checks_at_root(root, [&] {
    check_buffer(recv, count, "gather", "the root's recv");
    check_overlap(rank_, "gather", send, block, out, total,
                  out ? static_cast<std::byte*>(out) + block * static_cast<std::size_t>(rank_) : nullptr);
  });
  const Buffers buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(out), block, out ? total : 0};
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::gather, type, ReduceOp::sum, root, count, "direct")},
      buffers, ++collective_sequence_, [&] { return direct_gather(shape(count, type, ReduceOp::sum, root)); },
      [&] { return shape_text("gather", type, cat("root ", root), count); });
}

std::shared_ptr<Operation> CommImpl::scatter(const void* send, void* recv, std::size_t count, DataType type, int root) {
  const std::size_t block = checked_bytes(count, type, static_cast<std::size_t>(size_), "scatter");
  const std::size_t total = block * static_cast<std::size_t>(size_);
  check_root(root, "scatter");
  check_buffer(recv, count, "scatter", "recv");
  const void* in = rank_ == root ? send : nullptr;
  checks_at_root(root, [&] {
    check_buffer(send, count, "scatter", "the root's send");
    check_overlap(rank_, "scatter", recv, block, in, total,
                  in ? static_cast<const std::byte*>(in) + block * static_cast<std::size_t>(rank_) : nullptr);
  });
  const Buffers buffers{static_cast<const std::byte*>(in), static_cast<std::byte*>(recv), in ? total : 0, block};
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::scatter, type, ReduceOp::sum, root, count, "direct")},
      buffers, ++collective_sequence_, [&] { return direct_scatter(shape(count, type, ReduceOp::sum, root)); },
      [&] { return shape_text("scatter", type, cat("root ", root), count); });
}

namespace {

void check_peer(int rank, int size, int peer, std::string_view op) {
  if (peer < 0 || peer >= size)
    throw InvalidArgument(cat("rank ", rank, ": ", op, ": peer ", peer, " is outside [0, ", size, ")"));
  if (peer == rank) throw InvalidArgument(cat("rank ", rank, ": ", op, ": peer ", peer, " is this rank itself"));
}

// Point-to-point tags live apart from collective tags: the top bit is set and
// the rest counts the messages in one direction between this pair (the
// sender's sends to the receiver, the receiver's receives from the sender),
// which both sides agree on whatever order each issues its sends and receives
// in: both may send first.
constexpr std::uint32_t kPointToPoint = 0x80000000u;

}  // namespace

std::shared_ptr<Operation> CommImpl::point_to_point(StepKind kind, int peer, Buffers buffers, DataType type,
                                                    std::size_t count) {
  const bool sends = kind == StepKind::send;
  std::uint32_t& count_here = (sends ? p2p_sent_ : p2p_received_)[peer];
  const std::uint32_t sequence = kPointToPoint | (count_here++ & ~kPointToPoint);
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::point_to_point, type, ReduceOp::sum, -1, count, "p2p"),
       .peer = peer, .sends = sends},
      buffers, sequence,
      [&] {
        Schedule schedule;
        schedule.algorithm = "p2p";
        schedule.type = type;
        schedule.ranks = size_;
        if (sends) schedule.add(Step{.kind = StepKind::send, .peer = peer, .src = {BufferId::input, 0, buffers.input_bytes}});
        else schedule.add(Step{.kind = StepKind::recv, .peer = peer, .dst = {BufferId::output, 0, buffers.output_bytes}});
        return schedule;
      },
      [&] { return sends ? shape_text("send", type, cat("to rank ", peer), count)
                         : shape_text("recv", type, cat("from rank ", peer), count); });
}

std::shared_ptr<Operation> CommImpl::send(const void* buffer, std::size_t count, DataType type, int peer) {
  const std::size_t bytes = checked_bytes(count, type, 1, "send");
  check_peer(rank_, size_, peer, "send");
  check_buffer(buffer, count, "send", "send");
  return point_to_point(StepKind::send, peer, Buffers{static_cast<const std::byte*>(buffer), nullptr, bytes, 0}, type,
                        count);
}

std::shared_ptr<Operation> CommImpl::recv(void* buffer, std::size_t count, DataType type, int peer) {
  const std::size_t bytes = checked_bytes(count, type, 1, "recv");
  check_peer(rank_, size_, peer, "recv");
  check_buffer(buffer, count, "recv", "recv");
  return point_to_point(StepKind::recv, peer, Buffers{nullptr, static_cast<std::byte*>(buffer), 0, bytes}, type, count);
}

std::shared_ptr<Operation> CommImpl::barrier() {
  return make_op({.descriptor = descriptor_of(OpDescriptor::Kind::barrier, DataType::u8, ReduceOp::sum, -1, 0, "ring")},
                 Buffers{}, ++collective_sequence_, [&] { return ring_barrier(shape(0, DataType::u8, ReduceOp::sum, 0)); },
                 [] { return std::string("barrier"); });
}

// ---- split ------------------------------------------------------------------------

std::unique_ptr<CommImpl> CommImpl::split(int color, int key) {
  check_open();
  // Every rank takes part in the exchange below, even one whose color is bad
  // or kNoColor, so the others never wait for it; the error comes after.
  // Every rank counts every split, so all derive the same child ids.
  const std::uint32_t split_index = ++splits_;
  // The child's id differs from the parent's, its siblings' and every other
  // descendant's (a keyed hash of the split's number and color: flipping
  // bits by them gave a grandchild its grandparent's id), and every member
  // derives the same one.
  WireWriter what;
  what.str("braid split");
  what.u32(split_index);
  what.u32(static_cast<std::uint32_t>(color));
  // The child links through the same contexts as this communicator, so its
  // members' addresses are known already: the exchange carries only colors
  // and keys. A member enrolls its child before it, so that a member that
  // finishes the split first and dials at once is never refused; the rank
  // is known after it.
  const bool member = color >= 0;
  std::unique_ptr<CommImpl> child;
  if (member) {
    child = new_child(what.take());
    child->enroll();
  }
  struct Record {
    std::int32_t color, key;
  };
  std::vector<Record> all(static_cast<std::size_t>(size_));
  Record mine{color, key};
  // A failed exchange destroys the child unborn, which withdraws it.
  run(all_gather(&mine, all.data(), sizeof(Record), DataType::u8));
  if (color == Comm::kNoColor) return nullptr;
  if (color < 0)
    throw InvalidArgument(cat("rank ", rank_, ": split: color ", color, " must be non-negative or Comm::kNoColor (",
                              Comm::kNoColor, ")"));
  std::vector<int> members;  // parent ranks of the child's members, in child rank order
  for (int r = 0; r < size_; ++r)
    if (all[static_cast<std::size_t>(r)].color == color) members.push_back(r);
  // A color no other rank uses makes a communicator of one, as in MPI and NCCL.
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[static_cast<std::size_t>(a)].key < all[static_cast<std::size_t>(b)].key;
  });
  adopt_members(*child, members, cat(store_name_, " (split ", split_index, ", color ", color, ")"));
  return child;
}

std::unique_ptr<CommImpl> CommImpl::new_child(std::span<const std::byte> derivation) const {
  std::unique_ptr<CommImpl> child(new CommImpl(-1, 0, settings_));
  const Digest digest = hmac_sha256(comm_id_.bytes, derivation);
  std::copy_n(digest.begin(), child->comm_id_.bytes.size(), child->comm_id_.bytes.begin());
  child->advertise_ = advertise_;
  child->kinds_ = kinds_;
  child->contexts_ = contexts_;
  return child;
}

void CommImpl::adopt_members(CommImpl& child, const std::vector<int>& members, std::string name) {
  child.rank_ = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  child.size_ = static_cast<int>(members.size());
  child.p2p_sent_.assign(members.size(), 0);
  child.p2p_received_.assign(members.size(), 0);
  child.recorder_.set_owner(cat("rank ", child.rank_, " of ", child.size_));
  std::vector<RankInfo> infos;
  Addresses addresses(kinds_.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    RankInfo info = infos_[members[i]];
    info.rank = static_cast<int>(i);
    infos.push_back(info);
    for (std::size_t kind = 0; kind < kinds_.size(); ++kind) addresses[kind].push_back(addresses_[kind][members[i]]);
  }
  child.store_ = store_;
  child.store_server_ = store_server_;  // so that a grow of the child serves its newcomers from the same store
  child.hosted_ = hosted_;
  child.scope_ = scope_;
  child.job_scope_ = job_scope_;
  for (std::size_t i = 0; i < members.size(); ++i)
    if (members[i] == store_host_) child.store_host_ = static_cast<int>(i);
  child.store_name_ = std::move(name);
  child.store_addr_ = store_addr_;
  child.enroll();
  child.start(std::move(infos), std::move(addresses));
}

void CommImpl::settle_before_shrink(bool abort_parent) {
  // What is queued here goes first: aborted, or finished (its errors stay
  // with its operations; a failed communicator is shrunk all the same).
  if (abort_parent) {
    abort();
    return;
  }
  try {
    flush();
  } catch (const Error&) {
  }
}

std::unique_ptr<CommImpl> CommImpl::shrink(std::span<const int> excluded, bool abort_parent) {
  check_open();
  std::vector<int> out(excluded.begin(), excluded.end());
  std::sort(out.begin(), out.end());
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0 || out[i] >= size_)
      throw InvalidArgument(cat("rank ", rank_, ": shrink: rank ", out[i], " is not a rank of this communicator of ",
                                size_));
    if (i > 0 && out[i] == out[i - 1])
      throw InvalidArgument(cat("rank ", rank_, ": shrink: rank ", out[i], " is excluded twice"));
  }
  if (std::binary_search(out.begin(), out.end(), rank_))
    throw InvalidArgument(cat("rank ", rank_, ": shrink: this rank is in the list of ranks to exclude; an excluded "
                              "rank does not call shrink"));
  settle_before_shrink(abort_parent);
  // Every member counts its shrinks alike and passes the same list, so all
  // derive the same id, apart from this one's, its splits' and every other
  // shrink's (a member that passed another list derives another id, which
  // its peers never make: its dials are answered not_yet until the timeout).
  const std::uint32_t index = ++shrinks_;
  WireWriter what;
  what.str("braid shrink");
  what.u32(index);
  what.u32(static_cast<std::uint32_t>(out.size()));
  for (int r : out) what.u32(static_cast<std::uint32_t>(r));
  std::vector<int> members;
  for (int r = 0; r < size_; ++r)
    if (!std::binary_search(out.begin(), out.end(), r)) members.push_back(r);
  std::unique_ptr<CommImpl> child = new_child(what.take());
  // Its members make it without an exchange: a peer may dial before this
  // side made it, and is told to come again (LinkOwner::derived).
  child->derived_ = true;
  adopt_members(*child, members, cat(store_name_, " (shrink ", index, ", without ", describe_ranks(out), ")"));
  return child;
}

}  // namespace braid
