// The TCP store server: the key-value map and its clients over non-blocking
// sockets (the wire format is store_protocol.hpp), served on the process's
// service thread (core/event_loop.hpp) beside everything else that must
// answer at any time; it has no thread of its own.
//
// The loop watches the listening socket and every client connection, level
// triggered. A connection reads into a buffer and decodes whole frames; its
// requests are answered in order. A get or wait whose keys are missing parks
// the connection: its later requests stay buffered until the keys appear or
// the deadline carried in the request passes, when it is answered TIMEOUT with
// the keys still missing. A parked request watches one missing key at a time;
// setting that key re-checks it, and it is either answered or moves on to the
// next missing key, so a wait on n keys costs O(n) re-checks in all. Deadlines
// are kept sorted and the server's ticker tells the loop the earliest, so an
// idle store uses no CPU. A peer whose bytes are not this protocol (an HTTP probe, noise,
// another braid version) is sent one error frame, logged with its address, and
// closed; the others go on. A peer that closes its sending side gets no more
// answers: the client never does that.
//
// Every connection starts with the handshake of store_handshake.hpp: until it
// is done (and, with a key, the client has proved it holds the key) nothing
// but the handshake is answered, and frames of at most kMaxHandshakeFrame are
// read. A client refused for its key is logged with
// its address and closed; one that does not finish the handshake within
// kHandshakeWait is closed too, so strangers cannot pile up. Refusals are
// logged through a rate limit, so a flood of strangers cannot flood the log.
//
// A store serves one job (job_scope() in store.hpp): a client of another job
// is refused at once, and once the rank hosting the store seals it (its
// communicator formed) every new client is refused as too late. A client of
// this job refused for its key has its claimed rank recorded under
// <scope>refusal/<n> (and the count under <scope>refusals), so the ranks
// waiting for it fail at once with the reason instead of at their timeout.
//
// With TLS on, a connection first runs the TLS handshake, one non-blocking
// step per readiness event and within the same kHandshakeWait; a client whose
// first byte does not open a TLS handshake is answered with one error frame in
// clear ("this store runs TLS") and closed. Afterwards reads and writes go
// through OpenSSL. OpenSSL may hold decrypted bytes that the level-triggered
// epoll cannot see, so a connection that stopped reading at its limit reads
// them as soon as it has room again.
//
// Values are bytes. add() keeps its integer as decimal text (as torch's store
// does), so get() of a counter reads "42", and set("n", "5") then add works.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "bootstrap/store.hpp"
#include "bootstrap/store_handshake.hpp"
#include "bootstrap/store_protocol.hpp"
#include "braid/types.hpp"
#include "core/check.hpp"
#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

namespace wire = store_protocol;

constexpr std::size_t kReadChunk = 64 * 1024;
// Stop taking a client's requests while this much of its replies is unsent.
constexpr std::size_t kOutputHighWater = std::size_t{1} << 20;
// Buffers larger than this are released once empty (after a big value).
constexpr std::size_t kKeepCapacity = std::size_t{1} << 20;
// How long a new connection has to complete its handshake. A braid client
// sends its hello as soon as it connects and the server answers at once.
constexpr Millis kHandshakeWait = std::chrono::seconds(10);
// The largest frame read from a connection whose handshake is not done: a
// stranger cannot make the server buffer a 64 MiB "frame" before it has
// proved anything.
constexpr std::size_t kMaxHandshakeFrame = 256;

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// "127.0.0.1:5123 pid 811": who made a claim.
std::string claimant(const std::string& peer, std::uint32_t pid) { return cat(peer, " pid ", pid); }

