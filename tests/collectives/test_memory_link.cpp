// The in-memory fabric itself: ordering, tags and sizes, reductions on
// receive, and the three ways a send can complete.
#include <catch2/catch.hpp>

#include <cstdint>

#include "memory_link.hpp"

namespace braid::test {
namespace {

TEST_CASE("memory link: messages arrive in order with their tags", "[memory_link]") {
  MemoryFabric fabric(2);
  const std::int32_t a[2] = {1, 2}, b[3] = {3, 4, 5};
  std::int32_t x[2] = {}, y[3] = {};
  Request rx = fabric.link(1, 0)->recv(MemView{reinterpret_cast<std::byte*>(x), sizeof x}, make_tag(1, 0));
  Request ry = fabric.link(1, 0)->recv(MemView{reinterpret_cast<std::byte*>(y), sizeof y}, make_tag(1, 1));
  CHECK_FALSE(fabric.link(1, 0)->progress());  // nothing sent yet
  CHECK_FALSE(rx->done());
  Request sa = fabric.link(0, 1)->send(ConstMemView{reinterpret_cast<const std::byte*>(a), sizeof a}, make_tag(1, 0));
  Request sb = fabric.link(0, 1)->send(ConstMemView{reinterpret_cast<const std::byte*>(b), sizeof b}, make_tag(1, 1));
  CHECK(sa->done());  // eager: copied at once
  CHECK(sb->done());
  CHECK(fabric.undelivered() == 2);
  CHECK_FALSE(rx->done());  // receives complete in progress()
  CHECK(fabric.link(1, 0)->busy());
  CHECK(fabric.link(1, 0)->progress());
  REQUIRE(rx->done());
  REQUIRE(ry->done());
  CHECK_FALSE(rx->failed());
  CHECK_FALSE(ry->failed());
  CHECK(x[1] == 2);
  CHECK(y[2] == 5);
  CHECK_FALSE(fabric.link(1, 0)->busy());
  CHECK(fabric.undelivered() == 0);
}

TEST_CASE("memory link: lazy sends stay posted until progress()", "[memory_link]") {
  MemoryFabric fabric(2, {.sends = SendCompletion::lazy});
  std::byte data[4] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}}, got[4] = {};
  Request s = fabric.link(0, 1)->send(ConstMemView{data, 4}, make_tag(0, 7));
  Request r = fabric.link(1, 0)->recv(MemView{got, 4}, make_tag(0, 7));
  CHECK_FALSE(s->done());
  CHECK(fabric.link(0, 1)->busy());
  CHECK_FALSE(fabric.link(1, 0)->progress());  // not delivered yet
  data[3] = std::byte{9};                        // the source is read when the send is delivered
  CHECK(fabric.link(0, 1)->progress());
  CHECK(s->done());
  CHECK(fabric.link(1, 0)->progress());
  REQUIRE(r->done());
  CHECK(got[3] == std::byte{9});
}

TEST_CASE("memory link: rendezvous sends wait for the receiver and watch their source", "[memory_link]") {
  MemoryFabric fabric(2, {.sends = SendCompletion::rendezvous});
  std::byte data[4] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}}, got[4] = {};
  Request s = fabric.link(0, 1)->send(ConstMemView{data, 4}, make_tag(0, 1));
  for (int i = 0; i < 3; ++i) fabric.link(0, 1)->progress();
  CHECK_FALSE(s->done());  // nobody has taken it
  data[0] = std::byte{7};  // still allowed to change: not read yet (the receiver will see it)
  Request r = fabric.link(1, 0)->recv(MemView{got, 4}, make_tag(0, 1));
  CHECK(fabric.link(1, 0)->progress());
  REQUIRE(r->done());
  CHECK(got[0] == std::byte{7});
  CHECK(fabric.undelivered() == 0);
  CHECK(fabric.link(0, 1)->progress());
  CHECK_FALSE(s->done());  // completes on the second progress() after the read
  SECTION("unchanged source") {
    CHECK(fabric.link(0, 1)->progress());
    REQUIRE(s->done());
    CHECK_FALSE(s->failed());
    CHECK_FALSE(fabric.link(0, 1)->busy());
  }
  SECTION("source changed after the read") {
    data[3] = std::byte{0};
    fabric.link(0, 1)->progress();
    REQUIRE(s->failed());
    CHECK_THROWS_WITH(s->rethrow_if_failed(), Catch::Contains("changed the source of op #0 step 1"));
  }
}

TEST_CASE("memory link: receives reduce, and wrong tags or sizes fail with ProtocolMismatch", "[memory_link]") {
  MemoryFabric fabric(3);
  SECTION("recv_reduce combines the local region with the message") {
    const std::int32_t local[3] = {10, 20, 30}, incoming[3] = {1, 2, 3};
    std::int32_t out[3] = {};
    fabric.link(2, 0)->send(ConstMemView{reinterpret_cast<const std::byte*>(incoming), sizeof incoming}, make_tag(0, 5));
    Request r = fabric.link(0, 2)->recv_reduce(MemView{reinterpret_cast<std::byte*>(out), sizeof out},
                                               ConstMemView{reinterpret_cast<const std::byte*>(local), sizeof local},
                                               DataType::i32, ReduceOp::sum, make_tag(0, 5));
    fabric.link(0, 2)->progress();
    REQUIRE(r->done());
    r->rethrow_if_failed();
    CHECK(out[0] == 11);
    CHECK(out[2] == 33);
  }
  SECTION("a different tag") {
    std::byte buf[8] = {};
    fabric.link(1, 2)->send(ConstMemView{buf, 8}, make_tag(4, 2));
    Request r = fabric.link(2, 1)->recv(MemView{buf, 8}, make_tag(4, 3));
    fabric.link(2, 1)->progress();
    REQUIRE(r->failed());
    CHECK_THROWS_AS(r->rethrow_if_failed(), ProtocolMismatch);
    try {
      r->rethrow_if_failed();
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::protocol);
      CHECK_THAT(std::string(e.what()), Catch::Contains(describe_tag(make_tag(4, 2))) && Catch::Contains(describe_tag(make_tag(4, 3))));
    }
  }
  SECTION("a different size") {
    std::byte buf[8] = {};
    fabric.link(1, 2)->send(ConstMemView{buf, 8}, make_tag(0, 9));
    Request r = fabric.link(2, 1)->recv(MemView{buf, 4}, make_tag(0, 9));
    fabric.link(2, 1)->progress();
    REQUIRE(r->failed());
    CHECK_THROWS_AS(r->rethrow_if_failed(), ProtocolMismatch);
  }
  SECTION("unreceived messages are reported") {
    fabric.link(0, 1)->send(ConstMemView{}, make_tag(2, 6));
    CHECK(fabric.undelivered() == 1);
    CHECK_THAT(fabric.describe_undelivered(), Catch::Contains("rank 0 -> rank 1") && Catch::Contains("op #2 step 6"));
  }
}

}  // namespace
}  // namespace braid::test
