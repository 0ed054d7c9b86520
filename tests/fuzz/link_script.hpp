// LinkScript: the input of fuzz_tcp_link, a few receives to post on a TcpLink
// and the bytes its peer sends on each socket. It knows nothing of the frame
// format (the seeds are written by a real TcpLink sending), so it stays valid
// while that format changes.
//
// Layout, little-endian; every input is a script (missing bytes read as 0):
//
//   u8   bit 0: two sockets (else one); bits 1-2: receives - 1 (at most 3)
//   u8   chunk: 0, the peer writes everything at once; else it writes at most
//        this many bytes per socket between two progress() calls (for a few
//        turns, then the rest), so headers and payloads arrive in pieces
//   per receive, 30 bytes:
//     u8   bit 0: recv_reduce (else recv); bit 1: in place; bits 2-7: data type (mod 10)
//     u8   reduce op (mod 5)
//     u32  message bytes: as is up to kMaxRecvBytes, else mod 4097 (most random
//          values are large, and a run that allocates megabytes is a slow run);
//          rounded down to whole elements for recv_reduce
//     u64  tag id
//     u8[16] tag context
//   u32  how many of the remaining bytes go to socket 0; the rest go to socket 1
//   ...  the bytes
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "braid/types.hpp"
#include "transport/transport.hpp"

namespace braid::fuzz {

/// 1 MiB: above TcpLink::kStripeMinBytes, so two sockets stripe a message.
inline constexpr std::size_t kMaxRecvBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxScriptRecvs = 3;

struct ScriptedRecv {
  bool reduce = false;
  bool in_place = false;
  DataType type = DataType::u8;
  ReduceOp op = ReduceOp::sum;
  std::uint32_t bytes = 0;
  std::uint64_t tag_id = 0;
  std::array<std::byte, 16> tag_context{};
};

struct LinkScript {
  bool two_sockets = false;
  std::size_t chunk = 0;  // 0: all at once
  std::vector<ScriptedRecv> recvs;
  std::array<std::vector<std::byte>, 2> sent;  // what the peer sends on socket 0 and 1
};

inline Tag tag_of(const ScriptedRecv& r) { return Tag{r.tag_id, r.tag_context}; }

namespace script_detail {

class Cursor {
 public:
  explicit Cursor(std::span<const std::byte> in) : in_(in) {}
  std::uint64_t le(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }
  std::uint8_t byte() { return pos_ < in_.size() ? static_cast<std::uint8_t>(in_[pos_++]) : 0; }
  std::span<const std::byte> rest() const { return in_.subspan(std::min(pos_, in_.size())); }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

inline void put_le(std::vector<std::byte>& out, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

}  // namespace script_detail

inline LinkScript parse_link_script(std::span<const std::byte> in) {
  script_detail::Cursor c(in);
  LinkScript s;
  std::uint8_t flags = c.byte();
  s.two_sockets = (flags & 1) != 0;
  std::size_t count = std::min<std::size_t>(((flags >> 1) & 3) + 1, kMaxScriptRecvs);
  s.chunk = c.byte();
  for (std::size_t i = 0; i < count; ++i) {
    ScriptedRecv r;
    std::uint8_t kind = c.byte();
    r.reduce = (kind & 1) != 0;
    r.in_place = (kind & 2) != 0;
    r.type = static_cast<DataType>((kind >> 2) % kDataTypeCount);
    r.op = static_cast<ReduceOp>(c.byte() % kReduceOpCount);
    auto bytes = static_cast<std::size_t>(c.le(4));
    if (bytes > kMaxRecvBytes) bytes %= 4097;
    if (r.reduce) bytes -= bytes % size_of(r.type);
    r.bytes = static_cast<std::uint32_t>(bytes);
    r.tag_id = c.le(8);
    for (auto& b : r.tag_context) b = static_cast<std::byte>(c.byte());
    s.recvs.push_back(r);
  }
  std::size_t split = c.le(4);
  auto rest = c.rest();
  if (!s.two_sockets) split = rest.size();
  split = std::min(split, rest.size());
  s.sent[0].assign(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(split));
  s.sent[1].assign(rest.begin() + static_cast<std::ptrdiff_t>(split), rest.end());
  return s;
}

inline std::vector<std::byte> encode_link_script(const LinkScript& s) {
  using script_detail::put_le;
  std::vector<std::byte> out;
  std::size_t count = std::clamp<std::size_t>(s.recvs.size(), 1, kMaxScriptRecvs);
  put_le(out, (s.two_sockets ? 1u : 0u) | ((count - 1) << 1), 1);
  put_le(out, std::min<std::size_t>(s.chunk, 255), 1);
  for (std::size_t i = 0; i < count; ++i) {
    ScriptedRecv r = i < s.recvs.size() ? s.recvs[i] : ScriptedRecv{};
    put_le(out, (r.reduce ? 1u : 0u) | (r.in_place ? 2u : 0u) | (static_cast<unsigned>(r.type) << 2), 1);
    put_le(out, static_cast<unsigned>(r.op), 1);
    put_le(out, r.bytes, 4);
    put_le(out, r.tag_id, 8);
    out.insert(out.end(), r.tag_context.begin(), r.tag_context.end());
  }
  put_le(out, s.sent[0].size(), 4);
  out.insert(out.end(), s.sent[0].begin(), s.sent[0].end());
  out.insert(out.end(), s.sent[1].begin(), s.sent[1].end());
  return out;
}

}  // namespace braid::fuzz
