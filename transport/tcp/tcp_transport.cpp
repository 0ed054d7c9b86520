#include "transport/tcp/tcp_transport.hpp"

#include <algorithm>

#include "core/log.hpp"
#include "core/text.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/tcp_link.hpp"

namespace braid {
namespace {

// How long an accepted connection may take to present its Hello: long enough
// for a loaded machine, short enough that a silent stranger cannot stall us.
constexpr Millis kHelloWait{5000};

// A healthy peer acknowledges data within milliseconds and answers keepalive
// probes even while busy, so 10 s without either means the link or the host
// is gone: the socket then fails instead of stalling until the operation's
// own timeout (a downed link never fails a plain TCP connection).
constexpr Millis kLivenessBound{10000};

Deadline min_deadline(Deadline a, Millis b) { return Deadline(std::min(a.at(), Clock::now() + b)); }

}  // namespace

SockAddr parse_tcp_address(std::span<const std::byte> bytes) {
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto addrs = resolve(parse_host_port(text, "peer TCP address"), "peer TCP address");
  return addrs.front();
}

TcpTransport::TcpTransport(TcpOptions options) : options_(std::move(options)) {
  SockAddr bind_to = options_.listen_address;
  bind_to.set_port(0);
  listener_ = listen_tcp(bind_to, cat("rank ", options_.rank, ": TCP transport listener"));
  listen_address_ = braid::local_address(listener_.get());
}

std::vector<std::byte> TcpTransport::local_address() const {
  std::string text = listen_address_.to_string();
  auto* p = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(p, p + text.size());
}

std::unique_ptr<Link> TcpTransport::connect(const RankInfo& peer, std::span<const std::byte> peer_address,
                                            Deadline deadline) {
  PeerRef ref{&peer, peer_address};
  auto links = connect_all(std::span(&ref, 1), deadline);
  return std::move(links.front());
}

std::vector<std::unique_ptr<Link>> TcpTransport::connect_all(std::span<const PeerRef> peers, Deadline deadline) {
  std::vector<std::unique_ptr<Link>> links(peers.size());
  std::vector<std::size_t> order(peers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return peers[a].info->rank < peers[b].info->rank; });
  for (std::size_t i : order)
    if (peers[i].info->rank < options_.rank) links[i] = make_link(*peers[i].info, dial(peers[i], deadline));
  for (std::size_t i : order)
    if (peers[i].info->rank > options_.rank)
      links[i] = make_link(*peers[i].info, accept_from(peers[i].info->rank, deadline));
  return links;
}

