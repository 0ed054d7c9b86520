// TLS (OpenSSL libssl): encryption and mutual certificate authentication of
// every braid connection, the store's and each TCP data connection, when
// BRAID_TLS=1.
//
// Each process holds a TlsContext: its certificate chain and private key
// (BRAID_TLS_CERT, BRAID_TLS_KEY) and the CA bundle that every peer's
// certificate must chain to (BRAID_TLS_CA). Both ends of a connection present
// a certificate and both verify the other's (SSL_VERIFY_PEER |
// SSL_VERIFY_FAIL_IF_NO_PEER_CERT); ranks reach each other by IP address, so
// no host name is checked: membership is "holds a key whose certificate the
// job's CA signed". TLS 1.2 is the floor, 1.3 what two braids negotiate.
//
// The TLS handshake runs right after the TCP connection opens and before
// braid's own hello (and its BRAID_AUTH_KEY challenge), which then travel
// inside TLS. The dialing side is the TLS client, the accepting side the
// server. A TlsSession never blocks by itself: its read and write say "would
// block" when OpenSSL wants the socket to be readable or writable, so the TCP
// link keeps its non-blocking, edge-triggered progress; the blocking-with-
// deadline helpers of Socket poll(2) on top of that for handshakes and the
// store client.
//
// OpenSSL talks to the socket through a small BIO of our own that uses
// send(MSG_NOSIGNAL | MSG_DONTWAIT) and recv(MSG_DONTWAIT): a peer that
// vanishes is an error, never SIGPIPE, whatever blocking mode the fd is in.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/deadline.hpp"
#include "core/socket.hpp"

struct ssl_ctx_st;
struct ssl_st;
struct bio_st;

namespace braid {

/// The files of a TLS configuration: PEM paths, as the settings name them.
struct TlsFiles {
  std::string cert;  // BRAID_TLS_CERT: this process's certificate chain, leaf first
  std::string key;   // BRAID_TLS_KEY: its private key
  std::string ca;    // BRAID_TLS_CA: the CA certificates peers must chain to (a file or a directory)
};

/// This process's TLS configuration: none (TLS off) or a loaded OpenSSL
/// context. Copies share the context.
class TlsContext {
 public:
  TlsContext() = default;
  /// Loads and checks the files; InvalidArgument names the setting and the
  /// path that is missing, unreadable or not PEM, or says that the key does
  /// not belong to the certificate.
  static TlsContext load(const TlsFiles& files);

  bool enabled() const { return ctx_ != nullptr; }
  ssl_ctx_st* get() const { return ctx_.get(); }
  /// The subject of this process's certificate ("CN=rank0,O=braid test").
  const std::string& subject() const { return subject_; }

 private:
  std::shared_ptr<ssl_ctx_st> ctx_;
  std::string subject_;
};

enum class TlsRole { client, server };  // the dialing side is the client

/// One TLS connection over a connected TCP socket, which it does not own (the
/// Socket that holds both closes the fd after the session is gone). Not
/// thread-safe: one thread drives it at a time, like the link it serves.
class TlsSession {
 public:
  /// What read and write return when the socket has nothing for them now.
  static constexpr long kWouldBlock = -1;
  enum class Want { nothing, read, write };

  TlsSession(const TlsContext& context, int fd, TlsRole role);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  /// One non-blocking step of the handshake: Want::nothing once it is done,
  /// else what the socket must become. Throws ProtocolMismatch saying why
  /// the handshake failed (the peer's certificate, an alert from the peer, a
  /// peer that does not speak TLS) or PeerLost when the peer closed.
  Want handshake_step();
  /// The whole handshake, waiting with poll(2); Timeout at the deadline.
  /// Errors are prefixed with `what`.
  void handshake(Deadline deadline, std::string_view what);

  /// Non-blocking: the bytes moved (> 0), kWouldBlock, or for read 0 when the
  /// peer closed the connection. Throws PeerLost or ProtocolMismatch with the
  /// TLS or socket error (no context: the caller adds it).
  long read(void* data, std::size_t bytes);
  long write(const void* data, std::size_t bytes);
  /// As read, leaving the bytes to be read again.
  long peek(void* data, std::size_t bytes);
  /// What the last read or write that returned kWouldBlock waits for.
  Want want() const { return want_; }
  /// True when decrypted or undecrypted bytes wait inside OpenSSL, which
  /// epoll cannot see: whoever stops reading must come back for them.
  bool has_pending() const;
  int fd() const { return fd_; }
  /// "TLSv1.3", after the handshake.
  std::string protocol() const;
  /// Called while verifying: the subject of a peer certificate that failed.
  void rejected_certificate(std::string subject) { rejected_ = std::move(subject); }

 private:
  // read, or peek when `peek`.
  long receive(void* data, std::size_t bytes, bool peek);
  // The text for a failed OpenSSL call that returned `ret`.
  [[noreturn]] void fail(int ret, bool handshaking);

  int fd_;
  ssl_st* ssl_ = nullptr;
  Want want_ = Want::nothing;
  int last_errno_ = 0;  // what the BIO saw, for messages
  bool eof_ = false;    // the BIO read the end of the stream
  std::string rejected_;  // the subject of the peer certificate verification refused
  friend struct TlsBio;
};

/// A connected TCP socket, in clear or inside TLS: what the connection
/// handshakes, the store client and the TCP link read and write through.
class Socket {
 public:
  Socket() = default;
  explicit Socket(Fd fd) : fd_(std::move(fd)) {}
  Socket(Fd fd, std::unique_ptr<TlsSession> tls) : fd_(std::move(fd)), tls_(std::move(tls)) {}

  int fd() const { return fd_.get(); }
  /// The TLS session, or null for a connection in clear.
  TlsSession* tls() const { return tls_.get(); }
  explicit operator bool() const { return static_cast<bool>(fd_); }
  void reset() {
    tls_.reset();
    fd_.reset();
  }

  /// Full transfers bounded by `deadline`, in clear or through TLS: Timeout,
  /// PeerLost or (TLS) ProtocolMismatch, with `what` in the message.
  void send_all(const void* data, std::size_t bytes, Deadline deadline, std::string_view what);
  void recv_all(void* data, std::size_t bytes, Deadline deadline, std::string_view what);

 private:
  Fd fd_;
  std::unique_ptr<TlsSession> tls_;  // destroyed before the fd closes
};

/// `fd` as a Socket: in clear when `tls` is off, else after a TLS handshake
/// as `role` bounded by `deadline` (errors prefixed with `what`).
Socket open_socket(Fd fd, const TlsContext& tls, TlsRole role, Deadline deadline, std::string_view what);

/// Waits for the first byte a newly accepted peer sends and says whether it
/// opens a TLS handshake (a TLS record of type handshake, 0x16) rather than a
/// braid hello in clear. Does not consume it. Timeout or PeerLost otherwise.
bool starts_tls(int fd, Deadline deadline, std::string_view what);

/// True when `bytes` begin like a TLS handshake record, the way a TLS client
/// opens: what a rank without TLS sees when a rank with TLS dials it.
bool looks_like_tls(std::span<const std::byte> bytes);

}  // namespace braid
