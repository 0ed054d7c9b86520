// The TCP transport's handshake: the wire format, and real transports on
// loopback refusing strangers and other communicators.
#include <catch2/catch.hpp>

#include <future>
#include <thread>

#include "braid/types.hpp"
#include "core/socket.hpp"
#include "transport/tcp/handshake.hpp"
#include "tests/unit/tcp_rank.hpp"
#include "loopback_fixtures.hpp"

using namespace braid;
using namespace braid::test;

namespace {

Hello sample_hello() {
  Hello h;
  h.stream = 1;
  h.streams = 2;
  h.comm_id = CommId::random();
  h.from_rank = 3;
  h.to_rank = 1;
  h.world_size = 4;
  return h;
}

std::vector<std::byte> as_bytes(const std::string& s) {
  auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

}  // namespace

TEST_CASE("hello round-trips through its wire form") {
  Hello h = sample_hello();
  for (bool auth : {false, true}) {
    h.auth = auth;
    Hello back = decode_hello(encode_hello(h));
    CHECK(back.version == kTcpProtocolVersion);
    CHECK(back.stream == 1);
    CHECK(back.streams == 2);
    CHECK(back.auth == auth);
    CHECK(back.comm_id == h.comm_id);
    CHECK(back.from_rank == 3);
    CHECK(back.to_rank == 1);
    CHECK(back.world_size == 4);
  }
}

TEST_CASE("a hello of this version with unknown flags or reserved bits is refused") {
  auto bytes = encode_hello(sample_hello());
  auto flags = bytes;
  flags[10] = std::byte{0x04};
  CHECK_THROWS_WITH(decode_hello(flags), Catch::Contains("unknown flags"));
  Hello derived = sample_hello();
  derived.derived = true;
  CHECK(decode_hello(encode_hello(derived)).derived);
  CHECK_FALSE(decode_hello(bytes).derived);
  auto reserved = bytes;
  reserved[43] = std::byte{0x01};
  CHECK_THROWS_WITH(decode_hello(reserved), Catch::Contains("reserved"));
  // Another version's hello is not interpreted beyond its version, so the
  // peer gets a polite wrong_version instead of a dropped connection.
  Hello other = sample_hello();
  other.version = 1;
  auto old = encode_hello(other);
  old[10] = std::byte{0xff};
  Hello back = decode_hello(old);
  CHECK(back.version == 1);
  CHECK(check_hello(back, other.comm_id, 1, 4, 2) == HelloStatus::wrong_version);
}

TEST_CASE("a hello that is not braid's is rejected with a clear message") {
  std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789abcdef0";
  auto bytes = as_bytes(http.substr(0, kHelloBytes));
  REQUIRE(bytes.size() == kHelloBytes);
  CHECK_THROWS_WITH(decode_hello(bytes), Catch::Contains("does not speak braid"));
  auto good = encode_hello(sample_hello());
  CHECK_THROWS_AS(decode_hello(std::span(good).first(10)), ProtocolMismatch);
}

TEST_CASE("check_hello names each kind of mismatch") {
  Hello h = sample_hello();
  CHECK(check_hello(h, h.comm_id, 1, 4, 2) == HelloStatus::accepted);
  CHECK(check_hello(h, CommId::random(), 1, 4, 2) == HelloStatus::wrong_communicator);
  CHECK(check_hello(h, h.comm_id, 2, 4, 2) == HelloStatus::wrong_rank);
  CHECK(check_hello(h, h.comm_id, 1, 5, 2) == HelloStatus::wrong_world_size);
  CHECK(check_hello(h, h.comm_id, 1, 4, 1) == HelloStatus::wrong_streams);
  Hello self = h;
  self.from_rank = 1;
  CHECK(check_hello(self, h.comm_id, 1, 4, 2) == HelloStatus::wrong_rank);
  Hello future = h;
  future.version = 99;
  CHECK(check_hello(future, h.comm_id, 1, 4, 2) == HelloStatus::wrong_version);
  CHECK(describe(HelloStatus::wrong_communicator).find("another communicator") != std::string_view::npos);
}

TEST_CASE("check_auth_mode: both sides must agree whether there is a key") {
  Hello h = sample_hello();
  CHECK(check_auth_mode(h, false) == HelloStatus::accepted);
  CHECK(check_auth_mode(h, true) == HelloStatus::auth_required);
  h.auth = true;
  CHECK(check_auth_mode(h, true) == HelloStatus::accepted);
  CHECK(check_auth_mode(h, false) == HelloStatus::auth_unexpected);
  CHECK(describe(HelloStatus::auth_required).find("authentication required") != std::string_view::npos);
  CHECK(describe(HelloStatus::auth_failed).find("authentication failed") != std::string_view::npos);
}

TEST_CASE("replies decode, and garbage replies are refused") {
  for (auto status :
       {HelloStatus::accepted, HelloStatus::wrong_rank, HelloStatus::challenge, HelloStatus::auth_failed,
        HelloStatus::tls_required, HelloStatus::finalized, HelloStatus::gave_up}) {
    HelloReply back = decode_reply(encode_reply(status));
    CHECK(back.status == status);
    CHECK(back.version == kTcpProtocolVersion);
  }
  auto reply = encode_reply(HelloStatus::accepted);
  reply[6] = std::byte{0x7f};  // status out of range
  CHECK_THROWS_AS(decode_reply(reply), ProtocolMismatch);
  CHECK(decode_reply(encode_reply(HelloStatus::not_yet)).status == HelloStatus::not_yet);
  reply = encode_reply(HelloStatus::not_yet);
  reply[6] = std::byte{static_cast<std::uint8_t>(HelloStatus::not_yet) + 1};  // one past the last status
  CHECK_THROWS_WITH(decode_reply(reply), Catch::Contains("unknown status"));
  reply[0] = std::byte{0};
  CHECK_THROWS_AS(decode_reply(reply), ProtocolMismatch);
  auto accepted = encode_reply(HelloStatus::accepted);
  CHECK_THROWS_AS(decode_reply(std::span(accepted).first(7)), ProtocolMismatch);
}

TEST_CASE("a reply of another version is only understood as a version refusal") {
  auto reply = encode_reply(HelloStatus::wrong_version);
  reply[4] = std::byte{1};  // what a version-1 rank answers
  HelloReply back = decode_reply(reply);
  CHECK(back.version == 1);
  CHECK(back.status == HelloStatus::wrong_version);
  reply = encode_reply(HelloStatus::accepted);
  reply[4] = std::byte{1};
  CHECK_THROWS_WITH(decode_reply(reply), Catch::Contains("version 1"));
}

TEST_CASE("an authentication proof has exactly its size") {
  AuthProof p;
  for (std::size_t i = 0; i < kNonceBytes; ++i) p.client_nonce[i] = std::byte(static_cast<std::uint8_t>(i));
  for (std::size_t i = 0; i < kDigestBytes; ++i) p.proof[i] = std::byte(static_cast<std::uint8_t>(100 + i));
  auto bytes = encode_auth_proof(p);
  AuthProof back = decode_auth_proof(bytes);
  CHECK(back.client_nonce == p.client_nonce);
  CHECK(back.proof == p.proof);
  CHECK_THROWS_AS(decode_auth_proof(std::span(bytes).first(kAuthProofBytes - 1)), ProtocolMismatch);
  std::vector<std::byte> longer(bytes.begin(), bytes.end());
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(decode_auth_proof(longer), ProtocolMismatch);
  CHECK_THROWS_AS(decode_auth_proof({}), ProtocolMismatch);
}

TEST_CASE("two transports connect, and a stranger in between is refused") {
  CommId id = CommId::random();
  TcpRank low(loopback_tcp_options(0, 2, id));
  TcpRank high(loopback_tcp_options(1, 2, id));
  RankInfo info0 = RankInfo::local(0), info1 = RankInfo::local(1);

  // A stranger connects to rank 0 first and sends an HTTP request.
  Fd stranger = connect_tcp({low.listening()}, Deadline::after(Millis(2000)), "stranger");
  std::string junk(kHelloBytes, 'x');
  send_all(stranger.get(), junk.data(), junk.size(), Deadline::after(Millis(2000)), "stranger");

  auto high_side = std::async(std::launch::async, [&] {
    auto addr = low.local_address();
    return high.connect(info0, addr, Deadline::after(Millis(3000)));
  });
  auto addr1 = high.local_address();
  auto link_low = low.connect(info1, addr1, Deadline::after(Millis(3000)));
  auto link_high = high_side.get();
  CHECK(link_low->peer() == 1);
  CHECK(link_high->peer() == 0);
  // The stranger was answered by closing its connection.
  char c;
  CHECK_THROWS_AS(recv_all(stranger.get(), &c, 1, Deadline::after(Millis(2000)), "stranger"), PeerLost);
}

TEST_CASE("a rank of another communicator is refused on both sides") {
  TcpRank low(loopback_tcp_options(0, 2, CommId::random(), Millis(1500)));
  TcpRank other(loopback_tcp_options(1, 2, CommId::random(), Millis(1500)));
  RankInfo info0 = RankInfo::local(0), info1 = RankInfo::local(1);
  auto dialer = std::async(std::launch::async, [&] {
    auto addr = low.local_address();
    return other.connect(info0, addr, Deadline::after(Millis(1500)));
  });
  auto addr1 = other.local_address();
  CHECK_THROWS_WITH(low.connect(info1, addr1, Deadline::after(Millis(1500))), Catch::Contains("rank 1 did not connect"));
  CHECK_THROWS_WITH(dialer.get(), Catch::Contains("another communicator"));
}

TEST_CASE("a peer that never dials times out naming it") {
  TcpRank low(loopback_tcp_options(0, 3, CommId::random(), Millis(300)));
  RankInfo info2 = RankInfo::local(2);
  std::string fake = "127.0.0.1:1";
  auto start = Clock::now();
  CHECK_THROWS_WITH(low.connect(info2, as_bytes(fake), Deadline::after(Millis(300))),
                    Catch::Contains("rank 2 did not connect"));
  CHECK(Clock::now() - start < std::chrono::seconds(5));
}
