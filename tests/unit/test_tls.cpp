// TLS end to end (BRAID_TLS): certificates made for each run by
// scripts/make-test-certs.sh (a CA, rank certificates, and an impostor from
// another CA); the settings and their errors; TCP transports that connect and
// move data both ways over TLS, striped, with a few MiB of recv_reduce and
// socket buffers small enough that OpenSSL must wait for the socket; refusals
// of a foreign certificate and of TLS on one side only, on both sides and in
// bounded time; the store over TLS; the abort notice through TLS; and a
// communicator of 3 ranks (threads) running collectives with BRAID_TLS=1.
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/store.hpp"
#include "braid/braid.hpp"
#include "braid/types.hpp"
#include "core/settings.hpp"
#include "core/socket.hpp"
#include "core/text.hpp"
#include "core/tls.hpp"
#include "transport/tcp/tcp_link.hpp"
#include "tests/unit/tcp_rank.hpp"
#include "loopback_fixtures.hpp"

using namespace braid;
using namespace braid::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// The certificates of this test run, made once by the script in a temporary
// directory that is removed at exit.
class Certs {
 public:
  static const Certs& get() {
    static Certs certs;
    return certs;
  }
  std::string path(std::string_view name) const { return cat(dir_, "/", name); }
  TlsFiles files(std::string_view leaf, std::string_view ca = "ca") const {
    return TlsFiles{path(cat(leaf, ".pem")), path(cat(leaf, ".key")), path(cat(ca, ".pem"))};
  }
  TlsContext context(std::string_view leaf, std::string_view ca = "ca") const { return TlsContext::load(files(leaf, ca)); }
  ~Certs() { std::filesystem::remove_all(dir_); }

 private:
  Certs() {
    char name[] = "/tmp/braid-tls-test-XXXXXX";
    if (::mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = name;
    std::string command = cat(BRAID_SOURCE_ROOT, "/scripts/make-test-certs.sh ", dir_, " 2");
    if (std::system(command.c_str()) != 0) throw std::runtime_error("scripts/make-test-certs.sh failed: " + command);
  }
  std::string dir_;
};

TcpOptions tcp_options(int rank, const CommId& id, TlsContext tls, Millis timeout = Millis(3000)) {
  TcpOptions o = loopback_tcp_options(rank, 2, id, timeout);
  o.tls = std::move(tls);
  return o;
}

struct LinkPair {
  std::unique_ptr<Link> low, high;  // rank 0's link to rank 1, and rank 1's to rank 0
};

// Connects two transports (rank 1 dials rank 0).
LinkPair connect_pair(TcpRank& low, TcpRank& high, Millis timeout = Millis(3000)) {
  RankInfo info0 = RankInfo::local(0), info1 = RankInfo::local(1);
  auto dialer = std::async(std::launch::async, [&] {
    return high.connect(info0, low.local_address(), Deadline::after(timeout));
  });
  LinkPair pair;
  pair.low = low.connect(info1, high.local_address(), Deadline::after(timeout));
  pair.high = dialer.get();
  return pair;
}

// Drives both links until every request is done or 20 s pass.
void drive(Link& a, Link& b, const std::vector<Request>& requests) { drive_links(a, b, requests, 20s); }

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> out(bytes);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return out;
}

// Runs the accepting side (rank 0) on another thread and the dialing side here;
// returns both errors (the acceptor's is a Timeout naming why).
struct Refusal {
  std::string dialer, acceptor;
  double seconds;
};
Refusal refuse_pair(TcpRank& low, TcpRank& high, Millis timeout = 1500ms) {
  RankInfo info0 = RankInfo::local(0), info1 = RankInfo::local(1);
  auto t0 = Clock::now();
  auto acceptor = std::async(std::launch::async, [&] {
    return thrown<Timeout>([&] { low.connect(info1, high.local_address(), Deadline::after(timeout)); });
  });
  std::string dialer = thrown<Error>([&] { high.connect(info0, low.local_address(), Deadline::after(timeout)); });
  std::string accepted = acceptor.get();
  return Refusal{dialer, accepted, seconds_since(t0)};
}

HostPort where(const TcpStoreServer& server) { return HostPort{"127.0.0.1", server.address().port()}; }

std::string free_store_addr() {
  Fd fd = listen_tcp(loopback(), "test");
  return "127.0.0.1:" + std::to_string(local_address(fd.get()).port());
}

// Rank threads report through exceptions (Catch2 assertions are not
// thread-safe); the test's thread rethrows them.
void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

}  // namespace

