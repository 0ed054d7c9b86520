// TcpContext: the TCP transport of one process. One listening socket serves
// every communicator of the process (and, on the rank that hosts the
// rendezvous store, the store too: one port for both), its connections
// served on the service thread by TcpAcceptor, which files each under the
// communicator its hello names. For a pair of ranks the higher one dials and
// the lower one takes what its acceptor filed, so connect() never waits for
// the peer's engine: a dial is answered by the peer's service thread within
// a round trip, and a connection not filed yet is simply not returned yet.
//
// With an authentication key every connection runs the challenge-response of
// handshake.hpp, and a dialer with another key (or none) is refused and
// logged on both sides. With TLS (core/tls.hpp) every connection, each
// stream of a link, first runs a TLS handshake with mutual certificate
// verification, and the hello, the challenge-response and the data follow
// inside TLS.
//
// Connecting never outlives its peer: while a rank waits for a peer to dial,
// connect() checks, at most every few milliseconds, that the peer still
// exists: a peer on this host by its process id, a remote one by knocking on
// its listener (with backoff). A listener that refuses connections means the
// peer's process exited or crashed: PeerLost at once, not a wait until the
// timeout. A peer that finalized or gave up answers a dial saying so.
#pragma once

#include <map>
#include <mutex>
#include <tuple>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/event_loop.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/tcp_acceptor.hpp"
#include "transport/tcp/tcp_registry.hpp"
#include "transport/transport.hpp"

namespace braid {

class TcpContext final : public TransportContext {
 public:
  struct Options {
    SockAddr bind;                        // port 0: picked (from port_range when set)
    std::optional<PortRange> port_range;  // BRAID_PORT_RANGE
    AuthKey auth_key;                     // none: connections are not authenticated
    TlsContext tls;                       // off: connections run in clear
  };

  TcpContext(EventLoop& service, std::function<void()> wake_engine, Options options);
  ~TcpContext() override;

  std::string_view name() const override { return "tcp"; }
  std::vector<std::byte> local_address(const SockAddr& advertise) const override;
  bool serves(const ContextSetup& setup) const override;
  void enroll(const LinkOwner& owner) override { registry_.enroll(owner); }
  void withdraw(const LinkOwner& owner, bool failed, std::string_view why) override;
  std::vector<std::unique_ptr<Link>> connect(const LinkOwner& owner, std::span<const PeerRef> peers,
                                             Deadline deadline, const PeerWatch& watch) override;
  std::string describe(const LinkOwner& owner) const override;

 private:
  // connect()'s loop; the links it made stay in `links` when it throws.
  void connect_each(const LinkOwner& owner, std::span<const PeerRef> peers, Deadline deadline,
                    const PeerWatch& watch, std::vector<std::unique_ptr<Link>>& links);

 public:

  /// The address the listener is bound to (for tests and the store).
  SockAddr listening() const { return acceptor_->address(); }
  /// Connections that open with the store's bytes go to `adopt` from now on.
  void serve_store(TcpAcceptor::StoreAdopter adopt) { acceptor_->serve_store(std::move(adopt)); }

 private:
  // When the next liveness check of a peer is due, and the gap after it.
  struct Liveness {
    Clock::time_point next;
    Millis interval;
  };
  std::unique_ptr<Link> dial(const LinkOwner& owner, const PeerRef& peer, Deadline deadline, const PeerWatch& watch);
  void dial_handshake(Socket& socket, const Hello& hello, Deadline deadline, const std::string& what,
                      const PeerWatch& watch);
  // Throws PeerLost when the peer is known to be gone.
  void check_alive(const LinkOwner& owner, const PeerRef& peer);
  std::unique_ptr<Link> make_link(const LinkOwner& owner, const RankInfo& peer, const SockAddr& remote,
                                  std::vector<Socket> sockets);

  Options options_;
  std::uint64_t kernel_id_;  // this process's kernel: peers on it are looked up in the process table
  TcpRegistry registry_;
  std::unique_ptr<TcpAcceptor> acceptor_;
  // Touched by the engine's driving thread only (one at a time).
  std::mutex liveness_mutex_;  // connect() runs on the engine and on threads making communicators
  std::map<std::tuple<CommId, int, int>, Liveness> liveness_;  // communicator, this rank, peer
  /// A derived communicator's peer that answered not_yet: when to dial it
  /// again, and the pause after that (guarded by liveness_mutex_).
  struct Again {
    Clock::time_point at;
    Clock::duration pause;
  };
  std::map<std::tuple<CommId, int, int>, Again> again_;
};

/// "127.0.0.1:40123" as bytes: the TCP transport's address format.
SockAddr parse_tcp_address(std::span<const std::byte> bytes);

}  // namespace braid
