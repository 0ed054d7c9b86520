#include "transport/tcp/handshake.hpp"

#include <algorithm>

#include "braid/types.hpp"
#include "core/text.hpp"
#include "core/wire.hpp"

namespace braid {

std::string_view describe(HelloStatus status) {
  switch (status) {
    case HelloStatus::accepted: return "accepted";
    case HelloStatus::wrong_version: return "protocol version differs";
    case HelloStatus::wrong_communicator: return "belongs to another communicator (another job, or a stale rank)";
    case HelloStatus::wrong_rank: return "rank numbers do not match this communicator";
    case HelloStatus::wrong_world_size: return "world size differs";
    case HelloStatus::wrong_streams: return "BRAID_TCP_STREAMS differs between the ranks";
  }
  return "unknown refusal";
}

std::array<std::byte, kHelloBytes> encode_hello(const Hello& hello) {
  WireWriter w;
  w.u32(kTcpMagic);
  w.u16(hello.version);
  w.u16(hello.stream);
  w.u16(hello.streams);
  w.u16(0);
  w.bytes(hello.comm_id.bytes);
  w.u32(hello.from_rank);
  w.u32(hello.to_rank);
  w.u32(hello.world_size);
  w.u32(0);
  std::array<std::byte, kHelloBytes> out;
  auto bytes = w.take();
  std::copy(bytes.begin(), bytes.end(), out.begin());
  return out;
}

Hello decode_hello(std::span<const std::byte> bytes) {
  WireReader r(bytes, "braid TCP hello");
  if (bytes.size() != kHelloBytes)
    throw ProtocolMismatch(cat("braid TCP hello must be ", kHelloBytes, " bytes, got ", bytes.size()));
  if (r.u32() != kTcpMagic) throw ProtocolMismatch("the connection does not speak braid's TCP protocol (bad magic)");
  Hello h;
  h.version = r.u16();
  h.stream = r.u16();
  h.streams = r.u16();
  r.u16();
  auto id = r.bytes(h.comm_id.bytes.size());
  std::copy(id.begin(), id.end(), h.comm_id.bytes.begin());
  h.from_rank = r.u32();
  h.to_rank = r.u32();
  h.world_size = r.u32();
  r.u32();
  return h;
}

HelloStatus check_hello(const Hello& hello, const CommId& comm_id, int my_rank, int world_size, int streams) {
  if (hello.version != kTcpProtocolVersion) return HelloStatus::wrong_version;
  if (hello.comm_id != comm_id) return HelloStatus::wrong_communicator;
  if (hello.world_size != static_cast<std::uint32_t>(world_size)) return HelloStatus::wrong_world_size;
  if (hello.to_rank != static_cast<std::uint32_t>(my_rank) || hello.from_rank >= hello.world_size ||
      hello.from_rank == hello.to_rank)
    return HelloStatus::wrong_rank;
  if (hello.streams != streams || hello.stream >= hello.streams) return HelloStatus::wrong_streams;
  return HelloStatus::accepted;
}

std::array<std::byte, kHelloReplyBytes> encode_reply(HelloStatus status) {
  WireWriter w;
  w.u32(kTcpMagic);
  w.u16(kTcpProtocolVersion);
  w.u16(static_cast<std::uint16_t>(status));
  std::array<std::byte, kHelloReplyBytes> out;
  auto bytes = w.take();
  std::copy(bytes.begin(), bytes.end(), out.begin());
  return out;
}

HelloStatus decode_reply(std::span<const std::byte> bytes) {
  WireReader r(bytes, "braid TCP hello reply");
  if (bytes.size() != kHelloReplyBytes) throw ProtocolMismatch("braid TCP hello reply has the wrong size");
  if (r.u32() != kTcpMagic) throw ProtocolMismatch("the peer answered with something that is not braid's TCP protocol");
  r.u16();
  auto status = r.u16();
  if (status > static_cast<std::uint16_t>(HelloStatus::wrong_streams))
    throw ProtocolMismatch(cat("braid TCP hello reply has unknown status ", status));
  return static_cast<HelloStatus>(status);
}

}  // namespace braid
