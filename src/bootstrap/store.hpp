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

#include "braid/store.hpp"
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

class EventLoop;
class TlsSession;

/// The store server rank 0 (or UniqueId::create) hosts: any number of clients
/// over TCP, served on an EventLoop (the process's service thread) until
/// destroyed. With a key, only clients that
/// prove they hold the same key are served; the others are refused and logged
/// with their address. With TLS on, every client connects through TLS with a
/// certificate the server's CA signed, and a client in clear is refused.
class TcpStoreServer {
 public:
  /// Binds `addr` (port 0 picks a free one). Throws SystemError naming the
  /// address if it is in use.
  /// `job` is the job id every client must present (empty: clients without one).
  /// With `ports`, port 0 picks a free port of that range.
  static std::unique_ptr<TcpStoreServer> start(EventLoop& loop, const SockAddr& addr, AuthKey key = {},
                                               TlsContext tls = {}, std::string job = {},
                                               std::optional<PortRange> ports = {});
  /// A server without a listener of its own: the connections come through
  /// adopt(), from a listener that also serves other protocols (the TCP
  /// transport's, on the store's port). `address` is that listener's.
  static std::unique_ptr<TcpStoreServer> serve_adopted(EventLoop& loop, const SockAddr& address, AuthKey key = {},
                                                       TlsContext tls = {}, std::string job = {});
  virtual ~TcpStoreServer() = default;
  /// The address clients connect to (with the port actually bound).
  virtual SockAddr address() const = 0;
  /// The communicator has formed: clients that connect from now on are
  /// refused as too late (those connected already go on), but for a member
  /// reconnecting with `token` (set_store_member). Thread-safe.
  /// Sealing again (a communicator grown at this store) adds a token: the
  /// earlier communicators' members may still reconnect.
  virtual void seal(Bytes token = {}) = 0;
  /// An elastic job (BRAID_ELASTIC): past the seal, a client of this job that
  /// joins as no rank yet (Comm::join, to be admitted by a grow) is let in.
  /// Thread-safe.
  virtual void admit_joiners() = 0;
  /// Whether every one of `keys` is set (the host's own look, without a
  /// client). Thread-safe.
  virtual bool holds(const std::vector<std::string>& keys) = 0;
  /// Since when no client that joined as `rank` (its hello's rank, of this
  /// job) has a connection open, after one had; nullopt while one is open or
  /// none ever was. A rank whose process died is absent for good; a live one
  /// reconnecting is absent for a moment. Thread-safe.
  virtual std::optional<Clock::time_point> absent_since(int rank) = 0;
  /// Serves a connection another listener accepted. Its first bytes (the
  /// store's hello) must still be unread in the socket, or in `tls`, the
  /// session whose handshake that listener ran. Thread-safe.
  virtual void adopt(Fd fd, SockAddr from, std::unique_ptr<TlsSession> tls) = 0;
};

/// A client of TcpStoreServer. Thread-safe. Connecting retries until the
/// deadline, since rank 0 may start after the others. Every connection runs the
/// handshake with `key` (none: the store must have none either); a refusal or
/// a store that cannot prove the key is ProtocolMismatch naming the address.
/// With `tls` on, every connection runs TLS first (the store must too), and a
/// TLS failure is ProtocolMismatch naming the address and the reason.
///
/// The hello names `job`, the rank this client joins as (-1: none), the world
/// size it joins with (0: none) and its pid. A store
/// of another job refuses at once (ProtocolMismatch saying two jobs share the
/// address); a sealed store (its communicator formed) is retried until the
/// deadline, since a new store may take over the address once the old one goes.
/// From now on, when `store` (a TCP store's client; other stores ignore it)
/// has to reconnect, it passes the seal of its communicator's store with
/// `token`: the member's right to reconnect.
void set_store_member(Store& store, const Bytes& token);

std::unique_ptr<Store> connect_tcp_store(const HostPort& where, Deadline connect_deadline, AuthKey key = {},
                                         TlsContext tls = {}, std::string job = {}, int rank = -1,
                                         int world_size = 0);

}  // namespace braid
