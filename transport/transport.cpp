#include "transport/transport.hpp"

#include "core/text.hpp"

namespace braid {

std::string describe_tag(Tag tag) {
  return cat("op #", tag >> 32, " step ", tag & 0xffffffffu);
}

}  // namespace braid