// ------------------------------------------------------------ settings and files

TEST_CASE("tls: the settings load the files and name the one that is wrong", "[tls][settings]") {
  const Certs& certs = Certs::get();
  EnvVar on("BRAID_TLS", nullptr), cert("BRAID_TLS_CERT", nullptr), key("BRAID_TLS_KEY", nullptr),
      ca("BRAID_TLS_CA", nullptr);
  SECTION("off by default") { CHECK_FALSE(Settings::from_env().tls.enabled()); }
  SECTION("on with all three files") {
    EnvVar on1("BRAID_TLS", "1"), c("BRAID_TLS_CERT", certs.path("rank0.pem")),
        k("BRAID_TLS_KEY", certs.path("rank0.key")), a("BRAID_TLS_CA", certs.path("ca.pem"));
    TlsContext tls = Settings::from_env().tls;
    REQUIRE(tls.enabled());
    CHECK_THAT(tls.subject(), Contains("braid rank 0"));
  }
  SECTION("on without the files says which are missing") {
    EnvVar on1("BRAID_TLS", "1"), c("BRAID_TLS_CERT", certs.path("rank0.pem"));
    CHECK_THAT(thrown<InvalidArgument>([] { Settings::from_env(); }),
               Contains("BRAID_TLS_KEY") && Contains("BRAID_TLS_CA") && Contains("not set"));
  }
  SECTION("files without BRAID_TLS=1 are an error, BRAID_TLS=0 turns it off") {
    EnvVar c("BRAID_TLS_CERT", certs.path("rank0.pem"));
    CHECK_THAT(thrown<InvalidArgument>([] { Settings::from_env(); }), Contains("BRAID_TLS_CERT set but BRAID_TLS is not"));
    EnvVar off("BRAID_TLS", "0");
    CHECK_FALSE(Settings::from_env().tls.enabled());
  }
  SECTION("a value that is not 0 or 1") {
    EnvVar bad("BRAID_TLS", "maybe");
    CHECK_THAT(thrown<InvalidArgument>([] { Settings::from_env(); }), Contains("BRAID_TLS='maybe'"));
  }
  SECTION("a missing certificate file names the path") {
    std::string missing = certs.path("no-such-cert.pem");
    EnvVar on1("BRAID_TLS", "1"), c("BRAID_TLS_CERT", missing), k("BRAID_TLS_KEY", certs.path("rank0.key")),
        a("BRAID_TLS_CA", certs.path("ca.pem"));
    CHECK_THAT(thrown<InvalidArgument>([] { Settings::from_env(); }),
               Contains("BRAID_TLS_CERT='" + missing + "'") && Contains("No such file"));
  }
  SECTION("a missing key or CA file names the path") {
    std::string missing = certs.path("nothing-here");
    auto files = certs.files("rank0");
    files.key = missing;
    CHECK_THAT(thrown<InvalidArgument>([&] { TlsContext::load(files); }), Contains("BRAID_TLS_KEY='" + missing + "'"));
    files = certs.files("rank0");
    files.ca = missing;
    CHECK_THAT(thrown<InvalidArgument>([&] { TlsContext::load(files); }), Contains("BRAID_TLS_CA='" + missing + "'"));
  }
  SECTION("a file that is not PEM names the path") {
    auto files = certs.files("rank0");
    files.cert = certs.path("rank0.key");  // a key where the certificate belongs
    CHECK_THAT(thrown<InvalidArgument>([&] { TlsContext::load(files); }),
               Contains("BRAID_TLS_CERT='" + files.cert + "'") && Contains("not a PEM certificate"));
    files = certs.files("rank0");
    files.key = certs.path("rank0.pem");  // a certificate where the key belongs
    CHECK_THAT(thrown<InvalidArgument>([&] { TlsContext::load(files); }),
               Contains("BRAID_TLS_KEY='" + files.key + "'") && Contains("not a PEM private key"));
    files = certs.files("rank0");
    files.ca = certs.path("rank0.key");
    CHECK_THAT(thrown<InvalidArgument>([&] { TlsContext::load(files); }), Contains("BRAID_TLS_CA='" + files.ca + "'"));
  }
  SECTION("a key that belongs to another certificate") {
    auto files = certs.files("rank0");
    files.key = certs.path("rank1.key");
    CHECK_THAT(thrown<InvalidArgument>([&] { TlsContext::load(files); }),
               Contains(files.key) && Contains("does not belong to the certificate") && Contains(files.cert));
  }
  SECTION("an unreadable key names the path") {
    if (::geteuid() == 0) return;  // root reads anything
    std::string copy = certs.path("unreadable.key");
    std::filesystem::copy_file(certs.path("rank0.key"), copy, std::filesystem::copy_options::overwrite_existing);
    ::chmod(copy.c_str(), 0);
    auto files = certs.files("rank0");
    files.key = copy;
    CHECK_THAT(thrown<InvalidArgument>([&] { TlsContext::load(files); }), Contains(copy) && Contains("ermission"));
  }
}

