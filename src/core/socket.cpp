#include "core/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <random>
#include <cstring>
#include <thread>

#include "braid/types.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::set_port(std::uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

bool SockAddr::is_loopback() const {
  if (family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  if (family() == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
  return false;
}

bool SockAddr::is_any_host() const {
  if (family() == AF_INET) return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (family() == AF_INET6) return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
  return false;
}

void SockAddr::set_any_host() {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_addr.s_addr = htonl(INADDR_ANY);
  else if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_addr = in6addr_any;
}

std::string SockAddr::host_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, buf, sizeof buf);
  else if (family() == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, buf, sizeof buf);
  else
    return "(no address)";
  return buf;
}

std::string SockAddr::to_string() const {
  if (family() == AF_INET6) return cat("[", host_string(), "]:", port());
  return cat(host_string(), ":", port());
}

HostPort parse_host_port(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(cat(what, " '", text, "' is not host:port (", why, ")"));
  };
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      throw bad("expected [ipv6]:port");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) throw bad("no port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) throw bad("empty host");
  unsigned value = 0;
  if (port.empty() || port.size() > 5) throw bad("bad port");
  for (char c : port) {
    if (c < '0' || c > '9') throw bad("bad port");
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > 65535) throw bad("port above 65535");
  return HostPort{std::string(host), static_cast<std::uint16_t>(value)};
}

std::vector<SockAddr> resolve(const HostPort& where, std::string_view what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string port = std::to_string(where.port);
  int rc = getaddrinfo(where.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0)
    throw InvalidArgument(cat(what, " host '", where.host, "' does not resolve: ", gai_strerror(rc)));
  std::vector<SockAddr> out;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    SockAddr a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = ai->ai_addrlen;
    out.push_back(a);
  }
  freeaddrinfo(found);
  if (out.empty()) throw InvalidArgument(cat(what, " host '", where.host, "' has no IPv4 or IPv6 address"));
  return out;
}

namespace {

SockAddr from_ifaddr(const sockaddr* sa) {
  SockAddr a;
  a.length = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  std::memcpy(&a.storage, sa, a.length);
  a.set_port(0);
  return a;
}

struct IfAddrs {
  ifaddrs* list = nullptr;
  IfAddrs() {
    if (getifaddrs(&list) != 0) throw SystemError(cat("getifaddrs failed: ", errno_text(errno)));
  }
  ~IfAddrs() { freeifaddrs(list); }
};

}  // namespace

std::optional<SockAddr> interface_address(std::string_view ifname) {
  IfAddrs ifs;
  bool exists = false;
  std::optional<SockAddr> v6;
  for (ifaddrs* i = ifs.list; i != nullptr; i = i->ifa_next) {
    if (ifname != i->ifa_name) continue;
    exists = true;
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET) return from_ifaddr(i->ifa_addr);
    if (i->ifa_addr->sa_family == AF_INET6 && !v6) v6 = from_ifaddr(i->ifa_addr);
  }
  if (!exists) throw InvalidArgument(cat("network interface '", ifname, "' does not exist on this host"));
  return v6;
}

std::optional<SockAddr> first_external_address() {
  IfAddrs ifs;
  for (ifaddrs* i = ifs.list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    return from_ifaddr(i->ifa_addr);
  }
  return std::nullopt;
}

SockAddr local_address_toward(const SockAddr& remote) {
  Fd fd(::socket(remote.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) throw SystemError(cat("socket() failed: ", errno_text(errno)));
  if (::connect(fd.get(), remote.raw(), remote.length) != 0)
    throw SystemError(cat("no route from this host to ", remote.to_string(), ": ", errno_text(errno)));
  SockAddr local = local_address(fd.get());
  local.set_port(0);
  return local;
}

Fd listen_tcp(const SockAddr& addr, std::string_view what, int backlog) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw SystemError(cat(what, ": socket() failed: ", errno_text(errno)));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), addr.raw(), addr.length) != 0) {
    int err = errno;
    throw SystemError(cat(what, ": cannot bind ", addr.to_string(), ": ", errno_text(err),
                          err == EADDRINUSE ? " (another process holds this port)" : ""));
  }
  if (::listen(fd.get(), backlog) != 0)
    throw SystemError(cat(what, ": listen on ", addr.to_string(), " failed: ", errno_text(errno)));
  return fd;
}

