// ShmRing between two processes: every size class, many messages in flight,
// both directions, sleeping on the futex and being woken, timeouts, close.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "tests/transport/shm/child_process.hpp"
#include "tests/transport/shm/ring_fixture.hpp"
#include "transport/shm/doorbell.hpp"

using namespace braid;
using namespace braid::test;
using braid::Clock;  // core/deadline.hpp: std::chrono::steady_clock
using std::chrono::milliseconds;

namespace {

std::vector<std::size_t> size_classes(std::size_t slot) {
  return {0, 1, 7, 4093, slot - 1, slot, slot + 1, 3 * slot + 5, std::size_t{64} << 20};
}

}  // namespace

TEST_CASE("messages of every size class cross the ring intact", "[shm]") {
  RingPair pair;
  auto sizes = size_classes(pair.geometry().slot_bytes);
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent");
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::byte> bytes(sizes[i]);
      fill_pattern(bytes, static_cast<std::uint32_t>(i));
      send_one(ring, tag_of(i), bytes);
    }
    return 0;
  });
  REQUIRE(pair.segment().wait_attached(1, kPatience));
  pair.segment().unlink();
  ShmRingReceiver ring(pair.region(1), "parent from child");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("message " << i << " of " << sizes[i] << " bytes");
    std::vector<std::byte> bytes(sizes[i], std::byte{0xee});
    receive_one(ring, tag_of(i), bytes);
    CHECK(has_pattern(bytes, static_cast<std::uint32_t>(i)));
  }
  CHECK(child.join() == 0);
}

TEST_CASE("thousands of messages in flight arrive in order, both directions at once", "[shm]") {
  // Small slots, so one message spans several and several share the ring.
  RingPair pair(RingGeometry{.slot_count = 8, .slot_bytes = 8192});
  // Each process sleeps on one doorbell that its peer rings both for "data
  // sent" and for "slot freed": the engine's way to wait on many rings.
  ShmSegment bells = ShmSegment::create(2 * sizeof(DoorbellWord));
  constexpr int kMessages = 3000;
  auto size_of_message = [](int i) -> std::size_t { return (i % 10 == 0) ? 20000 + i : (i * 37) % 3000; };
  // Each side sends kMessages while receiving the other's kMessages, so the
  // two rings are full at the same time and neither side may block on one.
  auto exchange = [&](ShmRingSender& out, ShmRingReceiver& in, Doorbell bell, std::uint32_t out_seed,
                      std::uint32_t in_seed) {
    std::vector<std::vector<std::byte>> outgoing(kMessages), incoming(kMessages);
    std::deque<OutgoingMessage> sends;
    for (int i = 0; i < kMessages; ++i) {
      outgoing[i].resize(size_of_message(i));
      fill_pattern(outgoing[i], out_seed + static_cast<std::uint32_t>(i));
      sends.push_back({tag_of(static_cast<std::uint64_t>(i)), {outgoing[i].data(), outgoing[i].size()}});
      incoming[i].resize(size_of_message(i));
    }
    int received = 0;
    std::optional<IncomingMessage> current;
    auto deadline = Clock::now() + kPatience;
    auto ready = [&] { return in.has_data() || (!sends.empty() && out.has_space()); };
    while (!sends.empty() || received < kMessages) {
      bool moved = false;
      while (!sends.empty() && out.try_push(sends.front())) sends.pop_front(), moved = true;
      while (received < kMessages) {
        if (!current) current = IncomingMessage{tag_of(static_cast<std::uint64_t>(received)),
                                                {incoming[received].data(), incoming[received].size()}};
        if (!in.try_pop(*current)) break;
        current.reset();
        ++received, moved = true;
      }
      if (moved || spin_until(ready, kSpin)) continue;
      std::uint32_t ticket = bell.arm();
      if (ready()) {
        bell.disarm();
        continue;
      }
      bell.wait(ticket, std::chrono::milliseconds(100));
      if (Clock::now() > deadline) return false;
    }
    for (int i = 0; i < kMessages; ++i)
      if (!has_pattern(incoming[i], in_seed + static_cast<std::uint32_t>(i))) return false;
    return true;
  };
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmSegment their_bells = ShmSegment::open(bells.name());
    auto* words = reinterpret_cast<DoorbellWord*>(their_bells.data());
    ShmRingReceiver in(pair.region(mine, 0), "child from parent", RingCopy::by_size, &words[1], &words[0]);
    ShmRingSender out(pair.region(mine, 1), "child to parent", RingCopy::by_size, &words[1], &words[0]);
    return exchange(out, in, Doorbell(&words[1]), 5000, 1000) ? 0 : 3;
  });
  auto* words = reinterpret_cast<DoorbellWord*>(bells.data());
  ShmRingSender out(pair.region(0), "parent to child", RingCopy::by_size, &words[0], &words[1]);
  ShmRingReceiver in(pair.region(1), "parent from child", RingCopy::by_size, &words[0], &words[1]);
  CHECK(exchange(out, in, Doorbell(&words[0]), 1000, 5000));
  CHECK(child.join() == 0);
}

