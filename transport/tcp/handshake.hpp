// The TCP transport's connection handshake. The dialing rank sends a Hello;
// the accepting rank checks it and answers with a HelloReply. A connection
// whose first bytes are not a braid Hello of this protocol version, for this
// communicator and this rank, is refused with a reason both sides log.
//
//   Hello (44 bytes, little-endian)
//     u32 magic 'BRDT'  u16 version  u16 stream  u16 streams  u16 reserved
//     u8[16] communicator id  u32 from_rank  u32 to_rank  u32 world_size  u32 reserved
//   HelloReply (8 bytes)
//     u32 magic 'BRDT'  u16 version  u16 status (HelloStatus)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/comm_id.hpp"

namespace braid {

inline constexpr std::uint32_t kTcpMagic = 0x54445242;  // "BRDT"
inline constexpr std::uint16_t kTcpProtocolVersion = 1;
inline constexpr std::size_t kHelloBytes = 44;
inline constexpr std::size_t kHelloReplyBytes = 8;

struct Hello {
  std::uint16_t version = kTcpProtocolVersion;
  std::uint16_t stream = 0;
  std::uint16_t streams = 1;
  CommId comm_id;
  std::uint32_t from_rank = 0;
  std::uint32_t to_rank = 0;
  std::uint32_t world_size = 0;
};

enum class HelloStatus : std::uint16_t {
  accepted = 0,
  wrong_version = 1,
  wrong_communicator = 2,
  wrong_rank = 3,
  wrong_world_size = 4,
  wrong_streams = 5,
};
std::string_view describe(HelloStatus status);

std::array<std::byte, kHelloBytes> encode_hello(const Hello& hello);
/// Throws ProtocolMismatch when the bytes are not a braid Hello (wrong magic,
/// e.g. an HTTP request or another program). Version and ids are checked by
/// check_hello, so a braid peer of another version gets a polite refusal.
Hello decode_hello(std::span<const std::byte> bytes);
/// What the accepting rank answers to `hello`.
HelloStatus check_hello(const Hello& hello, const CommId& comm_id, int my_rank, int world_size, int streams);

std::array<std::byte, kHelloReplyBytes> encode_reply(HelloStatus status);
HelloStatus decode_reply(std::span<const std::byte> bytes);

}  // namespace braid
