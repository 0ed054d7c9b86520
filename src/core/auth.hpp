// Authentication: the shared secret (BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE)
// and the challenge-response every braid connection runs with it, the store's
// and the TCP transport's alike.
//
// Each side draws a fresh 32-byte nonce (RAND_bytes). The accepting side
// sends its nonce; the dialing side answers with its own nonce and
//
//   client proof = HMAC-SHA256(key, "braid-client" 0x00 protocol 0x00 server_nonce client_nonce hello)
//
// where `hello` is the exact bytes of the dialing side's first message (for
// the TCP transport it carries the communicator id, both ranks, the world size
// and the stream, so a proof is bound to one connection of one communicator).
// The accepting side checks it in constant time and answers
//
//   server proof = HMAC-SHA256(key, "braid-server" 0x00 protocol 0x00 client_nonce server_nonce hello)
//
// so the dialing side authenticates the acceptor too. Fresh nonces on both
// sides make a recorded proof useless on a later connection; the role label
// keeps one side's proof from being reflected as the other's; the protocol
// name ("tcp/2", "store/2") keeps a proof for the store from opening a data
// connection. The key itself never crosses the wire and is never logged.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kDigestBytes = 32;
/// A key file holds one secret; anything larger is a mistake (or /dev/zero).
inline constexpr std::size_t kMaxAuthKeyBytes = 64 * 1024;

using Nonce = std::array<std::byte, kNonceBytes>;
using Digest = std::array<std::byte, kDigestBytes>;

/// The shared secret, or none (authentication off). Copies share one buffer,
/// which is wiped when the last copy goes. Deliberately not printable.
class AuthKey {
 public:
  AuthKey() = default;
  /// Throws InvalidArgument when `secret` is empty or above kMaxAuthKeyBytes.
  explicit AuthKey(std::string_view secret);
  /// Reads the key from a regular file; one trailing newline (\n or \r\n) is
  /// not part of the key. Throws InvalidArgument naming `setting` and `path`
  /// when the file cannot be read, is empty, or is too large.
  static AuthKey from_file(const std::string& path, std::string_view setting);

  bool enabled() const { return secret_ != nullptr; }
  std::span<const std::byte> secret() const;

 private:
  std::shared_ptr<const std::vector<std::byte>> secret_;
};

/// HMAC-SHA256 of `message` under `key` (OpenSSL libcrypto).
Digest hmac_sha256(std::span<const std::byte> key, std::span<const std::byte> message);
/// 32 bytes from OpenSSL's CSPRNG; SystemError if it fails.
Nonce random_nonce();
/// Initialises OpenSSL now. An object whose thread may use OpenSSL (an
/// event loop's: TLS, nonces) calls it before that thread starts, so that
/// OpenSSL's cleanup at exit, registered here, runs after the object's
/// destructor stopped the thread: a thread still running at OPENSSL_cleanup
/// keeps its per-thread state (its random generator) forever.
void init_openssl();
/// Equal sizes and contents, compared in time independent of the contents.
bool same_digest(std::span<const std::byte> a, std::span<const std::byte> b);

enum class AuthRole { client, server };

/// The proof `role` sends in a handshake of `protocol` (see the top of this
/// file). The key must be enabled.
Digest handshake_proof(const AuthKey& key, AuthRole role, std::string_view protocol, const Nonce& client_nonce,
                       const Nonce& server_nonce, std::span<const std::byte> hello);

}  // namespace braid
