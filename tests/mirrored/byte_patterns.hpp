// Bytes for the hash and checkpoint tests: deterministic filler (xorshift, so
// failures reproduce) and text as bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace braid::mirrored {

using Bytes = std::vector<std::byte>;

inline Bytes pattern(std::size_t size, std::uint64_t seed) {
  Bytes bytes(size);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15 + 1;
  for (auto& b : bytes) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x >> 56);
  }
  return bytes;
}

inline Bytes text_bytes(std::string_view text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

}  // namespace braid::mirrored
