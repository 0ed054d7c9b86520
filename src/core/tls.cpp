#include "core/tls.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdio>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// The first error OpenSSL queued on this thread, as text; the queue is
// cleared so the next call starts clean.
std::string openssl_reason() {
  unsigned long code = ERR_peek_error();
  std::string text = "no detail from OpenSSL";
  if (code != 0) {
    const char* reason = ERR_reason_error_string(code);
    text = reason ? reason : cat("OpenSSL error ", code);
  }
  ERR_clear_error();
  return text;
}

// OpenSSL never prompts for a passphrase: an encrypted key is an error.
int no_passphrase(char*, int, int, void*) { return 0; }

void check_readable(std::string_view setting, const std::string& path, std::string_view what) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) throw InvalidArgument(cat(setting, "='", path, "': cannot open ", what, ": ", errno_text(errno)));
  std::fclose(f);
}

std::string subject_of(const X509* cert) {
  if (cert == nullptr) return "(no certificate)";
  char text[512];
  X509_NAME_oneline(X509_get_subject_name(cert), text, sizeof text);
  return text;
}

// Alerts a peer sends when it does not accept the certificate it was shown.
bool certificate_alert(int alert) {
  switch (alert) {
    case SSL_AD_BAD_CERTIFICATE:
    case SSL_AD_UNSUPPORTED_CERTIFICATE:
    case SSL_AD_CERTIFICATE_REVOKED:
    case SSL_AD_CERTIFICATE_EXPIRED:
    case SSL_AD_CERTIFICATE_UNKNOWN:
    case SSL_AD_UNKNOWN_CA:
    case SSL_AD_ACCESS_DENIED:
    case SSL_AD_DECRYPT_ERROR:
    case SSL_AD_CERTIFICATE_REQUIRED:
      return true;
    default:
      return false;
  }
}

// Remembers the certificate that failed verification, for the message (the
// session does not keep a peer certificate it rejected).
int remember_rejected(int ok, X509_STORE_CTX* store) {
  if (ok) return ok;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* session = ssl ? static_cast<TlsSession*>(SSL_get_app_data(ssl)) : nullptr;
  if (session) session->rejected_certificate(subject_of(X509_STORE_CTX_get0_cert(store)));
  return ok;
}

constexpr std::size_t kReadAheadBytes = 64 * 1024;

constexpr std::string_view kEveryProcess = "is BRAID_TLS=1 set in every process of the job?";

}  // namespace

