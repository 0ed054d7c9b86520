// The store serves one job: a client of another job is refused at once, a
// sealed store (its communicator formed) is retried until the deadline or
// until a new store takes the address over, a client refused for its key has
// its claimed rank recorded for the others, and the bounded calls (try_set,
// peek) never hold their caller up when the store is gone.
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "bootstrap/store.hpp"
#include "braid/types.hpp"
#include "core/socket.hpp"
#include "loopback_fixtures.hpp"

using namespace braid;
using namespace braid::test;
using namespace std::chrono_literals;

namespace {

HostPort where(const TcpStoreServer& server) { return HostPort{"127.0.0.1", server.address().port()}; }

std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

}  // namespace

TEST_CASE("store jobs: a client of another job is refused at once, naming both causes", "[store]") {
  auto server = TcpStoreServer::start(service_loop(), loopback(), {}, {}, "job-A");
  auto same = connect_tcp_store(where(*server), Deadline::after(2s), {}, {}, "job-A", 1);
  same->set("k", "v");
  auto t0 = Clock::now();
  std::string what = thrown<ProtocolMismatch>([&] { connect_tcp_store(where(*server), Deadline::after(5s), {}, {}, "job-B", 1); });
  CHECK(seconds_since(t0) < 1.0);
  CHECK_THAT(what, Catch::Contains("another job") && Catch::Contains("job-B") && Catch::Contains("BRAID_JOB_ID"));
  // No job id at a store that has one is another job too.
  CHECK_THAT(thrown<ProtocolMismatch>([&] { connect_tcp_store(where(*server), Deadline::after(2s)); }),
             Catch::Contains("another job") && Catch::Contains("(none)"));
  CHECK(same->get_string("k", 1s) == "v");
}

TEST_CASE("store jobs: a sealed store is retried until the deadline, then named", "[store]") {
  auto server = TcpStoreServer::start(service_loop(), loopback(), {}, {}, "");
  auto member = connect_tcp_store(where(*server), Deadline::after(2s), {}, {}, "", 0);
  server->seal();
  // Those connected go on.
  member->set("still", "works");
  CHECK(member->get_string("still", 1s) == "works");
  auto t0 = Clock::now();
  std::string what = thrown<Timeout>([&] { connect_tcp_store(where(*server), Deadline::after(600ms), {}, {}, "", 1); });
  CHECK(seconds_since(t0) >= 0.5);
  CHECK(seconds_since(t0) < 3.0);
  CHECK_THAT(what, Catch::Contains("already formed") && Catch::Contains("restarted") &&
                       Catch::Contains("retried until the timeout"));
}

TEST_CASE("store jobs: a client that finds a sealed store joins the next one at that address", "[store]") {
  auto old_store = TcpStoreServer::start(service_loop(), loopback(), {}, {}, "");
  const std::uint16_t port = old_store->address().port();
  old_store->seal();
  auto client = std::async(std::launch::async, [&] {
    auto s = connect_tcp_store(HostPort{"127.0.0.1", port}, Deadline::after(10s), {}, {}, "", 1);
    return s->get_string("generation", 5s);
  });
  std::this_thread::sleep_for(200ms);
  old_store.reset();
  std::unique_ptr<TcpStoreServer> next;
  for (int i = 0; i < 100 && !next; ++i) {
    try {
      next = TcpStoreServer::start(service_loop(), loopback(port), {}, {}, "");
    } catch (const SystemError&) {
      std::this_thread::sleep_for(20ms);  // the old socket may linger a moment
    }
  }
  REQUIRE(next);
  connect_tcp_store(where(*next), Deadline::after(2s))->set("generation", "next");
  REQUIRE(client.wait_for(10s) == std::future_status::ready);
  CHECK(client.get() == "next");
}

TEST_CASE("store jobs: a client refused for its key is recorded under the rank it claimed", "[store]") {
  auto server = TcpStoreServer::start(service_loop(), loopback(), AuthKey("right key"), {}, "job-K");
  auto member = connect_tcp_store(where(*server), Deadline::after(2s), AuthKey("right key"), {}, "job-K", 0);
  CHECK_THAT(thrown<ProtocolMismatch>(
                 [&] { connect_tcp_store(where(*server), Deadline::after(2s), AuthKey("wrong key"), {}, "job-K", 2); }),
             Catch::Contains("authentication"));
  const std::string scope = job_scope("job-K");
  CHECK(member->add(scope + "refusals", 0) == 1);
  std::string entry = member->get_string(scope + "refusal/1", 1s);
  CHECK_THAT(entry, Catch::StartsWith("rank 2: ") && Catch::Contains("127.0.0.1:") && Catch::Contains("refused"));
  // A stranger of another job with a wrong key claims nothing here.
  CHECK_THROWS(connect_tcp_store(where(*server), Deadline::after(2s), AuthKey("wrong key"), {}, "job-Z", 3));
  CHECK(member->add(scope + "refusals", 0) == 1);
}

TEST_CASE("store jobs: bounded calls give up quickly when the store is gone", "[store]") {
  auto server = TcpStoreServer::start(service_loop(), loopback(), {}, {}, "");
  auto client = connect_tcp_store(where(*server), Deadline::after(2s), {}, {}, "", 0);
  CHECK(client->try_set("notice", bytes_of("bye"), 200ms));
  CHECK(client->peek("notice", 200ms).has_value());
  CHECK_FALSE(client->peek("absent", 200ms).has_value());
  server.reset();
  auto t0 = Clock::now();
  CHECK_FALSE(client->try_set("notice", bytes_of("again"), 100ms));
  CHECK_THROWS_AS(client->peek("notice", 100ms), Error);
  CHECK(seconds_since(t0) < 1.0);
}

TEST_CASE("store jobs: an elastic job's sealed store lets in a process joining as no rank, and only that", "[store]") {
  auto server = TcpStoreServer::start(service_loop(), loopback(), {}, {}, "job-E");
  auto member = connect_tcp_store(where(*server), Deadline::after(2s), {}, {}, "job-E", 0, 2);
  server->seal(Bytes{std::byte{1}, std::byte{2}});
  // Not elastic yet: a joiner is refused as too late, like anyone.
  CHECK_THAT(thrown<Timeout>([&] { connect_tcp_store(where(*server), Deadline::after(400ms), {}, {}, "job-E"); }),
             Catch::Contains("already formed"));
  server->admit_joiners();
  auto joiner = connect_tcp_store(where(*server), Deadline::after(2s), {}, {}, "job-E");
  joiner->set("elastic/arrival/1", "me");
  CHECK(member->get_string("elastic/arrival/1", 1s) == "me");
  // A rank claimed anew, or another job, is still refused.
  CHECK_THAT(thrown<Timeout>([&] { connect_tcp_store(where(*server), Deadline::after(400ms), {}, {}, "job-E", 1, 2); }),
             Catch::Contains("already formed"));
  CHECK_THAT(thrown<ProtocolMismatch>([&] { connect_tcp_store(where(*server), Deadline::after(2s), {}, {}, "job-F"); }),
             Catch::Contains("another job"));
}
