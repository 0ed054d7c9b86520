// Store: the key-value rendezvous every rank reaches at start-up (addresses,
// rank info, the communicator id). Values are bytes. Every wait is bounded.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/types.hpp"
#include "core/auth.hpp"
#include "core/deadline.hpp"
#include "core/socket.hpp"
#include "core/tls.hpp"

namespace braid {

using Bytes = std::vector<std::byte>;

/// The prefix of every key a job's communicators use in a store: "braid/"
/// without a job id, else "braid/job:<id>/", so two jobs that share a store
/// (a user's store, or one address by mistake) never read each other's keys.
inline std::string job_scope(std::string_view job) {
  return job.empty() ? std::string("braid/") : "braid/job:" + std::string(job) + "/";
}

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(std::string_view key, std::span<const std::byte> value) = 0;
  /// Waits until `key` exists and returns its value; Timeout names the key.
  virtual Bytes get(std::string_view key, Millis timeout) = 0;
  /// Adds delta to the integer at key (absent counts as 0); returns the new value.
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;
  /// True if every key exists now.
  virtual bool check(std::span<const std::string> keys) = 0;
  /// Waits until every key exists; Timeout lists the keys still missing.
  virtual void wait(std::span<const std::string> keys, Millis timeout) = 0;
  /// A set that gives up after `budget` instead of failing (the store may be
  /// gone, or busy with another thread's wait): true when it was stored. For
  /// notices that must not hold up the caller (an abort).
  virtual bool try_set(std::string_view key, std::span<const std::byte> value, Millis budget) {
    (void)budget;
    try {
      set(key, value);
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  /// Reads `key` if it is there now, giving up after `budget`: its value, or
  /// nullopt when it is absent. Timeout when the store is busy past the
  /// budget; PeerLost (or another Error) when it cannot be reached.
  virtual std::optional<Bytes> peek(std::string_view key, Millis budget) {
    (void)budget;
    const std::string k(key);
    if (!check(std::span(&k, 1))) return std::nullopt;
    return get(key, Millis(0));
  }
  /// This client's end of its connection ("127.0.0.1:51234"), for messages
  /// that must tell two clients apart; empty where there is none.
  virtual std::string endpoint() const { return {}; }

  void set(std::string_view key, std::string_view value) {
    set(key, std::span(reinterpret_cast<const std::byte*>(value.data()), value.size()));
  }
  std::string get_string(std::string_view key, Millis timeout) {
    Bytes b = get(key, timeout);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
};

/// The store server rank 0 (or UniqueId::create) hosts: a thread serving any
/// number of clients over TCP until destroyed. With a key, only clients that
/// prove they hold the same key are served; the others are refused and logged
/// with their address. With TLS on, every client connects through TLS with a
/// certificate the server's CA signed, and a client in clear is refused.
class TcpStoreServer {
 public:
  /// Binds `addr` (port 0 picks a free one). Throws SystemError naming the
  /// address if it is in use.
  /// `job` is the job id every client must present (empty: clients without one).
  static std::unique_ptr<TcpStoreServer> start(const SockAddr& addr, AuthKey key = {}, TlsContext tls = {},
                                               std::string job = {});
  virtual ~TcpStoreServer() = default;
  /// The address clients connect to (with the port actually bound).
  virtual SockAddr address() const = 0;
  /// The communicator has formed: clients that connect from now on are
  /// refused as too late (those connected already go on). Thread-safe.
  virtual void seal() = 0;
};

/// A client of TcpStoreServer. Thread-safe. Connecting retries until the
/// deadline, since rank 0 may start after the others. Every connection runs the
/// handshake with `key` (none: the store must have none either); a refusal or
/// a store that cannot prove the key is ProtocolMismatch naming the address.
/// With `tls` on, every connection runs TLS first (the store must too), and a
/// TLS failure is ProtocolMismatch naming the address and the reason.
///
/// The hello names `job` and the rank this client joins as (-1: none). A store
/// of another job refuses at once (ProtocolMismatch saying two jobs share the
/// address); a sealed store (its communicator formed) is retried until the
/// deadline, since a new store may take over the address once the old one goes.
std::unique_ptr<Store> connect_tcp_store(const HostPort& where, Deadline connect_deadline, AuthKey key = {},
                                         TlsContext tls = {}, std::string job = {}, int rank = -1);

}  // namespace braid
