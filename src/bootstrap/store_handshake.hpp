// The store server's side of a connection's handshake (store_protocol.hpp has
// the frames, core/auth.hpp the proofs), as a state machine fed one decoded
// request at a time, so it can be tested and fuzzed without sockets.
//
//   hello     another job id than the store's: OtherJob
//             the store is sealed (its communicator formed): Sealed, unless
//             the hello carries the seal's token (a member reconnecting)
//             no key on either side: answered ok, done
//             a key on both: answered with a challenge (a fresh server nonce)
//             a key on one side only: AuthRefused
//   auth      the client proof checked in constant time: answered with the
//             server proof, done; a wrong proof (another key, a replay): AuthRefused
//   anything else, or a handshake request out of turn: ProtocolMismatch
#pragma once

#include <span>

#include "bootstrap/store_protocol.hpp"
#include "braid/types.hpp"
#include "core/auth.hpp"

namespace braid::store_protocol {

/// A client refused for its key (or lack of one): the server answers it with
/// Status::auth_failed and this message, logs it, and closes the connection.
class AuthRefused : public ProtocolMismatch {
 public:
  using ProtocolMismatch::ProtocolMismatch;
};

/// A client of another job (its hello names another job id): answered
/// Status::other_job and closed.
class OtherJob : public ProtocolMismatch {
 public:
  using ProtocolMismatch::ProtocolMismatch;
};

/// A client that arrives after the communicator formed: answered
/// Status::sealed and closed. The client retries, since a new store may take
/// over the address once the old one goes.
class Sealed : public ProtocolMismatch {
 public:
  using ProtocolMismatch::ProtocolMismatch;
};

/// Whether a hello's member token is the seal's (not empty): a member of the
/// store's formed communicator reconnecting.
bool is_member_token(std::span<const std::byte> member, std::span<const std::byte> seal);

class ServerHandshake {
 public:
  explicit ServerHandshake(AuthKey key, std::string job = {}) : key_(std::move(key)), job_(std::move(job)) {}

  bool done() const { return phase_ == Phase::done; }
  /// The op a refusal now answers: hello, then auth.
  Op expected_op() const { return phase_ == Phase::hello ? Op::hello : Op::auth; }
  /// The reply to `request`, decoded from `frame` (whose bytes a hello
  /// contributes to the transcript). Throws as the table above says.
  /// `sealed`: the store's communicator has formed; a hello whose member
  /// token equals `seal` (not empty) still passes.
  Reply answer(const Request& request, std::span<const std::byte> frame, bool sealed = false,
               std::span<const std::byte> seal = {});
  /// What the client's hello claimed, once it came: its rank (-1: none) and
  /// whether its job id is the store's.
  int claimed_rank() const { return claimed_rank_; }
  bool same_job() const { return same_job_; }

 private:
  enum class Phase { hello, proof, done };
  AuthKey key_;
  std::string job_;
  int claimed_rank_ = -1;
  bool same_job_ = false;
  Phase phase_ = Phase::hello;
  Nonce server_nonce_{};
  Bytes hello_frame_;
};

}  // namespace braid::store_protocol
