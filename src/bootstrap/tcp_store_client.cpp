// The TCP store client: one connection and one request at a time, under a
// mutex (so a get that waits holds up the other threads sharing this client;
// give each waiter its own client if that matters). A request whose reply does
// not arrive by its local deadline (the wait it asked for plus a grace period)
// drops the connection, so a late reply can never be read as the answer to a
// later request; the next call reconnects. Connection failures are PeerLost,
// missing replies Timeout, and every message names the store and the operation.
// Every connection, the first and each reopened one, starts with the handshake
// of store_protocol.hpp; a refusal (another key, or a key on one side only) is
// ProtocolMismatch naming the store's address. With TLS, each connection runs
// the TLS handshake (this process the client) before that.
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>

#include "bootstrap/store.hpp"
#include "bootstrap/store_protocol.hpp"
#include "braid/types.hpp"
#include "core/check.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

namespace wire = store_protocol;

// Bound on requests that do not wait for keys (set, add, check): the store
// answers them at once, so this only catches a stalled server or network.
constexpr Millis kReplyTimeout = std::chrono::seconds(60);
// How long past a get's or wait's own timeout the client waits for the
// server's TIMEOUT answer before it gives up on the connection.
constexpr Millis kReplyGrace = std::chrono::milliseconds(1000);
// Reopening a connection that was dropped: the server was up a moment ago.
constexpr Millis kReconnectWindow = std::chrono::seconds(5);

std::string quoted_list(const std::vector<std::string>& keys, std::size_t show = 10) {
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < show; ++i) out += cat(i ? ", '" : "'", keys[i], "'");
  if (keys.size() > show) out += cat(" and ", keys.size() - show, " more");
  return out;
}

// Sends one frame and reads one reply frame.
wire::Reply exchange(Socket& socket, const Bytes& frame, Deadline deadline) {
  socket.send_all(frame.data(), frame.size(), deadline, "send");
  Bytes in(wire::kHeaderBytes);
  socket.recv_all(in.data(), in.size(), deadline, "receive");
  std::size_t size = wire::frame_size(in, true).value_or(0);
  BRAID_CHECK(size >= wire::kHeaderBytes);
  in.resize(size);
  socket.recv_all(in.data() + wire::kHeaderBytes, size - wire::kHeaderBytes, deadline, "receive");
  auto decoded = wire::decode_reply(in);
  BRAID_CHECK(decoded && decoded->consumed == size);
  return std::move(decoded->message);
}

// Opens a connection: TCP, then TLS where it is on. A TLS failure names the
// store; a timeout is left for the caller to word.
Socket open_connection(const std::vector<SockAddr>& addrs, const TlsContext& tls, const std::string& address,
                       Deadline deadline, std::string_view what) {
  Fd fd = connect_tcp(addrs, deadline, what);
  set_nodelay(fd.get());
  const std::string store = cat("braid store at ", address);
  try {
    return open_socket(std::move(fd), tls, TlsRole::client, deadline, store);
  } catch (const ProtocolMismatch& e) {
    log_warn(e.what());
    throw;
  } catch (const PeerLost& e) {
    log_warn(e.what());
    throw;
  }
}

