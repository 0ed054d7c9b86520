#include "transport/tcp/handshake.hpp"

#include <algorithm>

#include "braid/types.hpp"
#include "core/text.hpp"
#include "core/tls.hpp"
#include "core/wire.hpp"

namespace braid {
namespace {

template <std::size_t N>
std::array<std::byte, N> to_array(WireWriter& w) {
  auto bytes = w.take();
  std::array<std::byte, N> out;
  std::copy(bytes.begin(), bytes.end(), out.begin());
  return out;
}

}  // namespace

std::string_view describe(HelloStatus status) {
  switch (status) {
    case HelloStatus::accepted: return "accepted";
    case HelloStatus::wrong_version: return "protocol version differs";
    case HelloStatus::wrong_communicator: return "belongs to another communicator (another job, or a stale rank)";
    case HelloStatus::wrong_rank: return "rank numbers do not match this communicator";
    case HelloStatus::wrong_world_size: return "world size differs";
    case HelloStatus::wrong_streams: return "BRAID_TCP_STREAMS differs between the ranks";
    case HelloStatus::auth_required:
      return "authentication required: the accepting rank has a key (BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE) "
             "and the dialing rank has none";
    case HelloStatus::auth_unexpected:
      return "the dialing rank sent an authenticated hello but the accepting rank has no key "
             "(BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE is set on one rank only)";
    case HelloStatus::challenge: return "authentication challenge";
    case HelloStatus::auth_failed:
      return "authentication failed: the proof of the shared key is wrong (the ranks hold different keys, "
             "or the connection replayed an old proof)";
    case HelloStatus::tls_required:
      return "TLS required: the accepting rank runs with BRAID_TLS=1 and the dialing rank connected without TLS "
             "(BRAID_TLS is set on some ranks only)";
    case HelloStatus::finalized:
      return "the accepting rank has finalized this communicator (it ran fewer operations than the dialing rank)";
    case HelloStatus::gave_up: return "the accepting rank gave up on this communicator (it aborted or failed)";
    case HelloStatus::not_yet:
      return "the accepting rank has not made this communicator (yet): it did not call shrink, or passed another "
             "list of ranks to exclude";
  }
  return "unknown refusal";
}

std::array<std::byte, kHelloBytes> encode_hello(const Hello& hello) {
  WireWriter w;
  w.u32(kTcpMagic);
  w.u16(hello.version);
  w.u16(hello.stream);
  w.u16(hello.streams);
  w.u16(static_cast<std::uint16_t>((hello.auth ? kHelloFlagAuth : 0) | (hello.derived ? kHelloFlagDerived : 0)));
  w.bytes(hello.comm_id.bytes);
  w.u32(hello.from_rank);
  w.u32(hello.to_rank);
  w.u32(hello.world_size);
  w.u32(0);
  return to_array<kHelloBytes>(w);
}

Hello decode_hello(std::span<const std::byte> bytes) {
  if (bytes.size() != kHelloBytes)
    throw ProtocolMismatch(cat("braid TCP hello must be ", kHelloBytes, " bytes, got ", bytes.size()));
  if (looks_like_tls(bytes))
    throw ProtocolMismatch("the peer opened a TLS handshake but this rank runs without TLS (BRAID_TLS=1 is set on "
                           "some ranks only)");
  WireReader r(bytes, "braid TCP hello");
  if (r.u32() != kTcpMagic) throw ProtocolMismatch("the connection does not speak braid's TCP protocol (bad magic)");
  Hello h;
  h.version = r.u16();
  if (h.version != kTcpProtocolVersion) return h;  // check_hello refuses it by version
  h.stream = r.u16();
  h.streams = r.u16();
  std::uint16_t flags = r.u16();
  if ((flags & ~(kHelloFlagAuth | kHelloFlagDerived)) != 0)
    throw ProtocolMismatch(cat("braid TCP hello with unknown flags ", flags));
  h.auth = (flags & kHelloFlagAuth) != 0;
  h.derived = (flags & kHelloFlagDerived) != 0;
  auto id = r.bytes(h.comm_id.bytes.size());
  std::copy(id.begin(), id.end(), h.comm_id.bytes.begin());
  h.from_rank = r.u32();
  h.to_rank = r.u32();
  h.world_size = r.u32();
  if (r.u32() != 0) throw ProtocolMismatch("braid TCP hello with a non-zero reserved field");
  r.expect_end();
  return h;
}

HelloStatus check_hello(const Hello& hello, const CommId& comm_id, int my_rank, int world_size, int streams) {
  if (hello.version != kTcpProtocolVersion) return HelloStatus::wrong_version;
  if (hello.comm_id != comm_id) return HelloStatus::wrong_communicator;
  if (hello.world_size != static_cast<std::uint32_t>(world_size)) return HelloStatus::wrong_world_size;
  if (hello.to_rank != static_cast<std::uint32_t>(my_rank) || hello.from_rank >= hello.world_size ||
      hello.from_rank == hello.to_rank)
    return HelloStatus::wrong_rank;
  if (hello.streams != streams || hello.stream >= hello.streams) return HelloStatus::wrong_streams;
  return HelloStatus::accepted;
}

HelloStatus check_auth_mode(const Hello& hello, bool have_key) {
  if (have_key && !hello.auth) return HelloStatus::auth_required;
  if (!have_key && hello.auth) return HelloStatus::auth_unexpected;
  return HelloStatus::accepted;
}

std::array<std::byte, kHelloReplyBytes> encode_reply(HelloStatus status) {
  WireWriter w;
  w.u32(kTcpMagic);
  w.u16(kTcpProtocolVersion);
  w.u16(static_cast<std::uint16_t>(status));
  return to_array<kHelloReplyBytes>(w);
}

HelloReply decode_reply(std::span<const std::byte> bytes) {
  if (bytes.size() != kHelloReplyBytes)
    throw ProtocolMismatch(cat("braid TCP hello reply must be ", kHelloReplyBytes, " bytes, got ", bytes.size()));
  WireReader r(bytes, "braid TCP hello reply");
  if (r.u32() != kTcpMagic) throw ProtocolMismatch("the peer answered with something that is not braid's TCP protocol");
  HelloReply reply;
  reply.version = r.u16();
  auto status = r.u16();
  if (status > static_cast<std::uint16_t>(HelloStatus::not_yet))
    throw ProtocolMismatch(cat("braid TCP hello reply has unknown status ", status));
  reply.status = static_cast<HelloStatus>(status);
  if (reply.version != kTcpProtocolVersion && reply.status != HelloStatus::wrong_version)
    throw ProtocolMismatch(cat("the peer answered in braid TCP protocol version ", reply.version,
                               ", but this rank speaks ", kTcpProtocolVersion,
                               " (are two braid versions mixed in one job?)"));
  return reply;
}

std::array<std::byte, kAuthProofBytes> encode_auth_proof(const AuthProof& proof) {
  WireWriter w;
  w.bytes(proof.client_nonce);
  w.bytes(proof.proof);
  return to_array<kAuthProofBytes>(w);
}

AuthProof decode_auth_proof(std::span<const std::byte> bytes) {
  if (bytes.size() != kAuthProofBytes)
    throw ProtocolMismatch(
        cat("braid TCP authentication proof must be ", kAuthProofBytes, " bytes, got ", bytes.size()));
  WireReader r(bytes, "braid TCP authentication proof");
  AuthProof p;
  auto nonce = r.bytes(kNonceBytes);
  std::copy(nonce.begin(), nonce.end(), p.client_nonce.begin());
  auto mac = r.bytes(kDigestBytes);
  std::copy(mac.begin(), mac.end(), p.proof.begin());
  return p;
}

}  // namespace braid
