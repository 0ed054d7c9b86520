// ShmRing's single copies between two processes (shm_ring.hpp): a message of
// at least the threshold is read by the consumer straight from the
// producer's buffer, copied or reduced, and its send completes only once it
// was read; below the threshold, before the consumer's verdict, and after a
// refusal, messages go through the slots.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "core/reduce.hpp"
#include "tests/transport/shm/child_process.hpp"
#include "tests/transport/shm/ring_fixture.hpp"

using namespace braid;
using namespace braid::test;

namespace {

// Above kEagerSendBytes, below which the ring never sends by one copy.
constexpr std::size_t kThreshold = 96 * 1024;

// The consumer's yes arrives with its first try_pop: the child waits for it.
void await_verdict(const ShmRingSender& ring, bool expect) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (ring.consumer_reads_directly() != expect) {
    child_require(std::chrono::steady_clock::now() < deadline, "the consumer's verdict on single copies");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::vector<float> floats(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 1000) + 0.5f;
  return v;
}

}  // namespace

TEST_CASE("single copies: large messages are read from the producer's buffer, copied and reduced", "[shm]") {
  // Sizes: below the threshold (slots), at it, across several bounce blocks
  // of a reduce and not a multiple of one, and larger than the whole ring.
  const std::vector<std::size_t> copy_sizes = {kThreshold - 1, kThreshold, 3 * (1u << 20) + 12345};
  const std::vector<std::size_t> reduce_counts = {kThreshold / 4, 200'003, 1u << 20};
  static_assert(kThreshold > kEagerSendBytes);
  RingPair pair(RingGeometry{.slot_count = 4, .slot_bytes = 64 * 1024});
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent", RingCopy::by_size, nullptr, nullptr, kThreshold);
    std::vector<std::byte> hello(16);
    send_one(ring, tag_of(0), hello);
    await_verdict(ring, true);
    for (std::size_t i = 0; i < copy_sizes.size(); ++i) {
      std::vector<std::byte> bytes(copy_sizes[i]);
      fill_pattern(bytes, static_cast<std::uint32_t>(i));
      const bool single = send_reporting(ring, tag_of(1 + i), bytes);
      child_require(single == (copy_sizes[i] >= kThreshold),
                    "a message at or above the threshold, and only such, goes by one copy");
      // The consumer has read it: changing it now must not change what arrived.
      std::memset(bytes.data(), 0xab, bytes.size());
    }
    for (std::size_t i = 0; i < reduce_counts.size(); ++i) {
      auto incoming = floats(reduce_counts[i], 2.0f);
      const bool single = send_reporting(ring, tag_of(100 + i), std::as_bytes(std::span(incoming)));
      child_require(single, "a reduce's message goes by one copy");
    }
    return 0;
  });
  REQUIRE(pair.segment().wait_attached(1, kPatience));
  pair.segment().unlink();
  ShmRingReceiver ring(pair.region(1), "parent from child", RingCopy::by_size, nullptr, nullptr, true);
  std::vector<std::byte> hello(16);
  receive_one(ring, tag_of(0), hello);
  for (std::size_t i = 0; i < copy_sizes.size(); ++i) {
    INFO("copy of " << copy_sizes[i] << " bytes");
    std::vector<std::byte> bytes(copy_sizes[i], std::byte{0xee});
    receive_one(ring, tag_of(1 + i), bytes);
    CHECK(has_pattern(bytes, static_cast<std::uint32_t>(i)));
  }
  for (std::size_t i = 0; i < reduce_counts.size(); ++i) {
    INFO("reduce of " << reduce_counts[i] << " floats");
    auto local = floats(reduce_counts[i], 3.0f);
    auto incoming = floats(reduce_counts[i], 2.0f);
    std::vector<float> expected(local.size()), dst(local.size(), -1.0f);
    reduce(DataType::f32, ReduceOp::sum, reinterpret_cast<std::byte*>(expected.data()),
           reinterpret_cast<const std::byte*>(local.data()), reinterpret_cast<const std::byte*>(incoming.data()),
           local.size());
    IncomingMessage message{tag_of(100 + i), {reinterpret_cast<std::byte*>(dst.data()), dst.size() * 4},
                            reinterpret_cast<const std::byte*>(local.data()), DataType::f32, ReduceOp::sum};
    receive(ring, message);
    CHECK(std::memcmp(dst.data(), expected.data(), dst.size() * 4) == 0);
  }
  CHECK(ring.single_copy_refused().empty());
  CHECK(child.join() == 0);
}

TEST_CASE("single copies: a consumer that does not take them gets everything through the slots", "[shm]") {
  RingPair pair(RingGeometry{.slot_count = 4, .slot_bytes = 64 * 1024});
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent", RingCopy::by_size, nullptr, nullptr, kThreshold);
    std::vector<std::byte> bytes(1u << 20);
    fill_pattern(bytes, 7);
    child_require(!send_reporting(ring, tag_of(1), bytes), "no single copy to a consumer that said no");
    child_require(!ring.consumer_reads_directly(), "the consumer's no");
    return 0;
  });
  REQUIRE(pair.segment().wait_attached(1, kPatience));
  pair.segment().unlink();
  // Made before the child's sender, with single copies off: it says no at once.
  ShmRingReceiver ring(pair.region(1), "parent from child", RingCopy::by_size, nullptr, nullptr, false);
  std::vector<std::byte> bytes(1u << 20);
  receive_one(ring, tag_of(1), bytes);
  CHECK(has_pattern(bytes, 7));
  CHECK(child.join() == 0);
}