// The address without its port: "127.0.0.1" of "127.0.0.1:5123", "::1" of "[::1]:5123".
std::string_view host_part(std::string_view peer) {
  auto colon = peer.rfind(':');
  std::string_view host = colon == std::string_view::npos ? peer : peer.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

struct Waiter {
  wire::Request request;  // a get or a wait
  Clock::time_point deadline;
  std::string watching;  // the missing key whose set re-checks this waiter
};

// What the connection's TLS is doing: off (the store runs in clear), waiting
// for the first byte, in its handshake, or carrying the store's frames.
enum class TlsPhase { off, first_byte, handshake, open };

// receive() and send_some() results besides a byte count (0: the peer closed).
constexpr long kWouldBlock = TlsSession::kWouldBlock;
constexpr long kFailed = -2;

struct Connection {
  Connection(Fd f, std::string from, const AuthKey& key, const std::string& job)
      : fd(std::move(f)), peer(std::move(from)), handshake(key, job) {}

  Fd fd;
  std::unique_ptr<TlsSession> tls;  // destroyed before the fd closes
  TlsPhase tls_phase = TlsPhase::off;
  std::string peer;
  wire::ServerHandshake handshake;
  Clock::time_point handshake_deadline;
  Bytes in;
  std::size_t in_start = 0;  // in[in_start..] is not yet decoded
  Bytes out;
  std::size_t out_sent = 0;
  std::optional<Waiter> waiter;
  std::uint32_t events = 0;  // the epoll interest registered now
  EventLoop::Id watch = 0;
  int member_rank = -1;  // the rank this client joined as, once its handshake is done (-1: none)
  // What its hello claimed, when it claimed a rank of this job.
  int claimed_size = 0;
  std::uint32_t pid = 0;

  std::size_t unread() const { return in.size() - in_start; }
  std::size_t read_limit() const { return handshake.done() ? wire::kMaxFrameBytes : kMaxHandshakeFrame; }
  std::size_t unsent() const { return out.size() - out_sent; }
};

class Server final : public TcpStoreServer {
 public:
  Server(EventLoop& loop, Fd listener, SockAddr bound, AuthKey key, TlsContext tls, std::string job);
  ~Server() override;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  SockAddr address() const override { return address_; }
  void seal(Bytes token) override {
    loop_.run_sync([&] {
      if (!token.empty()) seal_tokens_.push_back(std::move(token));
    });
    sealed_.store(true);
  }
  void admit_joiners() override { joiners_.store(true); }
  void adopt(Fd fd, SockAddr from, std::unique_ptr<TlsSession> tls) override;
  bool holds(const std::vector<std::string>& keys) override {
    bool all = false;
    loop_.run_sync([&] { all = missing_keys(keys).empty(); });
    return all;
  }
  std::optional<Clock::time_point> absent_since(int rank) override {
    std::optional<Clock::time_point> since;
    loop_.run_sync([&] {
      if (auto it = absent_since_.find(rank); it != absent_since_.end()) since = it->second;
    });
    return since;
  }

 private:
  void refuse(std::uint64_t id, Connection& c, wire::Status status, const std::string& why);
  void record_refusal(const Connection& c, const std::string& why);
  void discard_input(Connection& c);
  template <typename... Parts>
  void warn_limited(const Parts&... parts) {
    if (auto note = refusal_log_.pass()) log_warn(parts..., *note);
  }
  std::optional<Clock::time_point> tick();
  std::uint64_t add_connection(Connection c);  // its id; 0 when the loop refused its fd
  void accept_all();
  void on_connection_event(std::uint64_t id, std::uint32_t events);
  bool advance_tls(std::uint64_t id, Connection& c);
  void refuse_clear_client(Connection& c);
  bool read_input(Connection& c);
  long receive(Connection& c, std::byte* data, std::size_t bytes);
  long send_some(Connection& c, const std::byte* data, std::size_t bytes);
  bool flush(Connection& c);
  void settle_touched();
  void process(std::uint64_t id, Connection& c);
  void handle(std::uint64_t id, Connection& c, wire::Request request);
  void expire_handshakes();
  /// Keeps what a hello claims, refusing (OtherJob) a second claim of a
  /// rank a member holds; check_world_size() refuses another world size
  /// than the job's, once the client is in.
  void note_claim(Connection& c, const wire::Request& hello);
  void check_world_size(Connection& c);
  /// Whether a hello's member token is one this store was sealed with.
  bool is_member(std::span<const std::byte> token) const {
    return std::any_of(seal_tokens_.begin(), seal_tokens_.end(),
                       [&](const Bytes& seal) { return wire::is_member_token(token, seal); });
  }
  /// Closes the connection that has been in its handshake longest.
  void shed_oldest_stranger(const std::string& why);
  void handle_add(Connection& c, const std::string& key, std::int64_t delta);
  void park(std::uint64_t id, Connection& c, wire::Request request);
  void notify(const std::string& key);
  void recheck(std::uint64_t id, Connection& c);
  void expire_waiters();
  void unwatch(std::uint64_t id, const std::string& key);
  void reply(Connection& c, const wire::Reply& r);
  void update_events(std::uint64_t id, Connection& c);
  void close(std::uint64_t id);
  std::vector<std::string> missing_keys(const std::vector<std::string>& keys) const;
  void touch(std::uint64_t id) { touched_.push_back(id); }

  EventLoop& loop_;
  Fd listener_;  // none when the server was handed its connections (adopt)
  SockAddr address_;
  AuthKey key_;
  TlsContext tls_;
  std::string job_;
  std::string name_;  // "braid store at 127.0.0.1:29500"
  EventLoop::Id listener_watch_ = 0;
  EventLoop::Id ticker_ = 0;
  std::atomic<bool> sealed_{false};
  std::vector<Bytes> seal_tokens_;  // the loop's: every communicator formed here (a grown one adds its own)
  std::atomic<bool> joiners_{false};  // an elastic job: a client joining as no rank passes the seal
  LogRateLimit refusal_log_;
  std::int64_t refusals_ = 0;

  // Touched on the loop's thread only.
  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<std::uint64_t, Connection> connections_;
  std::unordered_map<std::string, std::vector<std::uint64_t>> watchers_;
  std::set<std::pair<Clock::time_point, std::uint64_t>> deadlines_;
  std::set<std::pair<Clock::time_point, std::uint64_t>> handshakes_;  // connections still in their handshake
  std::vector<std::uint64_t> touched_;  // connections to process, flush and re-arm
  std::unordered_map<int, int> open_by_rank_;                   // a member rank's connections open now
  std::unordered_map<int, Clock::time_point> absent_since_;   // when a member rank's last one closed
  std::uint64_t next_id_ = 1;
  struct WorldClaim {
    int size;
    int rank;
    std::string who;
  };
  std::optional<WorldClaim> world_;  // the world size the job's first rank joined with
  std::size_t max_strangers_ = stranger_limit();  // connections in their handshake beyond it: the oldest goes
  SpareFd spare_;  // freed to drop a client when the process is out of descriptors
};

Server::Server(EventLoop& loop, Fd listener, SockAddr bound, AuthKey key, TlsContext tls, std::string job)
    : loop_(loop),
      listener_(std::move(listener)),
      address_(bound),
      key_(std::move(key)),
      tls_(std::move(tls)),
      job_(std::move(job)),
      name_(cat("braid store at ", bound.to_string())) {
  loop_.run_sync([&] {
    if (listener_)
      listener_watch_ = loop_.watch(listener_.get(), EPOLLIN, [this](std::uint32_t) {
        accept_all();
        settle_touched();
      });
    ticker_ = loop_.add_ticker([this] { return tick(); });
  });
}

Server::~Server() {
  loop_.run_sync([&] {
    loop_.remove_ticker(ticker_);
    if (listener_watch_ != 0) loop_.unwatch(listener_watch_);
    for (auto& [id, c] : connections_) loop_.unwatch(c.watch);
    connections_.clear();
    listener_.reset();
  });
}

std::optional<Clock::time_point> Server::tick() {
  try {
    expire_waiters();
    expire_handshakes();
    settle_touched();
  } catch (const std::exception& e) {
    log_warn(name_, ": ", e.what());
  }
  std::optional<Clock::time_point> next;
  if (!deadlines_.empty()) next = deadlines_.begin()->first;
  if (!handshakes_.empty() && (!next || handshakes_.begin()->first < *next)) next = handshakes_.begin()->first;
  return next;
}

void Server::accept_all() {
  while (true) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        // Out of descriptors: the oldest client still in its handshake makes
        // room; with none, the queued client is taken and closed (it
        // retries), so the level-triggered listener never spins.
        if (!handshakes_.empty()) {
          shed_oldest_stranger(cat("cannot accept a client (", errno_text(err), ")"));
          continue;
        }
        warn_limited(name_, ": cannot accept a client (", errno_text(err),
                     "): dropping it; raise the open-file limit (ulimit -n)");
        if (!spare_.drop_one(listener_.get())) return;
        continue;
      }
      throw SystemError(cat("accept failed: ", errno_text(err)));
    }
    set_nodelay(fd);
    Connection c(Fd(fd), peer_address(fd).to_string(), key_, job_);
    if (tls_.enabled()) c.tls_phase = TlsPhase::first_byte;
    add_connection(std::move(c));
  }
}

