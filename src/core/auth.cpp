#include "core/auth.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "braid/types.hpp"
#include "core/check.hpp"
#include "core/socket.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

std::string openssl_error() {
  unsigned long code = ERR_get_error();
  if (code == 0) return "no detail from OpenSSL";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

// The secret's buffer is wiped before it is freed.
std::shared_ptr<const std::vector<std::byte>> keep_secret(std::vector<std::byte> bytes) {
  return std::shared_ptr<const std::vector<std::byte>>(new std::vector<std::byte>(std::move(bytes)),
                                                       [](const std::vector<std::byte>* v) {
                                                         auto* p = const_cast<std::vector<std::byte>*>(v);
                                                         OPENSSL_cleanse(p->data(), p->size());
                                                         delete p;
                                                       });
}

}  // namespace

AuthKey::AuthKey(std::string_view secret) {
  if (secret.empty()) throw InvalidArgument("an authentication key cannot be empty");
  if (secret.size() > kMaxAuthKeyBytes)
    throw InvalidArgument(cat("an authentication key of ", secret.size(), " bytes exceeds the limit of ",
                              kMaxAuthKeyBytes, " bytes"));
  auto b = std::as_bytes(std::span(secret.data(), secret.size()));
  secret_ = keep_secret(std::vector<std::byte>(b.begin(), b.end()));
}

AuthKey AuthKey::from_file(const std::string& path, std::string_view setting) {
  auto fail = [&](std::string_view why) -> AuthKey {
    throw InvalidArgument(cat(setting, "='", path, "': ", why));
  };
  // O_NONBLOCK: opening a FIFO with no writer must not block start-up; it is
  // refused below as not a regular file.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) return fail(cat("cannot open the key file: ", errno_text(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(cat("cannot stat the key file: ", errno_text(errno)));
  if (!S_ISREG(st.st_mode)) return fail("the key file is not a regular file");
  std::vector<std::byte> bytes(kMaxAuthKeyBytes + 1);
  std::size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      OPENSSL_cleanse(bytes.data(), bytes.size());
      return fail(cat("cannot read the key file: ", errno_text(err)));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  auto wipe_and_fail = [&](std::string_view why) -> AuthKey {
    OPENSSL_cleanse(bytes.data(), bytes.size());
    return fail(why);
  };
  if (got > kMaxAuthKeyBytes)
    return wipe_and_fail(cat("the key file is larger than ", kMaxAuthKeyBytes, " bytes; it should hold one secret"));
  if (got > 0 && bytes[got - 1] == std::byte{'\n'}) --got;
  if (got > 0 && bytes[got - 1] == std::byte{'\r'}) --got;
  if (got == 0) return wipe_and_fail("the key file is empty");
  AuthKey key;
  std::vector<std::byte> secret(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(got));
  OPENSSL_cleanse(bytes.data(), bytes.size());
  key.secret_ = keep_secret(std::move(secret));
  return key;
}

std::span<const std::byte> AuthKey::secret() const {
  if (!secret_) return {};
  return *secret_;
}

Digest hmac_sha256(std::span<const std::byte> key, std::span<const std::byte> message) {
  BRAID_CHECK(key.size() <= kMaxAuthKeyBytes, "HMAC key too long");
  Digest out{};
  unsigned int length = 0;
  static const unsigned char kNoKey = 0;
  const void* key_data = key.empty() ? static_cast<const void*>(&kNoKey) : key.data();
  auto* done = HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()),
                    reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                    reinterpret_cast<unsigned char*>(out.data()), &length);
  if (done == nullptr || length != out.size())
    throw SystemError(cat("HMAC-SHA256 failed in OpenSSL: ", openssl_error()));
  return out;
}

void init_openssl() {
  // With no options OPENSSL_init_crypto returns at once, doing nothing:
  // loading the configuration is the step that registers the cleanup at exit
  // (as the first RAND_bytes would, later).
  if (OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, nullptr) != 1) throw SystemError(cat("OpenSSL failed to initialise: ", openssl_error()));
}

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1)
    throw SystemError(cat("OpenSSL's random generator failed (RAND_bytes): ", openssl_error()));
  return n;
}

bool same_digest(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Digest handshake_proof(const AuthKey& key, AuthRole role, std::string_view protocol, const Nonce& client_nonce,
                       const Nonce& server_nonce, std::span<const std::byte> hello) {
  BRAID_CHECK(key.enabled(), "a handshake proof without a key");
  std::string_view label = role == AuthRole::client ? "braid-client" : "braid-server";
  const Nonce& first = role == AuthRole::client ? server_nonce : client_nonce;
  const Nonce& second = role == AuthRole::client ? client_nonce : server_nonce;
  std::vector<std::byte> transcript;
  transcript.reserve(label.size() + protocol.size() + 2 + 2 * kNonceBytes + hello.size());
  auto put = [&](std::span<const std::byte> b) { transcript.insert(transcript.end(), b.begin(), b.end()); };
  put(std::as_bytes(std::span(label.data(), label.size())));
  transcript.push_back(std::byte{0});
  put(std::as_bytes(std::span(protocol.data(), protocol.size())));
  transcript.push_back(std::byte{0});
  put(first);
  put(second);
  put(hello);
  return hmac_sha256(key.secret(), transcript);
}

}  // namespace braid
