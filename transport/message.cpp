#include "transport/message.hpp"

#include "core/text.hpp"

namespace braid {

void throw_mismatch(const MessageHeader& got, const Tag& expected, std::size_t expected_bytes, std::string_view who) {
  const Tag received = got.as_tag();
  throw TagMismatch(cat(who, " a message ", describe_tag(received), " of ", got.bytes, " bytes while expecting ",
                        describe_tag(expected), " of ", expected_bytes,
                        " bytes: the ranks are running different operations"),
                    expected, expected_bytes, received, got.bytes);
}

}  // namespace braid
