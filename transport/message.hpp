// The one message header and matching rule of every link (docs/architecture.md). A link
// puts a MessageHeader before each message, on the wire (tcp) or in a
// shared-memory slot (shm): the message's tag (operation sequence and step),
// its 16-byte operation descriptor and its size. The receiving side checks the
// header against the receive it serves with check_match() before a byte of
// the payload touches the receiver's buffer, so ranks that run different
// operations get a TagMismatch naming both, never mixed data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "transport/transport.hpp"

namespace braid {

struct MessageHeader {
  std::uint64_t tag = 0;    // Tag::id
  std::uint64_t bytes = 0;  // payload size
  std::array<std::byte, 16> context{};

  Tag as_tag() const { return Tag{tag, context}; }
};
static_assert(sizeof(MessageHeader) == 32, "message headers are 32 bytes in every transport");

/// The tag of an abort notice: its payload is the reason the sender gave up.
inline constexpr std::uint64_t kAbortTag = ~std::uint64_t{0};
/// The tag of a goodbye: the sender finalized the communicator in order and
/// sends nothing more on this link (Link::goodbye); no payload.
inline constexpr std::uint64_t kGoodbyeTag = ~std::uint64_t{0} - 2;
/// The longest reason an abort notice carries.
inline constexpr std::size_t kMaxAbortReason = 4096;

inline MessageHeader header_for(const Tag& tag, std::size_t bytes) {
  return MessageHeader{tag.id, static_cast<std::uint64_t>(bytes), tag.context};
}

/// Throws the TagMismatch of check_match.
[[noreturn]] void throw_mismatch(const MessageHeader& got, const Tag& expected, std::size_t expected_bytes,
                                 std::string_view who);

/// Throws TagMismatch ("<who> a message op #3 step 1 of 64 bytes while
/// expecting op #3 step 2 of 64 bytes: the ranks are running different
/// operations") unless `got` carries `expected` and exactly `expected_bytes`.
/// `who()` says where it came from ("rank 0: received from rank 1 (host,
/// addr) (op #3 step 2)"); it is called only for a mismatch, so a matching
/// message formats no text.
template <typename Who>
void check_match(const MessageHeader& got, const Tag& expected, std::size_t expected_bytes, Who&& who) {
  if (got.as_tag() == expected && got.bytes == expected_bytes) [[likely]]
    return;
  throw_mismatch(got, expected, expected_bytes, who());
}

}  // namespace braid
