// The bootstrap store: the wire format's encoder and decoder on bytes, then the
// TCP server and client over loopback.
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/store.hpp"
#include "bootstrap/store_handshake.hpp"
#include "bootstrap/store_protocol.hpp"
#include "braid/types.hpp"
#include "core/socket.hpp"
#include "loopback_fixtures.hpp"

using namespace braid;
using namespace braid::test;
using namespace std::chrono_literals;
namespace wire = braid::store_protocol;

namespace {

Bytes bytes_of(std::string_view s) {
  auto b = std::as_bytes(std::span(s.data(), s.size()));
  return Bytes(b.begin(), b.end());
}

std::string text_of(const Bytes& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

std::unique_ptr<TcpStoreServer> start_server() { return TcpStoreServer::start(service_loop(), loopback()); }

HostPort where(const TcpStoreServer& server) { return HostPort{"127.0.0.1", server.address().port()}; }

std::unique_ptr<Store> connect(const TcpStoreServer& server) {
  return connect_tcp_store(where(server), Deadline::after(2s));
}

// A port nothing listens on (bound once by us, then released).
std::uint16_t free_port() {
  Fd fd = listen_tcp(loopback(), "test");
  return local_address(fd.get()).port();
}

Fd raw_connection(const TcpStoreServer& server) {
  return connect_tcp({server.address()}, Deadline::after(2s), "test connection");
}

// Reads until the peer closes (true) or the deadline passes (false); what
// arrived before the close is appended to `received`.
bool closed_by_peer(int fd, Deadline deadline, Bytes* received = nullptr) {
  while (!deadline.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, deadline.poll_ms()) <= 0) continue;
    std::byte buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n > 0 && received != nullptr) received->insert(received->end(), buf, buf + n);
  }
  return false;
}

wire::Reply read_reply(int fd) {
  Bytes in(wire::kHeaderBytes);
  recv_all(fd, in.data(), in.size(), Deadline::after(5s), "test");
  in.resize(*wire::frame_size(in, true));
  recv_all(fd, in.data() + wire::kHeaderBytes, in.size() - wire::kHeaderBytes, Deadline::after(5s), "test");
  return wire::decode_reply(in).value().message;
}

void send_bytes(int fd, const Bytes& b) { send_all(fd, b.data(), b.size(), Deadline::after(2s), "test"); }

// A raw connection past the handshake of a store without a key.
Fd raw_session(const TcpStoreServer& server) {
  Fd fd = raw_connection(server);
  send_bytes(fd.get(), wire::encode(wire::Request{.op = wire::Op::hello}));
  wire::Reply r = read_reply(fd.get());
  REQUIRE(r.op == wire::Op::hello);
  REQUIRE(r.status == wire::Status::ok);
  REQUIRE_FALSE(r.challenge);
  return fd;
}

// What a fake store answers to a client's hello (no key). No Catch2
// assertions: fakes run on their own threads.
bool answer_hello(int fd) {
  Bytes in(wire::kHeaderBytes);
  recv_all(fd, in.data(), in.size(), Deadline::after(5s), "fake store");
  in.resize(wire::frame_size(in, false).value_or(wire::kHeaderBytes));
  recv_all(fd, in.data() + wire::kHeaderBytes, in.size() - wire::kHeaderBytes, Deadline::after(5s), "fake store");
  auto hello = wire::decode_request(in);
  if (!hello || hello->message.op != wire::Op::hello) return false;
  send_bytes(fd, wire::encode(wire::Reply{.op = wire::Op::hello}));
  return true;
}

Nonce sample_nonce(std::uint8_t from) {
  Nonce n{};
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = std::byte(static_cast<std::uint8_t>(from + i));
  return n;
}

std::vector<Bytes> sample_requests() {
  Bytes all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes.push_back(std::byte(i));
  return {
      wire::encode(wire::Request{.op = wire::Op::set, .keys = {"k"}, .value = all_bytes}),
      wire::encode(wire::Request{.op = wire::Op::set, .keys = {""}, .value = {}}),
      wire::encode(wire::Request{.op = wire::Op::get, .keys = {"rank3/addr"}, .timeout = 1500ms}),
      wire::encode(wire::Request{.op = wire::Op::add, .keys = {"counter"}, .delta = -7}),
      wire::encode(wire::Request{.op = wire::Op::check, .keys = {"a", "bb", "ccc"}}),
      wire::encode(wire::Request{.op = wire::Op::wait, .keys = {"x", "y"}, .timeout = 20ms}),
      wire::encode(wire::Request{.op = wire::Op::hello}),
      wire::encode(wire::Request{.op = wire::Op::hello, .auth = true}),
      wire::encode(wire::Request{.op = wire::Op::auth, .nonce = sample_nonce(1), .proof = sample_nonce(77)}),
  };
}

