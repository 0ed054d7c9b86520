// UcxArrivals (transport/ucx/ucx_context.hpp): the ring that files each UCX
// message of a link by sequence number until its receive takes it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "transport/ucx/ucx_context.hpp"

using braid::UcxArrival;
using braid::UcxArrivals;

namespace {
// Files message `sequence` carrying its number as its length.
bool file(UcxArrivals& ring, std::uint64_t sequence) {
  UcxArrival* slot = ring.put(sequence, braid::MessageHeader{});
  if (slot == nullptr) return false;
  slot->length = sequence;
  return true;
}
}  // namespace

TEST_CASE("arrivals are found by sequence number, in and out of order, and each is taken once", "[ucx]") {
  UcxArrivals ring;
  REQUIRE(ring.find(0) == nullptr);
  REQUIRE(file(ring, 1));  // overtook message 0
  REQUIRE(ring.find(0) == nullptr);
  REQUIRE(ring.find(1)->length == 1);
  REQUIRE(file(ring, 0));
  REQUIRE_FALSE(file(ring, 1));  // twice: refused
  REQUIRE(ring.take(0).length == 0);
  REQUIRE_FALSE(file(ring, 0));  // taken already: a late copy is refused too
  // A later receive may finish first: 2 taken before 1 keeps 1 findable.
  REQUIRE(file(ring, 2));
  REQUIRE(ring.take(2).length == 2);
  REQUIRE(ring.find(2) == nullptr);
  REQUIRE(ring.find(1)->length == 1);
  ring.remove(1);
  REQUIRE(ring.find(1) == nullptr);
  REQUIRE_FALSE(file(ring, 2));
  REQUIRE(file(ring, 3));
}

TEST_CASE("arrivals grow past the ring when sends run far ahead, and drain whatever was not taken", "[ucx]") {
  UcxArrivals ring;
  // 1000 messages before any receive, then 5000 more far ahead of it.
  for (std::uint64_t k = 0; k < 1000; ++k) REQUIRE(file(ring, k));
  REQUIRE(file(ring, 6000));
  for (std::uint64_t k = 0; k < 1000; k += 2) REQUIRE(ring.take(k).length == k);
  for (std::uint64_t k = 1; k < 1000; k += 2) REQUIRE(ring.find(k)->length == k);
  REQUIRE(ring.find(6000)->length == 6000);
  // Thousands of messages taken in order wrap the ring many times.
  for (std::uint64_t k = 1; k < 1000; k += 2) ring.remove(k);
  for (std::uint64_t k = 1000; k < 50000; ++k) {
    if (k == 6000) continue;
    REQUIRE(file(ring, k));
    REQUIRE(ring.take(k).length == k);
  }
  REQUIRE(ring.find(6000)->length == 6000);
  std::vector<std::uint64_t> left;
  REQUIRE(file(ring, 50001));
  ring.drain([&](UcxArrival& a) { left.push_back(a.length); });
  std::sort(left.begin(), left.end());
  REQUIRE(left == std::vector<std::uint64_t>{6000, 50001});
  REQUIRE(ring.find(6000) == nullptr);
}

namespace {
std::array<std::byte, 16> descriptor(int k) {
  std::array<std::byte, 16> d{};
  d[0] = std::byte(k);
  return d;
}
// Files message `sequence` with a full header carrying descriptor `k`.
bool file_full(UcxArrivals& ring, std::uint64_t sequence, int k) {
  braid::MessageHeader h;
  h.tag = sequence;
  h.context = descriptor(k);
  return ring.put(sequence, h) != nullptr;
}
// Files message `sequence` with a short header (its descriptor its predecessor's).
bool file_short(UcxArrivals& ring, std::uint64_t sequence) {
  UcxArrival* a = ring.put_following(static_cast<std::uint32_t>(sequence), sequence, 8);
  if (a == nullptr) return false;
  a->length = 8;
  return true;
}
}  // namespace

TEST_CASE("a short header takes its descriptor from the message before it, however they arrive", "[ucx]") {
  UcxArrivals ring;
  REQUIRE(file_full(ring, 0, 1));
  REQUIRE(file_short(ring, 1));
  REQUIRE(ring.find(1)->header.context == descriptor(1));
  REQUIRE(ring.find(1)->header.tag == 1);
  REQUIRE(ring.find(1)->header.bytes == 8);
  // 3 and 4 overtake 2: held, not found, until 2 brings the descriptor.
  REQUIRE(file_short(ring, 3));
  REQUIRE(file_short(ring, 4));
  REQUIRE(ring.find(3) == nullptr);
  REQUIRE(ring.find(4) == nullptr);
  REQUIRE(file_full(ring, 2, 7));
  REQUIRE(ring.find(3)->header.context == descriptor(7));
  REQUIRE(ring.find(4)->header.context == descriptor(7));
  // Taken before the next arrives: the ring keeps the descriptor of the
  // last message it moved past.
  for (std::uint64_t k = 0; k <= 4; ++k) ring.remove(k);
  REQUIRE(file_short(ring, 5));
  REQUIRE(ring.find(5)->header.context == descriptor(7));
  // A later full header changes it for those after it only.
  REQUIRE(file_full(ring, 6, 9));
  REQUIRE(file_short(ring, 7));
  REQUIRE(ring.find(5)->header.context == descriptor(7));
  REQUIRE(ring.find(7)->header.context == descriptor(9));
  // A late copy (its number before the ring's front) and a duplicate are refused.
  ring.remove(5);
  REQUIRE_FALSE(file_short(ring, 5));
  REQUIRE_FALSE(file_short(ring, 7));
  // Held short-header messages are drained with the rest.
  REQUIRE(file_short(ring, 9));
  std::vector<std::uint64_t> left;
  ring.drain([&](UcxArrival& a) { left.push_back(a.header.tag); });
  std::sort(left.begin(), left.end());
  REQUIRE(left == std::vector<std::uint64_t>{6, 7, 9});
}

TEST_CASE("an arrival's payload is UCX's data, its own inline copy or its larger copy", "[ucx]") {
  UcxArrival a;
  a.length = 8;
  a.inline_copy[0] = std::byte{7};
  REQUIRE(a.bytes() == a.inline_copy.data());
  a.length = UcxArrival::kInlineBytes + 1;
  a.copy.assign(a.length, std::byte{1});
  REQUIRE(a.bytes() == a.copy.data());
  std::byte kept[4] = {};
  a.data = kept;
  REQUIRE(a.bytes() == kept);
}