// The BIO through which OpenSSL reaches the socket (see the top of tls.hpp).
struct TlsBio {
  static BIO_METHOD* method() {
    static BIO_METHOD* m = [] {
      BIO_METHOD* made = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "braid socket");
      if (made == nullptr || !BIO_meth_set_write_ex(made, write) || !BIO_meth_set_read_ex(made, read) ||
          !BIO_meth_set_ctrl(made, ctrl) || !BIO_meth_set_create(made, create))
        throw SystemError(cat("cannot set up OpenSSL's socket I/O: ", openssl_reason()));
      return made;
    }();
    return m;
  }
  static int create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
  }
  static int write(BIO* bio, const char* data, std::size_t bytes, std::size_t* written) {
    auto* session = static_cast<TlsSession*>(BIO_get_data(bio));
    BIO_clear_retry_flags(bio);
    while (true) {
      ssize_t n = ::send(session->fd_, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) {
        *written = static_cast<std::size_t>(n);
        return 1;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
      else session->last_errno_ = errno;
      return 0;
    }
  }
  static int read(BIO* bio, char* data, std::size_t bytes, std::size_t* got) {
    auto* session = static_cast<TlsSession*>(BIO_get_data(bio));
    BIO_clear_retry_flags(bio);
    while (true) {
      ssize_t n = ::recv(session->fd_, data, bytes, MSG_DONTWAIT);
      if (n > 0) {
        *got = static_cast<std::size_t>(n);
        return 1;
      }
      if (n == 0) {
        session->eof_ = true;
        return 0;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
      else session->last_errno_ = errno;
      return 0;
    }
  }
  static long ctrl(BIO* bio, int command, long, void*) {
    switch (command) {
      case BIO_CTRL_FLUSH:
        return 1;
      case BIO_CTRL_EOF:
        return static_cast<TlsSession*>(BIO_get_data(bio))->eof_ ? 1 : 0;
      default:
        return 0;
    }
  }
};

TlsContext TlsContext::load(const TlsFiles& files) {
  check_readable("BRAID_TLS_CERT", files.cert, "the certificate file");
  check_readable("BRAID_TLS_KEY", files.key, "the private key file");
  struct stat ca_stat {};
  if (::stat(files.ca.c_str(), &ca_stat) != 0)
    throw InvalidArgument(cat("BRAID_TLS_CA='", files.ca, "': cannot open the CA file: ", errno_text(errno)));
  const bool ca_directory = S_ISDIR(ca_stat.st_mode);
  if (!ca_directory) check_readable("BRAID_TLS_CA", files.ca, "the CA file");

  ERR_clear_error();
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  if (!ctx) throw SystemError(cat("cannot create an OpenSSL context: ", openssl_reason()));
  SSL_CTX* c = ctx.get();
  SSL_CTX_set_default_passwd_cb(c, no_passphrase);
  SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, remember_rejected);
  // Every connection is a fresh full handshake: no tickets, no cache.
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  // A write returns after each record, and a retried write may come from a
  // buffer that moved (the store server's output grows while it waits).
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read records in bulk rather than header and body in two recv calls. The
  // bytes OpenSSL then holds are why readers go on until it wants the socket
  // readable (tls.hpp: has_pending).
  SSL_CTX_set_read_ahead(c, 1);
  SSL_CTX_set_default_read_buffer_len(c, kReadAheadBytes);
  // braid frames carry their lengths, so a connection cut short is caught
  // above TLS; a bare EOF reads as the peer closing, like a plain socket.
  SSL_CTX_set_options(c, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);

  if (SSL_CTX_use_certificate_chain_file(c, files.cert.c_str()) != 1)
    throw InvalidArgument(
        cat("BRAID_TLS_CERT='", files.cert, "': not a PEM certificate chain (OpenSSL: ", openssl_reason(), ")"));
  std::FILE* key_file = std::fopen(files.key.c_str(), "r");
  if (key_file == nullptr)
    throw InvalidArgument(cat("BRAID_TLS_KEY='", files.key, "': cannot open the private key file: ", errno_text(errno)));
  EVP_PKEY* key = PEM_read_PrivateKey(key_file, nullptr, no_passphrase, nullptr);
  std::fclose(key_file);
  if (key == nullptr)
    throw InvalidArgument(cat("BRAID_TLS_KEY='", files.key,
                              "': not a PEM private key, or one encrypted with a passphrase (OpenSSL: ",
                              openssl_reason(), ")"));
  int used = SSL_CTX_use_PrivateKey(c, key);
  EVP_PKEY_free(key);
  if (used != 1 || SSL_CTX_check_private_key(c) != 1)
    throw InvalidArgument(cat("BRAID_TLS_KEY='", files.key, "': the private key does not belong to the certificate in "
                              "BRAID_TLS_CERT='", files.cert, "' (OpenSSL: ", openssl_reason(), ")"));
  int loaded = ca_directory ? SSL_CTX_load_verify_locations(c, nullptr, files.ca.c_str())
                            : SSL_CTX_load_verify_locations(c, files.ca.c_str(), nullptr);
  if (loaded != 1)
    throw InvalidArgument(
        cat("BRAID_TLS_CA='", files.ca, "': no PEM CA certificate could be read (OpenSSL: ", openssl_reason(), ")"));

  TlsContext out;
  out.subject_ = subject_of(SSL_CTX_get0_certificate(c));
  out.ctx_ = std::move(ctx);
  return out;
}