std::vector<Bytes> sample_replies() {
  return {
      wire::encode(wire::Reply{.op = wire::Op::set}),
      wire::encode(wire::Reply{.op = wire::Op::get, .value = bytes_of(std::string("a\0b", 3))}),
      wire::encode(wire::Reply{.op = wire::Op::add, .number = -42}),
      wire::encode(wire::Reply{.op = wire::Op::check, .all_present = true}),
      wire::encode(wire::Reply{.op = wire::Op::wait, .status = wire::Status::timeout, .missing = {"m1", "m2"}}),
      wire::encode(wire::Reply{.op = wire::Op::add, .status = wire::Status::invalid_argument, .message = "nope"}),
      wire::encode(wire::Reply{.op = wire::Op::hello}),
      wire::encode(wire::Reply{.op = wire::Op::hello, .challenge = true, .nonce = sample_nonce(9)}),
      wire::encode(wire::Reply{.op = wire::Op::auth, .proof = sample_nonce(200)}),
      wire::encode(wire::Reply{.op = wire::Op::auth, .status = wire::Status::auth_failed, .message = "wrong key"}),
  };
}

// A header followed by a hand-made body.
Bytes frame(wire::Op op, Bytes body, std::uint8_t version = wire::kVersion, std::uint8_t status = 0) {
  Bytes f{std::byte{wire::kMagic}, std::byte{version}, std::byte(static_cast<std::uint8_t>(op)), std::byte{status}};
  auto n = static_cast<std::uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) f.push_back(std::byte(static_cast<std::uint8_t>(n >> (8 * i))));
  f.insert(f.end(), body.begin(), body.end());
  return f;
}

void put_u32(Bytes& b, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(std::byte(static_cast<std::uint8_t>(v >> (8 * i))));
}

// A u32 length field followed by `zeros` zero bytes.
Bytes length_then_zeros(std::uint32_t length, std::size_t zeros) {
  Bytes b(4 + zeros);
  for (std::size_t i = 0; i < 4; ++i) b[i] = std::byte(static_cast<std::uint8_t>(length >> (8 * i)));
  return b;
}

}  // namespace

// ------------------------------------------------------------ wire format

TEST_CASE("store protocol: requests round-trip, binary and empty values included", "[store][protocol]") {
  Bytes all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes.push_back(std::byte(i));
  Bytes f = wire::encode(wire::Request{.op = wire::Op::set, .keys = {"k"}, .value = all_bytes});
  auto d = wire::decode_request(f);
  REQUIRE(d);
  CHECK(d->consumed == f.size());
  CHECK(d->message.op == wire::Op::set);
  CHECK(d->message.keys == std::vector<std::string>{"k"});
  CHECK(d->message.value == all_bytes);

  d = wire::decode_request(wire::encode(wire::Request{.op = wire::Op::set, .keys = {"empty"}}));
  REQUIRE(d);
  CHECK(d->message.value.empty());

  d = wire::decode_request(wire::encode(wire::Request{.op = wire::Op::get, .keys = {"g"}, .timeout = 1234ms}));
  REQUIRE(d);
  CHECK(d->message.timeout == 1234ms);

  d = wire::decode_request(wire::encode(wire::Request{.op = wire::Op::add, .keys = {"n"}, .delta = INT64_MIN}));
  REQUIRE(d);
  CHECK(d->message.delta == INT64_MIN);

  d = wire::decode_request(wire::encode(wire::Request{.op = wire::Op::wait, .keys = {"a", "", "c"}, .timeout = 5ms}));
  REQUIRE(d);
  CHECK(d->message.keys == std::vector<std::string>{"a", "", "c"});
  CHECK(d->message.timeout == 5ms);

  d = wire::decode_request(wire::encode(wire::Request{.op = wire::Op::check}));
  REQUIRE(d);
  CHECK(d->message.keys.empty());

  // Timeouts beyond the cap are clamped, negative ones become zero.
  d = wire::decode_request(wire::encode(wire::Request{.op = wire::Op::get, .keys = {"g"}, .timeout = Millis::max()}));
  CHECK(d->message.timeout == wire::kMaxTimeout);
  d = wire::decode_request(wire::encode(wire::Request{.op = wire::Op::get, .keys = {"g"}, .timeout = -5ms}));
  CHECK(d->message.timeout == 0ms);
}

TEST_CASE("store protocol: replies round-trip", "[store][protocol]") {
  auto d = wire::decode_reply(wire::encode(wire::Reply{.op = wire::Op::get, .value = bytes_of("v")}));
  REQUIRE(d);
  CHECK(d->message.status == wire::Status::ok);
  CHECK(text_of(d->message.value) == "v");

  d = wire::decode_reply(wire::encode(wire::Reply{.op = wire::Op::add, .number = -3}));
  CHECK(d->message.number == -3);

  d = wire::decode_reply(wire::encode(wire::Reply{.op = wire::Op::check, .all_present = true}));
  CHECK(d->message.all_present);

  d = wire::decode_reply(
      wire::encode(wire::Reply{.op = wire::Op::wait, .status = wire::Status::timeout, .missing = {"m1", "m2"}}));
  CHECK(d->message.status == wire::Status::timeout);
  CHECK(d->message.missing == std::vector<std::string>{"m1", "m2"});

  d = wire::decode_reply(
      wire::encode(wire::Reply{.op = wire::Op::add, .status = wire::Status::invalid_argument, .message = "bad"}));
  CHECK(d->message.status == wire::Status::invalid_argument);
  CHECK(d->message.message == "bad");
}

