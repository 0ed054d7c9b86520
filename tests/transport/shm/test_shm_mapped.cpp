// Shared allocations and the rings' mapped messages (shared_memory.hpp,
// shm_ring.hpp): memory from shared_alloc is found by address, refuses a
// free while registered, and a message above kEagerSendBytes from it is
// copied or reduced by the consumer straight out of the producer's memory,
// whose send completes only once it was read; other messages, and every
// message to a consumer that does not map, go through the slots. The
// consumer's mappings of freed allocations go at its next new mapping.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "core/reduce.hpp"
#include "tests/transport/shm/child_process.hpp"
#include "tests/transport/shm/ring_fixture.hpp"
#include "transport/shm/shared_memory.hpp"

using namespace braid;
using namespace braid::test;

namespace {

// The child's side: the hello MappingConsumer takes, then the parent's word
// that it maps.
void greet_and_await_maps(ShmRingSender& ring) {
  std::vector<std::byte> hello(16);
  send_one(ring, tag_of(0), hello);
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!ring.consumer_maps()) {
    child_require(std::chrono::steady_clock::now() < deadline, "the consumer's word on mapped messages");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// The parent's side of a case between two processes: once the child has
// attached, its ring with mappings of the child's allocations, past the
// child's hello (sent before it waits for this side's word on mapping).
struct MappingConsumer {
  MappingConsumer(RingPair& pair, pid_t child)
      : mappings(child),
        ring(attached(pair), "parent from child", RingCopy::by_size, nullptr, nullptr, false, &mappings) {
    std::vector<std::byte> hello(16);
    receive_one(ring, tag_of(0), hello);
  }
  static std::span<std::byte> attached(RingPair& pair) {
    REQUIRE(pair.segment().wait_attached(1, kPatience));
    pair.segment().unlink();
    return pair.region(1);
  }
  PeerMappings mappings;
  ShmRingReceiver ring;
};

float value_at(std::size_t i, float scale) { return scale * static_cast<float>(i % 1000) + 0.5f; }

// An allocation freed when the scope ends.
struct Shared {
  explicit Shared(std::size_t size) : data(static_cast<std::byte*>(shared_alloc(size))), bytes(size) {}
  ~Shared() { shared_free(data); }
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  std::span<std::byte> span(std::size_t offset, std::size_t n) const { return {data + offset, n}; }
  std::byte* data;
  std::size_t bytes;
};

}  // namespace

TEST_CASE("shared allocations: found by address, freed once, kept while registered", "[shm]") {
  CHECK_THROWS_AS(shared_alloc(0), InvalidArgument);
  CHECK_FALSE(shared_find(nullptr, 1).has_value());
  auto* p = static_cast<std::byte*>(shared_alloc(10000));
  CHECK(shared_size(p) == 12288);  // whole pages
  CHECK(std::all_of(p, p + 12288, [](std::byte b) { return b == std::byte{0}; }));
  auto inside = shared_find(p + 100, 5000);
  REQUIRE(inside.has_value());
  CHECK(inside->offset == 100);
  CHECK(inside->allocation_bytes == 12288);
  CHECK_FALSE(shared_find(p + 100, 12288).has_value());  // runs past the end
  CHECK_FALSE(shared_find(p - 1, 2).has_value());        // starts before it
  std::vector<std::byte> heap(100);
  CHECK_FALSE(shared_find(heap.data(), heap.size()).has_value());
  CHECK_THROWS_AS(shared_free(p + 4096), InvalidArgument);  // not its start

  int owner = 0, other = 0;
  CHECK_THROWS_WITH(shared_register(&owner, heap.data(), heap.size(), "rank 0: register_buffer"),
                    Catch::Contains("rank 0: register_buffer") && Catch::Contains("not inside memory from braid_mem_alloc"));
  void* handle = shared_register(&owner, p + 10, 100, "test");
  CHECK(shared_register(&owner, p, 12288, "test") != handle);
  CHECK_THROWS_WITH(shared_free(p), Catch::Contains("registered"));
  CHECK_THROWS_AS(shared_deregister(&other, handle, "test"), InvalidArgument);  // not its owner's
  shared_deregister(&owner, handle, "test");
  CHECK_THROWS_AS(shared_deregister(&owner, handle, "test"), InvalidArgument);  // already ended
  CHECK_THROWS_WITH(shared_free(p), Catch::Contains("registered"));             // the second one holds it
  CHECK(shared_deregister_all(&owner) == 1);
  shared_free(p);
  CHECK_THROWS_AS(shared_free(p), InvalidArgument);  // freed already
  CHECK_FALSE(shared_find(p, 1).has_value());
  shared_free(nullptr);
}

TEST_CASE("shared allocations: a process maps another's and sees what it writes", "[shm]") {
  Shared a(1 << 16);
  PeerMappings mappings(::getpid());
  const auto range = shared_find(a.data + 64, 128);
  REQUIRE(range.has_value());
  const std::byte* base = mappings.map(*range);
  CHECK(base != a.data);  // a mapping of its own
  a.data[64] = std::byte{42};
  CHECK(base[64] == std::byte{42});
  CHECK(mappings.map(*range) == base);  // kept
  CHECK(mappings.held() == 1);
}

TEST_CASE("mapped messages: large ones from shared memory are read in place, copied and reduced", "[shm]") {
  static_assert(kEagerSendBytes == 64 * 1024);
  const std::size_t big = 3 * (1u << 20) + 12344;  // larger than the whole ring
  const std::size_t floats = 200'003;
  RingPair pair(RingGeometry{.slot_count = 4, .slot_bytes = 64 * 1024});
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent");
    greet_and_await_maps(ring);
    {
      Shared a(4u << 20);
      // A copy from an offset inside the allocation: mapped.
      auto copy = a.span(4096 + 8, big);
      fill_pattern(copy, 1);
      child_require(send_reporting(ring, tag_of(1), copy), "a large message from shared memory is mapped");
      std::memset(copy.data(), 0xab, copy.size());  // read already: changes nothing that arrived
      // kEagerSendBytes exactly, and one that runs past the allocation's end: slots.
      auto eager = a.span(0, kEagerSendBytes);
      fill_pattern(eager, 2);
      child_require(!send_reporting(ring, tag_of(2), eager), "a message of kEagerSendBytes goes through the slots");
      std::vector<std::byte> heap(1u << 20);
      fill_pattern(heap, 3);
      child_require(!send_reporting(ring, tag_of(3), heap), "a message from heap memory goes through the slots");
      // A reduce's incoming floats.
      auto incoming = a.span(0, floats * 4);
      auto* f = reinterpret_cast<float*>(incoming.data());
      for (std::size_t i = 0; i < floats; ++i) f[i] = value_at(i, 2.0f);
      child_require(send_reporting(ring, tag_of(4), incoming), "a reduce's message from shared memory is mapped");
      child_require(ring.mapped_sent() == 2, "two mapped messages");
    }
    // A new allocation after the first was freed (its fd number may be the same).
    Shared b(1u << 20);
    fill_pattern(b.span(0, b.bytes), 5);
    child_require(send_reporting(ring, tag_of(5), b.span(0, b.bytes)), "the new allocation's message is mapped");
    return 0;
  });
  MappingConsumer consumer(pair, child.pid());
  ShmRingReceiver& ring = consumer.ring;
  PeerMappings& mappings = consumer.mappings;
  std::vector<std::byte> bytes(big, std::byte{0xee});
  receive_one(ring, tag_of(1), bytes);
  CHECK(has_pattern(bytes, 1));
  CHECK(mappings.held() == 1);
  std::vector<std::byte> eager(kEagerSendBytes);
  receive_one(ring, tag_of(2), eager);
  CHECK(has_pattern(eager, 2));
  std::vector<std::byte> heap(1u << 20);
  receive_one(ring, tag_of(3), heap);
  CHECK(has_pattern(heap, 3));
  std::vector<float> local(floats), dst(floats, -1.0f);
  for (std::size_t i = 0; i < floats; ++i) local[i] = value_at(i, 3.0f);
  IncomingMessage message{tag_of(4), {reinterpret_cast<std::byte*>(dst.data()), dst.size() * 4},
                          reinterpret_cast<const std::byte*>(local.data()), DataType::f32, ReduceOp::sum};
  receive(ring, message);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < floats; ++i) wrong += dst[i] != value_at(i, 3.0f) + value_at(i, 2.0f);
  CHECK(wrong == 0);
  std::vector<std::byte> last(1u << 20);
  receive_one(ring, tag_of(5), last);
  CHECK(has_pattern(last, 5));
  // The first allocation was freed before the second was mapped: dropped then.
  CHECK(mappings.held() == 1);
  CHECK(child.join() == 0);
}

