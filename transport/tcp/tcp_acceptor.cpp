#include "transport/tcp/tcp_acceptor.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "braid/types.hpp"
#include "core/text.hpp"
#include "transport/tcp/tcp_link.hpp"

namespace braid {
namespace {

constexpr std::byte kTlsRecord{0x16};     // a TLS ClientHello's first byte
constexpr std::byte kStoreMagic{0xB7};    // the store's frames (bootstrap/store_protocol.hpp)
constexpr std::byte kHelloFirst{'B'};     // 'BRDT', kTcpMagic in little-endian

}  // namespace

TcpAcceptor::TcpAcceptor(EventLoop& loop, Fd listener, Options options, TcpRegistry& registry)
    : loop_(loop), listener_(std::move(listener)), address_(local_address(listener_.get())),
      options_(std::move(options)), registry_(registry), max_pending_(stranger_limit()) {
  set_nonblocking(listener_.get(), true);
  loop_.run_sync([&] {
    listener_watch_ = loop_.watch(listener_.get(), EPOLLIN, [this](std::uint32_t) { accept_new(); });
    ticker_ = loop_.add_ticker([this] { return tick(); });
  });
}

TcpAcceptor::~TcpAcceptor() {
  loop_.run_sync([&] {
    loop_.remove_ticker(ticker_);
    loop_.unwatch(listener_watch_);
    for (auto& [id, c] : pending_) loop_.unwatch(c.watch);
    pending_.clear();
    listener_.reset();
  });
}

void TcpAcceptor::serve_store(StoreAdopter adopt) {
  loop_.run_sync([&] {
    store_ = std::move(adopt);
    std::vector<std::uint64_t> waiting;
    for (auto& [id, c] : pending_)
      if (c.awaiting_store) waiting.push_back(id);
    for (std::uint64_t id : waiting) {
      Incoming& c = pending_.at(id);
      c.awaiting_store = false;
      want(id, c, EPOLLIN);
      if (!serve(id, c)) close(id);
    }
  });
}

void TcpAcceptor::accept_new() {
  while (true) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the oldest silent connection makes
      // room for what is queued; with none, the first in the queue is
      // taken and closed (the spare descriptor), so the listener never spins.
      const int err = errno;
      if (!pending_.empty()) {
        warn_limited("TCP listener ", address_.to_string(), ": cannot accept a connection (", errno_text(err),
                     "): closing the oldest silent one, from ", pending_.begin()->second.from.to_string());
        close(pending_.begin()->first);
        continue;
      }
      warn_limited("TCP listener ", address_.to_string(), ": cannot accept a connection (", errno_text(err),
                   "): dropping it; raise the open-file limit (ulimit -n)");
      if (!spare_.drop_one(listener_.get())) return;
      continue;
    }
    Incoming c;
    c.fd = Fd(fd);
    c.from = peer_address(fd);
    c.since = Clock::now();
    c.deadline = c.since + kHelloWait;
    if (pending_.size() >= max_pending_) {
      // Ids grow with time: the first is the oldest.
      warn_limited("TCP listener ", address_.to_string(), ": closing the connection from ",
                   pending_.begin()->second.from.to_string(), ": more than ", max_pending_,
                   " connections are in their handshake");
      close(pending_.begin()->first);
    }
    const std::uint64_t id = next_id_++;
    try {
      c.watch = loop_.watch(fd, EPOLLIN, [this, id](std::uint32_t) {
        auto it = pending_.find(id);
        if (it != pending_.end() && !serve(id, it->second)) close(id);
      });
    } catch (const Error& e) {
      warn_limited("TCP listener ", address_.to_string(), ": ", e.what());
      continue;
    }
    c.events = EPOLLIN;
    pending_.emplace(id, std::move(c));
  }
}

void TcpAcceptor::close(std::uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  loop_.unwatch(it->second.watch);
  if (it->second.fd) {
    // Unread bytes would turn the close into a reset that can overtake the
    // refusal just sent: take what the dialer sent first (bounded).
    std::byte scratch[4096];
    for (int i = 0; i < 16 && ::recv(it->second.fd.get(), scratch, sizeof scratch, MSG_DONTWAIT) > 0; ++i) {
    }
  }
  pending_.erase(it);
}

