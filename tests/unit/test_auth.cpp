// Authentication end to end: the HMAC helper against RFC 4231, the key
// settings, then real TCP transports and stores on loopback with the same key,
// another key, a key on one side only, and replayed or garbage proofs. Every
// refusal must be bounded in time and named on both sides.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/store.hpp"
#include "bootstrap/store_protocol.hpp"
#include "braid/braid.hpp"
#include "braid/types.hpp"
#include "core/auth.hpp"
#include "core/settings.hpp"
#include "core/socket.hpp"
#include "core/text.hpp"
#include "transport/tcp/handshake.hpp"
#include "tests/unit/tcp_rank.hpp"
#include "loopback_fixtures.hpp"

using namespace braid;
using namespace braid::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
namespace wire = braid::store_protocol;

namespace {

std::vector<std::byte> bytes_of(std::string_view s) {
  auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

std::vector<std::byte> from_hex(std::string_view hex) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(std::byte(static_cast<std::uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16))));
  return out;
}

// A file under /tmp that is removed at the end of the scope.
class TempFile {
 public:
  explicit TempFile(std::string_view contents) {
    char name[] = "/tmp/braid-auth-test-XXXXXX";
    int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    path_ = name;
    REQUIRE(::write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size()));
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TcpOptions tcp_options(int rank, int size, const CommId& id, AuthKey key, Millis timeout = Millis(3000)) {
  TcpOptions o = loopback_tcp_options(rank, size, id, timeout);
  o.auth_key = std::move(key);
  return o;
}

// Drives both links until every request is done or 3 s pass.
void drive(Link& a, Link& b, const std::vector<Request>& requests) { drive_links(a, b, requests, 3s); }

// The dialing side of the TCP handshake by hand, to replay and forge proofs.
struct RawDial {
  Fd fd;
  std::array<std::byte, kHelloBytes> hello;
  Nonce server_nonce{};
};

RawDial raw_dial_to_challenge(const SockAddr& to, const Hello& hello) {
  RawDial d;
  d.fd = connect_tcp({to}, Deadline::after(2s), "raw dialer");
  d.hello = encode_hello(hello);
  send_all(d.fd.get(), d.hello.data(), d.hello.size(), Deadline::after(2s), "raw dialer");
  std::array<std::byte, kHelloReplyBytes> reply;
  recv_all(d.fd.get(), reply.data(), reply.size(), Deadline::after(5s), "raw dialer");
  REQUIRE(decode_reply(reply).status == HelloStatus::challenge);
  recv_all(d.fd.get(), d.server_nonce.data(), d.server_nonce.size(), Deadline::after(2s), "raw dialer");
  return d;
}

HelloStatus send_proof(const RawDial& d, const std::array<std::byte, kAuthProofBytes>& proof) {
  send_all(d.fd.get(), proof.data(), proof.size(), Deadline::after(2s), "raw dialer");
  std::array<std::byte, kHelloReplyBytes> reply;
  recv_all(d.fd.get(), reply.data(), reply.size(), Deadline::after(5s), "raw dialer");
  return decode_reply(reply).status;
}

// A fake acceptor that answers one dialer with `script` (no Catch2 inside:
// it runs on its own thread).
template <typename Script>
std::thread fake_acceptor(Fd& listener, Script script) {
  return std::thread([&listener, script] {
    auto fd = accept_tcp(listener.get(), Deadline::after(5s));
    if (!fd) return;
    std::array<std::byte, kHelloBytes> hello;
    try {
      recv_all(fd->get(), hello.data(), hello.size(), Deadline::after(5s), "fake");
      script(fd->get());
      char c;
      while (true) recv_all(fd->get(), &c, 1, Deadline::after(5s), "fake");  // until the dialer hangs up
    } catch (const Error&) {
    }
  });
}

std::vector<std::byte> address_bytes(const SockAddr& a) { return bytes_of(a.to_string()); }

// Store helpers.
HostPort where(const TcpStoreServer& server) { return HostPort{"127.0.0.1", server.address().port()}; }

wire::Reply read_store_reply(int fd) {
  Bytes in(wire::kHeaderBytes);
  recv_all(fd, in.data(), in.size(), Deadline::after(5s), "test");
  in.resize(*wire::frame_size(in, true));
  recv_all(fd, in.data() + wire::kHeaderBytes, in.size() - wire::kHeaderBytes, Deadline::after(5s), "test");
  return wire::decode_reply(in).value().message;
}

void send_frame(int fd, const Bytes& b) { send_all(fd, b.data(), b.size(), Deadline::after(2s), "test"); }

bool closed_by_peer(int fd, Deadline deadline) {
  char buf[256];
  while (!deadline.expired()) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) std::this_thread::sleep_for(5ms);
  }
  return false;
}

}  // namespace

