// Sockets: an owning file descriptor, addresses, and the few blocking-with-
// deadline operations that rendezvous and handshakes need. The data path
// (transport/tcp) uses these to set up, then drives non-blocking I/O itself.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/deadline.hpp"

namespace braid {

/// Owns one file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// An IPv4 or IPv6 socket address.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  std::uint16_t port() const;
  void set_port(std::uint16_t port);
  bool is_loopback() const;
  /// The wildcard address of its family (0.0.0.0, ::): a listener there
  /// listens on every interface.
  bool is_any_host() const;
  /// Makes the host part the wildcard of its family, keeping the port.
  void set_any_host();
  /// "127.0.0.1:29500", "[::1]:29500".
  std::string to_string() const;
  /// The address without the port ("127.0.0.1", "::1").
  std::string host_string() const;
  const sockaddr* raw() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* raw() { return reinterpret_cast<sockaddr*>(&storage); }
};

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};

/// Splits "host:port", "[v6addr]:port" or "v6addr" with a port; throws
/// InvalidArgument naming `what` and the text when malformed.
HostPort parse_host_port(std::string_view text, std::string_view what);
/// Resolves host (name or literal) for a TCP stream; throws InvalidArgument
/// naming `what` when it does not resolve.
std::vector<SockAddr> resolve(const HostPort& where, std::string_view what);
/// The first address of interface `ifname` (IPv4 preferred); nullopt if it
/// has none; throws InvalidArgument if no such interface exists.
std::optional<SockAddr> interface_address(std::string_view ifname);
/// The IPv4 address of the first interface that is up and not loopback.
std::optional<SockAddr> first_external_address();

/// The local address the kernel would use to reach `remote` (a UDP connect,
/// which sends nothing): what a rank advertises by default.
SockAddr local_address_toward(const SockAddr& remote);

/// A listening TCP socket bound to `addr` (port 0 picks one). Throws
/// SystemError naming `what` and the address, e.g. when the port is in use.
Fd listen_tcp(const SockAddr& addr, std::string_view what, int backlog = 128);

/// The ports a job's listening sockets may use (BRAID_PORT_RANGE=40000-40050),
/// so that a firewall needs to open only those.
struct PortRange {
  std::uint16_t first = 0;
  std::uint16_t last = 0;
  /// "40000-40050" (or one port, "40000"); throws InvalidArgument naming `what`.
  static PortRange parse(std::string_view text, std::string_view what);
  bool contains(std::uint16_t port) const { return port >= first && port <= last; }
  std::string to_string() const;
};
/// Like listen_tcp, but when `addr` has port 0 and `range` is set, binds the
/// first free port of the range, starting at a random one so that ranks
/// starting together rarely try the same port. SystemError naming the range
/// when every port of it is taken.
Fd listen_tcp(const SockAddr& addr, const std::optional<PortRange>& range, std::string_view what,
              int backlog = 128);
/// Connects to one of `addrs`, retrying refused or unreachable attempts until
/// the deadline (the other side may not be listening yet). Throws Timeout
/// naming `what` and the last error.
Fd connect_tcp(const std::vector<SockAddr>& addrs, Deadline deadline, std::string_view what);
/// One connection attempt to `addr` that waits at most until `deadline`: the
/// connected socket (blocking mode), or the errno that ended it (ECONNREFUSED:
/// nothing listens there; ETIMEDOUT: no answer by the deadline).
struct ConnectAttempt {
  Fd fd;
  int error = 0;
};
ConnectAttempt try_connect_tcp(const SockAddr& addr, Deadline deadline);
/// Waits for one connection on a listening socket; nullopt at the deadline.
std::optional<Fd> accept_tcp(int listen_fd, Deadline deadline);

/// Waits until `fd` is ready for `events` (poll's POLLIN, POLLOUT); false at
/// the deadline. An error on the descriptor counts as ready (the next I/O
/// call reports it). Calls this thread's interruption check (InterruptScope).
bool wait_fd(int fd, short events, Deadline deadline);

/// While alive, every blocking socket wait of this thread (wait_fd, so
/// connect_tcp, send_all, recv_all and the TLS handshakes) calls `check` at
/// least every kInterruptPoll; `check` cancels the wait by throwing (an abort,
/// a peer known to be dead). Scopes nest; the innermost one is called.
class InterruptScope {
 public:
  static constexpr Millis kInterruptPoll{10};
  explicit InterruptScope(std::function<void()> check);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  /// Calls the innermost scope's check, if any.
  static void poll();
  /// True once the innermost scope's check threw: code that catches errors
  /// of its own (a stranger's failed handshake) lets an interruption pass.
  static bool fired();

 private:
  std::function<void()> check_;
  InterruptScope* outer_;
  bool fired_ = false;
};

SockAddr local_address(int fd);
SockAddr peer_address(int fd);

void set_nonblocking(int fd, bool on);
void set_nodelay(int fd);
/// Keepalive plus TCP_USER_TIMEOUT so a silently dead link fails in bounded time.
void set_liveness(int fd, Millis user_timeout);
void set_buffer_sizes(int fd, std::size_t bytes);

/// How many connections a listener keeps that have not finished their
/// handshake (strangers, or ranks still saying hello): an eighth of the
/// process's open-file limit, between 8 and 1024, so that silent
/// connections cannot take the descriptors the job itself needs. Past it,
/// the oldest is closed (docs/security.md).
std::size_t stranger_limit();

/// A descriptor a listener holds back for the moment the process runs out
/// (EMFILE): released, it lets the listener take the connection waiting in
/// its queue and close it, instead of finding it ready again at once and
/// spinning. The client sees its connection closed and retries.
class SpareFd {
 public:
  SpareFd();
  /// Accepts one waiting connection of `listen_fd` and closes it; false when
  /// there was none or the spare could not be freed.
  bool drop_one(int listen_fd);

 private:
  void reserve();  // holds /dev/null open when it does not yet
  Fd fd_;
};

/// Blocking-with-deadline full transfers on a socket of either mode. Throw
/// Timeout or PeerLost with `what` in the message.
void send_all(int fd, const void* data, std::size_t bytes, Deadline deadline, std::string_view what);
void recv_all(int fd, void* data, std::size_t bytes, Deadline deadline, std::string_view what);

}  // namespace braid
