// TcpLink: a Link over one or more connected, non-blocking TCP sockets.
//
// Each message travels as a 32-byte frame header (tag id, payload bytes, tag
// context) and its payload. A message of at least kStripeMinBytes is cut into one part per
// socket (boundaries on 64-byte multiples, so no element of any type is
// split) and every part carries its own header; smaller messages go on socket
// 0. Both ends compute the same cut from the size, so each socket stays a
// simple FIFO. Sends gather as many queued parts as fit into one sendmsg;
// a receive reads header and payload with one readv where it can.
//
// A rank that gives up sends, where no frame is half-written, an abort
// notice: a frame whose tag is kAbortTag and whose payload is the reason. The
// peer turns it into PeerLost carrying that reason instead of a bare EOF.
//
// recv_reduce never lands the incoming bytes in the destination: they arrive
// in a small per-socket bounce buffer that stays in cache and are combined
// with the local operand element by element as they come in, so the
// reduction of one slice overlaps the transfer of the next.
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/socket.hpp"
#include "transport/transport.hpp"

namespace braid {

class TcpLink final : public Link {
 public:
  static constexpr std::size_t kStripeMinBytes = 256 * 1024;
  static constexpr std::size_t kBounceBytes = 256 * 1024;
  static constexpr std::uint64_t kAbortTag = ~std::uint64_t{0};
  static constexpr std::size_t kMaxAbortReason = 4096;

  TcpLink(int self_rank, int peer_rank, std::string peer_name, std::vector<Fd> sockets);
  ~TcpLink() override;

  int peer() const override { return peer_; }
  Request send(ConstMemView src, Tag tag) override;
  Request recv(MemView dst, Tag tag) override;
  Request recv_reduce(MemView dst, ConstMemView local, DataType type, ReduceOp op, Tag tag) override;
  bool progress() override;
  bool busy() const override;
  void attach(Poller& poller) override;
  void abort(std::string_view reason) override;
  std::string describe_peer() const override { return peer_name_; }

 private:
  // On the wire, little-endian: u64 tag id, u64 payload bytes, 16 bytes of
  // tag context.
  struct FrameHeader {
    std::uint64_t tag;
    std::uint64_t bytes;
    std::array<std::byte, 16> context;
  };
  static_assert(sizeof(FrameHeader) == 32, "frame headers are 32 bytes on the wire");
  struct Message {
    Request request;
    int parts_left = 0;
  };
  struct SendPart {
    std::shared_ptr<Message> message;
    FrameHeader header;
    const std::byte* data;
    std::size_t sent = 0;  // of header + payload
  };
  struct RecvPart {
    std::shared_ptr<Message> message;
    Tag tag;
    std::byte* dst;
    const std::byte* local;  // non-null for recv_reduce
    std::size_t bytes;
    DataType type = DataType::u8;
    ReduceOp op = ReduceOp::sum;
    FrameHeader header{};
    std::size_t header_got = 0;
    std::size_t done = 0;  // payload bytes landed in dst
  };
  struct Stream {
    Fd fd;
    std::deque<SendPart> sends;
    std::deque<RecvPart> recvs;
    std::vector<std::byte> bounce;
    std::size_t bounce_fill = 0;
  };

  // How a message of `bytes` is cut: part i is [cut(i), cut(i + 1)).
  std::size_t parts_for(std::size_t bytes) const;
  std::size_t cut(std::size_t bytes, std::size_t parts, std::size_t i) const;
  Request post_recv(MemView dst, const std::byte* local, DataType type, ReduceOp op, Tag tag);
  bool progress_sends(Stream& s);
  bool progress_recvs(Stream& s);
  void finish_part(const std::shared_ptr<Message>& message);
  void check_header(const RecvPart& part) const;
  // `early` holds the first bytes of the notice, read together with its header.
  [[noreturn]] void read_abort_notice(Stream& s, const RecvPart& part, std::span<const std::byte> early);
  void absorb_payload(Stream& s, RecvPart& part, std::size_t n);
  void fail(std::exception_ptr error);
  std::string where(std::string_view action, const Tag& tag) const;

  int self_;
  int peer_;
  std::string peer_name_;
  std::vector<Stream> streams_;
  std::exception_ptr broken_;
};

}  // namespace braid