PortRange PortRange::parse(std::string_view text, std::string_view what) {
  auto number = [&](std::string_view part) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || value < 1 || value > 65535)
      throw InvalidArgument(cat(what, "='", text, "' is not a port range (example: 40000-40050; ports 1-65535)"));
    return static_cast<std::uint16_t>(value);
  };
  auto dash = text.find('-');
  PortRange r;
  r.first = number(text.substr(0, dash));
  r.last = dash == std::string_view::npos ? r.first : number(text.substr(dash + 1));
  if (r.last < r.first)
    throw InvalidArgument(cat(what, "='", text, "': the range ends before it starts (example: 40000-40050)"));
  return r;
}

std::string PortRange::to_string() const { return first == last ? cat(first) : cat(first, "-", last); }

Fd listen_tcp(const SockAddr& addr, const std::optional<PortRange>& range, std::string_view what, int backlog) {
  if (!range || addr.port() != 0) return listen_tcp(addr, what, backlog);
  const unsigned span = static_cast<unsigned>(range->last - range->first) + 1;
  static std::atomic<unsigned> salt{0};
  const unsigned start = static_cast<unsigned>(std::random_device{}() + salt.fetch_add(7919)) % span;
  for (unsigned i = 0; i < span; ++i) {
    SockAddr a = addr;
    a.set_port(static_cast<std::uint16_t>(range->first + (start + i) % span));
    try {
      return listen_tcp(a, what, backlog);
    } catch (const SystemError&) {
      // Taken (by another rank, a split child, another program): the next one.
    }
  }
  throw SystemError(cat(what, ": every port of BRAID_PORT_RANGE=", range->to_string(), " on ", addr.host_string(),
                        " is in use; widen the range (each rank needs one port per communicator, the store one "
                        "more)"));
}

namespace {

// The innermost InterruptScope of this thread.
thread_local InterruptScope* t_interrupt = nullptr;

}  // namespace

InterruptScope::InterruptScope(std::function<void()> check) : check_(std::move(check)), outer_(t_interrupt) {
  t_interrupt = this;
}

InterruptScope::~InterruptScope() { t_interrupt = outer_; }

void InterruptScope::poll() {
  if (t_interrupt == nullptr || !t_interrupt->check_) return;
  try {
    t_interrupt->check_();
  } catch (...) {
    t_interrupt->fired_ = true;
    throw;
  }
}

bool InterruptScope::fired() { return t_interrupt != nullptr && t_interrupt->fired_; }

bool wait_fd(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int ms = deadline.poll_ms(t_interrupt != nullptr ? InterruptScope::kInterruptPoll : Millis(1000));
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // the next I/O call reports it
    InterruptScope::poll();
    if (deadline.expired()) return false;
  }
}

ConnectAttempt try_connect_tcp(const SockAddr& addr, Deadline deadline) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) throw SystemError(cat("socket() failed: ", errno_text(errno)));
  int rc = ::connect(fd.get(), addr.raw(), addr.length);
  int err = rc == 0 ? 0 : errno;
  if (rc != 0 && err == EINPROGRESS) {
    if (!wait_fd(fd.get(), POLLOUT, deadline)) return ConnectAttempt{Fd(), ETIMEDOUT};
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  }
  if (err != 0) return ConnectAttempt{Fd(), err};
  set_nonblocking(fd.get(), false);
  return ConnectAttempt{std::move(fd), 0};
}

