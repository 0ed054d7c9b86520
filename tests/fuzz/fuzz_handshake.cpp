// The TCP transport's connection handshake (transport/tcp/handshake.hpp): the
// accepting rank decodes a Hello and an AuthProof from whoever connected, the
// dialing rank a HelloReply. Every input goes to all three decoders (each
// takes one exact size). What a decoder accepts must encode back to the same
// bytes, except a Hello or HelloReply of another version, which is read only
// as far as its version.
#include <cstdint>

#include "finding.hpp"
#include "transport/tcp/handshake.hpp"

using namespace braid;
using fuzz::same_bytes;

namespace {

void hello(std::span<const std::byte> in) {
  Hello h;
  try {
    h = decode_hello(in);
  } catch (const Error& e) {
    fuzz::expect_refusal(e);
    return;
  }
  // What the acceptor does next with it, for a rank 1 of 4 with 2 streams.
  HelloStatus status = check_hello(h, CommId{}, 1, 4, 2);
  BRAID_FUZZ_EXPECT(!describe(status).empty());
  BRAID_FUZZ_EXPECT(!describe(check_auth_mode(h, in[0] == std::byte{0})).empty());
  if (h.version != kTcpProtocolVersion) {
    BRAID_FUZZ_EXPECT(status == HelloStatus::wrong_version);
    return;
  }
  BRAID_FUZZ_EXPECT(same_bytes(encode_hello(h), in));
}

void reply(std::span<const std::byte> in) {
  HelloReply r;
  try {
    r = decode_reply(in);
  } catch (const Error& e) {
    fuzz::expect_refusal(e);
    return;
  }
  BRAID_FUZZ_EXPECT(describe(r.status) != "unknown refusal");
  if (r.version != kTcpProtocolVersion) {
    BRAID_FUZZ_EXPECT(r.status == HelloStatus::wrong_version);
    return;
  }
  BRAID_FUZZ_EXPECT(same_bytes(encode_reply(r.status), in));
}

void auth_proof(std::span<const std::byte> in) {
  AuthProof p;
  try {
    p = decode_auth_proof(in);
  } catch (const Error& e) {
    fuzz::expect_refusal(e);
    return;
  }
  BRAID_FUZZ_EXPECT(same_bytes(encode_auth_proof(p), in));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto in = fuzz::input_bytes(data, size);
  hello(in);
  reply(in);
  auth_proof(in);
  return 0;
}
