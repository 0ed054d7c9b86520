// The TCP transport's connection handshake. The dialing rank sends a Hello;
// the accepting rank checks it and answers with a HelloReply. A connection
// whose first bytes are not a braid Hello of this protocol version, for this
// communicator and this rank, is refused with a reason both sides log.
//
// Without a key (BRAID_AUTH_KEY unset on both ranks) that is all:
//
//   dialer -> Hello (auth flag 0)    acceptor -> HelloReply accepted, or a refusal
//
// With a key on both ranks the acceptor challenges before it looks at the ids
// (core/auth.hpp has the proofs):
//
//   dialer -> Hello (auth flag 1)
//   acceptor -> HelloReply challenge, server nonce (32 bytes)
//   dialer -> AuthProof: client nonce, client proof over the nonces and the Hello
//   acceptor -> HelloReply auth_failed
//             | HelloReply (an id refusal, e.g. wrong_communicator)
//             | HelloReply accepted, server proof (32 bytes)
//
// and the dialer checks the server proof before it uses the connection. A key
// on one side only is refused at once (auth_required / auth_unexpected).
//
// With BRAID_TLS=1 all of the above runs inside TLS (core/tls.hpp), whose
// handshake comes first: the dialer is the TLS client. An acceptor with TLS
// that is sent a Hello in clear answers it, in clear, with tls_required; an
// acceptor without TLS that is sent a TLS ClientHello refuses it as such
// (decode_hello says so) and closes.
//
//   Hello (44 bytes, little-endian)
//     u32 magic 'BRDT'  u16 version  u16 stream  u16 streams  u16 flags (bit 0: auth, bit 1: derived)
//     u8[16] communicator id  u32 from_rank  u32 to_rank  u32 world_size  u32 reserved (0)
//   HelloReply (8 bytes, then the 32 bytes named above where there are some)
//     u32 magic 'BRDT'  u16 version  u16 status (HelloStatus)
//   AuthProof (64 bytes)
//     u8[32] client nonce  u8[32] client proof
//
// The first 8 bytes of Hello and HelloReply keep version 1's layout, so a rank
// of another version gets "protocol version differs" rather than garbage.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/auth.hpp"
#include "core/comm_id.hpp"

namespace braid {

inline constexpr std::uint32_t kTcpMagic = 0x54445242;  // "BRDT"
inline constexpr std::uint16_t kTcpProtocolVersion = 3;
/// Names the protocol inside the authentication transcript.
inline constexpr std::string_view kTcpAuthProtocol = "braid-tcp/3";
inline constexpr std::size_t kHelloBytes = 44;
inline constexpr std::size_t kHelloReplyBytes = 8;
inline constexpr std::size_t kAuthProofBytes = kNonceBytes + kDigestBytes;
inline constexpr std::uint16_t kHelloFlagAuth = 1;
/// The communicator was made by its members without an exchange
/// (Comm::shrink): an acceptor that does not know it yet answers not_yet.
inline constexpr std::uint16_t kHelloFlagDerived = 2;

struct Hello {
  std::uint16_t version = kTcpProtocolVersion;
  std::uint16_t stream = 0;
  std::uint16_t streams = 1;
  bool auth = false;  // the dialer holds a key and expects a challenge
  bool derived = false;  // kHelloFlagDerived
  CommId comm_id;
  std::uint32_t from_rank = 0;
  std::uint32_t to_rank = 0;
  std::uint32_t world_size = 0;
};

enum class HelloStatus : std::uint16_t {
  accepted = 0,
  wrong_version = 1,
  wrong_communicator = 2,
  wrong_rank = 3,
  wrong_world_size = 4,
  wrong_streams = 5,
  auth_required = 6,    // the acceptor has a key, the dialer sent none
  auth_unexpected = 7,  // the dialer has a key, the acceptor has none
  challenge = 8,        // followed by the acceptor's nonce
  auth_failed = 9,      // the dialer's proof is wrong: another key, or a replay
  tls_required = 10,    // the acceptor runs TLS (BRAID_TLS=1), the dialer sent its hello in clear
  finalized = 11,       // the acceptor's rank finalized that communicator in order
  gave_up = 12,         // the acceptor's rank gave up on that communicator (aborted or failed)
  not_yet = 13,         // a derived communicator the acceptor's rank has not made yet: dial again
};
std::string_view describe(HelloStatus status);

struct HelloReply {
  std::uint16_t version = kTcpProtocolVersion;  // the version the replying rank speaks
  HelloStatus status = HelloStatus::accepted;
};

struct AuthProof {
  Nonce client_nonce{};
  Digest proof{};
};

std::array<std::byte, kHelloBytes> encode_hello(const Hello& hello);
/// Throws ProtocolMismatch when the bytes are not a braid Hello (wrong size or
/// magic, e.g. an HTTP request, another program, or a TLS handshake from a rank
/// with BRAID_TLS=1, which the message names) or, for this version,
/// unknown flags or non-zero reserved fields. The rest of a Hello of another
/// version is not interpreted, so such a peer gets a polite wrong_version.
Hello decode_hello(std::span<const std::byte> bytes);
/// What the accepting rank answers about the ids in `hello` (and its version).
HelloStatus check_hello(const Hello& hello, const CommId& comm_id, int my_rank, int world_size, int streams);
/// Whether the two ranks agree on authentication: accepted when both or
/// neither hold a key, else auth_required or auth_unexpected.
HelloStatus check_auth_mode(const Hello& hello, bool have_key);

std::array<std::byte, kHelloReplyBytes> encode_reply(HelloStatus status);
/// Throws ProtocolMismatch on a wrong size or magic, an unknown status, or a
/// reply of another version that is not a wrong_version refusal.
HelloReply decode_reply(std::span<const std::byte> bytes);

std::array<std::byte, kAuthProofBytes> encode_auth_proof(const AuthProof& proof);
/// Throws ProtocolMismatch unless `bytes` is exactly kAuthProofBytes long.
AuthProof decode_auth_proof(std::span<const std::byte> bytes);

}  // namespace braid