TEST_CASE("a consumer asleep on the futex is woken by the producer", "[shm]") {
  RingPair pair;
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent");
    std::this_thread::sleep_for(milliseconds(150));  // the parent is asleep by now
    std::vector<std::byte> bytes(100);
    fill_pattern(bytes, 9);
    send_one(ring, tag_of(9), bytes);
    return ring.wakes_sent() >= 1 ? 0 : 3;  // it had to make the wake call
  });
  ShmRingReceiver ring(pair.region(1), "parent from child");
  auto start = Clock::now();
  REQUIRE(ring.arm());  // nothing there yet: may sleep
  CHECK(ring.wait(std::chrono::seconds(10)));
  auto slept = Clock::now() - start;
  CHECK(slept >= milliseconds(100));
  CHECK(slept < milliseconds(5000));
  CHECK_FALSE(ring.arm());  // the message is there: arming says so
  std::vector<std::byte> bytes(100);
  receive_one(ring, tag_of(9), bytes);
  CHECK(has_pattern(bytes, 9));
  CHECK(child.join() == 0);
}

TEST_CASE("a producer asleep on a full ring is woken when the consumer frees a slot", "[shm]") {
  RingPair pair(RingGeometry{.slot_count = 4, .slot_bytes = 4096});
  constexpr std::size_t kBytes = 64 * 4096;  // 16 slots' worth through 4 slots
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent");
    std::vector<std::byte> bytes(kBytes);
    fill_pattern(bytes, 4);
    OutgoingMessage message{tag_of(4), {bytes.data(), bytes.size()}};
    child_require(!ring.try_push(message), "the ring holds only part");
    child_require(ring.arm(), "full ring: may sleep");
    // The parent starts draining only after 150 ms: a wake before the 10 s
    // timeout is the consumer's, and the parent checks it made the call.
    child_require(ring.wait(std::chrono::seconds(10)), "woken before the timeout");
    std::deque<OutgoingMessage> rest{message};
    send_all(ring, rest);
    return 0;
  });
  std::this_thread::sleep_for(milliseconds(150));
  ShmRingReceiver ring(pair.region(1), "parent from child");
  std::vector<std::byte> bytes(kBytes);
  receive_one(ring, tag_of(4), bytes);
  CHECK(has_pattern(bytes, 4));
  CHECK(ring.wakes_sent() >= 1);
  CHECK(child.join() == 0);
}

TEST_CASE("no wake system call is made while nobody sleeps", "[shm]") {
  RingPair pair;
  ShmRingSender sender(pair.region(0), "to self");
  ShmRingReceiver receiver(pair.region(0), "from self");
  std::vector<std::byte> bytes(1000), got(1000);
  for (std::uint32_t i = 0; i < 100; ++i) {
    fill_pattern(bytes, i);
    send_one(sender, tag_of(i), bytes);
    receive_one(receiver, tag_of(i), got);
    REQUIRE(has_pattern(got, i));
  }
  CHECK(sender.wakes_sent() == 0);
  CHECK(receiver.wakes_sent() == 0);
}

TEST_CASE("waiting on a silent peer times out within its bound", "[shm]") {
  RingPair pair;
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent");
    std::this_thread::sleep_for(milliseconds(1500));  // attached, silent
    return 0;
  });
  ShmRingReceiver ring(pair.region(1), "parent from child");
  auto start = Clock::now();
  CHECK_FALSE(ring.wait_for_data(std::chrono::microseconds(500), milliseconds(200)));
  auto waited = Clock::now() - start;
  CHECK(waited >= milliseconds(200));
  CHECK(waited < milliseconds(1000));
  std::vector<std::byte> bytes(8);
  IncomingMessage message{tag_of(1), {bytes.data(), bytes.size()}};
  CHECK_FALSE(ring.try_pop(message));
  child.kill_now();
}