void TcpAcceptor::want(std::uint64_t id, Incoming& c, std::uint32_t events) {
  (void)id;
  if (c.events == events) return;
  loop_.rewatch(c.watch, events);
  c.events = events;
}

std::optional<Clock::time_point> TcpAcceptor::tick() {
  const auto now = Clock::now();
  std::optional<Clock::time_point> next;
  std::vector<std::uint64_t> late;
  for (auto& [id, c] : pending_) {
    if (c.deadline <= now) late.push_back(id);
    else if (!next || c.deadline < *next) next = c.deadline;
  }
  for (std::uint64_t id : late) {
    Incoming& c = pending_.at(id);
    if (c.phase == Phase::first_bytes && c.got == 0)
      warn_limited("TCP listener ", address_.to_string(), ": closing the connection from ", c.from.to_string(),
                   ": it sent nothing within ", seconds_of(kHelloWait), " s");
    else
      warn_limited("TCP listener ", address_.to_string(), ": closing the connection from ", c.from.to_string(),
                   ": its handshake stalled for ", seconds_of(kHandshakeStep), " s");
    close(id);
  }
  return next;
}

bool TcpAcceptor::serve(std::uint64_t id, Incoming& c) {
  try {
    while (true) {
      switch (c.phase) {
        case Phase::first_bytes:
          if (!first_bytes(id, c)) return false;
          if (c.phase == Phase::first_bytes) return true;
          c.deadline = Clock::now() + kHandshakeStep;
          continue;
        case Phase::tls: {
          TlsSession::Want w = c.tls->handshake_step();
          if (w == TlsSession::Want::read) {
            want(id, c, EPOLLIN);
            return true;
          }
          if (w == TlsSession::Want::write) {
            want(id, c, EPOLLOUT);
            return true;
          }
          want(id, c, EPOLLIN);
          // Inside TLS the first bytes tell the store from a rank again.
          std::byte first{};
          long n = c.tls->peek(&first, 1);
          if (n == 0) return false;
          if (n == TlsSession::kWouldBlock) {
            c.phase = Phase::hello;  // nothing decrypted yet: it will be a hello or the store's
            c.got = 0;
            return true;
          }
          if (first == kStoreMagic && store_) {
            loop_.unwatch(c.watch);
            c.watch = 0;
            store_(std::move(c.fd), c.from, std::move(c.tls));
            return false;
          }
          c.phase = Phase::hello;
          continue;
        }
        case Phase::hello:
          if (c.tls && c.got == 0 && store_) {
            std::byte first{};
            long n = c.tls->peek(&first, 1);
            if (n == 0) return false;
            if (n == TlsSession::kWouldBlock) return true;
            if (first == kStoreMagic) {
              loop_.unwatch(c.watch);
              c.watch = 0;
              store_(std::move(c.fd), c.from, std::move(c.tls));
              return false;
            }
          }
          if (!read_in(c, kHelloBytes)) return true;
          on_hello(c);
          continue;
        case Phase::proof:
          if (!read_in(c, kAuthProofBytes)) return true;
          on_proof(c);
          continue;
        case Phase::reply:
          if (!flush(c)) {
            want(id, c, EPOLLOUT);
            return true;
          }
          want(id, c, EPOLLIN);
          if (c.status == HelloStatus::challenge) {
            c.phase = Phase::proof;
            c.got = 0;
            continue;
          }
          if (c.status != HelloStatus::accepted) return false;
          loop_.unwatch(c.watch);
          c.watch = 0;
          log_info("TCP listener ", address_.to_string(), ": accepted rank ", c.hello.from_rank, " (stream ",
                   c.hello.stream, ") from ", c.from.to_string(), " for communicator ", c.hello.comm_id.to_hex());
          if (auto went = registry_.file(c.hello, Socket(std::move(c.fd), std::move(c.tls)), c.from))
            TcpLink::send_withdrawal(went->socket, went->failed, went->why);
          return false;
      }
    }
  } catch (const Error& e) {
    warn_limited("TCP listener ", address_.to_string(), ": refused a connection from ", c.from.to_string(), ": ",
                 e.what());
    registry_.note_refusal(nullptr, -1, cat("a connection from ", c.from.to_string(), " was refused: ", e.what()));
    return false;
  }
}

