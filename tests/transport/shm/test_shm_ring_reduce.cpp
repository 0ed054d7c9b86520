// Reduce-from-slot for every type x op against the host kernels, and the
// header check: a message whose tag, context or size differs from the
// receive never writes into the destination.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "core/reduce.hpp"
#include "tests/transport/shm/child_process.hpp"
#include "tests/transport/shm/ring_fixture.hpp"

using namespace braid;
using namespace braid::test;

namespace {

// Odd, and spanning several 4 KiB slots for every element size.
constexpr std::size_t kCount = 3001;

// Element i of operand `seed` for `type`: small values of both signs (and
// fractions for floating point), so sums, products, minima and maxima all
// differ from either operand.
std::vector<std::byte> operand(DataType type, std::uint32_t seed) {
  std::size_t element = size_of(type);
  std::vector<std::byte> bytes(kCount * element);
  for (std::size_t i = 0; i < kCount; ++i) {
    int small = static_cast<int>((i * 7 + seed * 13) % 19) - 9;
    double value = small * 0.5 + ((i + seed) % 3 == 0 ? 0.25 : 0.0);
    std::byte* at = bytes.data() + i * element;
    auto put = [&](auto v) { std::memcpy(at, &v, sizeof(v)); };
    switch (type) {
      case DataType::f16: put(f32_to_f16(static_cast<float>(value))); break;
      case DataType::bf16: put(f32_to_bf16(static_cast<float>(value))); break;
      case DataType::f32: put(static_cast<float>(value)); break;
      case DataType::f64: put(value); break;
      case DataType::i8: put(static_cast<std::int8_t>(small)); break;
      case DataType::u8: put(static_cast<std::uint8_t>(small + 100)); break;
      case DataType::i32: put(static_cast<std::int32_t>(small * 1000)); break;
      case DataType::u32: put(static_cast<std::uint32_t>(small + 4000000000u)); break;
      case DataType::i64: put(static_cast<std::int64_t>(small) << 40); break;
      case DataType::u64: put(static_cast<std::uint64_t>(small + 77) * 0x100000001ull); break;
    }
  }
  return bytes;
}

std::uint32_t seed_of(int type, int op) { return static_cast<std::uint32_t>(type * 10 + op); }

}  // namespace

TEST_CASE("reduce straight from the slot matches the host kernels for every type and op", "[shm]") {
  RingPair pair(RingGeometry{.slot_count = 4, .slot_bytes = 4096});
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent");
    for (int t = 0; t < kDataTypeCount; ++t)
      for (int o = 0; o < kReduceOpCount; ++o) {
        auto incoming = operand(static_cast<DataType>(t), seed_of(t, o));
        send_one(ring, tag_of(static_cast<std::uint64_t>(t * 10 + o)), incoming);
      }
    return 0;
  });
  ShmRingReceiver ring(pair.region(1), "parent from child");
  for (int t = 0; t < kDataTypeCount; ++t)
    for (int o = 0; o < kReduceOpCount; ++o) {
      auto type = static_cast<DataType>(t);
      auto op = static_cast<ReduceOp>(o);
      INFO(name_of(type) << " " << name_of(op));
      auto local = operand(type, seed_of(t, o) + 1000);
      auto incoming = operand(type, seed_of(t, o));
      std::vector<std::byte> expected(local.size());
      reduce(type, op, expected.data(), local.data(), incoming.data(), kCount);
      // Odd ops reduce in place (dst == local), even ones into another buffer.
      std::vector<std::byte> dst(local.size(), std::byte{0xcd});
      std::byte* target = (o % 2 == 1) ? local.data() : dst.data();
      IncomingMessage message{tag_of(static_cast<std::uint64_t>(t * 10 + o)), {target, local.size()}, local.data(),
                              type, op};
      receive(ring, message);
      CHECK(std::memcmp(target, expected.data(), expected.size()) == 0);
    }
  CHECK(child.join() == 0);
}

TEST_CASE("a mismatched tag, context or size is reported and never written into the destination", "[shm]") {
  // Room for both messages (3 slots each), so the child finishes whichever
  // of them the parent leaves in the ring.
  RingPair pair(RingGeometry{.slot_count = 8, .slot_bytes = 4096});
  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(pair.name());
    ShmRingSender ring(pair.region(mine, 1), "child to parent");
    std::vector<std::byte> bytes(10000);
    fill_pattern(bytes, 5);
    send_one(ring, tag_of(5), bytes);
    fill_pattern(bytes, 6);
    send_one(ring, tag_of(6, 1), bytes);
    return 0;
  });
  ShmRingReceiver ring(pair.region(1), "parent from child");
  REQUIRE(ring.wait_for_data(kSpin, kPatience));
  std::vector<std::byte> dst(10000, std::byte{0xee});
  std::vector<std::byte> local(10000, std::byte{0x01});
  auto untouched = [&] {
    for (auto b : dst)
      if (b != std::byte{0xee}) return false;
    return true;
  };

  SECTION("wrong tag id") {
    IncomingMessage m{tag_of(7), {dst.data(), dst.size()}};
    try {
      ring.try_pop(m);
      FAIL("no mismatch");
    } catch (const TagMismatch& e) {
      CHECK(e.expected == tag_of(7));
      CHECK(e.received == tag_of(5));
      CHECK(e.received_bytes == 10000);
      CHECK(std::string(e.what()).find("parent from child") != std::string::npos);
    }
    CHECK(untouched());
  }
  SECTION("wrong size") {
    IncomingMessage m{tag_of(5), {dst.data(), 9999}};
    CHECK_THROWS_AS(ring.try_pop(m), TagMismatch);
    CHECK(untouched());
  }
  SECTION("wrong size on a reduce, and wrong context after a good message") {
    IncomingMessage bad{tag_of(5), {dst.data(), 9996}, local.data(), DataType::f32, ReduceOp::sum};
    CHECK_THROWS_AS(ring.try_pop(bad), TagMismatch);
    CHECK(untouched());
    // The ring is intact: the right receive gets message 5.
    std::vector<std::byte> good(10000);
    receive_one(ring, tag_of(5), good);
    CHECK(has_pattern(good, 5));
    // Message 6 carries context 1; a reduce expecting context 2 is refused.
    REQUIRE(ring.wait_for_data(kSpin, kPatience));
    IncomingMessage other{tag_of(6, 2), {dst.data(), dst.size()}, local.data(), DataType::u8, ReduceOp::sum};
    CHECK_THROWS_AS(ring.try_pop(other), TagMismatch);
    CHECK(untouched());
  }
  SECTION("a reduce whose size is not a whole number of elements is an invalid argument") {
    IncomingMessage m{tag_of(5), {dst.data(), 10000 - 2}, local.data(), DataType::f32, ReduceOp::sum};
    CHECK_THROWS_AS(ring.try_pop(m), InvalidArgument);
    CHECK(untouched());
  }
  CHECK(child.join() == 0);
}
