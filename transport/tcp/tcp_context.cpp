#include "transport/tcp/tcp_context.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/log.hpp"
#include "core/process.hpp"
#include "core/settings.hpp"
#include "core/text.hpp"
#include "transport/registry.hpp"
#include "transport/tcp/tcp_link.hpp"

namespace braid {
namespace {

// BRAID_TCP_BUFFER auto: sockets between ranks of one kernel (loopback,
// network namespaces of one machine) get 1 MiB buffers. The kernel's
// autotuning starts a connection's receive buffer at 128 KiB and grows it
// with what one round trip delivers, which over loopback never caught up
// with a collective's bursts: 4 ranks over loopback, all-reduce medians of 4-5
// interleaved launches, 1 MiB 729-756 us autotuned against 491-522 us, 4 MiB
// 4.4-4.8 ms against 3.7-3.8, no size slower beyond noise; 2 ranks within
// noise. Capped lower by net.core.rmem_max (stock kernels: 208 KiB, which
// measured 2x slower than autotuning at 1 MiB on 2 ranks), the kernel keeps
// its autotuning. Between machines it always does: a fixed buffer would cap
// a long link's window.
constexpr std::size_t kAutoTcpBuffer = 1u << 20;

std::size_t proc_size(const char* path) {
  std::size_t v = 0;
  std::ifstream(path) >> v;
  return v;
}

std::size_t buffer_for(const LinkOwner& owner, const RankInfo& peer) {
  if (owner.tcp_buffer_bytes) return *owner.tcp_buffer_bytes;
  static const bool allowed = proc_size("/proc/sys/net/core/rmem_max") >= kAutoTcpBuffer &&
                              proc_size("/proc/sys/net/core/wmem_max") >= kAutoTcpBuffer;
  static const std::uint64_t kernel = RankInfo::local_kernel_id();
  return allowed && peer.kernel_id == kernel ? kAutoTcpBuffer : 0;
}

// The peer answered not_yet: it has not made this derived communicator.
class NotMadeYet : public ProtocolMismatch {
 public:
  using ProtocolMismatch::ProtocolMismatch;
};

// A healthy peer acknowledges data within milliseconds and answers keepalive
// probes even while busy, so 10 s without either means the link or the host
// is gone: the socket then fails instead of stalling until the operation's
// own timeout (a downed link never fails a plain TCP connection).
constexpr Millis kLivenessBound{10000};
// Liveness of a peer being waited for: a local process is looked up every
// kLocalLivenessPoll; a remote listener is knocked on after
// kFirstLivenessCheck, then at doubling intervals up to kMaxLivenessInterval.
constexpr Millis kFirstLivenessCheck{100};
constexpr Millis kLocalLivenessPoll{50};
constexpr Millis kMaxLivenessInterval{5000};
constexpr Millis kKnockWait{50};
constexpr int kRefusalsMeanGone = 3;

Deadline min_deadline(Deadline a, Millis b) { return Deadline(std::min(a.at(), Clock::now() + b)); }

bool same_secret(const AuthKey& a, const AuthKey& b) {
  if (a.enabled() != b.enabled()) return false;
  if (!a.enabled()) return true;
  return same_digest(a.secret(), b.secret());
}

}  // namespace

SockAddr parse_tcp_address(std::span<const std::byte> bytes) {
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto addrs = resolve(parse_host_port(text, "peer TCP address"), "peer TCP address");
  return addrs.front();
}

TcpContext::TcpContext(EventLoop& service, std::function<void()> wake_engine, Options options)
    : options_(std::move(options)), kernel_id_(RankInfo::local(0).kernel_id), registry_(std::move(wake_engine)) {
  Fd listener = listen_tcp(options_.bind, options_.port_range, "the TCP transport's listener");
  acceptor_ = std::make_unique<TcpAcceptor>(service, std::move(listener),
                                            TcpAcceptor::Options{options_.auth_key, options_.tls}, registry_);
  log_info("TCP transport listens at ", acceptor_->address().to_string(), " for every communicator of this process");
}

TcpContext::~TcpContext() = default;

std::vector<std::byte> TcpContext::local_address(const SockAddr& advertise) const {
  SockAddr at = acceptor_->address().is_any_host() ? advertise : acceptor_->address();
  at.set_port(acceptor_->address().port());
  std::string text = at.to_string();
  auto* p = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(p, p + text.size());
}

bool TcpContext::serves(const ContextSetup& setup) const {
  const Settings& s = *setup.settings;
  if (!same_secret(s.auth_key, options_.auth_key)) return false;
  if (s.tls.enabled() != options_.tls.enabled() || (s.tls.enabled() && s.tls.subject() != options_.tls.subject()))
    return false;
  const SockAddr bound = acceptor_->address();
  if (s.port_range && !s.port_range->contains(bound.port())) return false;
  if (setup.bind.family() != bound.family()) return false;
  if (bound.is_any_host()) return true;
  return setup.bind.host_string() == bound.host_string() &&
         (setup.bind.port() == 0 || setup.bind.port() == bound.port());
}

void TcpContext::withdraw(const LinkOwner& owner, bool failed, std::string_view why) {
  // Connections a peer made for this rank and that it never took: the peer
  // holds them as links already (its hello was accepted), so it reads the
  // notice as from a link: why this rank gave up, or its goodbye.
  std::vector<Socket> untaken = registry_.withdraw(owner, failed, std::string(why));
  for (Socket& socket : untaken) TcpLink::send_withdrawal(socket, failed, why);
  std::lock_guard lock(liveness_mutex_);
  std::erase_if(liveness_, [&](const auto& l) {
    return std::get<0>(l.first) == owner.comm_id && std::get<1>(l.first) == owner.rank;
  });
  std::erase_if(again_, [&](const auto& a) {
    return std::get<0>(a.first) == owner.comm_id && std::get<1>(a.first) == owner.rank;
  });
}

std::string TcpContext::describe(const LinkOwner& owner) const {
  return cat("tcp (", owner.tcp_streams, owner.tcp_streams == 1 ? " stream" : " streams", ")");
}

std::vector<std::unique_ptr<Link>> TcpContext::connect(const LinkOwner& owner, std::span<const PeerRef> peers,
                                                       Deadline deadline, const PeerWatch& watch) {
  std::vector<std::unique_ptr<Link>> links;
  try {
    connect_each(owner, peers, deadline, watch, links);
  } catch (const Error& e) {
    // Links made before the failure go with it: each tells its peer why,
    // which already holds it as a link and would otherwise read a bare
    // close as this process dying.
    for (auto& link : links) link->abort(cat("rank ", owner.rank, " gave up: ", e.what()));
    throw;
  }
  return links;
}

void TcpContext::connect_each(const LinkOwner& owner, std::span<const PeerRef> peers, Deadline deadline,
                              const PeerWatch& watch, std::vector<std::unique_ptr<Link>>& links) {
  for (const PeerRef& peer : peers) {
    const int rank = peer.info->rank;
    if (watch) watch(rank, false);  // news that came before this try
    if (rank < owner.rank) {
      if (!owner.derived) {
        links.push_back(dial(owner, peer, deadline, watch));
        continue;
      }
      // A derived communicator (shrink): the peer may make its side a moment
      // after this one; it answers not_yet until then, and is asked again
      // after a pause that grows from 1 to 50 ms.
      const auto key = std::make_tuple(owner.comm_id, owner.rank, rank);
      {
        std::lock_guard lock(liveness_mutex_);
        if (auto it = again_.find(key); it != again_.end() && Clock::now() < it->second.at && !deadline.expired())
          continue;
      }
      try {
        links.push_back(dial(owner, peer, deadline, watch));
        std::lock_guard lock(liveness_mutex_);
        again_.erase(key);
      } catch (const NotMadeYet& e) {
        if (deadline.expired())
          throw Timeout(cat(e.what(), "; still so at the timeout: did every rank that is not excluded call shrink "
                                      "with the same list?"));
        std::lock_guard lock(liveness_mutex_);
        auto [it, fresh] = again_.try_emplace(key, Again{Clock::now(), std::chrono::milliseconds(1)});
        if (!fresh) it->second.pause = std::min<Clock::duration>(2 * it->second.pause, std::chrono::milliseconds(50));
        it->second.at = Clock::now() + it->second.pause;
      }
      continue;
    }
    // The peer dials this rank; its connection is on file once it did.
    if (auto taken = registry_.take(owner.comm_id, owner.rank, rank, owner.tcp_streams)) {
      const Hello& h = taken->hello;
      HelloStatus status = check_hello(h, owner.comm_id, owner.rank, owner.size, owner.tcp_streams);
      if (status != HelloStatus::accepted)
        throw ProtocolMismatch(cat("rank ", owner.rank, ": rank ", rank, " (", peer.info->hostname, ", ",
                                   taken->from.to_string(), ") connected with a hello this communicator refuses: ",
                                   braid::describe(status)));
      {
        std::lock_guard lock(liveness_mutex_);
        liveness_.erase({owner.comm_id, owner.rank, rank});
      }
      links.push_back(make_link(owner, *peer.info, taken->from, std::move(taken->sockets)));
      continue;
    }
    if (deadline.expired()) {
      std::string why = registry_.refusal(owner.comm_id, rank);
      throw Timeout(cat("rank ", owner.rank, ": rank ", rank, " did not connect to ", acceptor_->address().to_string(),
                        " within the timeout (",
                        why.empty() ? cat("did it, on ", peer.info->hostname, ", reach this operation, and can it "
                                          "reach this address?")
                                    : why,
                        ")"));
    }
    try {
      check_alive(owner, peer);
    } catch (const PeerLost&) {
      if (watch) watch(rank, true);  // the reason it published, if it did, says more
      throw;
    }
  }
}

void TcpContext::check_alive(const LinkOwner& owner, const PeerRef& peer) {
  auto now = Clock::now();
  std::unique_lock lock(liveness_mutex_);
  auto [it, made] = liveness_.try_emplace({owner.comm_id, owner.rank, peer.info->rank},
                                          Liveness{now + kFirstLivenessCheck, kFirstLivenessCheck});
  Liveness& liveness = it->second;
  if (now < liveness.next) return;
  const RankInfo& info = *peer.info;
  SockAddr addr = parse_tcp_address(peer.address);
  if (info.kernel_id == kernel_id_ && info.pid > 0) {
    // Same kernel: the process table answers at once and for free. It may be
    // another PID namespace's table (containers that share a host name), so
    // a process that seems gone is confirmed by its listener refusing.
    liveness.next = now + kLocalLivenessPoll;
    if (process_gone(info.pid) && try_connect_tcp(addr, Deadline::after(kKnockWait)).error == ECONNREFUSED)
      throw PeerLost(cat("rank ", owner.rank, ": rank ", info.rank, " (", info.hostname, ", pid ", info.pid,
                         ") is gone: its process exited or was killed before this rank could connect to it"));
    return;
  }
  // Another host: knock on its listener, less often the longer this lasts
  // (each knock is a connection the peer accepts and drops).
  liveness.interval = std::min(liveness.interval * 2, kMaxLivenessInterval);
  liveness.next = now + liveness.interval;
  ConnectAttempt knock = try_connect_tcp(addr, Deadline::after(kKnockWait));
  if (knock.error == ECONNREFUSED)
    throw PeerLost(cat("rank ", owner.rank, ": rank ", info.rank, " (", info.hostname, ", ", addr.to_string(),
                       ") is gone: its listener refuses connections (its process exited or crashed)"));
}

std::unique_ptr<Link> TcpContext::make_link(const LinkOwner& owner, const RankInfo& peer, const SockAddr& remote,
                                            std::vector<Socket> sockets) {
  for (auto& socket : sockets) {
    set_nonblocking(socket.fd(), true);
    set_nodelay(socket.fd());
    set_buffer_sizes(socket.fd(), buffer_for(owner, peer));
    set_liveness(socket.fd(), std::min(owner.timeout, kLivenessBound));
  }
  std::string name = cat("rank ", peer.rank, " (", peer.hostname, ", ", remote.to_string(), ")");
  log_info("rank ", owner.rank, ": connected to ", name, " over ", sockets.size(), " TCP stream(s)",
           sockets.front().tls() ? cat(" (", sockets.front().tls()->protocol(), ")") : "");
  return std::make_unique<TcpLink>(owner.rank, peer.rank, std::move(name), std::move(sockets));
}

std::unique_ptr<Link> TcpContext::dial(const LinkOwner& owner, const PeerRef& peer, Deadline deadline,
                                       const PeerWatch& watch) {
  const int rank = peer.info->rank;
  SockAddr addr = parse_tcp_address(peer.address);
  std::string what = cat("rank ", owner.rank, ": connecting to rank ", rank, " (", peer.info->hostname, ", ",
                         addr.to_string(), ")");
  // Every wait below is on the peer's service thread, never on its engine;
  // the watch still runs, so an abort or a peer's published failure ends it.
  InterruptScope scope([&] {
    if (watch) watch(rank, false);
  });
  std::vector<Socket> sockets;
  for (int stream = 0; stream < owner.tcp_streams; ++stream) {
    // The peer listened before it published its address, so a refusal means
    // it is gone; a few tries rule out a listener being replaced.
    Fd fd;
    int refusals = 0;
    while (!fd) {
      ConnectAttempt attempt = try_connect_tcp(addr, Deadline(std::min(deadline.at(), Clock::now() + kKnockWait * 20)));
      if (!attempt.error) {
        fd = std::move(attempt.fd);
        break;
      }
      if (attempt.error == ECONNREFUSED && ++refusals >= kRefusalsMeanGone) {
        if (watch) watch(rank, true);  // the reason it left, if it published one
        throw PeerLost(cat(what, ": nothing listens there any more (connection refused): rank ", rank,
                           "'s process exited or crashed"));
      }
      if (deadline.expired())
        throw Timeout(cat(what, ": could not connect before the deadline (last error: ", errno_text(attempt.error), ")"));
      InterruptScope::poll();
      std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(2), deadline.remaining()));
    }
    Socket socket;
    try {
      socket = open_socket(std::move(fd), options_.tls, TlsRole::client, deadline, what);
    } catch (const Error& e) {
      if (InterruptScope::fired()) throw;
      log_warn(e.what());
      if (e.code() == ErrorCode::peer_lost && watch) watch(rank, true);
      throw;
    }
    Hello hello;
    hello.stream = static_cast<std::uint16_t>(stream);
    hello.streams = static_cast<std::uint16_t>(owner.tcp_streams);
    hello.auth = options_.auth_key.enabled();
    hello.comm_id = owner.comm_id;
    hello.from_rank = static_cast<std::uint32_t>(owner.rank);
    hello.to_rank = static_cast<std::uint32_t>(rank);
    hello.world_size = static_cast<std::uint32_t>(owner.size);
    hello.derived = owner.derived;
    try {
      dial_handshake(socket, hello, deadline, what, watch);
    } catch (const PeerLost& e) {
      if (InterruptScope::fired()) throw;
      if (watch) watch(rank, true);
      throw PeerLost(cat(e.what(), " (rank ", rank, "'s process closed the connection before answering)"));
    }
    sockets.push_back(std::move(socket));
  }
  return make_link(owner, *peer.info, addr, std::move(sockets));
}

