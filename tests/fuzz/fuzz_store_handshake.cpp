// The store server's handshake state machine (src/bootstrap/store_handshake.hpp),
// fed what a client sends: request frames, one after another, until the
// server refuses one (it then closes the connection) or the bytes run out.
//
// The first input byte sets the scene: bit 0, the server holds a key; bit 1,
// an auth request's proof is replaced by the right one for the server's
// challenge (a fuzzer cannot guess an HMAC, so this stands in for a client
// that holds the key and lets the state machine get past the proof).
//
// Checked: only braid errors come out; every reply encodes and decodes back;
// once the server sends its proof it is the right one and the handshake is
// done; a done handshake refuses whatever comes next.
#include <cstdint>

#include "bootstrap/store_handshake.hpp"
#include "finding.hpp"

using namespace braid;
using namespace braid::store_protocol;

namespace {

constexpr std::string_view kKey = "braid fuzz key";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool server_has_key = (data[0] & 1) != 0;
  const bool client_proves = (data[0] & 2) != 0;
  auto in = fuzz::input_bytes(data + 1, size - 1);

  AuthKey key = server_has_key ? AuthKey(kKey) : AuthKey();
  ServerHandshake handshake(key);
  Bytes hello_frame;
  Nonce server_nonce{};
  bool challenged = false;
  bool was_done = false;
  while (true) {
    std::optional<Decoded<Request>> frame;
    try {
      frame = decode_request(in);
    } catch (const Error& e) {
      fuzz::expect_refusal(e);
      return 0;
    }
    if (!frame) return 0;
    auto bytes = in.first(frame->consumed);
    in = in.subspan(frame->consumed);
    Request& request = frame->message;
    if (request.op == Op::hello) hello_frame.assign(bytes.begin(), bytes.end());
    if (request.op == Op::auth && client_proves && challenged)
      request.proof = handshake_proof(key, AuthRole::client, kAuthProtocol, request.nonce, server_nonce, hello_frame);

    Reply reply;
    try {
      reply = handshake.answer(request, bytes);
    } catch (const Error& e) {
      fuzz::expect_refusal(e);
      // The refusal the server sends before it closes (tcp_store_server.cpp).
      bool auth = dynamic_cast<const AuthRefused*>(&e) != nullptr;
      Reply refusal{.op = auth ? handshake.expected_op() : Op::set,
                    .status = auth ? Status::auth_failed : Status::protocol_error,
                    .message = e.what()};
      BRAID_FUZZ_EXPECT(decode_reply(encode(refusal)).has_value());
      return 0;
    }
    BRAID_FUZZ_EXPECT(!was_done);
    BRAID_FUZZ_EXPECT(reply.op == request.op && reply.status == Status::ok);
    auto echoed = decode_reply(encode(reply));
    BRAID_FUZZ_EXPECT(echoed && echoed->message.challenge == reply.challenge && echoed->message.nonce == reply.nonce &&
                      echoed->message.proof == reply.proof);
    if (reply.challenge) {
      BRAID_FUZZ_EXPECT(server_has_key && !handshake.done());
      server_nonce = reply.nonce;
      challenged = true;
    }
    if (request.op == Op::auth) {
      BRAID_FUZZ_EXPECT(challenged && handshake.done());
      BRAID_FUZZ_EXPECT(reply.proof == handshake_proof(key, AuthRole::server, kAuthProtocol, request.nonce,
                                                       server_nonce, hello_frame));
    }
    was_done = handshake.done();
  }
}
