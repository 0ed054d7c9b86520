#include "transport/transport.hpp"

#include "core/text.hpp"

namespace braid {

std::string describe_tag(const Tag& tag) {
  return cat("op #", (tag.id >> 32) & 0x7fffffffu, (tag.id >> 63) ? " (point-to-point)" : "", " step ", tag.id & 0xffffffffu);
}

}  // namespace braid