TEST_CASE("store protocol: every strict prefix of a frame is incomplete, not an error", "[store][protocol]") {
  for (const Bytes& f : sample_requests()) {
    for (std::size_t n = 0; n < f.size(); ++n) CHECK_FALSE(wire::decode_request(std::span(f).first(n)));
    CHECK(wire::decode_request(f));
  }
  for (const Bytes& f : sample_replies()) {
    for (std::size_t n = 0; n < f.size(); ++n) CHECK_FALSE(wire::decode_reply(std::span(f).first(n)));
    CHECK(wire::decode_reply(f));
  }
}

TEST_CASE("store protocol: frames back to back decode one at a time", "[store][protocol]") {
  Bytes stream;
  auto requests = sample_requests();
  for (const auto& f : requests) stream.insert(stream.end(), f.begin(), f.end());
  std::span<const std::byte> rest(stream);
  for (const auto& f : requests) {
    auto d = wire::decode_request(rest);
    REQUIRE(d);
    CHECK(d->consumed == f.size());
    rest = rest.subspan(d->consumed);
  }
  CHECK(rest.empty());
}

TEST_CASE("store protocol: a stranger's bytes are refused on the first byte", "[store][protocol]") {
  Bytes http = bytes_of("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(std::span(http).first(1)); }),
             Catch::Matchers::Contains("another protocol"));
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(http); }), Catch::Matchers::Contains("GET / HTTP"));
  CHECK_THROWS_AS(wire::decode_reply(http), ProtocolMismatch);
}

TEST_CASE("store protocol: malformed headers are refused with a reason", "[store][protocol]") {
  using Catch::Matchers::Contains;
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::set, {}, 1)); }),
             Contains("version 1"));
  Bytes unknown_op = frame(wire::Op::set, {});
  unknown_op[2] = std::byte{9};
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(std::span(unknown_op).first(3)); }),
             Contains("unknown op 9"));
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::get, {}, wire::kVersion, 1)); }),
             Contains("status"));
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_reply(frame(wire::Op::get, {}, wire::kVersion, 7)); }),
             Contains("unknown status 7"));

  // A header announcing 4 GiB is refused before any body arrives.
  Bytes huge = frame(wire::Op::set, {});
  for (int i = 4; i < 8; ++i) huge[static_cast<std::size_t>(i)] = std::byte{0xff};
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(huge); }), Contains("above the limit"));
  CHECK_THROWS_AS(wire::frame_size(huge, false), ProtocolMismatch);
}

TEST_CASE("store protocol: lengths inside the body are checked", "[store][protocol]") {
  using Catch::Matchers::Contains;
  SECTION("a key longer than the cap") {
    Bytes body = length_then_zeros(5000, 5000 + 8);
    CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::get, body)); }), Contains("limit"));
  }
  SECTION("a key longer than the body") {
    Bytes body = length_then_zeros(100, 10);
    CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::get, body)); }),
               Contains("truncated"));
  }
  SECTION("a value length beyond the cap") {
    Bytes body;
    put_u32(body, 1);
    body.push_back(std::byte{'k'});
    put_u32(body, 0xffffffffu);
    CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::set, body)); }), Contains("limit"));
  }
  SECTION("a key count beyond the cap, and one the body cannot hold") {
    Bytes body;
    put_u32(body, 0xffffffffu);
    CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::check, body)); }),
               Contains("limit"));
    Bytes body2 = length_then_zeros(1000, 8);
    CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::check, body2)); }),
               Contains("truncated"));
  }
  SECTION("trailing bytes after the body") {
    Bytes f = wire::encode(wire::Request{.op = wire::Op::add, .keys = {"n"}, .delta = 1});
    Bytes body(f.begin() + wire::kHeaderBytes, f.end());
    body.push_back(std::byte{0});
    CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::add, body)); }),
               Contains("unexpected"));
  }
  SECTION("a timeout beyond the cap") {
    Bytes body;
    put_u32(body, 1);
    body.push_back(std::byte{'k'});
    for (int i = 0; i < 8; ++i) body.push_back(std::byte{0xff});
    CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::get, body)); }),
               Contains("timeout"));
  }
  SECTION("replies that contradict themselves") {
    Bytes flag_two = frame(wire::Op::check, {std::byte{2}}, wire::kVersion, 0);
    CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_reply(flag_two); }),
               Contains("presence flag"));
    Bytes no_keys;
    put_u32(no_keys, 0);
    CHECK_THROWS_AS(wire::decode_reply(frame(wire::Op::get, no_keys, wire::kVersion, 1)), ProtocolMismatch);
    CHECK_THROWS_AS(wire::decode_reply(frame(wire::Op::set, no_keys, wire::kVersion, 1)), ProtocolMismatch);
    CHECK_THROWS_AS(wire::decode_reply(frame(wire::Op::add, {}, wire::kVersion, 0)), ProtocolMismatch);
  }
}