TEST_CASE("after the producer closes, the consumer drains what was sent, then gets PeerLost", "[shm]") {
  RingPair pair;
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent");
    std::vector<std::byte> bytes(300000);
    fill_pattern(bytes, 1);
    send_one(ring, tag_of(1), bytes);
    fill_pattern(bytes, 2);
    send_one(ring, tag_of(2), bytes);
    ring.close();
    return 0;
  });
  ShmRingReceiver ring(pair.region(1), "parent from child");
  REQUIRE(child.join() == 0);
  std::vector<std::byte> bytes(300000);
  receive_one(ring, tag_of(1), bytes);
  CHECK(has_pattern(bytes, 1));
  receive_one(ring, tag_of(2), bytes);
  CHECK(has_pattern(bytes, 2));
  IncomingMessage third{tag_of(3), {bytes.data(), 10}};
  CHECK_THROWS_AS(ring.try_pop(third), PeerLost);
  CHECK(ring.peer_closed());
  CHECK_FALSE(ring.arm());  // a closed peer is never slept on
}

TEST_CASE("a ring refuses geometries it cannot hold and regions that were not formatted", "[shm]") {
  CHECK_THROWS_AS(ShmRing::bytes_needed(RingGeometry{.slot_count = 1, .slot_bytes = 4096}), InvalidArgument);
  CHECK_THROWS_AS(ShmRing::bytes_needed(RingGeometry{.slot_count = 8, .slot_bytes = 1000}), InvalidArgument);
  ShmSegment segment = ShmSegment::create(1 << 20);
  CHECK_THROWS_AS(ShmRingReceiver(segment.bytes(), "unformatted"), ProtocolMismatch);
  CHECK_THROWS_AS(ShmRing::format(segment.bytes().subspan(0, 8192), RingGeometry{}), InvalidArgument);
}

TEST_CASE("one doorbell shared by several rings wakes the process for whichever ring got work", "[shm]") {
  // The engine's use: every ring this process consumes rings one word, so
  // one arm()/wait() covers all of them. Both rings carry child -> parent.
  RingPair pair;
  ShmSegment bells = ShmSegment::create(sizeof(DoorbellWord));
  auto* word = reinterpret_cast<DoorbellWord*>(bells.data());
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmSegment their_bells = ShmSegment::open(bells.name());
    auto* peer_word = reinterpret_cast<DoorbellWord*>(their_bells.data());
    ShmRingSender first(pair.region(mine, 0), "child to parent, ring 0", RingCopy::cached, nullptr, peer_word);
    ShmRingSender second(pair.region(mine, 1), "child to parent, ring 1", RingCopy::cached, nullptr, peer_word);
    (void)first;
    std::this_thread::sleep_for(milliseconds(150));
    std::vector<std::byte> bytes(64);
    fill_pattern(bytes, 2);
    send_one(second, tag_of(2), bytes);
    return second.wakes_sent() >= 1 ? 0 : 3;
  });
  ShmRingReceiver first(pair.region(0), "parent from ring 0", RingCopy::cached, word, nullptr);
  ShmRingReceiver second(pair.region(1), "parent from ring 1", RingCopy::cached, word, nullptr);
  Doorbell bell(word);
  auto start = Clock::now();
  std::uint32_t ticket = bell.arm();
  REQUIRE_FALSE(first.has_data());
  REQUIRE_FALSE(second.has_data());
  CHECK(bell.wait(ticket, std::chrono::seconds(10)));
  CHECK(Clock::now() - start >= milliseconds(100));
  CHECK_FALSE(first.has_data());
  CHECK(second.has_data());
  std::vector<std::byte> bytes(64);
  receive_one(second, tag_of(2), bytes);
  CHECK(has_pattern(bytes, 2));
  CHECK(child.join() == 0);
}

