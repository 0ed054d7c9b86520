#include "transport/tcp/tcp_transport.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <thread>

#include "core/log.hpp"
#include "core/process.hpp"
#include "core/text.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/tcp_link.hpp"

namespace braid {
namespace {

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

}  // namespace

SockAddr parse_tcp_address(std::span<const std::byte> bytes) {
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto addrs = resolve(parse_host_port(text, "peer TCP address"), "peer TCP address");
  return addrs.front();
}

TcpTransport::TcpTransport(TcpOptions options)
    : options_(std::move(options)), acceptor_(options_), kernel_id_(RankInfo::local(options_.rank).kernel_id) {}

std::vector<std::byte> TcpTransport::local_address() const {
  std::string text = acceptor_.address().to_string();
  auto* p = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(p, p + text.size());
}

std::unique_ptr<Link> TcpTransport::connect(const RankInfo& peer, std::span<const std::byte> peer_address,
                                            Deadline deadline) {
  PeerRef ref{&peer, peer_address};
  auto links = connect_all(std::span(&ref, 1), deadline, {});
  return std::move(links.front());
}

std::string TcpTransport::describe() const {
  return cat("tcp (", options_.streams, options_.streams == 1 ? " stream" : " streams", ")");
}

std::vector<std::unique_ptr<Link>> TcpTransport::connect_all(std::span<const PeerRef> peers, Deadline deadline,
                                                            const PeerWatch& watch) {
  std::vector<std::unique_ptr<Link>> links(peers.size());
  std::vector<std::size_t> order(peers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return peers[a].info->rank < peers[b].info->rank; });
  for (bool dialing : {true, false}) {
    for (std::size_t i : order) {
      const PeerRef& peer = peers[i];
      const int rank = peer.info->rank;
      if ((rank < options_.rank) != dialing) continue;
      if (watch) watch(rank, false);  // news that came before this wait began
      Liveness liveness{Clock::now() + kFirstLivenessCheck, kFirstLivenessCheck};
      InterruptScope scope([&] {
        if (watch) watch(rank, false);
        try {
          check_alive(peer, liveness);
        } catch (const PeerLost&) {
          if (watch) watch(rank, true);  // the reason it published, if it did, says more
          throw;
        }
      });
      if (dialing) {
        SockAddr remote = parse_tcp_address(peer.address);
        links[i] = make_link(*peer.info, remote, dial(peer, deadline, watch));
      } else {
        SockAddr remote;
        auto sockets = acceptor_.accept_from(rank, deadline, &remote);
        links[i] = make_link(*peer.info, remote, std::move(sockets));
      }
    }
  }
  return links;
}

void TcpTransport::check_alive(const PeerRef& peer, Liveness& liveness) {
  auto now = Clock::now();
  if (now < liveness.next) return;
  const RankInfo& info = *peer.info;
  SockAddr addr = parse_tcp_address(peer.address);
  if (info.kernel_id == kernel_id_ && info.pid > 0) {
    // Same kernel: the process table answers at once and for free. It may be
    // another PID namespace's table (containers that share a host name), so
    // a process that seems gone is confirmed by its listener refusing.
    liveness.next = now + kLocalLivenessPoll;
    if (process_gone(info.pid) && try_connect_tcp(addr, Deadline::after(kKnockWait)).error == ECONNREFUSED)
      throw PeerLost(cat("rank ", options_.rank, ": rank ", info.rank, " (", info.hostname, ", pid ", info.pid,
                         ") is gone: its process exited or was killed before this rank could connect to it"));
    return;
  }
  // Another host: knock on its listener, less often the longer this lasts
  // (each knock is a connection the peer accepts and drops).
  liveness.interval = std::min(liveness.interval * 2, kMaxLivenessInterval);
  liveness.next = now + liveness.interval;
  ConnectAttempt knock = try_connect_tcp(addr, Deadline::after(kKnockWait));
  if (knock.error == ECONNREFUSED)
    throw PeerLost(cat("rank ", options_.rank, ": rank ", info.rank, " (", info.hostname, ", ", addr.to_string(),
                       ") is gone: its listener refuses connections (it exited, crashed, aborted or destroyed the "
                       "communicator)"));
}