TEST_CASE("store protocol: the handshake frames round-trip and are checked strictly", "[store][protocol]") {
  using Catch::Matchers::Contains;
  auto hello = wire::decode_request(wire::encode(wire::Request{.op = wire::Op::hello, .auth = true}));
  REQUIRE(hello);
  CHECK(hello->message.auth);
  auto claim = wire::decode_request(wire::encode(
      wire::Request{.op = wire::Op::hello, .job = "j", .rank = 3, .world_size = 65536, .pid = 4000000000u}));
  REQUIRE(claim);
  CHECK(claim->message.rank == 3);
  CHECK(claim->message.world_size == 65536);
  CHECK(claim->message.pid == 4000000000u);
  Bytes oversized = wire::encode(wire::Request{.op = wire::Op::hello, .world_size = 5});
  oversized[oversized.size() - 8] = std::byte{0xff};  // world size 0x...ff: past any rank count
  oversized[oversized.size() - 5] = std::byte{0x7f};
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(oversized); }), Contains("world size"));
  auto auth = wire::decode_request(
      wire::encode(wire::Request{.op = wire::Op::auth, .nonce = sample_nonce(3), .proof = sample_nonce(50)}));
  REQUIRE(auth);
  CHECK(auth->message.nonce == sample_nonce(3));
  CHECK(auth->message.proof == sample_nonce(50));
  auto challenge =
      wire::decode_reply(wire::encode(wire::Reply{.op = wire::Op::hello, .challenge = true, .nonce = sample_nonce(4)}));
  REQUIRE(challenge);
  CHECK(challenge->message.challenge);
  CHECK(challenge->message.nonce == sample_nonce(4));
  auto proof = wire::decode_reply(wire::encode(wire::Reply{.op = wire::Op::auth, .proof = sample_nonce(5)}));
  REQUIRE(proof);
  CHECK(proof->message.proof == sample_nonce(5));

  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::hello, {std::byte{2}})); }),
             Contains("auth flag"));
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::hello, {})); }),
             Contains("truncated"));
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::auth, Bytes(63))); }),
             Contains("truncated"));
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_request(frame(wire::Op::auth, Bytes(65))); }),
             Contains("unexpected"));
  // A challenge without its nonce, a nonce without a challenge, a short proof.
  CHECK_THROWS_AS(wire::decode_reply(frame(wire::Op::hello, {std::byte{1}}, wire::kVersion, 0)), ProtocolMismatch);
  Bytes stray_nonce(33);
  CHECK_THROWS_AS(wire::decode_reply(frame(wire::Op::hello, stray_nonce, wire::kVersion, 0)), ProtocolMismatch);
  CHECK_THROWS_AS(wire::decode_reply(frame(wire::Op::auth, Bytes(31), wire::kVersion, 0)), ProtocolMismatch);
  // Only the handshake fails authentication.
  Bytes message = length_then_zeros(1, 1);
  CHECK(wire::decode_reply(frame(wire::Op::auth, message, wire::kVersion, 4)));
  CHECK_THAT(thrown<ProtocolMismatch>([&] { wire::decode_reply(frame(wire::Op::get, message, wire::kVersion, 4)); }),
             Contains("only hello and auth"));
  CHECK_THROWS_AS(wire::encode(wire::Reply{.op = wire::Op::get, .status = wire::Status::auth_failed}), InvalidArgument);
}