void Server::adopt(Fd fd, SockAddr from, std::unique_ptr<TlsSession> tls) {
  set_nonblocking(fd.get(), true);
  loop_.run_sync([&] {
    Connection c(std::move(fd), from.to_string(), key_, job_);
    if (tls) {
      c.tls = std::move(tls);
      c.tls_phase = TlsPhase::open;
    } else if (tls_.enabled()) {
      c.tls_phase = TlsPhase::first_byte;
    }
    // Bytes may be waiting already: the hello that told the listener what this is.
    if (const std::uint64_t id = add_connection(std::move(c)); id != 0) {
      on_connection_event(id, EPOLLIN);
      settle_touched();
    }
  });
}

std::uint64_t Server::add_connection(Connection c) {
  const std::uint64_t id = next_id_++;
  try {
    c.watch = loop_.watch(c.fd.get(), EPOLLIN, [this, id](std::uint32_t events) {
      on_connection_event(id, events);
      settle_touched();
    });
  } catch (const Error& e) {
    log_warn(name_, ": cannot watch the connection from ", c.peer, ": ", e.what());
    return 0;
  }
  c.events = EPOLLIN;
  if (handshakes_.size() >= max_strangers_)
    shed_oldest_stranger(cat("more than ", max_strangers_, " clients are in their handshake"));
  c.handshake_deadline = Clock::now() + kHandshakeWait;
  handshakes_.emplace(c.handshake_deadline, id);
  log_trace(name_, ": client connected from ", c.peer);
  connections_.emplace(id, std::move(c));
  return id;
}

