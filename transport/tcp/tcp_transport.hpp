// TcpTransport: reaches every peer over TCP. Each rank listens on one port of
// the address it advertises. For a pair of ranks the higher rank dials and the
// lower accepts; connect_all() dials all lower peers first and then accepts
// from the higher ones, so by induction on the rank no two ranks wait on each
// other. A connection that arrives for a peer nobody asked for yet is kept
// until asked for; a stranger is refused and logged with its address. With an
// authentication key every connection runs the challenge-response of
// handshake.hpp, and a dialer with another key (or none) is refused and logged
// on both sides. With TLS (core/tls.hpp) every connection, each stream of a
// link, first runs a TLS handshake with mutual certificate verification, and
// the hello, the challenge-response and the data follow inside TLS.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/auth.hpp"
#include "core/comm_id.hpp"
#include "core/socket.hpp"
#include "core/tls.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/transport.hpp"

namespace braid {

struct TcpOptions {
  int rank = 0;
  int world_size = 1;
  CommId comm_id;
  int streams = 1;
  std::size_t buffer_bytes = 0;
  Millis timeout{300000};
  SockAddr listen_address;  // the IP to advertise; the port is picked here
  AuthKey auth_key;         // none: connections are not authenticated
  TlsContext tls;           // off: connections run in clear
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(TcpOptions options);

  std::string_view name() const override { return "tcp"; }
  bool can_reach(const RankInfo&, const RankInfo&) const override { return true; }
  std::vector<std::byte> local_address() const override;
  std::unique_ptr<Link> connect(const RankInfo& peer, std::span<const std::byte> peer_address,
                                Deadline deadline) override;

  struct PeerRef {
    const RankInfo* info;
    std::span<const std::byte> address;
  };
  /// Connects to several peers in the deadlock-free order described above.
  std::vector<std::unique_ptr<Link>> connect_all(std::span<const PeerRef> peers, Deadline deadline);

  SockAddr listening() const { return listen_address_; }
  /// Sets who this transport speaks for, before any connection: a split
  /// communicator opens its listener before it knows its rank there.
  void set_identity(int rank, int world_size, const CommId& comm_id) {
    options_.rank = rank;
    options_.world_size = world_size;
    options_.comm_id = comm_id;
  }
  int streams() const { return options_.streams; }

 private:
  std::vector<Socket> dial(const PeerRef& peer, Deadline deadline);
  void dial_handshake(Socket& socket, const Hello& hello, Deadline deadline, const std::string& what);
  // The acceptor's side of the challenge-response: accepted or auth_failed,
  // and the server proof to send with an acceptance.
  HelloStatus authenticate(Socket& socket, std::span<const std::byte> hello_bytes, Deadline deadline,
                           const std::string& what, Digest& server_proof);
  std::vector<Socket> accept_from(int peer, Deadline deadline);
  // Accepts one connection and files it under its rank; false at the deadline.
  bool accept_one(Deadline deadline);
  // With TLS on: answers a dialer that sent its hello in clear with
  // tls_required, and logs it.
  void refuse_clear_hello(Fd fd, const SockAddr& from, Deadline deadline);
  std::unique_ptr<Link> make_link(const RankInfo& peer, std::vector<Socket> sockets);

  TcpOptions options_;
  Fd listener_;
  SockAddr listen_address_;
  std::map<std::pair<int, int>, Socket> accepted_;  // (rank, stream) -> connection
  std::map<int, std::string> refused_;              // claimed rank -> the last refusal, for a timeout's message
  std::string refused_unnamed_;  // the last refusal before a rank was named (TLS), for a timeout's message
};

/// "127.0.0.1:40123" as bytes: the TCP transport's address format.
SockAddr parse_tcp_address(std::span<const std::byte> bytes);

}  // namespace braid