TEST_CASE("store handshake: the server's state machine", "[store][protocol]") {
  using Catch::Matchers::Contains;
  wire::Request hello{.op = wire::Op::hello}, keyed_hello{.op = wire::Op::hello, .auth = true};
  Bytes hello_frame = wire::encode(hello), keyed_frame = wire::encode(keyed_hello);
  wire::Request get{.op = wire::Op::get, .keys = {"k"}};
  SECTION("no key: one hello and it is done") {
    wire::ServerHandshake h{AuthKey()};
    CHECK_FALSE(h.done());
    CHECK_THAT(thrown<ProtocolMismatch>([&] { h.answer(get, wire::encode(get)); }),
               Contains("before the handshake"));
    wire::Reply r = h.answer(hello, hello_frame);
    CHECK(r.op == wire::Op::hello);
    CHECK_FALSE(r.challenge);
    CHECK(h.done());
    CHECK_THROWS_AS(h.answer(hello, hello_frame), ProtocolMismatch);
  }
  SECTION("a sealed store: a member's token passes, another or none is too late") {
    const Bytes seal{std::byte{7}, std::byte{8}, std::byte{9}};
    wire::Request member = hello;
    member.member = seal;
    wire::ServerHandshake passes{AuthKey()};
    passes.answer(member, wire::encode(member), true, seal);
    CHECK(passes.done());
    wire::Request other = member;
    other.member[2] = std::byte{0};
    wire::ServerHandshake wrong{AuthKey()};
    CHECK_THAT(thrown<wire::Sealed>([&] { wrong.answer(other, wire::encode(other), true, seal); }),
               Contains("already formed"));
    wire::ServerHandshake none{AuthKey()};
    CHECK_THROWS_AS(none.answer(hello, hello_frame, true, seal), wire::Sealed);
    wire::ServerHandshake unsealed_token{AuthKey()};
    CHECK_THROWS_AS(unsealed_token.answer(member, wire::encode(member), true, {}), wire::Sealed);
  }
  SECTION("no key, and a client with one") {
    wire::ServerHandshake h{AuthKey()};
    CHECK_THROWS_AS(h.answer(keyed_hello, keyed_frame), wire::AuthRefused);
  }
  SECTION("a key, and a client without one") {
    wire::ServerHandshake h{AuthKey("k")};
    CHECK_THAT(thrown<wire::AuthRefused>([&] { h.answer(hello, hello_frame); }), Contains("authentication required"));
  }
  SECTION("a key: challenge, proof, server proof") {
    AuthKey key("k");
    wire::ServerHandshake h{key};
    wire::Reply challenge = h.answer(keyed_hello, keyed_frame);
    REQUIRE(challenge.challenge);
    CHECK_FALSE(h.done());
    CHECK(h.expected_op() == wire::Op::auth);
    CHECK_THROWS_AS(h.answer(keyed_hello, keyed_frame), ProtocolMismatch);
    wire::Request auth{.op = wire::Op::auth, .nonce = sample_nonce(1)};
    auth.proof = handshake_proof(key, AuthRole::client, wire::kAuthProtocol, auth.nonce, challenge.nonce, keyed_frame);
    wire::Request wrong = auth;
    wrong.proof[0] ^= std::byte{1};
    SECTION("the right proof") {
      wire::Reply done = h.answer(auth, wire::encode(auth));
      CHECK(h.done());
      CHECK(done.proof ==
            handshake_proof(key, AuthRole::server, wire::kAuthProtocol, auth.nonce, challenge.nonce, keyed_frame));
    }
    SECTION("a proof one bit off") {
      CHECK_THAT(thrown<wire::AuthRefused>([&] { h.answer(wrong, wire::encode(wrong)); }),
                 Contains("authentication failed"));
      CHECK_FALSE(h.done());
    }
    SECTION("a proof bound to another hello") {
      wire::Request other = auth;
      other.proof =
          handshake_proof(key, AuthRole::client, wire::kAuthProtocol, auth.nonce, challenge.nonce, hello_frame);
      CHECK_THROWS_AS(h.answer(other, wire::encode(other)), wire::AuthRefused);
    }
  }
}

TEST_CASE("store protocol: the encoder enforces the caps", "[store][protocol]") {
  CHECK_THROWS_AS(wire::encode(wire::Request{.op = wire::Op::get, .keys = {std::string(wire::kMaxKeyBytes + 1, 'k')}}),
                  InvalidArgument);
  CHECK_NOTHROW(wire::encode(wire::Request{.op = wire::Op::get, .keys = {std::string(wire::kMaxKeyBytes, 'k')}}));
  CHECK_THROWS_AS(wire::encode(wire::Request{.op = wire::Op::set, .keys = {"a", "b"}}), InvalidArgument);
  CHECK_THROWS_AS(wire::encode(wire::Request{.op = wire::Op::check,
                                             .keys = std::vector<std::string>(wire::kMaxKeys + 1)}),
                  InvalidArgument);
  CHECK_THROWS_AS(wire::encode(wire::Reply{.op = wire::Op::set, .status = wire::Status::timeout}), InvalidArgument);
}

TEST_CASE("store protocol: mutated frames decode or throw ProtocolMismatch, nothing else", "[store][protocol]") {
  std::mt19937 rng(12345);
  auto requests = sample_requests();
  auto replies = sample_replies();
  int decoded = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    bool reply = (round & 1) != 0;
    const auto& pool = reply ? replies : requests;
    Bytes f = pool[rng() % pool.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      switch (rng() % 3) {
        case 0: f[rng() % f.size()] = std::byte(static_cast<std::uint8_t>(rng())); break;
        case 1: f.resize(rng() % f.size()); break;
        case 2: f.insert(f.begin() + static_cast<std::ptrdiff_t>(rng() % (f.size() + 1)),
                         std::byte(static_cast<std::uint8_t>(rng())));
                break;
      }
    }
    try {
      bool got = reply ? wire::decode_reply(f).has_value() : wire::decode_request(f).has_value();
      decoded += got ? 1 : 0;
    } catch (const ProtocolMismatch&) {
      ++refused;
    }
  }
  CHECK(refused > 1000);
  CHECK(decoded > 0);
}