// Takes `lock` within `budget`. std::timed_mutex::try_lock_for would do, but
// it waits in pthread_mutex_clocklock, which ThreadSanitizer (GCC 12) does not
// see, so it reports every later unlock as wrong; polling try_lock is visible.
bool lock_within(std::unique_lock<std::mutex>& lock, Millis budget) {
  const auto until = Clock::now() + budget;
  while (!lock.try_lock()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// Who this client is, for every connection's hello.
struct Identity {
  AuthKey key;
  std::string job;
  int rank = -1;
  int world_size = 0;
  Bytes member;  // the seal's token, once this client's communicator formed
};

// The store refused this client as arriving after its communicator formed.
class TooLate : public ProtocolMismatch {
 public:
  using ProtocolMismatch::ProtocolMismatch;
};

// The client's side of the handshake on a fresh connection.
void handshake(Socket& socket, const Identity& id, const std::string& address, Deadline deadline) {
  const AuthKey& key = id.key;
  const std::string store = cat("braid store at ", address);
  auto refuse = [&](const std::string& why) {
    log_warn(store, ": ", why);
    throw ProtocolMismatch(cat(store, ": ", why));
  };
  auto check = [&](const wire::Reply& reply, wire::Op op) {
    if (reply.status == wire::Status::auth_failed || reply.status == wire::Status::other_job)
      refuse(cat("refused this process: ", reply.message));
    if (reply.status == wire::Status::sealed) throw TooLate(cat(store, ": refused this process: ", reply.message));
    if (reply.status == wire::Status::protocol_error) refuse(cat("refused the connection: ", reply.message));
    if (reply.op != op || reply.status != wire::Status::ok)
      refuse(cat("answered the ", wire::name_of(op), " of the handshake with a ", wire::name_of(reply.op), " (",
                 wire::name_of(reply.status), ")"));
  };
  try {
    Bytes hello = wire::encode(
        wire::Request{.op = wire::Op::hello, .auth = key.enabled(), .job = id.job, .rank = id.rank, .member = id.member,
                      .world_size = id.world_size, .pid = static_cast<std::uint32_t>(::getpid())});
    wire::Reply challenge = exchange(socket, hello, deadline);
    check(challenge, wire::Op::hello);
    if (!challenge.challenge) {
      if (key.enabled())
        refuse("authentication failed: the store accepted this process without authenticating it, so it does not "
               "hold the shared key (is something else listening at this address?)");
      return;
    }
    if (!key.enabled())
      refuse("the store asked for authentication but this process has no key (set the same BRAID_AUTH_KEY or "
             "BRAID_AUTH_KEY_FILE in every process)");
    Nonce mine = random_nonce();
    wire::Request auth{.op = wire::Op::auth, .nonce = mine};
    auth.proof = handshake_proof(key, AuthRole::client, wire::kAuthProtocol, mine, challenge.nonce, hello);
    wire::Reply answer = exchange(socket, wire::encode(auth), deadline);
    check(answer, wire::Op::auth);
    Digest expected = handshake_proof(key, AuthRole::server, wire::kAuthProtocol, mine, challenge.nonce, hello);
    if (!same_digest(answer.proof, expected))
      refuse("authentication failed: the store could not prove it holds the shared key (the processes hold "
             "different keys, or something else listens at this address)");
  } catch (const TooLate&) {
    throw;
  } catch (const ProtocolMismatch& e) {
    if (std::string_view(e.what()).starts_with(store)) throw;
    throw ProtocolMismatch(cat(store, ": handshake: ", e.what()));
  } catch (const Timeout& e) {
    throw Timeout(cat(store, ": no answer to the handshake (", e.what(), ")"));
  } catch (const PeerLost& e) {
    throw PeerLost(cat(store, ": the connection closed during the handshake (", e.what(), ")"));
  }
}

class Client final : public Store {
 public:
  Client(std::string address, std::vector<SockAddr> addrs, Socket socket, Identity id, TlsContext tls)
      : address_(std::move(address)),
        addrs_(std::move(addrs)),
        id_(std::move(id)),
        tls_(std::move(tls)),
        socket_(std::move(socket)) {}

  /// Reconnects pass the store's seal with `token` from now on.
  void set_member(const Bytes& token) {
    std::lock_guard lock(mutex_);
    id_.member = token;
  }

  void set(std::string_view key, std::span<const std::byte> value) override {
    wire::Request r{.op = wire::Op::set, .keys = {std::string(key)}, .value = Bytes(value.begin(), value.end())};
    call(r, kReplyTimeout);
  }

  bool try_set(std::string_view key, std::span<const std::byte> value, Millis budget) override {
    wire::Request r{.op = wire::Op::set, .keys = {std::string(key)}, .value = Bytes(value.begin(), value.end())};
    try {
      std::unique_lock lock(mutex_, std::defer_lock);
      if (!lock_within(lock, budget)) return false;
      call_locked(r, budget);
      return true;
    } catch (const Error& e) {
      log_trace(prefix(r), "gave up: ", e.what());
      return false;
    }
  }

  std::optional<Bytes> peek(std::string_view key, Millis budget) override {
    wire::Request r{.op = wire::Op::get, .keys = {std::string(key)}, .timeout = Millis(0)};
    std::unique_lock lock(mutex_, std::defer_lock);
    if (!lock_within(lock, budget)) throw Timeout(cat(prefix(r), "the store client is busy"));
    wire::Reply reply = call_locked(r, budget);
    if (reply.status == wire::Status::timeout) return std::nullopt;
    return std::move(reply.value);
  }

  std::string endpoint() const override { return endpoint_; }

  Bytes get(std::string_view key, Millis timeout) override {
    timeout = std::clamp(timeout, Millis(0), wire::kMaxTimeout);
    wire::Request r{.op = wire::Op::get, .keys = {std::string(key)}, .timeout = timeout};
    wire::Reply reply = call(r, timeout + kReplyGrace);
    if (reply.status == wire::Status::timeout)
      throw Timeout(cat(prefix(r), "the key was not set within ", seconds_of(timeout), " s"));
    return std::move(reply.value);
  }

  std::int64_t add(std::string_view key, std::int64_t delta) override {
    return call(wire::Request{.op = wire::Op::add, .keys = {std::string(key)}, .delta = delta}, kReplyTimeout).number;
  }

  bool check(std::span<const std::string> keys) override {
    wire::Request r{.op = wire::Op::check, .keys = std::vector<std::string>(keys.begin(), keys.end())};
    return call(r, kReplyTimeout).all_present;
  }

  std::vector<std::string> missing(std::span<const std::string> keys) override {
    // A wait that gives up at once is answered with the keys still missing.
    wire::Request r{.op = wire::Op::wait, .keys = std::vector<std::string>(keys.begin(), keys.end()), .timeout = Millis(0)};
    wire::Reply reply = call(r, kReplyTimeout);
    if (reply.status == wire::Status::timeout) return std::move(reply.missing);
    return {};
  }

  void wait(std::span<const std::string> keys, Millis timeout) override {
    timeout = std::clamp(timeout, Millis(0), wire::kMaxTimeout);
    wire::Request r{
        .op = wire::Op::wait, .keys = std::vector<std::string>(keys.begin(), keys.end()), .timeout = timeout};
    wire::Reply reply = call(r, timeout + kReplyGrace);
    if (reply.status == wire::Status::timeout)
      throw Timeout(cat(prefix(r), "after ", seconds_of(timeout), " s these keys are still missing: ",
                        quoted_list(reply.missing)));
  }

 private:
  // "braid store at 127.0.0.1:29500: get 'rank3/addr': "
  std::string prefix(const wire::Request& r) const {
    auto op = wire::name_of(r.op);
    if (r.op == wire::Op::check || r.op == wire::Op::wait)
      return cat("braid store at ", address_, ": ", op, " for ", r.keys.size(), " keys: ");
    return cat("braid store at ", address_, ": ", op, " '", r.keys.empty() ? "" : r.keys.front(), "': ");
  }

  // Sends one request and returns an ok or timeout reply; other outcomes throw.
  wire::Reply call(const wire::Request& r, Millis budget) {
    Bytes frame;
    try {
      frame = wire::encode(r);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(cat(prefix(r), e.what()));
    }
    std::lock_guard lock(mutex_);
    return call_locked(r, budget, std::move(frame));
  }

  wire::Reply call_locked(const wire::Request& r, Millis budget, Bytes frame = {}) {
    if (frame.empty()) frame = wire::encode(r);
    auto deadline = Deadline::after(budget);
    if (!socket_) reconnect(r, deadline);
    try {
      wire::Reply reply = exchange(socket_, frame, deadline);
      if (reply.status == wire::Status::protocol_error)
        throw ProtocolMismatch(cat("the store refused the request: ", reply.message));
      if (reply.op != r.op)
        throw ProtocolMismatch(cat("the store answered a ", wire::name_of(reply.op), " instead"));
      if (reply.status == wire::Status::invalid_argument) throw InvalidArgument(cat(prefix(r), reply.message));
      return reply;
    } catch (const Timeout& e) {
      socket_.reset();
      throw Timeout(cat(prefix(r), "no reply within ", seconds_of(budget),
                        " s, so the connection is dropped and the next call reopens it (", e.what(), ")"));
    } catch (const PeerLost& e) {
      socket_.reset();
      throw PeerLost(cat(prefix(r), "lost the connection to the store (", e.what(), ")"));
    } catch (const ProtocolMismatch& e) {
      socket_.reset();
      throw ProtocolMismatch(cat(prefix(r), e.what()));
    }
  }

  void reconnect(const wire::Request& r, Deadline deadline) {
    Deadline window = Deadline::after(kReconnectWindow);
    Deadline until = deadline.at() < window.at() ? deadline : window;
    Socket socket;
    try {
      socket = open_connection(addrs_, tls_, address_, until, "reconnect");
      handshake(socket, id_, address_, until);
    } catch (const Timeout& e) {
      throw PeerLost(cat(prefix(r), "the connection to the store was lost and could not be reopened (", e.what(), ")"));
    }
    socket_ = std::move(socket);
  }

  std::string address_;
  std::vector<SockAddr> addrs_;
  Identity id_;
  TlsContext tls_;
  std::mutex mutex_;
  Socket socket_;  // empty after a failure: the next call reconnects
  std::string endpoint_ = socket_ ? local_address(socket_.fd()).to_string() : std::string();
};

std::string host_port_text(const HostPort& where) {
  if (where.host.find(':') != std::string::npos) return cat("[", where.host, "]:", where.port);
  return cat(where.host, ":", where.port);
}

}  // namespace

void set_store_member(Store& store, const Bytes& token) {
  if (auto* client = dynamic_cast<Client*>(&store)) client->set_member(token);
}

std::unique_ptr<Store> connect_tcp_store(const HostPort& where, Deadline connect_deadline, AuthKey key,
                                         TlsContext tls, std::string job, int rank, int world_size) {
  std::string address = host_port_text(where);
  auto addrs = resolve(where, cat("the braid store address ", address));
  Identity id{std::move(key), std::move(job), rank, world_size};
  // A sealed store belongs to a communicator that formed already; a new one
  // may take over the address as soon as it goes (a loop that re-creates its
  // communicator), so retry until the deadline, saying so once.
  auto pause = std::chrono::milliseconds(2);
  auto back_off = [&] {
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, connect_deadline.remaining()));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  };
  std::string too_late;  // the last "sealed" refusal, for the message at the deadline
  while (true) {
    Socket socket;
    try {
      socket = open_connection(addrs, tls, address, connect_deadline, "connect");
      Deadline reply_bound = Deadline::after(kReplyTimeout);
      handshake(socket, id, address, connect_deadline.at() < reply_bound.at() ? connect_deadline : reply_bound);
    } catch (const TooLate& e) {
      if (too_late.empty()) log_info(e.what(), "; retrying until the timeout in case a new store takes over the address");
      too_late = e.what();
      if (connect_deadline.expired()) throw Timeout(cat(too_late, " (retried until the timeout)"));
      back_off();
      continue;
    } catch (const PeerLost& e) {
      // A store that closes as this client arrives (the previous
      // communicator's, going away): the next one may be up in a moment.
      if (connect_deadline.expired()) throw;
      log_trace(e.what(), "; retrying");
      back_off();
      continue;
    } catch (const Timeout& e) {
      if (!too_late.empty()) throw Timeout(cat(too_late, " (retried until the timeout)"));
      if (!socket)
        throw Timeout(cat("could not reach the braid store at ", address, " (", e.what(),
                          "); is the process hosting the store (rank 0) running, and is the address right?"));
      throw;
    }
    return std::make_unique<Client>(std::move(address), std::move(addrs), std::move(socket), std::move(id),
                                     std::move(tls));
  }
}

}  // namespace braid