TEST_CASE("producer and consumer as two threads of one process (so ThreadSanitizer sees the ordering)", "[shm]") {
  // Across processes a race detector sees only one side; here both sides
  // share one address space, so TSan checks that every slot's header and
  // payload are published by head's release and freed by tail's release.
  RingPair pair(RingGeometry{.slot_count = 4, .slot_bytes = 4096});
  constexpr int kMessages = 2000;
  auto size_of_message = [](int i) -> std::size_t { return static_cast<std::size_t>((i * 997) % 20000); };
  bool sender_ok = true;
  std::thread producer([&] {
    try {
      ShmRingSender ring(pair.region(0), "thread to thread");
      SpinBudget budget;
      std::vector<std::byte> bytes;
      for (int i = 0; i < kMessages; ++i) {
        bytes.resize(size_of_message(i));
        fill_pattern(bytes, static_cast<std::uint32_t>(i));
        OutgoingMessage m{tag_of(static_cast<std::uint64_t>(i)), {bytes.data(), bytes.size()}};
        while (!ring.try_push(m))
          if (!ring.wait_for_space(budget, kPatience)) throw std::runtime_error("no space");
      }
    } catch (...) {
      sender_ok = false;
    }
  });
  ShmRingReceiver ring(pair.region(0), "thread from thread");
  SpinBudget budget;
  int intact = 0;
  std::vector<std::byte> bytes;
  for (int i = 0; i < kMessages; ++i) {
    bytes.assign(size_of_message(i), std::byte{0});
    IncomingMessage m{tag_of(static_cast<std::uint64_t>(i)), {bytes.data(), bytes.size()}};
    while (!ring.try_pop(m))
      if (!ring.wait_for_data(budget, kPatience)) break;
    intact += m.done() && has_pattern(bytes, static_cast<std::uint32_t>(i));
  }
  producer.join();
  CHECK(sender_ok);
  CHECK(intact == kMessages);
}

TEST_CASE("adaptive stores: chunks filled either way arrive intact, and both ways are tried", "[shm]") {
  // RingCopy::adaptive (shm_ring.hpp): plain at first, then trials of each
  // way and long runs of the cheaper one. Whichever it keeps on this
  // machine, every trial streams some chunks and fills some plainly, and the
  // consumer copies or reduces each the same. Two threads, so that
  // ThreadSanitizer sees the cost words the two sides share.
  RingPair pair(RingGeometry{.slot_count = 4, .slot_bytes = 64 * 1024});
  constexpr int kMessages = 1500;
  auto floats_in = [](int i) -> std::size_t {
    return ShmRingSender::kAdaptiveBytes / 4 + static_cast<std::size_t>(i % 7) * 1000;
  };
  std::uint64_t adaptive = 0, streamed = 0;
  bool sender_ok = true;
  std::thread producer([&] {
    try {
      ShmRingSender ring(pair.region(0), "thread to thread", RingCopy::adaptive);
      SpinBudget budget;
      std::vector<float> values;
      for (int i = 0; i < kMessages; ++i) {
        values.assign(floats_in(i), static_cast<float>(i % 100));
        OutgoingMessage m{tag_of(static_cast<std::uint64_t>(i)),
                          {reinterpret_cast<const std::byte*>(values.data()), values.size() * 4}};
        while (!ring.try_push(m))
          if (!ring.wait_for_space(budget, kPatience)) throw std::runtime_error("no space");
      }
      adaptive = ring.adaptive_chunks();
      streamed = ring.streamed_chunks();
    } catch (...) {
      sender_ok = false;
    }
  });
  ShmRingReceiver ring(pair.region(0), "thread from thread", RingCopy::adaptive);
  SpinBudget budget;
  int intact = 0;
  std::vector<float> local, dst;
  for (int i = 0; i < kMessages; ++i) {
    const std::size_t n = floats_in(i);
    const bool reduce = i % 2 == 1;
    local.assign(n, 0.5f);
    dst.assign(n, -1.0f);
    IncomingMessage m{tag_of(static_cast<std::uint64_t>(i)), {reinterpret_cast<std::byte*>(dst.data()), n * 4}};
    if (reduce) {
      m.local = reinterpret_cast<const std::byte*>(local.data());
      m.type = DataType::f32;
      m.op = ReduceOp::sum;
    }
    while (!ring.try_pop(m))
      if (!ring.wait_for_data(budget, kPatience)) break;
    const float expected = static_cast<float>(i % 100) + (reduce ? 0.5f : 0.0f);
    intact += m.done() && std::all_of(dst.begin(), dst.end(), [&](float v) { return v == expected; });
  }
  producer.join();
  REQUIRE(sender_ok);
  CHECK(intact == kMessages);
  CHECK(adaptive == kMessages);  // every message one chunk of at least kAdaptiveBytes
  CHECK(streamed > 0);
  CHECK(streamed < adaptive);
}