// ------------------------------------------------------------ server and client

TEST_CASE("store: the server reports the port it bound", "[store]") {
  auto server = start_server();
  CHECK(server->address().port() != 0);
  CHECK(server->address().is_loopback());
}

TEST_CASE("store: a port in use is an error naming the address", "[store]") {
  auto server = start_server();
  CHECK_THAT(thrown<SystemError>([&] { TcpStoreServer::start(service_loop(), server->address()); }),
             Catch::Matchers::Contains(server->address().to_string()));
}

TEST_CASE("store: set and get round-trip bytes", "[store]") {
  auto server = start_server();
  auto store = connect(*server);
  Bytes all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes.push_back(std::byte(i));
  store->set("binary", all_bytes);
  store->set("empty", std::string_view());
  store->set("text", "hello");
  CHECK(store->get("binary", 1s) == all_bytes);
  CHECK(store->get("empty", 1s).empty());
  CHECK(store->get_string("text", 1s) == "hello");
  store->set("text", "again");
  CHECK(store->get_string("text", 1s) == "again");

  // A value larger than any socket buffer crosses in many partial reads and writes.
  Bytes big(8 << 20);
  std::mt19937 rng(7);
  for (auto& b : big) b = std::byte(static_cast<std::uint8_t>(rng()));
  store->set("big", big);
  auto other = connect(*server);
  CHECK(other->get("big", 5s) == big);

  CHECK_THAT(thrown<InvalidArgument>([&] { store->set(std::string(5000, 'k'), "v"); }),
             Catch::Matchers::Contains("braid store at"));
  store->set("still", "works");
}

TEST_CASE("store: get waits for a key another client sets later", "[store]") {
  auto server = start_server();
  auto reader = connect(*server);
  auto writer = connect(*server);
  auto t0 = Clock::now();
  std::thread later([&] {
    std::this_thread::sleep_for(150ms);
    writer->set("late", "value");
  });
  CHECK(reader->get_string("late", 5s) == "value");
  CHECK(seconds_since(t0) >= 0.1);
  later.join();
}

TEST_CASE("store: many clients wait for one key", "[store]") {
  auto server = start_server();
  std::vector<std::future<std::string>> readers;
  for (int i = 0; i < 16; ++i)
    readers.push_back(std::async(std::launch::async, [&] { return connect(*server)->get_string("go", 5s); }));
  std::this_thread::sleep_for(100ms);
  connect(*server)->set("go", "now");
  for (auto& r : readers) CHECK(r.get() == "now");
}

TEST_CASE("store: get times out in about its timeout, naming the key", "[store]") {
  auto server = start_server();
  auto store = connect(*server);
  auto t0 = Clock::now();
  try {
    store->get("rank7/addr", 200ms);
    FAIL("get returned a key nobody set");
  } catch (const Timeout& e) {
    std::string m = e.what();
    CHECK_THAT(m, Catch::Matchers::Contains("'rank7/addr'"));
    CHECK_THAT(m, Catch::Matchers::Contains(server->address().to_string()));
    CHECK_THAT(m, Catch::Matchers::Contains("get"));
  }
  double waited = seconds_since(t0);
  CHECK(waited >= 0.19);
  CHECK(waited < 0.8);
  store->set("after", "timeout");  // the connection is still good
  CHECK(store->get_string("after", 1s) == "timeout");
  CHECK_THROWS_AS(store->get("absent", 0ms), Timeout);
}

TEST_CASE("store: add from 16 clients is exact", "[store]") {
  auto server = start_server();
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&] {
      auto store = connect(*server);
      for (int i = 0; i < 100; ++i) store->add("counter", 1);
    });
  for (auto& t : threads) t.join();
  auto store = connect(*server);
  CHECK(store->add("counter", 0) == 1600);
  CHECK(store->get_string("counter", 1s) == "1600");
  CHECK(store->add("counter", -1601) == -1);
  CHECK(store->add("fresh", 5) == 5);

  store->set("word", "abc");
  CHECK_THAT(thrown<InvalidArgument>([&] { store->add("word", 1); }),
             Catch::Matchers::Contains("'word'") && Catch::Matchers::Contains("not a decimal"));
  store->set("max", std::to_string(INT64_MAX));
  CHECK_THAT(thrown<InvalidArgument>([&] { store->add("max", 1); }), Catch::Matchers::Contains("overflows"));
  CHECK(store->add("counter", 2) == 1);  // an error reply leaves the connection usable
}

TEST_CASE("store: one client shared by threads", "[store]") {
  auto server = start_server();
  auto store = connect(*server);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) store->add("shared", 2);
    });
  for (auto& t : threads) t.join();
  CHECK(store->add("shared", 0) == 800);
}

