// TcpAcceptor: the accepting side of the TCP transport, on the process's
// service thread (core/event_loop.hpp). It owns the process's one listening
// socket and serves it at any moment, whatever the ranks' engines are doing,
// so a rank that dials never waits on its peer's progress: only on this
// loop, which answers within a round trip.
//
// Every connection is a small state machine driven by readiness, never a
// blocking call: its first bytes say what it is (a TLS ClientHello, braid's
// hello 'BRDT', the store's frame magic 0xB7 when this listener also serves
// the store this process hosts, or garbage, refused on its first bytes);
// then, with TLS, the TLS handshake one step per event; then the hello, with
// a key the challenge and the client's proof; then the reply. A connection
// that says nothing for kHelloWait, or stalls in its handshake for
// kHandshakeStep, is closed, so strangers cost nobody any time. Refusals
// are logged through a rate limit; one that names a rank is remembered for
// that rank's timeout message.
//
// The hello names its communicator. One this process enrolled (TcpContext)
// is checked (ranks, world size, streams) and, accepted, filed under
// (communicator, dialing rank, stream) for the communicator to take; one
// enrolled before its rank is known (a split child whose members are still
// being counted) is accepted and checked when taken; one that finalized or
// gave up here is refused saying so; an unknown one is refused as another
// communicator's.
#pragma once

#include <sys/epoll.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "core/socket.hpp"
#include "core/tls.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/tcp_registry.hpp"

namespace braid {

class TcpAcceptor {
 public:
  /// How long a connection may stay silent before it is closed.
  static constexpr Millis kHelloWait{5000};
  /// The bound on the rest of a handshake once its first bytes came.
  static constexpr Millis kHandshakeStep{2000};

  /// Hands a connection whose first bytes are the store's to the store this
  /// process hosts on the same port (its first bytes still unread).
  using StoreAdopter = std::function<void(Fd fd, SockAddr from, std::unique_ptr<TlsSession> tls)>;

  struct Options {
    AuthKey auth_key;  // none: connections are not authenticated
    TlsContext tls;    // off: connections run in clear
  };

  /// Serves `listener` (non-blocking, listening) on `loop`; files accepted
  /// connections in `registry`, which it reads for the communicators.
  TcpAcceptor(EventLoop& loop, Fd listener, Options options, TcpRegistry& registry);
  ~TcpAcceptor();
  TcpAcceptor(const TcpAcceptor&) = delete;
  TcpAcceptor& operator=(const TcpAcceptor&) = delete;

  SockAddr address() const { return address_; }
  /// From now on, connections that open with the store's bytes go to `adopt`.
  void serve_store(StoreAdopter adopt);

 private:
  enum class Phase { first_bytes, tls, hello, proof, reply };
  struct Incoming {
    Fd fd;
    SockAddr from;
    Clock::time_point since;
    Clock::time_point deadline;
    Phase phase = Phase::first_bytes;
    std::unique_ptr<TlsSession> tls;
    std::array<std::byte, kAuthProofBytes> in{};  // the hello (44 bytes) or the proof (64)
    std::size_t got = 0;
    std::vector<std::byte> out;
    std::size_t sent = 0;
    std::array<std::byte, kHelloBytes> hello_bytes{};
    Hello hello;
    Nonce server_nonce{};
    HelloStatus status = HelloStatus::accepted;  // what the reply being sent says
    EventLoop::Id watch = 0;
    std::uint32_t events = 0;
    bool awaiting_store = false;  // opened with the store's bytes before serve_store
  };

  void accept_new();
  // One step of `id`'s machine; false when it is finished with (filed, refused, dropped).
  bool serve(std::uint64_t id, Incoming& c);
  bool first_bytes(std::uint64_t id, Incoming& c);
  bool read_in(Incoming& c, std::size_t wanted);  // false: not all there yet
  void on_hello(Incoming& c);
  void on_proof(Incoming& c);
  void decide(Incoming& c);
  bool flush(Incoming& c);  // true once `out` is out
  void want(std::uint64_t id, Incoming& c, std::uint32_t events);
  void close(std::uint64_t id);
  std::optional<Clock::time_point> tick();
  void refuse(Incoming& c, HelloStatus status);
  void note_refusal(const Incoming& c, std::string_view why);
  template <typename... Parts>
  void warn_limited(const Parts&... parts) {
    if (auto note = refusal_log_.pass()) log_warn(parts..., *note);
  }

  EventLoop& loop_;
  Fd listener_;
  SockAddr address_;
  Options options_;
  TcpRegistry& registry_;
  std::size_t max_pending_;  // connections in their handshake beyond this many: the oldest is closed
  SpareFd spare_;            // freed to drop a connection when the process is out of descriptors
  StoreAdopter store_;  // loop thread only, like everything below
  EventLoop::Id listener_watch_ = 0;
  EventLoop::Id ticker_ = 0;
  std::map<std::uint64_t, Incoming> pending_;
  std::uint64_t next_id_ = 1;
  LogRateLimit refusal_log_;
};

}  // namespace braid
