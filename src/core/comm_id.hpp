// CommId: 16 random bytes that name one communicator. Every connection's
// handshake carries it, so a rank of another job is refused.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <string>

namespace braid {

struct CommId {
  std::array<std::byte, 16> bytes{};

  static CommId random();  // from getrandom(2)
  std::string to_hex() const;
  bool operator==(const CommId&) const = default;
  auto operator<=>(const CommId&) const = default;
};

}  // namespace braid
