#include "transport/message.hpp"

#include "core/text.hpp"

namespace braid {

void check_match(const MessageHeader& got, const Tag& expected, std::size_t expected_bytes, std::string_view who) {
  const Tag received = got.as_tag();
  if (received == expected && got.bytes == expected_bytes) return;
  throw TagMismatch(cat(who, " a message ", describe_tag(received), " of ", got.bytes, " bytes while expecting ",
                        describe_tag(expected), " of ", expected_bytes,
                        " bytes: the ranks are running different operations"),
                    expected, expected_bytes, received, got.bytes);
}

}  // namespace braid
