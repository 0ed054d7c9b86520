// TcpRank: one rank of one communicator over a TCP context of its own (as if
// each rank were a process), for the unit tests that dial and accept real
// connections on loopback: the handshake, authentication and TLS tests.
#pragma once

#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "core/auth.hpp"
#include "core/comm_id.hpp"
#include "core/deadline.hpp"
#include "core/socket.hpp"
#include "core/tls.hpp"
#include "tests/unit/loopback_fixtures.hpp"
#include "transport/tcp/tcp_context.hpp"

namespace braid::test {

/// What a TCP rank uses: who it speaks for, and the socket, timeout and
/// security settings every rank of the communicator shares.
struct TcpOptions {
  int rank = 0;
  int world_size = 1;
  CommId comm_id;
  int streams = 1;
  std::size_t buffer_bytes = 0;  // SO_SNDBUF/SO_RCVBUF; 0: the kernel's
  Millis timeout{3000};
  SockAddr listen_address;  // the IP to listen on; the port is picked
  AuthKey auth_key;         // none: connections are not authenticated
  TlsContext tls;           // off: connections run in clear
};

/// TcpOptions for rank of size in communicator id, listening on loopback (no key, no TLS).
inline TcpOptions loopback_tcp_options(int rank, int size, const CommId& id, Millis timeout = Millis(3000)) {
  TcpOptions o;
  o.rank = rank;
  o.world_size = size;
  o.comm_id = id;
  o.timeout = timeout;
  o.listen_address = loopback();
  return o;
}

class TcpRank {
 public:
  explicit TcpRank(const TcpOptions& o)
      : context_(service_loop(), {}, TcpContext::Options{.bind = o.listen_address, .auth_key = o.auth_key, .tls = o.tls}),
        owner_{.comm_id = o.comm_id, .rank = o.rank, .size = o.world_size, .tcp_streams = o.streams,
               .tcp_buffer_bytes = o.buffer_bytes, .timeout = o.timeout},
        advertise_(o.listen_address) {
    context_.enroll(owner_);
  }

  SockAddr listening() const { return context_.listening(); }
  std::vector<std::byte> local_address() const { return context_.local_address(advertise_); }
  TcpContext& context() { return context_; }

  /// The link to `peer`: dialed now, or (a lower rank) taken once the peer
  /// dialed, asking the context again until the deadline, which throws.
  std::unique_ptr<Link> connect(const RankInfo& peer, std::span<const std::byte> address, Deadline deadline) {
    PeerRef ref{&peer, address};
    while (true) {
      auto links = context_.connect(owner_, std::span(&ref, 1), deadline, {});
      if (!links.empty()) return std::move(links.front());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  TcpContext context_;
  LinkOwner owner_;
  SockAddr advertise_;
};

}  // namespace braid::test