bool TcpAcceptor::first_bytes(std::uint64_t id, Incoming& c) {
  (void)id;
  std::array<std::byte, kHelloBytes> head{};
  ssize_t n = ::recv(c.fd.get(), head.data(), head.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    log_trace("TCP listener ", address_.to_string(), ": a connection from ", c.from.to_string(),
              " closed without a word");
    return false;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
    log_trace("TCP listener ", address_.to_string(), ": a connection from ", c.from.to_string(), " failed: ",
              errno_text(errno));
    return false;
  }
  c.got = 1;  // it spoke: a stall from here on is its handshake's
  const auto got = static_cast<std::size_t>(n);
  if (head[0] == kStoreMagic) {
    if (!store_) {
      // A rank that reached this port a moment before the store this process
      // is making started: it waits, unwatched, for serve_store (or its
      // hello wait).
      c.awaiting_store = true;
      want(id, c, 0);
      return true;
    }
    loop_.unwatch(c.watch);
    c.watch = 0;
    store_(std::move(c.fd), c.from, nullptr);
    return false;
  }
  if (head[0] == kTlsRecord && options_.tls.enabled()) {
    c.tls = std::make_unique<TlsSession>(options_.tls, c.fd.get(), TlsRole::server);
    c.phase = Phase::tls;
    c.got = 0;
    return true;
  }
  if (head[0] == kHelloFirst) {
    c.phase = Phase::hello;  // with TLS on, on_hello answers tls_required
    c.got = 0;
    return true;
  }
  // Not braid's (or TLS from a rank with BRAID_TLS=1 here without it):
  // decode_hello says which, on the bytes that came.
  try {
    std::array<std::byte, kHelloBytes> whole{};
    std::copy_n(head.begin(), got, whole.begin());
    decode_hello(whole);
  } catch (const ProtocolMismatch& e) {
    warn_limited("TCP listener ", address_.to_string(), ": refused a connection from ", c.from.to_string(), ": ",
                 e.what());
    registry_.note_refusal(nullptr, -1, cat("a connection from ", c.from.to_string(), " was refused: ", e.what()));
  }
  return false;
}

bool TcpAcceptor::read_in(Incoming& c, std::size_t wanted) {
  while (c.got < wanted) {
    long n = 0;
    if (c.tls) {
      n = c.tls->read(c.in.data() + c.got, wanted - c.got);
      if (n == TlsSession::kWouldBlock) {
        if (c.tls->want() == TlsSession::Want::write) loop_.rewatch(c.watch, c.events = EPOLLOUT);
        return false;
      }
    } else {
      n = ::recv(c.fd.get(), c.in.data() + c.got, wanted - c.got, MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
        throw PeerLost(cat("the connection failed during its handshake: ", errno_text(errno)));
      }
    }
    if (n == 0) throw PeerLost("the dialer closed the connection during its handshake");
    c.got += static_cast<std::size_t>(n);
  }
  return true;
}

bool TcpAcceptor::flush(Incoming& c) {
  while (c.sent < c.out.size()) {
    long n = 0;
    if (c.tls) {
      n = c.tls->write(c.out.data() + c.sent, c.out.size() - c.sent);
      if (n == TlsSession::kWouldBlock) return false;
    } else {
      n = ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
        throw PeerLost(cat("cannot answer the dialer: ", errno_text(errno)));
      }
    }
    c.sent += static_cast<std::size_t>(n);
  }
  return true;
}

void TcpAcceptor::on_hello(Incoming& c) {
  std::copy_n(c.in.begin(), kHelloBytes, c.hello_bytes.begin());
  c.hello = decode_hello(c.hello_bytes);
  const bool keyed = options_.auth_key.enabled();
  HelloStatus status = HelloStatus::accepted;
  if (options_.tls.enabled() && !c.tls) status = HelloStatus::tls_required;
  else if (c.hello.version != kTcpProtocolVersion) status = HelloStatus::wrong_version;
  else status = check_auth_mode(c.hello, keyed);
  if (status != HelloStatus::accepted) {
    refuse(c, status);
    return;
  }
  if (keyed) {
    // Nothing about the communicator is said to a dialer that has not
    // proved it holds the key.
    c.server_nonce = random_nonce();
    auto challenge = encode_reply(HelloStatus::challenge);
    c.out.assign(challenge.begin(), challenge.end());
    c.out.insert(c.out.end(), c.server_nonce.begin(), c.server_nonce.end());
    c.sent = 0;
    c.status = HelloStatus::challenge;
    c.phase = Phase::reply;
    return;
  }
  decide(c);
}

