#include <algorithm>

#include "braid/braid.hpp"
#include "core/settings.hpp"
#include "core/text.hpp"
#include "rendezvous.hpp"

namespace braid {

UniqueId UniqueId::create() {
  auto bytes = create_unique_id_bytes(Settings::from_env());
  UniqueId id;
  std::copy(bytes.begin(), bytes.end(), id.bytes.begin());
  return id;
}

std::string UniqueId::to_hex() const { return braid::to_hex(bytes); }

UniqueId UniqueId::from_hex(std::string_view hex) {
  if (hex.size() != 2 * kBytes)
    throw InvalidArgument(cat("a braid unique id is ", 2 * kBytes, " hex digits, got ", hex.size()));
  auto digit = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw InvalidArgument(cat("a braid unique id holds only hex digits, not '", c, "'"));
  };
  UniqueId id;
  for (std::size_t i = 0; i < kBytes; ++i)
    id.bytes[i] = static_cast<std::byte>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  return id;
}

}  // namespace braid