TEST_CASE("store: check and wait", "[store]") {
  auto server = start_server();
  auto store = connect(*server);
  store->set("present", "1");
  std::vector<std::string> none;
  std::vector<std::string> present{"present"};
  std::vector<std::string> mixed{"present", "missing-1", "missing-2"};
  CHECK(store->check(none));
  CHECK(store->check(present));
  CHECK_FALSE(store->check(mixed));
  store->wait(present, 1s);
  store->wait(none, 0ms);

  auto t0 = Clock::now();
  try {
    store->wait(mixed, 150ms);
    FAIL("wait returned with keys missing");
  } catch (const Timeout& e) {
    std::string m = e.what();
    CHECK_THAT(m, Catch::Matchers::Contains("'missing-1'") && Catch::Matchers::Contains("'missing-2'"));
    CHECK_THAT(m, !Catch::Matchers::Contains("'present'"));
    CHECK_THAT(m, Catch::Matchers::Contains("wait") && Catch::Matchers::Contains(server->address().to_string()));
  }
  CHECK(seconds_since(t0) < 0.8);

  // Satisfied one key at a time by another client.
  auto writer = connect(*server);
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    writer->set("missing-2", "x");
    std::this_thread::sleep_for(50ms);
    writer->add("missing-1", 1);
  });
  store->wait(mixed, 5s);
  CHECK(store->check(mixed));
  later.join();
}

TEST_CASE("store: requests sent back to back are answered in order", "[store]") {
  auto server = start_server();
  Fd raw = raw_session(*server);
  Bytes both = wire::encode(wire::Request{.op = wire::Op::get, .keys = {"p"}, .timeout = 5s});
  Bytes second = wire::encode(wire::Request{.op = wire::Op::add, .keys = {"q"}, .delta = 3});
  both.insert(both.end(), second.begin(), second.end());
  send_bytes(raw.get(), both);
  std::this_thread::sleep_for(50ms);
  auto store = connect(*server);
  CHECK_FALSE(store->check(std::vector<std::string>{"q"}));  // the add waits behind the get
  store->set("p", "pv");
  wire::Reply first = read_reply(raw.get());
  CHECK(first.op == wire::Op::get);
  CHECK(text_of(first.value) == "pv");
  wire::Reply then = read_reply(raw.get());
  CHECK(then.op == wire::Op::add);
  CHECK(then.number == 3);
}