void Server::on_connection_event(std::uint64_t id, std::uint32_t events) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if ((events & (EPOLLHUP | EPOLLERR)) != 0) {
    log_trace(name_, ": client ", c.peer, " disconnected");
    close(id);
    return;
  }
  if (c.tls_phase == TlsPhase::first_byte || c.tls_phase == TlsPhase::handshake) {
    if (!advance_tls(id, c)) {
      close(id);
      return;
    }
    if (c.tls_phase != TlsPhase::open) return;
    events |= EPOLLIN;  // the client's hello may have come with its last handshake message
  }
  if ((events & EPOLLIN) != 0 && !read_input(c)) {
    log_trace(name_, ": client ", c.peer, " disconnected");
    close(id);
    return;
  }
  touch(id);
}

// One step of a connection's TLS start; false when it is to be closed.
bool Server::advance_tls(std::uint64_t id, Connection& c) {
  try {
    if (c.tls_phase == TlsPhase::first_byte) {
      unsigned char first = 0;
      ssize_t n = ::recv(c.fd.get(), &first, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (first != 0x16) {
        refuse_clear_client(c);
        return false;
      }
      c.tls = std::make_unique<TlsSession>(tls_, c.fd.get(), TlsRole::server);
      c.tls_phase = TlsPhase::handshake;
    }
    TlsSession::Want want = c.tls->handshake_step();
    if (want == TlsSession::Want::nothing) {
      c.tls_phase = TlsPhase::open;
      log_trace(name_, ": client ", c.peer, " completed the TLS handshake (", c.tls->protocol(), ")");
      return true;
    }
    std::uint32_t wanted = want == TlsSession::Want::read ? EPOLLIN : EPOLLOUT;
    if (wanted != c.events) {
      loop_.rewatch(c.watch, wanted);
      c.events = wanted;
    }
    (void)id;
    return true;
  } catch (const Error& e) {
    warn_limited(name_, ": refused the client at ", c.peer, ": ", e.what());
    return false;
  }
}

// A client that speaks in clear to a store that runs TLS: one error frame in
// clear that says so, after taking what it sent (so closing does not reset the
// connection before the client reads the answer).
void Server::refuse_clear_client(Connection& c) {
  discard_input(c);
  std::string why = "this store runs TLS (BRAID_TLS=1) and the client connected without it (BRAID_TLS is set in "
                    "some processes of the job only)";
  warn_limited(name_, ": refused the client at ", c.peer, ": ", why);
  reply(c, wire::Reply{.op = wire::Op::hello, .status = wire::Status::protocol_error, .message = why});
  flush(c);
}

// Reads what the socket has, up to one maximal frame beyond what is decoded.
// Returns false when the peer closed or the connection failed.
bool Server::read_input(Connection& c) {
  while (c.unread() < c.read_limit()) {
    std::size_t old = c.in.size();
    std::size_t want = std::min(kReadChunk, c.read_limit() - c.unread());
    c.in.resize(old + want);
    long n = receive(c, c.in.data() + old, want);
    c.in.resize(old + static_cast<std::size_t>(std::max<long>(n, 0)));
    if (n > 0) continue;
    return n == kWouldBlock;
  }
  return true;
}

// Bytes read, 0 when the peer closed, kWouldBlock or kFailed.
long Server::receive(Connection& c, std::byte* data, std::size_t bytes) {
  if (c.tls) {
    try {
      return c.tls->read(data, bytes);
    } catch (const Error& e) {
      log_trace(name_, ": client ", c.peer, ": ", e.what());
      return kFailed;
    }
  }
  while (true) {
    ssize_t n = ::recv(c.fd.get(), data, bytes, MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : kFailed;
  }
}

// Bytes written, kWouldBlock or kFailed. Over TLS a write that would block is
// retried from the same bytes (the buffer may have grown and moved meanwhile).
long Server::send_some(Connection& c, const std::byte* data, std::size_t bytes) {
  if (c.tls) {
    try {
      return c.tls->write(data, bytes);
    } catch (const Error& e) {
      log_trace(name_, ": client ", c.peer, ": ", e.what());
      return kFailed;
    }
  }
  while (true) {
    ssize_t n = ::send(c.fd.get(), data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : kFailed;
  }
}

bool Server::flush(Connection& c) {
  while (c.unsent() > 0) {
    long n = send_some(c, c.out.data() + c.out_sent, c.unsent());
    if (n > 0) {
      c.out_sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n == kWouldBlock) return true;
    return false;
  }
  c.out.clear();
  c.out_sent = 0;
  if (c.out.capacity() > kKeepCapacity) Bytes().swap(c.out);
  return true;
}

// Processes, flushes and re-arms every connection something happened to;
// processing one (a set) can complete waiters on others, which joins the list.
void Server::settle_touched() {
  while (!touched_.empty()) {
    std::vector<std::uint64_t> ids;
    ids.swap(touched_);
    for (std::uint64_t id : ids) {
      auto it = connections_.find(id);
      if (it == connections_.end()) continue;
      Connection& c = it->second;
      try {
        process(id, c);
      } catch (const wire::AuthRefused& e) {
        record_refusal(c, e.what());
        refuse(id, c, wire::Status::auth_failed, e.what());
        continue;
      } catch (const wire::OtherJob& e) {
        refuse(id, c, wire::Status::other_job, e.what());
        continue;
      } catch (const wire::Sealed& e) {
        // Expected while a loop re-creates communicators at one address: the
        // client retries until the old store goes, so this is no warning.
        log_info(name_, ": refused the client at ", c.peer, ": ", e.what());
        reply(c, wire::Reply{.op = wire::Op::hello, .status = wire::Status::sealed, .message = e.what()});
        flush(c);
        close(id);
        continue;
      } catch (const ProtocolMismatch& e) {
        warn_limited(name_, ": closing the connection from ", c.peer, ": ", e.what());
        // One error frame, best effort: a braid of another version can then
        // say what happened instead of "connection closed".
        reply(c, wire::Reply{.status = wire::Status::protocol_error, .message = e.what()});
        flush(c);
        discard_input(c);
        close(id);
        continue;
      } catch (const std::exception& e) {
        log_warn(name_, ": closing the connection from ", c.peer, " after an error: ", e.what());
        close(id);
        continue;
      }
      if (!flush(c)) {
        log_trace(name_, ": cannot send to ", c.peer);
        close(id);
        continue;
      }
      // Bytes OpenSSL decrypted beyond what fitted: epoll will not report them.
      if (c.tls && c.tls->has_pending() && c.unread() < c.read_limit()) {
        std::size_t before = c.unread();
        if (!read_input(c)) {
          close(id);
          continue;
        }
        if (c.unread() > before) touch(id);
      }
      update_events(id, c);
    }
  }
}

void Server::process(std::uint64_t id, Connection& c) {
  while (!c.waiter && c.unsent() < kOutputHighWater) {
    auto pending = std::span(c.in).subspan(c.in_start);
    if (!c.handshake.done()) {
      if (c.in_start == 0 && looks_like_tls(pending))
        throw ProtocolMismatch("the client opened a TLS handshake but this store runs without TLS (BRAID_TLS=1 is "
                               "set in some processes of the job only)");
      auto size = wire::frame_size(pending, false);
      if (size && *size > kMaxHandshakeFrame)
        throw ProtocolMismatch(cat("a frame of ", *size, " bytes where the handshake belongs (at most ",
                                   kMaxHandshakeFrame, "; a braid store client opens with hello)"));
    }
    auto decoded = wire::decode_request(pending);
    if (!decoded) break;
    c.in_start += decoded->consumed;
    if (c.handshake.done()) {
      handle(id, c, std::move(decoded->message));
      continue;
    }
    const wire::Op op = decoded->message.op;
    if (op == wire::Op::hello) note_claim(c, decoded->message);  // may refuse a second claim of a member's rank
    // Past the seal come in only a member of a communicator formed here, and,
    // in an elastic job, a process joining as no rank yet (Comm::join).
    const bool late = sealed_.load() && op == wire::Op::hello && !is_member(decoded->message.member) &&
                      !(joiners_.load() && decoded->message.rank < 0);
    wire::Reply answer = c.handshake.answer(decoded->message, pending.first(decoded->consumed), late);
    // A world size counts once its client is in: after the proof, with a key.
    if ((op == wire::Op::hello && !key_.enabled()) || op == wire::Op::auth) check_world_size(c);
    reply(c, answer);
    if (c.handshake.done()) {
      handshakes_.erase({c.handshake_deadline, id});
      log_trace(name_, ": client ", c.peer, " completed the handshake");
      if (c.handshake.claimed_rank() >= 0 && c.handshake.same_job()) {
        c.member_rank = c.handshake.claimed_rank();
        ++open_by_rank_[c.member_rank];
        absent_since_.erase(c.member_rank);
        if (c.claimed_size > 0 && !world_)
          world_ = WorldClaim{c.claimed_size, c.member_rank, claimant(c.peer, c.pid)};
      }
    }
  }
  if (c.in_start == c.in.size()) {
    c.in.clear();
    c.in_start = 0;
    if (c.in.capacity() > kKeepCapacity) Bytes().swap(c.in);
  } else if (c.in_start > c.in.size() / 2) {
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.in_start));
    c.in_start = 0;
  }
}

// Without job ids, two jobs at one address look alike; what tells them
// apart is refused here at once, naming both claims (docs/security.md):
// another world size than the job's first rank gave, and, once the
// communicator formed, a rank that a member holds from another process.
void Server::note_claim(Connection& c, const wire::Request& hello) {
  c.claimed_size = hello.world_size;
  c.pid = hello.pid;
  const int rank = hello.rank;
  if (hello.job != job_ || rank < 0 || !sealed_.load() || is_member(hello.member)) return;
  // The handshake would answer "sealed", and the client retry until its
  // timeout in case a new store takes the address (a loop re-creating its
  // communicator: the same process). A member that holds the rank from
  // another process says there is no such next store.
  for (const auto& [other_id, other] : connections_) {
    if (other.member_rank != rank || &other == &c) continue;
    if (other.pid == c.pid && host_part(other.peer) == host_part(c.peer)) continue;  // the same process
    throw wire::OtherJob(cat("rank ", rank, " is claimed twice: by ", claimant(other.peer, other.pid),
                             ", a member of the communicator this store serves, which has already formed, and now by ",
                             claimant(c.peer, c.pid), ": two jobs share the store address ", address_.to_string(),
                             " without job ids, or rank ", rank, " was restarted while its first process still "
                             "runs; give each job its own address or BRAID_JOB_ID"));
  }
}

void Server::check_world_size(Connection& c) {
  const int rank = c.handshake.claimed_rank();
  if (!c.handshake.same_job() || rank < 0 || c.claimed_size <= 0 || !world_ || world_->size == c.claimed_size) return;
  std::string why = cat("rank ", rank, " (", claimant(c.peer, c.pid), ") joins with world size ", c.claimed_size,
                        ", but rank ", world_->rank, " (", world_->who, ") joined this store's job with world size ",
                        world_->size, ": two jobs share the store address ", address_.to_string(),
                        ", or the ranks were started with different sizes; give every rank of a job the same size, "
                        "and each job its own address or BRAID_JOB_ID");
  record_refusal(c, why);
  throw wire::OtherJob(why);
}

void Server::shed_oldest_stranger(const std::string& why) {
  // Deadlines grow with arrival: the first is the oldest.
  const std::uint64_t id = handshakes_.begin()->second;
  handshakes_.erase(handshakes_.begin());
  if (auto it = connections_.find(id); it != connections_.end())
    warn_limited(name_, ": closing the connection from ", it->second.peer, " (silent or still in its handshake): ",
                 why);
  close(id);
}

void Server::expire_handshakes() {
  auto now = Clock::now();
  while (!handshakes_.empty() && handshakes_.begin()->first <= now) {
    std::uint64_t id = handshakes_.begin()->second;
    auto it = connections_.find(id);
    if (it != connections_.end())
      warn_limited(name_, ": closing the connection from ", it->second.peer, ": no handshake within ",
                   seconds_of(kHandshakeWait), " s");
    handshakes_.erase(handshakes_.begin());
    close(id);
  }
}

void Server::handle(std::uint64_t id, Connection& c, wire::Request r) {
  static const std::string kNoKey;
  const std::string& key = r.keys.empty() ? kNoKey : r.keys.front();  // set, get, add carry one
  switch (r.op) {
    case wire::Op::set:
      data_.insert_or_assign(key, std::move(r.value));
      reply(c, wire::Reply{.op = r.op});
      notify(key);
      return;
    case wire::Op::add:
      handle_add(c, key, r.delta);
      return;
    case wire::Op::check:
      reply(c, wire::Reply{.op = r.op, .all_present = missing_keys(r.keys).empty()});
      return;
    case wire::Op::get:
      if (auto it = data_.find(key); it != data_.end()) {
        reply(c, wire::Reply{.op = r.op, .value = it->second});
        return;
      }
      park(id, c, std::move(r));
      return;
    case wire::Op::wait:
      if (missing_keys(r.keys).empty()) {
        reply(c, wire::Reply{.op = r.op});
        return;
      }
      park(id, c, std::move(r));
      return;
    case wire::Op::hello:
    case wire::Op::auth:
      throw ProtocolMismatch(cat("a second ", wire::name_of(r.op), " on a connection whose handshake is done"));
  }
}

void Server::handle_add(Connection& c, const std::string& key, std::int64_t delta) {
  std::int64_t current = 0;
  if (auto it = data_.find(key); it != data_.end()) {
    auto text = std::string_view(reinterpret_cast<const char*>(it->second.data()), it->second.size());
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
    if (ec != std::errc() || end != text.data() + text.size()) {
      reply(c, wire::Reply{.op = wire::Op::add,
                           .status = wire::Status::invalid_argument,
                           .message = cat("the key holds ", it->second.size(),
                                          " bytes that are not a decimal 64-bit integer, so it cannot be added to")});
      return;
    }
  }
  std::int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    reply(c, wire::Reply{.op = wire::Op::add,
                         .status = wire::Status::invalid_argument,
                         .message = cat("adding ", delta, " to ", current, " overflows a 64-bit integer")});
    return;
  }
  std::string text = std::to_string(sum);
  auto bytes = as_bytes(text);
  data_.insert_or_assign(key, Bytes(bytes.begin(), bytes.end()));
  reply(c, wire::Reply{.op = wire::Op::add, .number = sum});
  notify(key);
}

