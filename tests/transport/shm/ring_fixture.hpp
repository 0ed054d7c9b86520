// A segment holding two rings (parent to child, child to parent), and the
// helpers the ring tests share: byte patterns that expose a misplaced chunk,
// and blocking send/receive loops built on the non-blocking calls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/shm/shm_ring.hpp"
#include "transport/shm/shm_segment.hpp"

namespace braid::test {

inline constexpr auto kSpin = std::chrono::microseconds(20);
inline constexpr auto kPatience = std::chrono::seconds(10);

/// Ring 0 carries parent -> child, ring 1 child -> parent.
class RingPair {
 public:
  explicit RingPair(RingGeometry geometry = {}) : geometry_(geometry), ring_bytes_(ShmRing::bytes_needed(geometry)) {
    segment_ = ShmSegment::create(2 * ring_bytes_);
    ShmRing::format(region(segment_, 0), geometry_);
    ShmRing::format(region(segment_, 1), geometry_);
  }
  const std::string& name() const { return segment_.name(); }
  ShmSegment& segment() { return segment_; }
  std::span<std::byte> region(ShmSegment& s, int ring) const {
    return s.bytes().subspan(static_cast<std::size_t>(ring) * ring_bytes_, ring_bytes_);
  }
  std::span<std::byte> region(int ring) { return region(segment_, ring); }
  RingGeometry geometry() const { return geometry_; }

 private:
  RingGeometry geometry_;
  std::size_t ring_bytes_;
  ShmSegment segment_;
};

/// Byte i of message `seed`: depends on i's low and high bits, so a chunk
/// landing at the wrong offset or a stale slot shows.
inline std::byte pattern_byte(std::size_t i, std::uint32_t seed) {
  return static_cast<std::byte>((i * 131u + seed * 7u + (i >> 12) * 29u) & 0xffu);
}
inline void fill_pattern(std::span<std::byte> bytes, std::uint32_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern_byte(i, seed);
}
inline bool has_pattern(std::span<const std::byte> bytes, std::uint32_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] != pattern_byte(i, seed)) return false;
  return true;
}

inline Tag tag_of(std::uint64_t id, std::uint8_t context = 0) {
  Tag tag{id, {}};
  tag.context[0] = std::byte{context};
  return tag;
}

/// Pushes every message in order, keeping as many in the ring as fit.
inline void send_all(ShmRingSender& ring, std::deque<OutgoingMessage>& queue) {
  while (!queue.empty()) {
    while (!queue.empty() && ring.try_push(queue.front())) queue.pop_front();
    if (!queue.empty() && !ring.wait_for_space(kSpin, kPatience))
      throw std::runtime_error("send_all: no free slot within the patience");
  }
}

inline void send_one(ShmRingSender& ring, Tag tag, std::span<const std::byte> bytes) {
  std::deque<OutgoingMessage> queue;
  queue.push_back(OutgoingMessage{tag, ConstMemView{bytes.data(), bytes.size()}});
  send_all(ring, queue);
}

/// Sends `bytes` and reports whether it went by reference (a single copy or
/// a mapped message: the first try_push published a slot that only the
/// consumer's read frees).
inline bool send_reporting(ShmRingSender& ring, Tag tag, std::span<const std::byte> bytes) {
  std::deque<OutgoingMessage> queue;
  queue.push_back(OutgoingMessage{tag, ConstMemView{bytes.data(), bytes.size()}});
  bool by_reference = false;
  while (!ring.try_push(queue.front())) {
    by_reference |= queue.front().remote_until != 0;
    if (!ring.wait_for_space(kSpin, kPatience)) throw std::runtime_error("no progress within the patience");
  }
  return by_reference;
}

inline void receive(ShmRingReceiver& ring, IncomingMessage& message) {
  while (!ring.try_pop(message))
    if (!ring.wait_for_data(kSpin, kPatience)) throw std::runtime_error("receive: nothing arrived within the patience");
}

inline void receive_one(ShmRingReceiver& ring, Tag tag, std::span<std::byte> bytes) {
  IncomingMessage message{tag, MemView{bytes.data(), bytes.size()}};
  receive(ring, message);
}

}  // namespace braid::test