TEST_CASE("store: strangers are disconnected and the server keeps serving", "[store]") {
  auto server = start_server();
  auto good = connect(*server);
  good->set("k", "v");

  // Someone who connected and says nothing, and someone who stopped mid-frame,
  // hold nothing up.
  Fd idle = raw_connection(*server);
  Fd partial = raw_session(*server);
  Bytes half = wire::encode(wire::Request{.op = wire::Op::set, .keys = {"k"}, .value = Bytes(1000)});
  half.resize(100);
  send_bytes(partial.get(), half);

  SECTION("an HTTP request") {
    Fd http = raw_connection(*server);
    send_bytes(http.get(), bytes_of("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    CHECK(closed_by_peer(http.get(), Deadline::after(2s)));
  }
  SECTION("random bytes") {
    Fd noise = raw_connection(*server);
    Bytes junk(4096);
    std::mt19937 rng(99);
    for (auto& b : junk) b = std::byte(static_cast<std::uint8_t>(rng()));
    junk[0] = std::byte{0x00};
    ::send(noise.get(), junk.data(), junk.size(), MSG_NOSIGNAL);
    CHECK(closed_by_peer(noise.get(), Deadline::after(2s)));
  }
  SECTION("another protocol version is told why") {
    Fd old = raw_connection(*server);
    Bytes request = wire::encode(wire::Request{.op = wire::Op::get, .keys = {"k"}});
    request[1] = std::byte{1};
    send_bytes(old.get(), request);
    Bytes received;
    CHECK(closed_by_peer(old.get(), Deadline::after(2s), &received));
    auto reply = wire::decode_reply(received);
    REQUIRE(reply);
    CHECK(reply->message.status == wire::Status::protocol_error);
    CHECK_THAT(reply->message.message, Catch::Matchers::Contains("version 1"));
  }
  SECTION("a request before the handshake is refused") {
    Fd rude = raw_connection(*server);
    send_bytes(rude.get(), wire::encode(wire::Request{.op = wire::Op::get, .keys = {"k"}}));
    Bytes received;
    CHECK(closed_by_peer(rude.get(), Deadline::after(2s), &received));
    auto reply = wire::decode_reply(received);
    REQUIRE(reply);
    CHECK(reply->message.status == wire::Status::protocol_error);
    CHECK_THAT(reply->message.message, Catch::Matchers::Contains("before the handshake"));
  }
  SECTION("a large frame before the handshake is refused without reading it all") {
    Fd big = raw_connection(*server);
    ::send(big.get(), half.data(), half.size(), MSG_NOSIGNAL);
    Bytes whole = wire::encode(wire::Request{.op = wire::Op::set, .keys = {"k"}, .value = Bytes(1000)});
    ::send(big.get(), whole.data() + half.size(), whole.size() - half.size(), MSG_NOSIGNAL);
    CHECK(closed_by_peer(big.get(), Deadline::after(2s)));
  }
  SECTION("a second hello is refused") {
    Fd twice = raw_session(*server);
    send_bytes(twice.get(), wire::encode(wire::Request{.op = wire::Op::hello}));
    Bytes received;
    CHECK(closed_by_peer(twice.get(), Deadline::after(2s), &received));
    auto reply = wire::decode_reply(received);
    REQUIRE(reply);
    CHECK(reply->message.status == wire::Status::protocol_error);
  }
  CHECK(good->get_string("k", 1s) == "v");
  auto late = connect(*server);
  late->set("k2", "v2");
  CHECK(good->get_string("k2", 1s) == "v2");
}

TEST_CASE("store: connecting where no server listens times out with the address", "[store]") {
  std::uint16_t port = free_port();
  auto t0 = Clock::now();
  try {
    connect_tcp_store(HostPort{"127.0.0.1", port}, Deadline::after(300ms));
    FAIL("connected to nothing");
  } catch (const Timeout& e) {
    std::string expected = "could not reach the braid store at 127.0.0.1:" + std::to_string(port);
    CHECK_THAT(e.what(), Catch::Matchers::Contains(expected));
  }
  double waited = seconds_since(t0);
  CHECK(waited >= 0.29);
  CHECK(waited < 1.5);
}

TEST_CASE("store: a client may start before the server", "[store]") {
  std::uint16_t port = free_port();
  auto client = std::async(std::launch::async, [port] {
    auto store = connect_tcp_store(HostPort{"127.0.0.1", port}, Deadline::after(5s));
    return store->get_string("hello", 5s);
  });
  std::this_thread::sleep_for(200ms);
  auto server = TcpStoreServer::start(service_loop(), loopback(port));
  connect(*server)->set("hello", "world");
  CHECK(client.get() == "world");
}

TEST_CASE("store: the server going away is PeerLost, not a hang", "[store]") {
  auto server = start_server();
  std::string address = server->address().to_string();
  auto store = connect(*server);
  auto waiting = std::async(std::launch::async, [&] { store->get("never", 10s); });
  std::this_thread::sleep_for(100ms);
  auto t0 = Clock::now();
  server.reset();
  CHECK(seconds_since(t0) < 0.5);  // the destructor does not wait for waiters
  REQUIRE(waiting.wait_for(3s) == std::future_status::ready);
  CHECK_THAT(thrown<PeerLost>([&] { waiting.get(); }), Catch::Matchers::Contains(address));
  // The next call tries to reconnect, finds nobody, and says so.
  CHECK_THAT(thrown<PeerLost>([&] { store->get("never", 50ms); }), Catch::Matchers::Contains(address));
}

TEST_CASE("store: after a local timeout the client reconnects, so a late reply is never misread", "[store]") {
  // A fake store: the first connection answers too late, the second at once.
  Fd listener = listen_tcp(loopback(), "fake store");
  std::uint16_t port = local_address(listener.get()).port();
  std::atomic<int> accepted{0};
  std::thread fake([&] {
    std::vector<Fd> keep;
    for (int i = 0; i < 2; ++i) {
      auto fd = accept_tcp(listener.get(), Deadline::after(5s));
      if (!fd) return;
      ++accepted;
      if (!answer_hello(fd->get())) return;
      Bytes in(256);
      ssize_t n = ::recv(fd->get(), in.data(), in.size(), 0);
      if (n <= 0) return;
      if (i == 0) std::this_thread::sleep_for(1300ms);
      Bytes out = wire::encode(wire::Reply{.op = wire::Op::get, .value = bytes_of(i == 0 ? "stale" : "fresh")});
      ::send(fd->get(), out.data(), out.size(), MSG_NOSIGNAL);
      keep.push_back(std::move(*fd));
    }
  });
  auto store = connect_tcp_store(HostPort{"127.0.0.1", port}, Deadline::after(2s));
  CHECK_THAT(thrown<Timeout>([&] { store->get("slow", 100ms); }),
             Catch::Matchers::Contains("'slow'") && Catch::Matchers::Contains("no reply"));
  CHECK(store->get_string("fast", 1s) == "fresh");
  CHECK(accepted.load() == 2);
  fake.join();
}

TEST_CASE("store: IPv6 loopback", "[store]") {
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = TcpStoreServer::start(service_loop(), resolve(HostPort{"::1", 0}, "test").front());
  } catch (const Error& e) {
    WARN("no IPv6 loopback here: " << e.what());
    return;
  }
  auto store = connect_tcp_store(HostPort{"::1", server->address().port()}, Deadline::after(2s));
  store->set("six", "v6");
  CHECK(store->get_string("six", 1s) == "v6");
}