// ------------------------------------------------------------ the TCP transport

TEST_CASE("tls: transports connect and move data both ways, striped, with recv_reduce", "[tls][tcp]") {
  const Certs& certs = Certs::get();
  CommId id = CommId::random();
  auto o0 = tcp_options(0, id, certs.context("rank0")), o1 = tcp_options(1, id, certs.context("rank1"));
  o0.streams = o1.streams = 2;
  // Small socket buffers: OpenSSL must say "would block" on both reads and writes.
  o0.buffer_bytes = o1.buffer_bytes = 64 * 1024;
  o0.auth_key = o1.auth_key = AuthKey("inside TLS too");
  TcpRank low(o0), high(o1);
  LogCapture log;
  LinkPair links = connect_pair(low, high);
  REQUIRE(links.low->peer() == 1);
  REQUIRE(links.high->peer() == 0);

  // Messages of many sizes each way, around the staging limits and the stripe size.
  std::vector<std::size_t> sizes = {0,     1,     31,    32,     4096,           TcpLink::kTlsInlineBytes,
                                    16385, 65536, 70000, 300000, 3 * 1024 * 1024 + 64};
  std::vector<std::vector<std::byte>> out_up, out_down, in_up, in_down;
  std::vector<Request> requests;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    out_up.push_back(pattern(sizes[i], static_cast<unsigned>(i)));
    out_down.push_back(pattern(sizes[i], static_cast<unsigned>(100 + i)));
    in_up.emplace_back(sizes[i]);
    in_down.emplace_back(sizes[i]);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    Tag tag = make_tag(7, static_cast<std::uint32_t>(i));
    requests.push_back(links.high->send(ConstMemView{out_up[i].data(), sizes[i]}, tag));
    requests.push_back(links.low->send(ConstMemView{out_down[i].data(), sizes[i]}, tag));
    requests.push_back(links.low->recv(MemView{in_up[i].data(), sizes[i]}, tag));
    requests.push_back(links.high->recv(MemView{in_down[i].data(), sizes[i]}, tag));
  }
  // A recv_reduce of 4 MiB of floats each way.
  const std::size_t count = 1 << 20;
  std::vector<float> a(count), b(count), a_in(count), b_in(count);
  std::iota(a.begin(), a.end(), 0.0f);
  for (std::size_t i = 0; i < count; ++i) b[i] = static_cast<float>(i % 1000) * 0.5f;
  std::vector<float> sum_low(a), sum_high(b);  // reduced in place
  Tag reduce_tag = make_tag(8, 0);
  const std::size_t fbytes = count * sizeof(float);
  requests.push_back(links.low->send(ConstMemView{reinterpret_cast<const std::byte*>(a.data()), fbytes}, reduce_tag));
  requests.push_back(links.high->send(ConstMemView{reinterpret_cast<const std::byte*>(b.data()), fbytes}, reduce_tag));
  requests.push_back(links.low->recv_reduce(MemView{reinterpret_cast<std::byte*>(sum_low.data()), fbytes},
                                            ConstMemView{reinterpret_cast<const std::byte*>(sum_low.data()), fbytes},
                                            DataType::f32, ReduceOp::sum, reduce_tag));
  requests.push_back(links.high->recv_reduce(MemView{reinterpret_cast<std::byte*>(sum_high.data()), fbytes},
                                             ConstMemView{reinterpret_cast<const std::byte*>(sum_high.data()), fbytes},
                                             DataType::f32, ReduceOp::sum, reduce_tag));
  drive(*links.low, *links.high, requests);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("message " << i << " of " << sizes[i] << " bytes");
    CHECK(in_up[i] == out_up[i]);
    CHECK(in_down[i] == out_down[i]);
  }
  bool sums_right = true;
  for (std::size_t i = 0; i < count; ++i) sums_right = sums_right && sum_low[i] == a[i] + b[i] && sum_high[i] == a[i] + b[i];
  CHECK(sums_right);
  CHECK_FALSE(links.low->busy());
  CHECK_FALSE(links.high->busy());
  CHECK(log.text().find("refused") == std::string::npos);
}