void Server::park(std::uint64_t id, Connection& c, wire::Request r) {
  auto missing = missing_keys(r.keys);
  if (r.timeout <= Millis(0)) {
    reply(c, wire::Reply{.op = r.op, .status = wire::Status::timeout, .missing = std::move(missing)});
    return;
  }
  auto deadline = Clock::now() + r.timeout;
  watchers_[missing.front()].push_back(id);
  deadlines_.emplace(deadline, id);
  c.waiter = Waiter{std::move(r), deadline, std::move(missing.front())};
}

void Server::notify(const std::string& key) {
  auto node = watchers_.extract(key);
  if (node.empty()) return;
  for (std::uint64_t id : node.mapped()) {
    auto it = connections_.find(id);
    if (it == connections_.end() || !it->second.waiter || it->second.waiter->watching != key) continue;
    recheck(id, it->second);
  }
}

void Server::recheck(std::uint64_t id, Connection& c) {
  Waiter& w = *c.waiter;
  auto missing = missing_keys(w.request.keys);
  if (!missing.empty()) {
    w.watching = missing.front();
    watchers_[w.watching].push_back(id);
    return;
  }
  deadlines_.erase({w.deadline, id});
  if (w.request.op == wire::Op::get)
    reply(c, wire::Reply{.op = wire::Op::get, .value = data_.at(w.request.keys.front())});
  else
    reply(c, wire::Reply{.op = wire::Op::wait});
  c.waiter.reset();
  touch(id);  // its next buffered request, if any, can run now
}