std::unique_ptr<Link> TcpTransport::make_link(const RankInfo& peer, std::vector<Socket> sockets) {
  SockAddr remote = peer_address(sockets.front().fd());
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

std::vector<Socket> TcpTransport::dial(const PeerRef& peer, Deadline deadline) {
  int rank = peer.info->rank;
  SockAddr addr = parse_tcp_address(peer.address);
  std::string what = cat("rank ", options_.rank, ": connecting to rank ", rank, " (", peer.info->hostname, ", ",
                         addr.to_string(), ")");
  std::vector<Socket> sockets;
  for (int stream = 0; stream < options_.streams; ++stream) {
    Socket socket;
    try {
      // The TLS server answers when the peer gets round to accepting: the
      // whole deadline, as for the first reply below.
      socket = open_socket(connect_tcp({addr}, deadline, what), options_.tls, TlsRole::client, deadline, what);
    } catch (const Error& e) {
      log_warn(e.what());
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
    dial_handshake(socket, hello, deadline, what);
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
  const Deadline quick = min_deadline(deadline, kHelloWait);
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
    refuse(cat("the peer refused the connection: ", describe(reply.status), " (it speaks version ", reply.version,
               ", this rank ", kTcpProtocolVersion, ")"));
  if (reply.status != HelloStatus::accepted) refuse(cat("the peer refused the connection: ", describe(reply.status)));
}

HelloStatus TcpTransport::authenticate(Socket& socket, std::span<const std::byte> hello_bytes, Deadline deadline,
                                       const std::string& what, Digest& server_proof) {
  Nonce server_nonce = random_nonce();
  auto challenge = encode_reply(HelloStatus::challenge);
  std::array<std::byte, kHelloReplyBytes + kNonceBytes> out;
  std::copy(challenge.begin(), challenge.end(), out.begin());
  std::copy(server_nonce.begin(), server_nonce.end(), out.begin() + kHelloReplyBytes);
  socket.send_all(out.data(), out.size(), deadline, what);
  std::array<std::byte, kAuthProofBytes> in;
  socket.recv_all(in.data(), in.size(), deadline, what);
  AuthProof theirs = decode_auth_proof(in);
  Digest expected = handshake_proof(options_.auth_key, AuthRole::client, kTcpAuthProtocol, theirs.client_nonce,
                                    server_nonce, hello_bytes);
  if (!same_digest(theirs.proof, expected)) return HelloStatus::auth_failed;
  server_proof = handshake_proof(options_.auth_key, AuthRole::server, kTcpAuthProtocol, theirs.client_nonce,
                                 server_nonce, hello_bytes);
  return HelloStatus::accepted;
}

bool TcpTransport::accept_one(Deadline deadline) {
  auto conn = accept_tcp(listener_.get(), deadline);
  if (!conn) return false;
  SockAddr from = peer_address(conn->get());
  // One deadline for the whole handshake, TLS included, so a silent or slow
  // stranger costs at most kHelloWait.
  const Deadline quick = min_deadline(deadline, kHelloWait);
  const std::string what = "handshake";  // the log line below names the rank and the address
  std::array<std::byte, kHelloBytes> bytes;
  try {
    if (options_.tls.enabled() && !starts_tls(conn->get(), quick, what)) {
      refuse_clear_hello(std::move(*conn), from, quick);
      return true;
    }
    Socket socket = open_socket(std::move(*conn), options_.tls, TlsRole::server, quick, what);
    socket.recv_all(bytes.data(), bytes.size(), quick, what);
    Hello hello = decode_hello(bytes);
    const bool keyed = options_.auth_key.enabled();
    HelloStatus status =
        hello.version != kTcpProtocolVersion ? HelloStatus::wrong_version : check_auth_mode(hello, keyed);
    // With a key, nothing about this communicator is said to a peer that has
    // not proved it holds the key.
    Digest server_proof{};
    if (status == HelloStatus::accepted && keyed) status = authenticate(socket, bytes, quick, what, server_proof);
    if (status == HelloStatus::accepted)
      status = check_hello(hello, options_.comm_id, options_.rank, options_.world_size, options_.streams);
    auto reply = encode_reply(status);
    socket.send_all(reply.data(), reply.size(), quick, what);
    if (status == HelloStatus::accepted && keyed)
      socket.send_all(server_proof.data(), server_proof.size(), quick, what);
    if (status != HelloStatus::accepted) {
      std::string claim = hello.version == kTcpProtocolVersion ? cat(" claiming rank ", hello.from_rank) : "";
      log_warn("rank ", options_.rank, ": refused a connection from ", from.to_string(), claim, ": ", describe(status));
      if (hello.version == kTcpProtocolVersion && hello.from_rank < static_cast<std::uint32_t>(options_.world_size))
        refused_[static_cast<int>(hello.from_rank)] =
            cat("a connection from ", from.to_string(), " claiming to be it was refused: ", describe(status));
      return true;
    }
    accepted_[{static_cast<int>(hello.from_rank), hello.stream}] = std::move(socket);
  } catch (const Error& e) {
    log_warn("rank ", options_.rank, ": refused a connection from ", from.to_string(), ": ", e.what());
    refused_unnamed_ = cat("a connection from ", from.to_string(), " was refused: ", e.what());
  }
  return true;
}

void TcpTransport::refuse_clear_hello(Fd fd, const SockAddr& from, Deadline deadline) {
  std::array<std::byte, kHelloBytes> bytes;
  recv_all(fd.get(), bytes.data(), bytes.size(), deadline, "handshake");
  Hello hello = decode_hello(bytes);
  auto reply = encode_reply(HelloStatus::tls_required);
  send_all(fd.get(), reply.data(), reply.size(), deadline, "handshake");
  std::string claim = hello.version == kTcpProtocolVersion ? cat(" claiming rank ", hello.from_rank) : "";
  log_warn("rank ", options_.rank, ": refused a connection from ", from.to_string(), claim, ": ",
           describe(HelloStatus::tls_required));
  if (hello.version == kTcpProtocolVersion && hello.from_rank < static_cast<std::uint32_t>(options_.world_size))
    refused_[static_cast<int>(hello.from_rank)] = cat("a connection from ", from.to_string(),
                                                      " claiming to be it was refused: ",
                                                      describe(HelloStatus::tls_required));
}

std::vector<Socket> TcpTransport::accept_from(int peer, Deadline deadline) {
  std::vector<Socket> sockets;
  for (int stream = 0; stream < options_.streams; ++stream) {
    auto key = std::make_pair(peer, stream);
    while (accepted_.find(key) == accepted_.end()) {
      if (!accept_one(deadline)) {
        auto refusal = refused_.find(peer);
        std::string why = refusal != refused_.end() ? refusal->second
                          : !refused_unnamed_.empty() ? refused_unnamed_
                                                      : "did it start, and can it reach this address?";
        throw Timeout(cat("rank ", options_.rank, ": rank ", peer, " did not connect to ", listen_address_.to_string(),
                          " within the timeout (", why, ")"));
      }
    }
    sockets.push_back(std::move(accepted_[key]));
    accepted_.erase(key);
  }
  return sockets;
}

}  // namespace braid