Fd connect_tcp(const std::vector<SockAddr>& addrs, Deadline deadline, std::string_view what) {
  std::string last_error = "no address to try";
  auto pause = std::chrono::milliseconds(5);
  const auto started = Clock::now();
  std::chrono::seconds next_progress{5};
  while (true) {
    for (const auto& addr : addrs) {
      Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd) throw SystemError(cat(what, ": socket() failed: ", errno_text(errno)));
      int rc = ::connect(fd.get(), addr.raw(), addr.length);
      if (rc != 0 && errno == EINPROGRESS) {
        if (!wait_fd(fd.get(), POLLOUT, deadline)) {
          last_error = cat("connect to ", addr.to_string(), " did not complete");
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        set_nonblocking(fd.get(), false);
        return fd;
      }
      last_error = cat(addr.to_string(), ": ", errno_text(errno));
    }
    if (deadline.expired()) break;
    // Someone starting ranks on two machines by hand sees what this one waits for.
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started);
    if (waited >= next_progress) {
      next_progress = waited + std::chrono::seconds(5);
      const auto total = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started + deadline.remaining());
      log_info(what, ": waiting for ", addrs.empty() ? std::string("?") : addrs.front().to_string(), " (",
               waited.count(), " s of ", total.count(), " s; last error: ", last_error, ")");
    }
    InterruptScope::poll();
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline.remaining()));
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
  throw Timeout(cat(what, ": could not connect before the deadline (last error: ", last_error, ")"));
}

std::optional<Fd> accept_tcp(int listen_fd, Deadline deadline) {
  while (true) {
    if (!wait_fd(listen_fd, POLLIN, deadline)) return std::nullopt;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return Fd(fd);
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
      throw SystemError(cat("accept failed: ", errno_text(errno)));
  }
}

SockAddr local_address(int fd) {
  SockAddr a;
  a.length = sizeof a.storage;
  if (::getsockname(fd, a.raw(), &a.length) != 0) throw SystemError(cat("getsockname failed: ", errno_text(errno)));
  return a;
}

SockAddr peer_address(int fd) {
  SockAddr a;
  a.length = sizeof a.storage;
  if (::getpeername(fd, a.raw(), &a.length) != 0) a.length = 0;
  return a;
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) throw SystemError(cat("fcntl(O_NONBLOCK) failed: ", errno_text(errno)));
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::size_t stranger_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1024;
  return std::clamp<std::size_t>(static_cast<std::size_t>(limit.rlim_cur) / 8, 8, 1024);
}

SpareFd::SpareFd() { reserve(); }

void SpareFd::reserve() {
  if (!fd_) fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

bool SpareFd::drop_one(int listen_fd) {
  reserve();
  if (!fd_) return false;
  fd_.reset();
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) ::close(fd);
  reserve();
  return fd >= 0;
}

void set_liveness(int fd, Millis user_timeout) {
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 1, interval = 1, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  unsigned ms = static_cast<unsigned>(std::min<long long>(user_timeout.count(), 0x7fffffff));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

void set_buffer_sizes(int fd, std::size_t bytes) {
  if (bytes == 0) return;
  int size = static_cast<int>(std::min<std::size_t>(bytes, 1u << 30));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

void send_all(int fd, const void* data, std::size_t bytes, Deadline deadline, std::string_view what) {
  auto* p = static_cast<const std::byte*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline)) throw Timeout(cat(what, ": send timed out"));
      continue;
    }
    throw PeerLost(cat(what, ": send failed: ", errno_text(errno)));
  }
}

void recv_all(int fd, void* data, std::size_t bytes, Deadline deadline, std::string_view what) {
  auto* p = static_cast<std::byte*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) throw PeerLost(cat(what, ": the peer closed the connection"));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, deadline)) throw Timeout(cat(what, ": receive timed out"));
      continue;
    }
    throw PeerLost(cat(what, ": receive failed: ", errno_text(errno)));
  }
}

}  // namespace braid
