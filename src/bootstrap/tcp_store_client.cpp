// The TCP store client: one connection and one request at a time, under a
// mutex (so a get that waits holds up the other threads sharing this client;
// give each waiter its own client if that matters). A request whose reply does
// not arrive by its local deadline (the wait it asked for plus a grace period)
// drops the connection, so a late reply can never be read as the answer to a
// later request; the next call reconnects. Connection failures are PeerLost,
// missing replies Timeout, and every message names the store and the operation.
#include <algorithm>
#include <mutex>
#include <utility>

#include "bootstrap/store.hpp"
#include "bootstrap/store_protocol.hpp"
#include "braid/types.hpp"
#include "core/check.hpp"
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

class Client final : public Store {
 public:
  Client(std::string address, std::vector<SockAddr> addrs, Fd fd)
      : address_(std::move(address)), addrs_(std::move(addrs)), fd_(std::move(fd)) {}

  void set(std::string_view key, std::span<const std::byte> value) override {
    wire::Request r{.op = wire::Op::set, .keys = {std::string(key)}, .value = Bytes(value.begin(), value.end())};
    call(r, kReplyTimeout);
  }

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
    auto deadline = Deadline::after(budget);
    std::lock_guard lock(mutex_);
    if (!fd_) reconnect(r, deadline);
    try {
      send_all(fd_.get(), frame.data(), frame.size(), deadline, "send");
      Bytes in(wire::kHeaderBytes);
      recv_all(fd_.get(), in.data(), in.size(), deadline, "receive");
      std::size_t size = wire::frame_size(in, true).value_or(0);
      BRAID_CHECK(size >= wire::kHeaderBytes);
      in.resize(size);
      recv_all(fd_.get(), in.data() + wire::kHeaderBytes, size - wire::kHeaderBytes, deadline, "receive");
      auto decoded = wire::decode_reply(in);
      BRAID_CHECK(decoded && decoded->consumed == size);
      wire::Reply& reply = decoded->message;
      if (reply.status == wire::Status::protocol_error)
        throw ProtocolMismatch(cat("the store refused the request: ", reply.message));
      if (reply.op != r.op)
        throw ProtocolMismatch(cat("the store answered a ", wire::name_of(reply.op), " instead"));
      if (reply.status == wire::Status::invalid_argument) throw InvalidArgument(cat(prefix(r), reply.message));
      return std::move(reply);
    } catch (const Timeout& e) {
      fd_.reset();
      throw Timeout(cat(prefix(r), "no reply within ", seconds_of(budget),
                        " s, so the connection is dropped and the next call reopens it (", e.what(), ")"));
    } catch (const PeerLost& e) {
      fd_.reset();
      throw PeerLost(cat(prefix(r), "lost the connection to the store (", e.what(), ")"));
    } catch (const ProtocolMismatch& e) {
      fd_.reset();
      throw ProtocolMismatch(cat(prefix(r), e.what()));
    }
  }

  void reconnect(const wire::Request& r, Deadline deadline) {
    Deadline window = Deadline::after(kReconnectWindow);
    try {
      fd_ = connect_tcp(addrs_, deadline.at() < window.at() ? deadline : window, "reconnect");
    } catch (const Timeout& e) {
      throw PeerLost(cat(prefix(r), "the connection to the store was lost and could not be reopened (", e.what(), ")"));
    }
    set_nodelay(fd_.get());
  }

  std::string address_;
  std::vector<SockAddr> addrs_;
  std::mutex mutex_;
  Fd fd_;  // empty after a failure: the next call reconnects
};

std::string host_port_text(const HostPort& where) {
  if (where.host.find(':') != std::string::npos) return cat("[", where.host, "]:", where.port);
  return cat(where.host, ":", where.port);
}

}  // namespace

std::unique_ptr<Store> connect_tcp_store(const HostPort& where, Deadline connect_deadline) {
  std::string address = host_port_text(where);
  auto addrs = resolve(where, cat("the braid store address ", address));
  Fd fd;
  try {
    fd = connect_tcp(addrs, connect_deadline, "connect");
  } catch (const Timeout& e) {
    throw Timeout(cat("could not reach the braid store at ", address, " (", e.what(),
                      "); is the process hosting the store (rank 0) running, and is the address right?"));
  }
  set_nodelay(fd.get());
  return std::make_unique<Client>(std::move(address), std::move(addrs), std::move(fd));
}

}  // namespace braid