TEST_CASE("tls: the bytes on the wire are not the bytes sent", "[tls][tcp]") {
  // A TLS link over a socket pair whose other end is read raw: the frame
  // header and payload must not appear in clear.
  const Certs& certs = Certs::get();
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  Fd client_fd(fds[0]), server_fd(fds[1]);
  TlsContext c0 = certs.context("rank0"), c1 = certs.context("rank1");
  auto server = std::async(std::launch::async, [&] {
    auto session = std::make_unique<TlsSession>(c0, server_fd.get(), TlsRole::server);
    session->handshake(Deadline::after(3s), "test server");
    return session;
  });
  auto client = std::make_unique<TlsSession>(c1, client_fd.get(), TlsRole::client);
  client->handshake(Deadline::after(3s), "test client");
  auto server_session = server.get();
  CHECK(client->protocol() == "TLSv1.3");
  std::vector<Socket> sockets;
  sockets.emplace_back(std::move(client_fd), std::move(client));
  TcpLink link(1, 0, "raw peer", std::move(sockets));
  std::string secret = "a payload that must not be readable on the wire";
  auto request = link.send(ConstMemView{reinterpret_cast<const std::byte*>(secret.data()), secret.size()}, make_tag(1, 0));
  for (int i = 0; i < 100 && !request->done(); ++i) link.progress();
  REQUIRE(request->done());
  std::string raw(4096, '\0');
  ssize_t n = ::recv(server_fd.get(), raw.data(), raw.size(), MSG_DONTWAIT);
  REQUIRE(n > 0);
  raw.resize(static_cast<std::size_t>(n));
  CHECK(raw.find("must not be readable") == std::string::npos);
  CHECK(static_cast<std::size_t>(n) > secret.size() + 32);  // frame header + payload + TLS record overhead
}

TEST_CASE("tls: a certificate from another CA is refused on both sides", "[tls][tcp]") {
  const Certs& certs = Certs::get();
  CommId id = CommId::random();
  LogCapture log;
  SECTION("the dialing rank holds the foreign certificate") {
    TcpRank low(tcp_options(0, id, certs.context("rank0"), 1500ms));
    TcpRank high(tcp_options(1, id, certs.context("impostor"), 1500ms));
    Refusal r = refuse_pair(low, high);
    CHECK(r.seconds < 6);
    CHECK_THAT(r.dialer, Contains("rank 1: connecting to rank 0") && Contains(low.listening().to_string()) &&
                             Contains("refused this process's certificate"));
    CHECK_THAT(r.acceptor, Contains("rank 1 did not connect") && Contains("impostor") && Contains("is not trusted"));
    // Before a hello the listener knows no rank: it names itself.
    CHECK_THAT(log.text(), Contains("TCP listener " + low.listening().to_string() +
                                    ": refused a connection from 127.0.0.1:") &&
                               Contains("is not trusted"));
  }
  SECTION("the accepting rank holds the foreign certificate") {
    TcpRank low(tcp_options(0, id, certs.context("impostor"), 1500ms));
    TcpRank high(tcp_options(1, id, certs.context("rank1"), 1500ms));
    Refusal r = refuse_pair(low, high);
    CHECK(r.seconds < 6);
    CHECK_THAT(r.dialer, Contains("rank 1: connecting to rank 0") && Contains("impostor") && Contains("is not trusted"));
    CHECK_THAT(r.acceptor, Contains("rank 1 did not connect") && Contains("refused this process's certificate"));
  }
  SECTION("both trust only their own CA") {
    TcpRank low(tcp_options(0, id, certs.context("rank0"), 1500ms));
    TcpRank high(tcp_options(1, id, certs.context("impostor", "other-ca"), 1500ms));
    Refusal r = refuse_pair(low, high);
    CHECK_THAT(r.dialer, Contains("is not trusted") && Contains("braid rank 0"));
    CHECK_THAT(r.acceptor, Contains("rank 1 did not connect") && Contains("refused"));
  }
}