void Server::expire_waiters() {
  auto now = Clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    std::uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = connections_.find(id);
    BRAID_CHECK(it != connections_.end() && it->second.waiter, "a store deadline without its waiter");
    Connection& c = it->second;
    unwatch(id, c.waiter->watching);
    reply(c, wire::Reply{.op = c.waiter->request.op,
                         .status = wire::Status::timeout,
                         .missing = missing_keys(c.waiter->request.keys)});
    c.waiter.reset();
    touch(id);
  }
}

void Server::unwatch(std::uint64_t id, const std::string& key) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  std::erase(it->second, id);
  if (it->second.empty()) watchers_.erase(it);
}

void Server::reply(Connection& c, const wire::Reply& r) {
  Bytes frame = wire::encode(r);
  if (c.unsent() == 0) {
    c.out = std::move(frame);
    c.out_sent = 0;
  } else {
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
}

void Server::update_events(std::uint64_t id, Connection& c) {
  std::uint32_t want = (c.unread() < c.read_limit() ? EPOLLIN : 0u) | (c.unsent() > 0 ? EPOLLOUT : 0u);
  if (want == c.events) return;
  loop_.rewatch(c.watch, want);
  c.events = want;
  (void)id;
}

void Server::close(std::uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if (c.waiter) {
    deadlines_.erase({c.waiter->deadline, id});
    unwatch(id, c.waiter->watching);
  }
  if (!c.handshake.done()) handshakes_.erase({c.handshake_deadline, id});
  if (c.member_rank >= 0 && --open_by_rank_[c.member_rank] == 0) {
    open_by_rank_.erase(c.member_rank);
    absent_since_[c.member_rank] = Clock::now();
  }
  loop_.unwatch(c.watch);
  connections_.erase(it);
}

void Server::refuse(std::uint64_t id, Connection& c, wire::Status status, const std::string& why) {
  warn_limited(name_, ": refused the client at ", c.peer, ": ", why);
  reply(c, wire::Reply{.op = c.handshake.expected_op(), .status = status, .message = why});
  flush(c);
  discard_input(c);
  close(id);
}

// Closing a socket with unread bytes resets the connection, and the reset can
// overtake the answer just sent: read what the client sent (bounded) first.
void Server::discard_input(Connection& c) {
  std::byte scratch[4096];
  for (int i = 0; i < 16 && ::recv(c.fd.get(), scratch, sizeof scratch, MSG_DONTWAIT) > 0; ++i) {
  }
}

void Server::record_refusal(const Connection& c, const std::string& why) {
  int rank = c.handshake.claimed_rank();
  if (rank < 0 || !c.handshake.same_job()) return;
  const std::string scope = job_scope(job_);
  auto put = [&](const std::string& key, std::string_view text) {
    auto bytes = as_bytes(text);
    data_.insert_or_assign(key, Bytes(bytes.begin(), bytes.end()));
  };
  put(cat(scope, "refusal/", ++refusals_),
      cat("rank ", rank, ": its connection to the ", name_, " from ", c.peer, " was refused: ", why));
  put(cat(scope, "refusals"), std::to_string(refusals_));
  notify(cat(scope, "refusal/", refusals_));
  notify(cat(scope, "refusals"));
}

std::vector<std::string> Server::missing_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!data_.contains(k)) out.push_back(k);
  return out;
}

}  // namespace

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(EventLoop& loop, const SockAddr& addr, AuthKey key,
                                                      TlsContext tls, std::string job,
                                                      std::optional<PortRange> ports) {
  Fd listener = listen_tcp(addr, ports, "the braid store server");
  set_nonblocking(listener.get(), true);
  SockAddr bound = local_address(listener.get());
  bool keyed = key.enabled();
  bool secured = tls.enabled();
  auto server =
      std::make_unique<Server>(loop, std::move(listener), bound, std::move(key), std::move(tls), std::move(job));
  log_info("braid store serving at ", bound.to_string(), keyed ? " (clients must authenticate)" : "",
           secured ? " (over TLS)" : "");
  return server;
}

std::unique_ptr<TcpStoreServer> TcpStoreServer::serve_adopted(EventLoop& loop, const SockAddr& address, AuthKey key,
                                                              TlsContext tls, std::string job) {
  const bool keyed = key.enabled();
  const bool secured = tls.enabled();
  auto server = std::make_unique<Server>(loop, Fd(), address, std::move(key), std::move(tls), std::move(job));
  log_info("braid store serving at ", address.to_string(), " on the process's listener",
           keyed ? " (clients must authenticate)" : "", secured ? " (over TLS)" : "");
  return server;
}

}  // namespace braid
