// The store's wire protocol (src/bootstrap/store_protocol.hpp): the server
// reads requests and the client reads replies off a byte stream, a frame at a
// time, with frame_size telling a reader how much to buffer. Every input is
// read both ways, frame after frame, until a decoder wants more bytes or
// refuses.
//
// For each frame a decoder accepts: frame_size announces exactly the bytes it
// consumed, every shorter prefix is "incomplete" (never a refusal, never a
// different frame), and encoding the decoded message gives the same bytes.
#include <cstdint>

#include "bootstrap/store_protocol.hpp"
#include "finding.hpp"

using namespace braid;
using namespace braid::store_protocol;
using fuzz::same_bytes;

namespace {

template <typename Message>
std::optional<Decoded<Message>> decode(std::span<const std::byte> in) {
  if constexpr (std::is_same_v<Message, Request>)
    return decode_request(in);
  else
    return decode_reply(in);
}

template <typename Message>
void read_stream(std::span<const std::byte> in) {
  constexpr bool is_reply = std::is_same_v<Message, Reply>;
  while (true) {
    std::optional<Decoded<Message>> frame;
    std::optional<std::size_t> announced;
    try {
      announced = frame_size(in, is_reply);
      frame = decode<Message>(in);
    } catch (const Error& e) {
      fuzz::expect_refusal(e);
      return;
    }
    BRAID_FUZZ_EXPECT(announced.has_value() == (in.size() >= kHeaderBytes));
    if (!frame) {
      BRAID_FUZZ_EXPECT(!announced || *announced > in.size());
      return;
    }
    std::size_t used = frame->consumed;
    BRAID_FUZZ_EXPECT(announced && *announced == used);
    BRAID_FUZZ_EXPECT(used >= kHeaderBytes && used <= in.size() && used <= kMaxFrameBytes);
    // A reader that has only part of this frame waits for the rest.
    for (std::size_t prefix : {std::size_t{0}, std::size_t{1}, kHeaderBytes - 1, kHeaderBytes, used - 1})
      if (prefix < used) BRAID_FUZZ_EXPECT(!decode<Message>(in.first(prefix)).has_value());
    BRAID_FUZZ_EXPECT(same_bytes(encode(frame->message), in.first(used)));
    in = in.subspan(used);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto in = fuzz::input_bytes(data, size);
  read_stream<Request>(in);
  read_stream<Reply>(in);
  return 0;
}