TEST_CASE("tls: TLS on one side only is refused clearly on both sides", "[tls][tcp]") {
  const Certs& certs = Certs::get();
  CommId id = CommId::random();
  LogCapture log;
  SECTION("the accepting rank runs TLS, the dialing rank does not") {
    TcpRank low(tcp_options(0, id, certs.context("rank0"), 1500ms));
    TcpRank high(tcp_options(1, id, TlsContext{}, 1500ms));
    Refusal r = refuse_pair(low, high);
    CHECK(r.seconds < 6);
    CHECK_THAT(r.dialer, Contains("rank 1: connecting to rank 0") && Contains("TLS required"));
    CHECK_THAT(r.acceptor, Contains("rank 1 did not connect") && Contains("claiming to be it") &&
                               Contains("TLS required"));
    CHECK_THAT(log.text(), Contains("claiming rank 1: TLS required"));
  }
  SECTION("the dialing rank runs TLS, the accepting rank does not") {
    TcpRank low(tcp_options(0, id, TlsContext{}, 1500ms));
    TcpRank high(tcp_options(1, id, certs.context("rank1"), 1500ms));
    Refusal r = refuse_pair(low, high);
    CHECK(r.seconds < 6);
    CHECK_THAT(r.dialer, Contains("rank 1: connecting to rank 0") && Contains("BRAID_TLS=1"));
    CHECK_THAT(r.acceptor, Contains("rank 1 did not connect") && Contains("opened a TLS handshake") &&
                               Contains("runs without TLS"));
  }
}

TEST_CASE("tls: an abort notice crosses TLS", "[tls][tcp]") {
  const Certs& certs = Certs::get();
  CommId id = CommId::random();
  TcpRank low(tcp_options(0, id, certs.context("rank0"))), high(tcp_options(1, id, certs.context("rank1")));
  LinkPair links = connect_pair(low, high);
  std::vector<std::byte> in(100);
  auto pending = links.low->recv(MemView{in.data(), in.size()}, make_tag(3, 0));
  links.high->abort("rank 1 gave up: testing the notice");
  auto deadline = Deadline::after(3s);
  while (!pending->done() && !deadline.expired()) links.low->progress();
  REQUIRE(pending->done());
  CHECK_THAT(thrown<PeerLost>([&] { pending->rethrow_if_failed(); }), Contains("testing the notice"));
}

// ------------------------------------------------------------ the store

TEST_CASE("tls: the store works over TLS and refuses clients without it", "[tls][store]") {
  const Certs& certs = Certs::get();
  LogCapture log;
  auto server = TcpStoreServer::start(service_loop(), loopback(), AuthKey("store key"), certs.context("rank0"));
  SECTION("set, get, add and wait, with a value larger than a TLS record") {
    auto a = connect_tcp_store(where(*server), Deadline::after(3s), AuthKey("store key"), certs.context("rank0"));
    auto b = connect_tcp_store(where(*server), Deadline::after(3s), AuthKey("store key"), certs.context("rank1"));
    auto big = pattern(3 * 1024 * 1024 + 7, 5);
    auto waiter = std::async(std::launch::async, [&] { return b->get("big", 5000ms); });
    a->set("big", big);
    CHECK(waiter.get() == big);
    CHECK(a->add("n", 2) == 2);
    CHECK(b->add("n", 3) == 5);
    b->set("k", std::string_view("v"));
    std::vector<std::string> keys = {"k", "n", "big"};
    a->wait(keys, 1000ms);
    CHECK(a->get_string("k", 1000ms) == "v");
  }
  SECTION("a client without TLS is told the store runs TLS") {
    std::string what = thrown<ProtocolMismatch>(
        [&] { connect_tcp_store(where(*server), Deadline::after(3s), AuthKey("store key")); });
    CHECK_THAT(what, Contains("braid store at 127.0.0.1:") && Contains("this store runs TLS"));
    CHECK_THAT(log.text(), Contains("refused the client at 127.0.0.1:") && Contains("this store runs TLS"));
  }
  SECTION("a client with a foreign certificate is refused on both sides") {
    std::string what = thrown<Error>([&] {
      auto s = connect_tcp_store(where(*server), Deadline::after(3s), AuthKey("store key"), certs.context("impostor"));
      s->set("x", std::string_view("y"));
    });
    CHECK_THAT(what, Contains("braid store at 127.0.0.1:") && Contains("refused this process's certificate"));
    auto t0 = Clock::now();
    while (log.text().find("is not trusted") == std::string::npos && seconds_since(t0) < 3)
      std::this_thread::sleep_for(10ms);
    CHECK_THAT(log.text(), Contains("refused the client at 127.0.0.1:") && Contains("impostor") &&
                               Contains("is not trusted"));
  }
  SECTION("a TLS client at a store without TLS") {
    auto plain = TcpStoreServer::start(service_loop(), loopback(), AuthKey("store key"));
    std::string what = thrown<ProtocolMismatch>([&] {
      connect_tcp_store(where(*plain), Deadline::after(3s), AuthKey("store key"), certs.context("rank0"));
    });
    CHECK_THAT(what, Contains("braid store at 127.0.0.1:") && Contains("does not speak TLS"));
    auto t0 = Clock::now();
    while (log.text().find("runs without TLS") == std::string::npos && seconds_since(t0) < 3)
      std::this_thread::sleep_for(10ms);
    CHECK_THAT(log.text(), Contains("opened a TLS handshake but this store runs without TLS"));
  }
}