void TcpContext::dial_handshake(Socket& socket, const Hello& hello, Deadline deadline, const std::string& what,
                                const PeerWatch& watch) {
  auto refuse = [&](const std::string& why) {
    log_warn(what, ": ", why);
    throw ProtocolMismatch(cat(what, ": ", why));
  };
  auto read_reply = [&](Deadline until) {
    std::array<std::byte, kHelloReplyBytes> bytes;
    try {
      socket.recv_all(bytes.data(), bytes.size(), until, what);
    } catch (const ProtocolMismatch& e) {
      // Over TLS 1.3 a peer that refuses this rank's certificate says so
      // after the handshake looked done here: the alert comes in its place.
      log_warn(e.what());
      throw;
    }
    return decode_reply(bytes);
  };
  const bool keyed = options_.auth_key.enabled();
  auto hello_bytes = encode_hello(hello);
  // The peer's service thread answers at once; the bound only catches a
  // stalled host or network.
  const Deadline quick = min_deadline(deadline, TcpAcceptor::kHelloWait);
  socket.send_all(hello_bytes.data(), hello_bytes.size(), quick, what);
  HelloReply reply = read_reply(quick);
  if (reply.status == HelloStatus::challenge) {
    if (!keyed)
      refuse("the peer sent an authentication challenge but this rank has no key "
             "(set the same BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE on every rank)");
    Nonce server_nonce;
    socket.recv_all(server_nonce.data(), server_nonce.size(), quick, what);
    AuthProof mine{.client_nonce = random_nonce()};
    mine.proof = handshake_proof(options_.auth_key, AuthRole::client, kTcpAuthProtocol, mine.client_nonce,
                                 server_nonce, hello_bytes);
    auto proof_bytes = encode_auth_proof(mine);
    socket.send_all(proof_bytes.data(), proof_bytes.size(), quick, what);
    reply = read_reply(quick);
    if (reply.status == HelloStatus::accepted) {
      Digest theirs;
      socket.recv_all(theirs.data(), theirs.size(), quick, what);
      Digest expected = handshake_proof(options_.auth_key, AuthRole::server, kTcpAuthProtocol, mine.client_nonce,
                                        server_nonce, hello_bytes);
      if (!same_digest(theirs, expected))
        refuse("authentication failed: the peer could not prove it holds the shared key "
               "(the ranks hold different keys, or something else listens at this address)");
      return;
    }
  } else if (reply.status == HelloStatus::accepted && keyed) {
    refuse("authentication failed: the peer accepted the connection without authenticating it, "
           "so it is not a braid rank holding the shared key");
  }
  if (reply.status == HelloStatus::finalized || reply.status == HelloStatus::gave_up) {
    if (reply.status == HelloStatus::gave_up && watch) watch(static_cast<int>(hello.to_rank), true);  // the reason it published
    throw PeerLost(cat(what, ": ", braid::describe(reply.status)));
  }
  if (reply.status == HelloStatus::not_yet) throw NotMadeYet(cat(what, ": ", braid::describe(reply.status)));
  if (reply.status == HelloStatus::wrong_version)
    refuse(cat("the peer refused the connection: ", braid::describe(reply.status), " (it speaks version ", reply.version,
               ", this rank ", kTcpProtocolVersion, ")"));
  if (reply.status != HelloStatus::accepted) refuse(cat("the peer refused the connection: ", braid::describe(reply.status)));
}

}  // namespace braid