std::unique_ptr<Link> TcpTransport::make_link(const RankInfo& peer, const SockAddr& remote,
                                              std::vector<Socket> sockets) {
  for (auto& socket : sockets) {
    set_nonblocking(socket.fd(), true);
    set_nodelay(socket.fd());
    set_buffer_sizes(socket.fd(), options_.buffer_bytes);
    set_liveness(socket.fd(), std::min(options_.timeout, kLivenessBound));
  }
  std::string name = cat("rank ", peer.rank, " (", peer.hostname, ", ", remote.to_string(), ")");
  log_info("connected to ", name, " over ", sockets.size(), " TCP stream(s)",
           sockets.front().tls() ? cat(" (", sockets.front().tls()->protocol(), ")") : "");
  return std::make_unique<TcpLink>(options_.rank, peer.rank, std::move(name), std::move(sockets));
}

std::vector<Socket> TcpTransport::dial(const PeerRef& peer, Deadline deadline, const PeerWatch& watch) {
  int rank = peer.info->rank;
  SockAddr addr = parse_tcp_address(peer.address);
  std::string what = cat("rank ", options_.rank, ": connecting to rank ", rank, " (", peer.info->hostname, ", ",
                         addr.to_string(), ")");
  std::vector<Socket> sockets;
  for (int stream = 0; stream < options_.streams; ++stream) {
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
                           " exited, crashed, aborted or destroyed the communicator"));
      }
      if (deadline.expired())
        throw Timeout(cat(what, ": could not connect before the deadline (last error: ", errno_text(attempt.error), ")"));
      InterruptScope::poll();
      std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(2), deadline.remaining()));
    }
    Socket socket;
    try {
      // The TLS server answers when the peer gets round to accepting: the
      // whole deadline, as for the first reply below.
      socket = open_socket(std::move(fd), options_.tls, TlsRole::client, deadline, what);
    } catch (const Error& e) {
      if (InterruptScope::fired()) throw;
      log_warn(e.what());
      if (e.code() == ErrorCode::peer_lost && watch) watch(rank, true);
      throw;
    }
    Hello hello;
    hello.stream = static_cast<std::uint16_t>(stream);
    hello.streams = static_cast<std::uint16_t>(options_.streams);
    hello.auth = options_.auth_key.enabled();
    hello.comm_id = options_.comm_id;
    hello.from_rank = static_cast<std::uint32_t>(options_.rank);
    hello.to_rank = static_cast<std::uint32_t>(rank);
    hello.world_size = static_cast<std::uint32_t>(options_.world_size);
    try {
      dial_handshake(socket, hello, deadline, what);
    } catch (const PeerLost& e) {
      // The peer closed its listener with this connection still queued: it
      // gave up, and may have said why.
      if (InterruptScope::fired()) throw;
      if (watch) watch(rank, true);
      throw PeerLost(cat(e.what(), " (rank ", rank, " closed the connection before answering: it exited, crashed, "
                         "aborted or destroyed the communicator)"));
    }
    sockets.push_back(std::move(socket));
  }
  return sockets;
}

void TcpTransport::dial_handshake(Socket& socket, const Hello& hello, Deadline deadline, const std::string& what) {
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
  socket.send_all(hello_bytes.data(), hello_bytes.size(), deadline, what);
  // The first answer comes when the peer gets round to accepting, which may
  // be late; once it is talking to us, the rest is quick.
  HelloReply reply = read_reply(deadline);
  const Deadline quick = min_deadline(deadline, TcpAcceptor::kHelloWait);
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
  if (reply.status == HelloStatus::wrong_version)
    refuse(cat("the peer refused the connection: ", braid::describe(reply.status), " (it speaks version ", reply.version,
               ", this rank ", kTcpProtocolVersion, ")"));
  if (reply.status != HelloStatus::accepted) refuse(cat("the peer refused the connection: ", braid::describe(reply.status)));
}

}  // namespace braid
