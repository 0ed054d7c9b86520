// Store: the key-value rendezvous every rank reaches at start-up (addresses,
// rank info, the communicator id). Values are bytes. Every wait is bounded.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/auth.hpp"
#include "core/deadline.hpp"
#include "core/socket.hpp"
#include "core/tls.hpp"

namespace braid {

using Bytes = std::vector<std::byte>;

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
  static std::unique_ptr<TcpStoreServer> start(const SockAddr& addr, AuthKey key = {}, TlsContext tls = {});
  virtual ~TcpStoreServer() = default;
  /// The address clients connect to (with the port actually bound).
  virtual SockAddr address() const = 0;
};

/// A client of TcpStoreServer. Thread-safe. Connecting retries until the
/// deadline, since rank 0 may start after the others. Every connection runs the
/// handshake with `key` (none: the store must have none either); a refusal or
/// a store that cannot prove the key is ProtocolMismatch naming the address.
/// With `tls` on, every connection runs TLS first (the store must too), and a
/// TLS failure is ProtocolMismatch naming the address and the reason.
std::unique_ptr<Store> connect_tcp_store(const HostPort& where, Deadline connect_deadline, AuthKey key = {},
                                         TlsContext tls = {});

}  // namespace braid
