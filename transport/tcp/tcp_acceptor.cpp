#include "transport/tcp/tcp_acceptor.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "braid/types.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
TcpAcceptor::TcpAcceptor(const TcpOptions& options) : options_(options) {
  SockAddr bind_to = options_.listen_address;
  bind_to.set_port(0);
  listener_ = listen_tcp(bind_to, options_.port_range, cat("rank ", options_.rank, ": TCP transport listener"));
  set_nonblocking(listener_.get(), true);
  address_ = local_address(listener_.get());
  log_info("rank ", options_.rank, ": TCP transport listens at ", address_.to_string());
}

void TcpAcceptor::close() {
  listener_.reset();
  pending_.clear();
}

void TcpAcceptor::accept_new() {
  if (!listener_) return;
  while (true) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: what is pending stays queued.
      warn_limited("rank ", options_.rank, ": cannot accept a connection: ", errno_text(errno));
      return;
    }
    Fd conn(fd);
    SockAddr from = peer_address(fd);
    if (pending_.size() >= kMaxPending) {
      warn_limited("rank ", options_.rank, ": closing the connection from ", pending_.front().from.to_string(),
                   ": more than ", kMaxPending, " connections wait to say hello");
      pending_.erase(pending_.begin());
    }
    pending_.push_back(Pending{std::move(conn), from, Clock::now()});
  }
}

bool TcpAcceptor::serve(Pending& p) {
  // What must be there before the handshake can run without waiting on a
  // silent peer: the first byte with TLS (its ClientHello), else the hello.
  const std::size_t needed = options_.tls.enabled() ? 1 : kHelloBytes;
  std::array<std::byte, kHelloBytes> head;
  ssize_t n = ::recv(p.fd.get(), head.data(), needed, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    log_trace("rank ", options_.rank, ": a connection from ", p.from.to_string(), " closed without a word");
    return true;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (Clock::now() - p.since < kHelloWait) return false;
      warn_limited("rank ", options_.rank, ": closing the connection from ", p.from.to_string(), ": it sent nothing within ",
                   seconds_of(kHelloWait), " s");
      return true;
    }
    log_trace("rank ", options_.rank, ": a connection from ", p.from.to_string(), " failed: ", errno_text(errno));
    return true;
  }
  const auto got = static_cast<std::size_t>(n);
  // Garbage is refused on its first bytes: no braid hello starts that way.
  std::uint32_t magic = 0;
  const bool garbage = !options_.tls.enabled() && got >= 4 &&
                       (std::memcpy(&magic, head.data(), 4), magic != kTcpMagic) &&
                       !looks_like_tls(std::span(head).first(got));
  if (got < needed && !garbage) {
    if (Clock::now() - p.since < kHelloWait) return false;
    warn_limited("rank ", options_.rank, ": closing the connection from ", p.from.to_string(), ": it sent ", got,
                 " bytes of a hello and then nothing within ", seconds_of(kHelloWait), " s");
    return true;
  }
  if (garbage) {
    try {
      std::array<std::byte, kHelloBytes> whole{};
      std::copy_n(head.begin(), got, whole.begin());
      decode_hello(whole);
    } catch (const ProtocolMismatch& e) {
      warn_limited("rank ", options_.rank, ": refused a connection from ", p.from.to_string(), ": ", e.what());
      refused_unnamed_ = cat("a connection from ", p.from.to_string(), " was refused: ", e.what());
    }
    return true;
  }
  Fd fd = std::move(p.fd);
  set_nonblocking(fd.get(), false);
  handshake(std::move(fd), p.from);
  return true;
}