// ------------------------------------------------------------ the HMAC helper

TEST_CASE("auth: HMAC-SHA256 gives the RFC 4231 answers", "[auth]") {
  // Test case 1: key 0x0b x 20, "Hi There".
  auto tc1 = hmac_sha256(std::vector<std::byte>(20, std::byte{0x0b}), bytes_of("Hi There"));
  CHECK(to_hex(tc1) == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the output.
  auto tc2 = hmac_sha256(bytes_of("Jefe"), bytes_of("what do ya want for nothing?"));
  CHECK(to_hex(tc2) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  auto expected = from_hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(same_digest(tc2, expected));
  // Test case 6: a key longer than the block (hashed first).
  auto tc6 = hmac_sha256(std::vector<std::byte>(131, std::byte{0xaa}),
                         bytes_of("Test Using Larger Than Block-Size Key - Hash Key First"));
  CHECK(to_hex(tc6) == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("auth: digests compare by size and content", "[auth]") {
  Digest a = hmac_sha256(bytes_of("k"), bytes_of("m"));
  Digest b = a;
  CHECK(same_digest(a, b));
  b[31] ^= std::byte{1};
  CHECK_FALSE(same_digest(a, b));
  CHECK_FALSE(same_digest(a, std::span(a).first(31)));
  CHECK(same_digest({}, {}));
}

TEST_CASE("auth: nonces are fresh", "[auth]") {
  Nonce a = random_nonce(), b = random_nonce();
  CHECK(a != b);
  CHECK(a != Nonce{});
}

TEST_CASE("auth: a proof depends on the key, the role, the protocol, both nonces and the hello", "[auth]") {
  AuthKey key("secret"), other("Secret");
  Nonce cn = random_nonce(), sn = random_nonce();
  auto hello = bytes_of("hello bytes");
  Digest p = handshake_proof(key, AuthRole::client, "tcp", cn, sn, hello);
  CHECK(p == handshake_proof(AuthKey("secret"), AuthRole::client, "tcp", cn, sn, hello));
  CHECK(p != handshake_proof(other, AuthRole::client, "tcp", cn, sn, hello));
  CHECK(p != handshake_proof(key, AuthRole::server, "tcp", cn, sn, hello));
  CHECK(p != handshake_proof(key, AuthRole::client, "store", cn, sn, hello));
  CHECK(p != handshake_proof(key, AuthRole::client, "tcp", sn, cn, hello));
  CHECK(p != handshake_proof(key, AuthRole::client, "tcp", cn, random_nonce(), hello));
  CHECK(p != handshake_proof(key, AuthRole::client, "tcp", cn, sn, bytes_of("hello byteS")));
  // The transcript is the one the header documents.
  std::vector<std::byte> transcript = bytes_of(std::string("braid-client\0tcp\0", 17));
  transcript.insert(transcript.end(), sn.begin(), sn.end());
  transcript.insert(transcript.end(), cn.begin(), cn.end());
  transcript.insert(transcript.end(), hello.begin(), hello.end());
  CHECK(p == hmac_sha256(bytes_of("secret"), transcript));
}

// ------------------------------------------------------------ the key settings

TEST_CASE("auth: BRAID_AUTH_KEY and BRAID_AUTH_KEY_FILE", "[auth][settings]") {
  EnvVar clear_key("BRAID_AUTH_KEY", nullptr), clear_file("BRAID_AUTH_KEY_FILE", nullptr);
  SECTION("neither: authentication is off") { CHECK_FALSE(Settings::from_env().auth_key.enabled()); }
  SECTION("the key as text") {
    EnvVar key("BRAID_AUTH_KEY", "correct horse");
    AuthKey k = Settings::from_env().auth_key;
    REQUIRE(k.enabled());
    CHECK(std::string(reinterpret_cast<const char*>(k.secret().data()), k.secret().size()) == "correct horse");
  }
  SECTION("a key file gives the same key, without its trailing newline") {
    TempFile file("correct horse\n");
    EnvVar key_file("BRAID_AUTH_KEY_FILE", file.path().c_str());
    AuthKey k = Settings::from_env().auth_key;
    REQUIRE(k.enabled());
    AuthKey same("correct horse");
    auto text = same.secret();
    CHECK(std::equal(k.secret().begin(), k.secret().end(), text.begin(), text.end()));
    TempFile crlf("correct horse\r\n");
    auto k2 = AuthKey::from_file(crlf.path(), "BRAID_AUTH_KEY_FILE");
    CHECK(std::equal(k2.secret().begin(), k2.secret().end(), text.begin(), text.end()));
  }
  SECTION("both at once is an error") {
    TempFile file("x");
    EnvVar key("BRAID_AUTH_KEY", "x");
    EnvVar key_file("BRAID_AUTH_KEY_FILE", file.path().c_str());
    CHECK_THAT(thrown<InvalidArgument>([] { Settings::from_env(); }), Contains("both set"));
  }
  SECTION("a missing key file is an error naming the path") {
    std::string path = "/tmp/braid-auth-test-no-such-file-" + std::to_string(::getpid());
    EnvVar key_file("BRAID_AUTH_KEY_FILE", path.c_str());
    std::string what = thrown<InvalidArgument>([] { Settings::from_env(); });
    CHECK_THAT(what, Contains("BRAID_AUTH_KEY_FILE='" + path + "'") && Contains("No such file"));
  }
  SECTION("an empty key file is an error naming the path") {
    for (std::string_view contents : {"", "\n"}) {
      TempFile file(contents);
      EnvVar key_file("BRAID_AUTH_KEY_FILE", file.path().c_str());
      std::string what = thrown<InvalidArgument>([] { Settings::from_env(); });
      CHECK_THAT(what, Contains(file.path()) && Contains("empty"));
    }
  }
  SECTION("a key file that is not a regular file, or is huge, is refused without hanging") {
    EnvVar key_file("BRAID_AUTH_KEY_FILE", "/tmp");
    CHECK_THAT(thrown<InvalidArgument>([] { Settings::from_env(); }), Contains("'/tmp'") && Contains("regular"));
    TempFile big(std::string(kMaxAuthKeyBytes + 1, 'k'));
    CHECK_THAT(thrown<InvalidArgument>([&] { AuthKey::from_file(big.path(), "BRAID_AUTH_KEY_FILE"); }),
               Contains(big.path()) && Contains("larger"));
  }
  SECTION("an unreadable key file names the path") {
    if (::geteuid() == 0) return;  // root reads anything
    TempFile file("secret");
    ::chmod(file.path().c_str(), 0);
    EnvVar key_file("BRAID_AUTH_KEY_FILE", file.path().c_str());
    CHECK_THAT(thrown<InvalidArgument>([] { Settings::from_env(); }), Contains(file.path()));
  }
  SECTION("error messages never show the key") {
    std::string huge(kMaxAuthKeyBytes + 1, 'q');
    huge.replace(0, 6, "S3CR3T");
    EnvVar key("BRAID_AUTH_KEY", huge.c_str());
    std::string what = thrown<InvalidArgument>([] { Settings::from_env(); });
    CHECK_THAT(what, Contains("BRAID_AUTH_KEY"));
    CHECK(what.find("S3CR3T") == std::string::npos);
  }
}

// ------------------------------------------------------------ the TCP transport

TEST_CASE("auth: transports with the same key connect and carry data", "[auth][tcp]") {
  CommId id = CommId::random();
  AuthKey key("same key");
  auto o0 = tcp_options(0, 2, id, key), o1 = tcp_options(1, 2, id, key);
  o0.streams = o1.streams = 2;
  TcpRank low(o0), high(o1);
  RankInfo info0 = RankInfo::local(0), info1 = RankInfo::local(1);
  LogCapture log;
  auto dialer = std::async(std::launch::async, [&] {
    return high.connect(info0, low.local_address(), Deadline::after(3s));
  });
  auto link_low = low.connect(info1, high.local_address(), Deadline::after(3s));
  auto link_high = dialer.get();
  REQUIRE(link_low->peer() == 1);
  REQUIRE(link_high->peer() == 0);
  // The server proof and nonces must not leak into the data stream.
  std::vector<std::byte> out = bytes_of("across an authenticated link"), in(out.size());
  std::vector<std::byte> back = bytes_of("and back"), in_back(back.size());
  std::vector<Request> requests = {
      link_high->send(ConstMemView{out.data(), out.size()}, make_tag(1, 0)),
      link_low->recv(MemView{in.data(), in.size()}, make_tag(1, 0)),
      link_low->send(ConstMemView{back.data(), back.size()}, make_tag(1, 1)),
      link_high->recv(MemView{in_back.data(), in_back.size()}, make_tag(1, 1)),
  };
  drive(*link_low, *link_high, requests);
  CHECK(in == out);
  CHECK(in_back == back);
  CHECK(log.text().find("refused") == std::string::npos);
}

TEST_CASE("auth: a wrong key is refused on both sides, naming the peer's address, in bounded time", "[auth][tcp]") {
  CommId id = CommId::random();
  TcpRank low(tcp_options(0, 2, id, AuthKey("Alpha-K3y"), 1500ms));
  TcpRank high(tcp_options(1, 2, id, AuthKey("Beta-K3y"), 1500ms));
  RankInfo info0 = RankInfo::local(0), info1 = RankInfo::local(1);
  std::string low_addr = low.listening().to_string();
  LogCapture log;
  auto t0 = Clock::now();
  auto acceptor = std::async(std::launch::async, [&] {
    return thrown<Timeout>([&] { low.connect(info1, high.local_address(), Deadline::after(1500ms)); });
  });
  std::string dialer_error =
      thrown<ProtocolMismatch>([&] { high.connect(info0, low.local_address(), Deadline::after(1500ms)); });
  std::string acceptor_error = acceptor.get();
  CHECK(seconds_since(t0) < 5);
  // The dialer: a ProtocolMismatch naming the peer and its address.
  CHECK_THAT(dialer_error, Contains("rank 1: connecting to rank 0") && Contains(low_addr) &&
                               Contains("authentication failed"));
  // The acceptor: a timeout that says why the rank it waited for never got in.
  CHECK_THAT(acceptor_error, Contains("rank 1 did not connect") && Contains("authentication failed"));
  // Both logged it; the acceptor with the dialer's address.
  std::string logged = log.text();
  CHECK_THAT(logged, Contains("rank 0: refused a connection from 127.0.0.1:") &&
                         Contains("claiming rank 1: authentication failed"));
  CHECK_THAT(logged, Contains("connecting to rank 0") && Contains(low_addr + "): the peer refused the connection: "
                                                                             "authentication failed"));
  CHECK(logged.find("K3y") == std::string::npos);
}

TEST_CASE("auth: a key on one side only is refused both ways, with a message on both sides", "[auth][tcp]") {
  CommId id = CommId::random();
  RankInfo info0 = RankInfo::local(0), info1 = RankInfo::local(1);
  auto attempt = [&](AuthKey acceptor_key, AuthKey dialer_key) {
    TcpRank low(tcp_options(0, 2, id, std::move(acceptor_key), 1000ms));
    TcpRank high(tcp_options(1, 2, id, std::move(dialer_key), 1000ms));
    auto acceptor = std::async(std::launch::async, [&] {
      return thrown<Timeout>([&] { low.connect(info1, high.local_address(), Deadline::after(1000ms)); });
    });
    std::string dialer =
        thrown<ProtocolMismatch>([&] { high.connect(info0, low.local_address(), Deadline::after(1000ms)); });
    return std::pair{dialer, acceptor.get()};
  };
  SECTION("the acceptor has a key, the dialer none") {
    LogCapture log;
    auto [dialer, acceptor] = attempt(AuthKey("k"), AuthKey());
    CHECK_THAT(dialer, Contains("refused the connection: authentication required"));
    CHECK_THAT(acceptor, Contains("authentication required"));
    CHECK_THAT(log.text(), Contains("refused a connection from 127.0.0.1:") && Contains("authentication required"));
  }
  SECTION("the dialer has a key, the acceptor none") {
    LogCapture log;
    auto [dialer, acceptor] = attempt(AuthKey(), AuthKey("k"));
    CHECK_THAT(dialer, Contains("sent an authenticated hello but the accepting rank has no key"));
    CHECK_THAT(acceptor, Contains("has no key"));
    CHECK_THAT(log.text(), Contains("refused a connection from 127.0.0.1:") && Contains("claiming rank 1") &&
                               Contains("authenticated hello but the accepting rank has no key"));
  }
}

TEST_CASE("auth: a replayed or garbage proof is refused and the acceptor goes on", "[auth][tcp]") {
  CommId id = CommId::random();
  AuthKey key("shared");
  TcpRank low(tcp_options(0, 3, id, key));
  TcpRank high(tcp_options(2, 3, id, key));
  RankInfo info0 = RankInfo::local(0), info2 = RankInfo::local(2);
  LogCapture log;
  // Rank 0 waits for rank 2; meanwhile someone claiming rank 1 tries its luck.
  auto acceptor = std::async(std::launch::async, [&] {
    return low.connect(info2, high.local_address(), Deadline::after(5s));
  });
  Hello hello;
  hello.auth = true;
  hello.comm_id = id;
  hello.from_rank = 1;
  hello.to_rank = 0;
  hello.world_size = 3;

  // A legitimate exchange, recorded: it works, and the acceptor proves the key.
  RawDial first = raw_dial_to_challenge(low.listening(), hello);
  AuthProof proof{.client_nonce = random_nonce()};
  proof.proof = handshake_proof(key, AuthRole::client, kTcpAuthProtocol, proof.client_nonce, first.server_nonce,
                                first.hello);
  auto recorded = encode_auth_proof(proof);
  REQUIRE(send_proof(first, recorded) == HelloStatus::accepted);
  Digest server_proof;
  recv_all(first.fd.get(), server_proof.data(), server_proof.size(), Deadline::after(2s), "raw dialer");
  CHECK(same_digest(server_proof, handshake_proof(key, AuthRole::server, kTcpAuthProtocol, proof.client_nonce,
                                                  first.server_nonce, first.hello)));

  // The same bytes on a new connection meet a new nonce and fail.
  RawDial replay = raw_dial_to_challenge(low.listening(), hello);
  CHECK(replay.server_nonce != first.server_nonce);
  std::string replay_from = local_address(replay.fd.get()).to_string();
  CHECK(send_proof(replay, recorded) == HelloStatus::auth_failed);
  CHECK(closed_by_peer(replay.fd.get(), Deadline::after(2s)));

  // Random bytes, and a proof made with another key, fail too.
  RawDial garbage = raw_dial_to_challenge(low.listening(), hello);
  std::array<std::byte, kAuthProofBytes> noise;
  std::mt19937 rng(7);
  for (auto& b : noise) b = std::byte(static_cast<std::uint8_t>(rng()));
  CHECK(send_proof(garbage, noise) == HelloStatus::auth_failed);
  RawDial forged = raw_dial_to_challenge(low.listening(), hello);
  AuthProof guess{.client_nonce = random_nonce()};
  guess.proof = handshake_proof(AuthKey("guess"), AuthRole::client, kTcpAuthProtocol, guess.client_nonce,
                                forged.server_nonce, forged.hello);
  CHECK(send_proof(forged, encode_auth_proof(guess)) == HelloStatus::auth_failed);

  // A proof cut short: the acceptor gives up on it within its hello wait.
  RawDial cut = raw_dial_to_challenge(low.listening(), hello);
  send_all(cut.fd.get(), noise.data(), 10, Deadline::after(2s), "raw dialer");
  cut.fd.reset();

  // Rank 2 still gets in.
  auto link = high.connect(info0, low.local_address(), Deadline::after(5s));
  CHECK(link->peer() == 0);
  CHECK(acceptor.get()->peer() == 2);
  CHECK_THAT(log.text(),
             Contains("refused a connection from " + replay_from + " claiming rank 1: authentication failed"));
}

TEST_CASE("auth: the dialer refuses an acceptor that cannot prove the key", "[auth][tcp]") {
  Fd listener = listen_tcp(loopback(), "fake acceptor");
  SockAddr fake = local_address(listener.get());
  TcpRank dialer(tcp_options(1, 2, CommId::random(), AuthKey("key"), 2000ms));
  RankInfo info0 = RankInfo::local(0);
  LogCapture log;
  SECTION("one that accepts without a challenge") {
    std::thread t = fake_acceptor(listener, [](int fd) {
      auto reply = encode_reply(HelloStatus::accepted);
      send_all(fd, reply.data(), reply.size(), Deadline::after(2s), "fake");
    });
    auto t0 = Clock::now();
    CHECK_THAT(thrown<ProtocolMismatch>([&] { dialer.connect(info0, address_bytes(fake), Deadline::after(2s)); }),
               Contains(fake.to_string()) && Contains("without authenticating"));
    CHECK(seconds_since(t0) < 2);
    CHECK_THAT(log.text(), Contains("connecting to rank 0") && Contains("without authenticating"));
    t.join();
  }
  SECTION("one that challenges but answers with a bogus proof") {
    std::thread t = fake_acceptor(listener, [](int fd) {
      auto challenge = encode_reply(HelloStatus::challenge);
      Nonce n = random_nonce();
      send_all(fd, challenge.data(), challenge.size(), Deadline::after(2s), "fake");
      send_all(fd, n.data(), n.size(), Deadline::after(2s), "fake");
      std::array<std::byte, kAuthProofBytes> proof;
      recv_all(fd, proof.data(), proof.size(), Deadline::after(2s), "fake");
      auto accepted = encode_reply(HelloStatus::accepted);
      Digest bogus{};
      send_all(fd, accepted.data(), accepted.size(), Deadline::after(2s), "fake");
      send_all(fd, bogus.data(), bogus.size(), Deadline::after(2s), "fake");
    });
    CHECK_THAT(thrown<ProtocolMismatch>([&] { dialer.connect(info0, address_bytes(fake), Deadline::after(2s)); }),
               Contains(fake.to_string()) && Contains("could not prove it holds the shared key"));
    CHECK_THAT(log.text(), Contains("connecting to rank 0") && Contains("could not prove"));
    t.join();
  }
  SECTION("one that goes silent after the challenge: bounded by the deadline") {
    std::thread t = fake_acceptor(listener, [](int fd) {
      auto challenge = encode_reply(HelloStatus::challenge);
      Nonce n = random_nonce();
      send_all(fd, challenge.data(), challenge.size(), Deadline::after(2s), "fake");
      send_all(fd, n.data(), n.size(), Deadline::after(2s), "fake");
    });
    auto t0 = Clock::now();
    CHECK_THROWS_AS(dialer.connect(info0, address_bytes(fake), Deadline::after(700ms)), Timeout);
    CHECK(seconds_since(t0) < 2);
    t.join();
  }
}

// ------------------------------------------------------------ the store

TEST_CASE("auth: a store with a key serves clients with the same key", "[auth][store]") {
  AuthKey key("store key");
  auto server = TcpStoreServer::start(service_loop(), loopback(), key);
  auto a = connect_tcp_store(where(*server), Deadline::after(2s), key);
  auto b = connect_tcp_store(where(*server), Deadline::after(2s), AuthKey("store key"));
  a->set("k", std::string_view("v"));
  CHECK(b->get_string("k", 1s) == "v");
  CHECK(b->add("n", 5) == 5);
}

TEST_CASE("auth: a reopened store connection authenticates again", "[auth][store]") {
  AuthKey key("store key");
  auto server = TcpStoreServer::start(service_loop(), loopback(), key);
  std::uint16_t port = server->address().port();
  auto store = connect_tcp_store(where(*server), Deadline::after(2s), key);
  store->set("before", std::string_view("1"));
  server.reset();
  CHECK_THROWS_AS(store->get("before", 100ms), PeerLost);
  SECTION("by a store with the same key") {
    server = TcpStoreServer::start(service_loop(), loopback(port), key);
    store->set("after", std::string_view("2"));
    CHECK(store->get_string("after", 1s) == "2");
  }
  SECTION("by a store with another key: refused") {
    server = TcpStoreServer::start(service_loop(), loopback(port), AuthKey("impostor"));
    CHECK_THAT(thrown<ProtocolMismatch>([&] { store->set("after", std::string_view("2")); }),
               Contains("authentication failed"));
  }
}

TEST_CASE("auth: a store client with the wrong key is refused, logged with its address, told why", "[auth][store]") {
  auto server = TcpStoreServer::start(service_loop(), loopback(), AuthKey("R1ght-K3y"));
  std::string address = "127.0.0.1:" + std::to_string(server->address().port());
  LogCapture log;
  auto t0 = Clock::now();
  std::string what =
      thrown<ProtocolMismatch>([&] { connect_tcp_store(where(*server), Deadline::after(2s), AuthKey("Wr0ng-K3y")); });
  CHECK(seconds_since(t0) < 2);
  CHECK_THAT(what, Contains("braid store at " + address) && Contains("authentication failed"));
  std::string logged = log.text();
  CHECK_THAT(logged, Contains("braid store at " + address + ": refused the client at 127.0.0.1:") &&
                         Contains("authentication failed"));
  CHECK(logged.find("K3y") == std::string::npos);
  CHECK(what.find("K3y") == std::string::npos);
  // The store still serves the right key.
  auto good = connect_tcp_store(where(*server), Deadline::after(2s), AuthKey("R1ght-K3y"));
  good->set("k", std::string_view("v"));
}

TEST_CASE("auth: a store and a client must agree whether there is a key", "[auth][store]") {
  LogCapture log;
  SECTION("the store has a key, the client none") {
    auto server = TcpStoreServer::start(service_loop(), loopback(), AuthKey("k"));
    std::string what = thrown<ProtocolMismatch>([&] { connect_tcp_store(where(*server), Deadline::after(2s)); });
    CHECK_THAT(what, Contains(server->address().to_string()) && Contains("authentication required"));
    CHECK_THAT(log.text(), Contains("refused the client at 127.0.0.1:") && Contains("authentication required"));
  }
  SECTION("the client has a key, the store none") {
    auto server = TcpStoreServer::start(service_loop(), loopback());
    std::string what =
        thrown<ProtocolMismatch>([&] { connect_tcp_store(where(*server), Deadline::after(2s), AuthKey("k")); });
    CHECK_THAT(what, Contains(server->address().to_string()) && Contains("this store has no key"));
    CHECK_THAT(log.text(), Contains("refused the client at 127.0.0.1:") && Contains("this store has no key"));
  }
}

TEST_CASE("auth: the store refuses replayed and garbage proofs, and requests before the proof", "[auth][store]") {
  AuthKey key("k");
  auto server = TcpStoreServer::start(service_loop(), loopback(), key);
  LogCapture log;
  Bytes hello = wire::encode(wire::Request{.op = wire::Op::hello, .auth = true});
  auto challenge = [&](Fd& fd) {
    fd = connect_tcp({server->address()}, Deadline::after(2s), "raw client");
    send_frame(fd.get(), hello);
    wire::Reply r = read_store_reply(fd.get());
    REQUIRE(r.op == wire::Op::hello);
    REQUIRE(r.status == wire::Status::ok);
    REQUIRE(r.challenge);
    return r.nonce;
  };
  // A legitimate exchange, recorded.
  Fd first;
  Nonce n1 = challenge(first);
  wire::Request auth{.op = wire::Op::auth, .nonce = random_nonce()};
  auth.proof = handshake_proof(key, AuthRole::client, wire::kAuthProtocol, auth.nonce, n1, hello);
  Bytes recorded = wire::encode(auth);
  send_frame(first.get(), recorded);
  wire::Reply ok = read_store_reply(first.get());
  REQUIRE(ok.status == wire::Status::ok);
  CHECK(same_digest(ok.proof, handshake_proof(key, AuthRole::server, wire::kAuthProtocol, auth.nonce, n1, hello)));
  send_frame(first.get(), wire::encode(wire::Request{.op = wire::Op::set, .keys = {"k"}, .value = bytes_of("v")}));
  CHECK(read_store_reply(first.get()).status == wire::Status::ok);

  SECTION("a replay") {
    Fd again;
    Nonce n2 = challenge(again);
    CHECK(n2 != n1);
    std::string from = local_address(again.get()).to_string();
    send_frame(again.get(), recorded);
    wire::Reply refused = read_store_reply(again.get());
    CHECK(refused.status == wire::Status::auth_failed);
    CHECK_THAT(refused.message, Contains("authentication failed"));
    CHECK(closed_by_peer(again.get(), Deadline::after(2s)));
    CHECK_THAT(log.text(), Contains("refused the client at " + from + ": authentication failed"));
  }
  SECTION("garbage") {
    Fd noise;
    challenge(noise);
    wire::Request bad{.op = wire::Op::auth, .nonce = random_nonce(), .proof = random_nonce()};
    send_frame(noise.get(), wire::encode(bad));
    CHECK(read_store_reply(noise.get()).status == wire::Status::auth_failed);
    CHECK(closed_by_peer(noise.get(), Deadline::after(2s)));
  }
  SECTION("a request in place of the proof") {
    Fd rude;
    challenge(rude);
    send_frame(rude.get(), wire::encode(wire::Request{.op = wire::Op::get, .keys = {"k"}}));
    wire::Reply refused = read_store_reply(rude.get());
    CHECK(refused.status == wire::Status::protocol_error);
    CHECK(closed_by_peer(rude.get(), Deadline::after(2s)));
  }
  // The recorded connection still works; the others never got at the data.
  send_frame(first.get(), wire::encode(wire::Request{.op = wire::Op::get, .keys = {"k"}}));
  CHECK(read_store_reply(first.get()).value == bytes_of("v"));
}

TEST_CASE("auth: a store client refuses a store that cannot prove the key", "[auth][store]") {
  Fd listener = listen_tcp(loopback(), "fake store");
  std::uint16_t port = local_address(listener.get()).port();
  auto fake = [&](bool challenge) {
    return std::thread([&listener, challenge] {
      auto fd = accept_tcp(listener.get(), Deadline::after(5s));
      if (!fd) return;
      try {
        Bytes hello(wire::kHeaderBytes + 1);
        recv_all(fd->get(), hello.data(), hello.size(), Deadline::after(5s), "fake");
        send_frame(fd->get(), wire::encode(wire::Reply{.op = wire::Op::hello, .challenge = challenge,
                                                       .nonce = random_nonce()}));
        if (challenge) {
          Bytes auth(wire::kHeaderBytes + 2 * kNonceBytes);
          recv_all(fd->get(), auth.data(), auth.size(), Deadline::after(5s), "fake");
          send_frame(fd->get(), wire::encode(wire::Reply{.op = wire::Op::auth, .proof = random_nonce()}));
        }
        char c;
        while (true) recv_all(fd->get(), &c, 1, Deadline::after(5s), "fake");
      } catch (const Error&) {
      }
    });
  };
  std::string address = "braid store at 127.0.0.1:" + std::to_string(port);
  SECTION("one that lets a keyed client in without a challenge") {
    std::thread t = fake(false);
    CHECK_THAT(thrown<ProtocolMismatch>(
                   [&] { connect_tcp_store(HostPort{"127.0.0.1", port}, Deadline::after(2s), AuthKey("k")); }),
               Contains(address) && Contains("without authenticating"));
    t.join();
  }
  SECTION("one that answers the proof with a bogus proof of its own") {
    std::thread t = fake(true);
    CHECK_THAT(thrown<ProtocolMismatch>(
                   [&] { connect_tcp_store(HostPort{"127.0.0.1", port}, Deadline::after(2s), AuthKey("k")); }),
               Contains(address) && Contains("could not prove it holds the shared key"));
    t.join();
  }
}

// ------------------------------------------------------------ a whole communicator

TEST_CASE("auth: a communicator whose ranks share BRAID_AUTH_KEY works, split included", "[auth][comm]") {
  // Its store, its data connections and the split's connections all run the
  // authenticated handshake (the ranks are threads, so they share the key).
  EnvVar key("BRAID_AUTH_KEY", "job secret");
  EnvVar no_file("BRAID_AUTH_KEY_FILE", nullptr);
  Fd port_holder = listen_tcp(loopback(), "test");
  std::string addr = "127.0.0.1:" + std::to_string(local_address(port_holder.get()).port());
  port_holder.reset();
  std::vector<std::future<std::vector<float>>> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(std::async(std::launch::async, [=] {
      CommOptions o;
      o.timeout = 5000ms;
      Comm comm = Comm::init(addr, r, 3, o);
      std::vector<float> v = {float(r), 1.0f};
      comm.all_reduce(std::span(v), ReduceOp::sum);
      Comm reversed = comm.split(0, -r);
      reversed.all_reduce(std::span(v), ReduceOp::sum);
      return v;
    }));
  for (auto& rank : ranks) CHECK(rank.get() == std::vector<float>{9.0f, 9.0f});
}
