// TcpAcceptor: the accepting side of the TCP transport's connection set-up.
//
// It owns the listening socket. While its rank waits for a peer to connect
// (accept_from), it takes every pending connection at once and serves them
// side by side: a connection is looked at only when its first bytes are there
// (the hello, or the first byte of a TLS handshake), so a stranger that
// connects and says nothing costs nobody any time; it is closed after
// kHelloWait. Once a connection has spoken, the rest of its handshake (TLS,
// the key's challenge-response) is a few quick round trips bounded by
// kHandshakeStep. Garbage is refused on its first bytes. Refusals are logged
// with the sender's address through a rate limit. A connection that closes
// before sending anything is a liveness probe (or a port scan) and is dropped
// without a word.
//
// Connections filed for a rank nobody asked for yet are kept until asked for.
// A refusal that names a rank is remembered for that rank's timeout message.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "core/socket.hpp"
#include "core/tls.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/tcp_options.hpp"

namespace braid {

class TcpAcceptor {
 public:
  /// How long a connection may stay silent before it is closed.
  static constexpr Millis kHelloWait{5000};
  /// The bound on the rest of a handshake once its first bytes came.
  static constexpr Millis kHandshakeStep{2000};
  /// Connections waiting to speak beyond this many: the oldest is closed.
  static constexpr std::size_t kMaxPending = 1024;

  /// Listens on options.listen_address (port 0: the kernel picks one). The
  /// options are read at each accept, so set_identity() of the transport
  /// applies.
  explicit TcpAcceptor(const TcpOptions& options);

  SockAddr address() const { return address_; }
  /// Waits until `peer` opened every stream (options.streams) and passed
  /// the handshake, serving every other connection meanwhile. Timeout at the
  /// deadline naming the last refusal of that rank, if any. Blocking waits
  /// call this thread's InterruptScope.
  /// `from` (if given) receives the address the first stream came from.
  std::vector<Socket> accept_from(int peer, Deadline deadline, SockAddr* from = nullptr);
  /// Stops listening: a rank that dials now is refused by the kernel at once.
  void close();

 private:
  struct Pending {
    Fd fd;
    SockAddr from;
    Clock::time_point since;
  };
  // Takes every connection the kernel holds.
  void accept_new();
  // Looks at one pending connection; true when it is finished with (filed,
  // refused or dropped), false while it has not spoken yet.
  bool serve(Pending& p);
  // The handshake of a connection whose first bytes are there.
  void handshake(Fd fd, const SockAddr& from);
  // The acceptor's side of the challenge-response: accepted or auth_failed,
  // and the server proof to send with an acceptance.
  HelloStatus authenticate(Socket& socket, std::span<const std::byte> hello_bytes, Deadline deadline,
                           Digest& server_proof);
  // With TLS on: answers a dialer that sent its hello in clear with
  // tls_required.
  void refuse_clear_hello(Fd fd, const SockAddr& from, Deadline deadline);
  void note_refusal(const Hello& hello, const SockAddr& from, std::string_view why);
  template <typename... Parts>
  void warn_limited(const Parts&... parts) {
    if (auto note = refusal_log_.pass()) log_warn(parts..., *note);
  }

  const TcpOptions& options_;
  Fd listener_;
  SockAddr address_;
  std::vector<Pending> pending_;
  struct Accepted {
    Socket socket;
    SockAddr from;
  };
  std::map<std::pair<int, int>, Accepted> accepted_;  // (rank, stream) -> connection
  std::map<int, std::string> refused_;              // claimed rank -> the last refusal, for a timeout's message
  std::string refused_unnamed_;                     // the last refusal before a rank was named
  LogRateLimit refusal_log_;
};

}  // namespace braid