TlsSession::TlsSession(const TlsContext& context, int fd, TlsRole role) : fd_(fd) {
  if (!context.enabled()) throw Error(ErrorCode::internal, "a TLS session without a TLS context");
  ERR_clear_error();
  ssl_ = SSL_new(context.get());
  if (ssl_ == nullptr) throw SystemError(cat("cannot create a TLS session: ", openssl_reason()));
  BIO* bio = BIO_new(TlsBio::method());
  if (bio == nullptr) {
    SSL_free(ssl_);
    throw SystemError(cat("cannot create a TLS session's socket BIO: ", openssl_reason()));
  }
  BIO_set_data(bio, this);
  SSL_set_app_data(ssl_, this);
  SSL_set_bio(ssl_, bio, bio);  // the session owns the BIO now
  if (role == TlsRole::client) SSL_set_connect_state(ssl_);
  else SSL_set_accept_state(ssl_);
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

void TlsSession::fail(int ret, bool handshaking) {
  int kind = SSL_get_error(ssl_, ret);
  const std::string prefix = handshaking ? "TLS handshake failed: " : "TLS: ";
  const std::string closed =
      handshaking ? cat("the peer closed the connection during the TLS handshake (", kEveryProcess,
                        " Does the peer trust this process's certificate?)")
                  : std::string("the peer closed the connection");
  if (kind == SSL_ERROR_ZERO_RETURN || (kind == SSL_ERROR_SYSCALL && last_errno_ == 0)) {
    ERR_clear_error();
    throw PeerLost(closed);
  }
  if (kind == SSL_ERROR_SYSCALL) {
    ERR_clear_error();
    throw PeerLost(cat(prefix, errno_text(last_errno_),
                       handshaking ? cat(" (", kEveryProcess, " Does the peer trust this process's certificate?)") : ""));
  }
  unsigned long code = ERR_peek_error();
  int reason = ERR_GET_REASON(code);
  std::string detail = openssl_reason();
  if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    long verify = SSL_get_verify_result(ssl_);
    std::string subject = rejected_.empty() ? subject_of(SSL_get0_peer_certificate(ssl_)) : rejected_;
    throw ProtocolMismatch(cat(prefix, "the peer's certificate (", subject, ") is not trusted: ",
                               X509_verify_cert_error_string(verify),
                               " (it must be signed by a CA in this process's BRAID_TLS_CA)"));
  }
  if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
    throw ProtocolMismatch(cat(prefix, "the peer presented no certificate (", kEveryProcess, ")"));
  if (reason > SSL_AD_REASON_OFFSET) {
    int alert = reason - SSL_AD_REASON_OFFSET;
    if (certificate_alert(alert))
      throw ProtocolMismatch(cat(prefix, "the peer refused this process's certificate (alert: ", detail,
                                 "); is it signed by a CA in the peer's BRAID_TLS_CA?"));
    throw ProtocolMismatch(cat(prefix, "the peer ended the connection (alert: ", detail, ")"));
  }
  switch (reason) {
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_UNSUPPORTED_PROTOCOL:
      throw ProtocolMismatch(cat(prefix, "the peer does not speak TLS (", detail, "); ", kEveryProcess));
    default:
      throw ProtocolMismatch(cat(prefix, detail));
  }
}

TlsSession::Want TlsSession::handshake_step() {
  ERR_clear_error();
  last_errno_ = 0;
  int ret = SSL_do_handshake(ssl_);
  if (ret == 1) return Want::nothing;
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ: return Want::read;
    case SSL_ERROR_WANT_WRITE: return Want::write;
    default: fail(ret, true);
  }
}

void TlsSession::handshake(Deadline deadline, std::string_view what) {
  while (true) {
    Want want = Want::nothing;
    try {
      want = handshake_step();
    } catch (const ProtocolMismatch& e) {
      throw ProtocolMismatch(cat(what, ": ", e.what()));
    } catch (const PeerLost& e) {
      throw PeerLost(cat(what, ": ", e.what()));
    }
    if (want == Want::nothing) return;
    if (!wait_fd(fd_, want == Want::read ? POLLIN : POLLOUT, deadline))
      throw Timeout(cat(what, ": the TLS handshake did not complete within the timeout (", kEveryProcess, ")"));
  }
}

long TlsSession::read(void* data, std::size_t bytes) { return receive(data, bytes, false); }

long TlsSession::peek(void* data, std::size_t bytes) { return receive(data, bytes, true); }

long TlsSession::receive(void* data, std::size_t bytes, bool peek) {
  ERR_clear_error();
  last_errno_ = 0;
  std::size_t got = 0;
  int ret = peek ? SSL_peek_ex(ssl_, data, bytes, &got) : SSL_read_ex(ssl_, data, bytes, &got);
  if (ret == 1) return static_cast<long>(got);
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ: want_ = Want::read; return kWouldBlock;
    case SSL_ERROR_WANT_WRITE: want_ = Want::write; return kWouldBlock;
    case SSL_ERROR_ZERO_RETURN: return 0;
    case SSL_ERROR_SYSCALL:
      if (last_errno_ == 0) return 0;
      [[fallthrough]];
    default: fail(ret, false);
  }
}