// ------------------------------------------------------------ a communicator

TEST_CASE("tls: a communicator of 3 ranks runs collectives over TLS", "[tls][comm]") {
  const Certs& certs = Certs::get();
  // One certificate serves every rank; the threads share the environment.
  EnvVar on("BRAID_TLS", "1"), cert("BRAID_TLS_CERT", certs.path("rank0.pem")),
      key("BRAID_TLS_KEY", certs.path("rank0.key")), ca("BRAID_TLS_CA", certs.path("ca.pem")),
      streams("BRAID_TCP_STREAMS", "2"), debug("BRAID_DEBUG", "INFO"), transport("BRAID_TRANSPORT", "tcp");
  LogCapture log;
  const int n = 3;
  std::string addr = free_store_addr();
  CommOptions options;
  options.timeout = 20000ms;
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < n; ++r)
    ranks.push_back(std::async(std::launch::async, [=] {
      Comm comm = Comm::init(addr, r, n, options);
      expect(comm.describe().find("tls on") != std::string::npos, "describe() says tls on: " + comm.describe());
      for (std::size_t count : {std::size_t{1000}, std::size_t{1} << 20}) {  // small, and 4 MiB (the ring)
        std::vector<std::int32_t> v(count);
        std::iota(v.begin(), v.end(), comm.rank());
        comm.all_reduce(std::span(v), ReduceOp::sum);
        for (std::size_t i = 0; i < count; ++i)
          expect(v[i] == n * static_cast<std::int32_t>(i) + n * (n - 1) / 2, cat("all_reduce of ", count, " at ", i));
        std::vector<double> w(count, comm.rank() == 1 ? 2.5 : 0.0);
        comm.broadcast(std::span(w), 1);
        for (double x : w) expect(x == 2.5, cat("broadcast of ", count));
      }
      comm.barrier();
    }));
  for (auto& f : ranks) f.get();
  // The store and every link (2 per rank) ran TLS, not just the settings.
  std::string logged = log.text();
  CHECK_THAT(logged, Contains("(over TLS)"));
  std::size_t links = 0;
  for (auto at = logged.find("TCP stream(s) (TLSv1.3)"); at != std::string::npos;
       at = logged.find("TCP stream(s) (TLSv1.3)", at + 1))
    ++links;
  CHECK(links == 6);
}

TEST_CASE("tls: a rank with a foreign certificate cannot join, and nobody hangs", "[tls][comm]") {
  const Certs& certs = Certs::get();
  EnvVar on("BRAID_TLS", "1"), cert("BRAID_TLS_CERT", certs.path("rank0.pem")),
      key("BRAID_TLS_KEY", certs.path("rank0.key")), ca("BRAID_TLS_CA", certs.path("ca.pem"));
  std::string addr = free_store_addr();
  CommOptions options;
  options.timeout = 2000ms;
  LogCapture log;
  auto t0 = Clock::now();
  // Rank 0 (hosting the store) has the job's certificate. Rank 1 connects to
  // the store with a foreign one; Settings are per process, so rank 1 goes
  // through the store client directly with its own context.
  auto rank0 = std::async(std::launch::async, [=] { return thrown<Error>([&] { Comm::init(addr, 0, 2, options); }); });
  std::this_thread::sleep_for(100ms);
  std::string rank1 = thrown<Error>([&] {
    auto hp = parse_host_port(addr, "test");
    auto store = connect_tcp_store(hp, Deadline::after(2s), AuthKey{}, certs.context("impostor"));
    store->set("x", std::string_view("y"));
  });
  std::string rank0_error = rank0.get();
  CHECK(seconds_since(t0) < 10);
  CHECK_THAT(rank1, Contains("refused this process's certificate"));
  CHECK_THAT(rank0_error, Contains("did not join") || Contains("timed out") || Contains("within"));
}