void TcpAcceptor::handshake(Fd conn, const SockAddr& from) {
  const Deadline quick = Deadline::after(kHandshakeStep);
  const std::string what = "handshake";  // the log line below names the rank and the address
  std::array<std::byte, kHelloBytes> bytes;
  try {
    if (options_.tls.enabled() && !starts_tls(conn.get(), quick, what)) {
      refuse_clear_hello(std::move(conn), from, quick);
      return;
    }
    Socket socket = open_socket(std::move(conn), options_.tls, TlsRole::server, quick, what);
    socket.recv_all(bytes.data(), bytes.size(), quick, what);
    Hello hello = decode_hello(bytes);
    const bool keyed = options_.auth_key.enabled();
    HelloStatus status =
        hello.version != kTcpProtocolVersion ? HelloStatus::wrong_version : check_auth_mode(hello, keyed);
    // With a key, nothing about this communicator is said to a peer that has
    // not proved it holds the key.
    Digest server_proof{};
    if (status == HelloStatus::accepted && keyed) status = authenticate(socket, bytes, quick, server_proof);
    if (status == HelloStatus::accepted)
      status = check_hello(hello, options_.comm_id, options_.rank, options_.world_size, options_.streams);
    auto reply = encode_reply(status);
    socket.send_all(reply.data(), reply.size(), quick, what);
    if (status == HelloStatus::accepted && keyed)
      socket.send_all(server_proof.data(), server_proof.size(), quick, what);
    if (status != HelloStatus::accepted) {
      note_refusal(hello, from, describe(status));
      return;
    }
    accepted_[{static_cast<int>(hello.from_rank), hello.stream}] = Accepted{std::move(socket), from};
  } catch (const Error& e) {
    // An interruption (abort, a dead peer) is not this connection's fault.
    if (InterruptScope::fired()) throw;
    warn_limited("rank ", options_.rank, ": refused a connection from ", from.to_string(), ": ", e.what());
    refused_unnamed_ = cat("a connection from ", from.to_string(), " was refused: ", e.what());
  }
}

void TcpAcceptor::note_refusal(const Hello& hello, const SockAddr& from, std::string_view why) {
  const bool named = hello.version == kTcpProtocolVersion;
  warn_limited("rank ", options_.rank, ": refused a connection from ", from.to_string(),
               named ? cat(" claiming rank ", hello.from_rank) : "", ": ", why);
  if (named && hello.from_rank < static_cast<std::uint32_t>(options_.world_size))
    refused_[static_cast<int>(hello.from_rank)] =
        cat("a connection from ", from.to_string(), " claiming to be it was refused: ", why);
}

HelloStatus TcpAcceptor::authenticate(Socket& socket, std::span<const std::byte> hello_bytes, Deadline deadline,
                                      Digest& server_proof) {
  const std::string what = "handshake";
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

void TcpAcceptor::refuse_clear_hello(Fd fd, const SockAddr& from, Deadline deadline) {
  std::array<std::byte, kHelloBytes> bytes;
  recv_all(fd.get(), bytes.data(), bytes.size(), deadline, "handshake");
  Hello hello = decode_hello(bytes);
  auto reply = encode_reply(HelloStatus::tls_required);
  send_all(fd.get(), reply.data(), reply.size(), deadline, "handshake");
  note_refusal(hello, from, describe(HelloStatus::tls_required));
}

std::vector<Socket> TcpAcceptor::accept_from(int peer, Deadline deadline, SockAddr* from) {
  std::vector<Socket> sockets;
  for (int stream = 0; stream < options_.streams; ++stream) {
    const auto key = std::make_pair(peer, stream);
    while (accepted_.find(key) == accepted_.end()) {
      accept_new();
      // serve() may run a handshake that takes a moment; the list is not
      // touched meanwhile except by this loop.
      for (std::size_t i = 0; i < pending_.size();) {
        if (serve(pending_[i])) pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        else ++i;
      }
      if (accepted_.find(key) != accepted_.end()) break;
      if (deadline.expired()) {
        auto refusal = refused_.find(peer);
        std::string why = refusal != refused_.end() ? refusal->second
                          : !refused_unnamed_.empty() ? refused_unnamed_
                                                      : "did it start, and can it reach this address?";
        throw Timeout(cat("rank ", options_.rank, ": rank ", peer, " did not connect to ", address_.to_string(),
                          " within the timeout (", why, ")"));
      }
      // Sleep until the listener or a silent connection stirs; the slice
      // bounds how late an expiry or an interruption is seen.
      std::vector<pollfd> fds;
      if (listener_) fds.push_back(pollfd{listener_.get(), POLLIN, 0});
      for (const auto& p : pending_) fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
      int ms = deadline.poll_ms(InterruptScope::kInterruptPoll);
      if (::poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR)
        throw SystemError(cat("rank ", options_.rank, ": poll on the TCP listener failed: ", errno_text(errno)));
      InterruptScope::poll();
    }
    Accepted& got = accepted_[key];
    if (from != nullptr && stream == 0) *from = got.from;
    sockets.push_back(std::move(got.socket));
    accepted_.erase(key);
  }
  return sockets;
}

}  // namespace braid