long TlsSession::write(const void* data, std::size_t bytes) {
  ERR_clear_error();
  last_errno_ = 0;
  std::size_t put = 0;
  int ret = SSL_write_ex(ssl_, data, bytes, &put);
  if (ret == 1) return static_cast<long>(put);
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ: want_ = Want::read; return kWouldBlock;
    case SSL_ERROR_WANT_WRITE: want_ = Want::write; return kWouldBlock;
    case SSL_ERROR_SYSCALL:
      if (last_errno_ == ECONNRESET || last_errno_ == EPIPE) {
        // A peer that refused this process's certificate after a TLS 1.3
        // handshake (which ends on the client before the server has checked
        // it) sent an alert and closed; report the alert, which may still
        // wait in the receive queue, rather than the reset.
        int err = last_errno_;
        char scratch[512];
        std::size_t got = 0;
        ERR_clear_error();
        int r = SSL_read_ex(ssl_, scratch, sizeof scratch, &got);
        if (r != 1 && SSL_get_error(ssl_, r) == SSL_ERROR_SSL) fail(r, false);
        ERR_clear_error();
        last_errno_ = err;
        throw PeerLost(cat("TLS: ", errno_text(err)));
      }
      fail(ret, false);
    default: fail(ret, false);
  }
}

bool TlsSession::has_pending() const { return SSL_has_pending(ssl_) == 1; }

std::string TlsSession::protocol() const { return SSL_get_version(ssl_); }

void Socket::send_all(const void* data, std::size_t bytes, Deadline deadline, std::string_view what) {
  if (!tls_) return braid::send_all(fd_.get(), data, bytes, deadline, what);
  auto* p = static_cast<const std::byte*>(data);
  while (bytes > 0) {
    long n = 0;
    try {
      n = tls_->write(p, bytes);
    } catch (const ProtocolMismatch& e) {
      throw ProtocolMismatch(cat(what, ": send failed: ", e.what()));
    } catch (const PeerLost& e) {
      throw PeerLost(cat(what, ": send failed: ", e.what()));
    }
    if (n == TlsSession::kWouldBlock) {
      if (!wait_fd(fd_.get(), tls_->want() == TlsSession::Want::read ? POLLIN : POLLOUT, deadline))
        throw Timeout(cat(what, ": send timed out"));
      continue;
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void Socket::recv_all(void* data, std::size_t bytes, Deadline deadline, std::string_view what) {
  if (!tls_) return braid::recv_all(fd_.get(), data, bytes, deadline, what);
  auto* p = static_cast<std::byte*>(data);
  while (bytes > 0) {
    long n = 0;
    try {
      n = tls_->read(p, bytes);
    } catch (const ProtocolMismatch& e) {
      throw ProtocolMismatch(cat(what, ": ", e.what()));
    } catch (const PeerLost& e) {
      throw PeerLost(cat(what, ": receive failed: ", e.what()));
    }
    if (n == 0) throw PeerLost(cat(what, ": the peer closed the connection"));
    if (n == TlsSession::kWouldBlock) {
      if (!wait_fd(fd_.get(), tls_->want() == TlsSession::Want::write ? POLLOUT : POLLIN, deadline))
        throw Timeout(cat(what, ": receive timed out"));
      continue;
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

Socket open_socket(Fd fd, const TlsContext& tls, TlsRole role, Deadline deadline, std::string_view what) {
  if (!tls.enabled()) return Socket(std::move(fd));
  auto session = std::make_unique<TlsSession>(tls, fd.get(), role);
  session->handshake(deadline, what);
  return Socket(std::move(fd), std::move(session));
}

bool starts_tls(int fd, Deadline deadline, std::string_view what) {
  while (true) {
    unsigned char first = 0;
    ssize_t n = ::recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 1) return first == 0x16;
    if (n == 0) throw PeerLost(cat(what, ": the peer closed the connection before sending anything"));
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw PeerLost(cat(what, ": receive failed: ", errno_text(errno)));
    if (!wait_fd(fd, POLLIN, deadline)) throw Timeout(cat(what, ": the peer sent nothing within the timeout"));
  }
}

bool looks_like_tls(std::span<const std::byte> bytes) {
  // A TLS record: type 22 (handshake), then version 3.x.
  return bytes.size() >= 3 && bytes[0] == std::byte{0x16} && bytes[1] == std::byte{0x03} &&
         std::to_integer<int>(bytes[2]) <= 4;
}

}  // namespace braid