TEST_CASE("mapped messages: a consumer that does not map gets everything through the slots", "[shm]") {
  RingPair pair(RingGeometry{.slot_count = 4, .slot_bytes = 64 * 1024});
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent");
    Shared a(1u << 20);
    fill_pattern(a.span(0, a.bytes), 7);
    child_require(!send_reporting(ring, tag_of(1), a.span(0, a.bytes)), "no mapped message to a consumer that said no");
    child_require(!ring.consumer_maps(), "the consumer's no");
    return 0;
  });
  REQUIRE(pair.segment().wait_attached(1, kPatience));
  pair.segment().unlink();
  // Made with no mappings: it says no at once.
  ShmRingReceiver ring(pair.region(1), "parent from child");
  std::vector<std::byte> bytes(1u << 20);
  receive_one(ring, tag_of(1), bytes);
  CHECK(has_pattern(bytes, 7));
  CHECK(child.join() == 0);
}

TEST_CASE("mapped messages: an adaptive producer also sends some through the slots, and every one arrives intact",
          "[shm]") {
  // RingCopy::adaptive: one message in kMappedProbeEvery that could go
  // mapped goes the way not kept, whichever that is, so over a few probes
  // both ways carry messages (which one is kept depends on the machine's
  // costs at the time).
  constexpr std::uint32_t kMessages = 4 * ShmRingSender::kMappedProbeEvery + 5;
  constexpr std::size_t kBytes = 96 * 1024;
  RingPair pair(RingGeometry{.slot_count = 4, .slot_bytes = 64 * 1024});
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent", RingCopy::adaptive);
    greet_and_await_maps(ring);
    Shared a(2 * kBytes);
    for (std::uint32_t i = 1; i <= kMessages; ++i) {
      auto message = a.span((i % 2) * kBytes, kBytes);
      fill_pattern(message, static_cast<int>(i));
      send_one(ring, tag_of(i), message);  // done: read (mapped) or in the ring (slots)
    }
    child_require(ring.mapped_sent() + ring.mapped_through_slots() == kMessages,
                  "every message counted as mapped or through the slots");
    child_require(ring.mapped_sent() >= 2, "some messages went mapped");
    child_require(ring.mapped_through_slots() >= 2, "some messages went through the slots");
    return 0;
  });
  MappingConsumer consumer(pair, child.pid());
  ShmRingReceiver& ring = consumer.ring;
  int wrong = 0;
  for (std::uint32_t i = 1; i <= kMessages; ++i) {
    std::vector<std::byte> bytes(kBytes, std::byte{0xee});
    receive_one(ring, tag_of(i), bytes);
    wrong += has_pattern(bytes, static_cast<int>(i)) ? 0 : 1;
  }
  CHECK(wrong == 0);
  CHECK(child.join() == 0);
}