void TcpAcceptor::on_proof(Incoming& c) {
  AuthProof theirs = decode_auth_proof(std::span(c.in).first(kAuthProofBytes));
  Digest expected = handshake_proof(options_.auth_key, AuthRole::client, kTcpAuthProtocol, theirs.client_nonce,
                                    c.server_nonce, c.hello_bytes);
  if (!same_digest(theirs.proof, expected)) {
    refuse(c, HelloStatus::auth_failed);
    return;
  }
  decide(c);
  if (c.status == HelloStatus::accepted) {
    Digest proof = handshake_proof(options_.auth_key, AuthRole::server, kTcpAuthProtocol, theirs.client_nonce,
                                   c.server_nonce, c.hello_bytes);
    c.out.insert(c.out.end(), proof.begin(), proof.end());
  }
}

void TcpAcceptor::decide(Incoming& c) {
  LinkOwner owner;
  HelloStatus status = HelloStatus::wrong_communicator;
  switch (registry_.lookup(c.hello.comm_id, static_cast<int>(c.hello.to_rank), &owner)) {
    case TcpRegistry::Status::enrolled:
      status = check_hello(c.hello, owner.comm_id, owner.rank, owner.size, owner.tcp_streams);
      break;
    case TcpRegistry::Status::counting:
      // A split child still counting its members: what can be checked now
      // is; the rest is checked when the child takes the connection.
      status = c.hello.from_rank == c.hello.to_rank || c.hello.from_rank >= c.hello.world_size
                   ? HelloStatus::wrong_rank
               : c.hello.stream >= c.hello.streams ? HelloStatus::wrong_streams
                                                   : HelloStatus::accepted;
      break;
    case TcpRegistry::Status::finalized: status = HelloStatus::finalized; break;
    case TcpRegistry::Status::gave_up: status = HelloStatus::gave_up; break;
    case TcpRegistry::Status::unknown:
      // A communicator its members derive each on their own (shrink): this
      // rank may make it a moment after the dialer did.
      if (c.hello.derived) status = HelloStatus::not_yet;
      break;
  }
  if (status != HelloStatus::accepted) {
    refuse(c, status);
    return;
  }
  auto reply = encode_reply(HelloStatus::accepted);
  c.out.assign(reply.begin(), reply.end());
  c.sent = 0;
  c.status = HelloStatus::accepted;
  c.phase = Phase::reply;
}

void TcpAcceptor::refuse(Incoming& c, HelloStatus status) {
  auto reply = encode_reply(status);
  c.out.assign(reply.begin(), reply.end());
  c.sent = 0;
  c.status = status;
  c.phase = Phase::reply;
  // A communicator that went is no stranger's fault: said at INFO; one not
  // made yet, at TRACE (the dialer comes again).
  if (status == HelloStatus::not_yet)
    log_trace("TCP listener ", address_.to_string(), ": told rank ", c.hello.from_rank, " at ", c.from.to_string(),
              " to come again: communicator ", c.hello.comm_id.to_hex(), " is not made here yet");
  else if (status == HelloStatus::finalized || status == HelloStatus::gave_up)
    log_info("TCP listener ", address_.to_string(), ": told rank ", c.hello.from_rank, " at ", c.from.to_string(),
             " that communicator ", c.hello.comm_id.to_hex(), " is gone here: ", describe(status));
  else
    note_refusal(c, describe(status));
}

void TcpAcceptor::note_refusal(const Incoming& c, std::string_view why) {
  const bool named = c.hello.version == kTcpProtocolVersion;
  if (named)
    warn_limited("rank ", c.hello.to_rank, ": refused a connection from ", c.from.to_string(), " claiming rank ",
                 c.hello.from_rank, ": ", why, " (TCP listener ", address_.to_string(), ")");
  else
    warn_limited("TCP listener ", address_.to_string(), ": refused a connection from ", c.from.to_string(), ": ", why);
  const bool known = named && registry_.knows(c.hello.comm_id);
  registry_.note_refusal(known ? &c.hello.comm_id : nullptr, named ? static_cast<int>(c.hello.from_rank) : -1,
                         cat("a connection from ", c.from.to_string(), " claiming to be it was refused: ", why));
}

}  // namespace braid
