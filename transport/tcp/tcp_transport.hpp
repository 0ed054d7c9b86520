// TcpTransport: reaches every peer over TCP. Each rank listens on one port of
// the address it advertises (TcpAcceptor). For a pair of ranks the higher rank
// dials and the lower accepts; connect_all() dials all lower peers first and
// then accepts from the higher ones, so by induction on the rank no two ranks
// wait on each other. With an authentication key every connection runs the
// challenge-response of handshake.hpp, and a dialer with another key (or none)
// is refused and logged on both sides. With TLS (core/tls.hpp) every
// connection, each stream of a link, first runs a TLS handshake with mutual
// certificate verification, and the hello, the challenge-response and the data
// follow inside TLS.
//
// Connecting never outlives its peer: while it waits, the caller's PeerWatch
// runs every few milliseconds (an abort, a failure the peer published), and
// the transport itself checks that the peer still exists: a peer on this host
// by its process id, a remote one by probing its listener (with backoff). A
// listener that refuses connections means the peer exited, crashed, aborted or
// destroyed its communicator: PeerLost at once, not a wait until the timeout.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transport/tcp/handshake.hpp"
#include "transport/tcp/tcp_acceptor.hpp"
#include "transport/tcp/tcp_options.hpp"
#include "transport/transport.hpp"

namespace braid {

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(TcpOptions options);

  std::string_view name() const override { return "tcp"; }
  std::vector<std::byte> local_address() const override;
  /// Establishes the link to one peer (both ranks call this for each other).
  std::unique_ptr<Link> connect(const RankInfo& peer, std::span<const std::byte> peer_address, Deadline deadline);
  /// Connects to several peers in the deadlock-free order described above.
  std::vector<std::unique_ptr<Link>> connect_all(std::span<const PeerRef> peers, Deadline deadline,
                                                 const PeerWatch& watch) override;
  std::string describe() const override;
  void stop_accepting() override { acceptor_.close(); }

  SockAddr listening() const { return acceptor_.address(); }
  void set_identity(int rank, int world_size, const CommId& comm_id) override {
    options_.rank = rank;
    options_.world_size = world_size;
    options_.comm_id = comm_id;
  }
  int streams() const { return options_.streams; }

 private:
  // When the next liveness check of a peer is due, and the gap after it.
  struct Liveness {
    Clock::time_point next;
    Millis interval;
  };
  std::vector<Socket> dial(const PeerRef& peer, Deadline deadline, const PeerWatch& watch);
  void dial_handshake(Socket& socket, const Hello& hello, Deadline deadline, const std::string& what);
  // Throws PeerLost when the peer is known to be gone.
  void check_alive(const PeerRef& peer, Liveness& liveness);
  std::unique_ptr<Link> make_link(const RankInfo& peer, const SockAddr& remote, std::vector<Socket> sockets);

  TcpOptions options_;
  TcpAcceptor acceptor_;  // reads options_, so it comes after
  std::uint64_t kernel_id_;  // this process's kernel: peers on it are looked up in the process table
};

/// "127.0.0.1:40123" as bytes: the TCP transport's address format.
SockAddr parse_tcp_address(std::span<const std::byte> bytes);

}  // namespace braid
