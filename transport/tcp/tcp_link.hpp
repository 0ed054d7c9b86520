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
// peer turns it into PeerLost carrying that reason instead of a bare EOF. A
// rank that finalizes in order sends a goodbye (kGoodbyeTag, no payload)
// before it closes: the peer's departed() does not count that as a failure,
// and a receive posted after it fails saying the peer finalized.
//
// recv_reduce never lands the incoming bytes in the destination: they arrive
// in a small per-socket bounce buffer that stays in cache and are combined
// with the local operand element by element as they come in, so the
// reduction of one slice overlaps the transfer of the next.
//
// Under TLS (BRAID_TLS=1) a stream's socket carries a TlsSession, and the two
// syscalls above become OpenSSL calls on the same non-blocking fd, chosen by
// one branch per call (the path in clear is unchanged). TLS has no gather
// write, so frame headers, and payloads of up to kTlsInlineBytes, are copied
// into a per-stream staging buffer and leave in one SSL_write; a larger
// payload is written from the caller's memory after its header. A part is
// done only when its bytes are in the kernel, as in clear. A receive reads
// until OpenSSL says it wants the socket readable (so no edge of the edge-
// triggered poller is lost) or the posted receives are full; bytes that
// OpenSSL has buffered beyond them are read on the next progress(), which
// the executor calls whenever a receive is posted.
#pragma once

#include <sys/uio.h>

#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/socket.hpp"
#include "core/tls.hpp"
#include "transport/message.hpp"
#include "transport/transport.hpp"

namespace braid {

class TcpLink final : public Link {
 public:
  static constexpr std::size_t kStripeMinBytes = 256 * 1024;
  static constexpr std::size_t kBounceBytes = 256 * 1024;
  /// How long abort() may block to finish a half-sent frame before its notice.
  static constexpr std::chrono::milliseconds kAbortGrace{200};

  /// Frames one TLS write: headers and small payloads are copied into it.
  static constexpr std::size_t kTlsStageBytes = 64 * 1024;
  static constexpr std::size_t kTlsInlineBytes = 16 * 1024;
  /// The most a TLS write takes from a large payload at once.
  static constexpr std::size_t kTlsChunkBytes = 256 * 1024;

  /// On a connection that the peer holds as a link but this side never
  /// took: why this rank gave up (`failed`), or its goodbye, best effort
  /// and briefly, as abort() and goodbye() would have said it.
  static void send_withdrawal(Socket& socket, bool failed, std::string_view why);

  /// Over sockets in clear.
  TcpLink(int self_rank, int peer_rank, std::string peer_name, std::vector<Fd> sockets);
  /// Over sockets in clear or inside TLS (each Socket says which).
  TcpLink(int self_rank, int peer_rank, std::string peer_name, std::vector<Socket> sockets);
  ~TcpLink() override;

  int peer() const override { return peer_; }
  Request send(ConstMemView src, Tag tag) override;
  Request recv(MemView dst, Tag tag) override;
  Request recv_reduce(MemView dst, ConstMemView local, DataType type, ReduceOp op, Tag tag) override;
  bool progress() override;
  bool busy() const override;
  void attach(Poller& poller) override;
  void detach(Poller& poller) override;
  void goodbye() override;
  void abort(std::string_view reason) override;
  std::optional<std::string> departed() override;
  std::optional<Tag> waiting_tag() override;
  std::string describe_peer() const override { return peer_name_; }

 private:
  // On the wire, little-endian: the MessageHeader of transport/message.hpp.
  using FrameHeader = MessageHeader;
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
    Socket socket;
    std::deque<SendPart> sends;
    std::deque<RecvPart> recvs;
    std::vector<std::byte> bounce;
    std::size_t bounce_fill = 0;
    // TLS only: bytes of the first `staged_whole` queued parts (and, with
    // `staged_header`, the header of the next) waiting to be written.
    std::vector<std::byte> stage;
    std::size_t stage_sent = 0;
    std::size_t staged_whole = 0;
    bool staged_header = false;
    bool tls_write_pending = false;  // a write said "would block": retry it before anything else

    int fd() const { return socket.fd(); }
  };

  // How a message of `bytes` is cut: part i is [cut(i), cut(i + 1)).
  std::size_t parts_for(std::size_t bytes) const;
  std::size_t cut(std::size_t bytes, std::size_t parts, std::size_t i) const;
  Request post_recv(MemView dst, const std::byte* local, DataType type, ReduceOp op, Tag tag);
  bool progress_sends(Stream& s);
  bool progress_tls_sends(Stream& s);
  void stage_front_parts(Stream& s);
  bool progress_recvs(Stream& s);
  // readv's contract over TLS: bytes read, 0 at the end, -1 with errno EAGAIN.
  static ssize_t tls_readv(TlsSession& tls, const iovec* iov, int count);
  void finish_part(const std::shared_ptr<Message>& message);
  // After a failed send: the abort notice the peer left before closing, if
  // one waits at the head of the inbound bytes ("it gave up: ..."), else "".
  std::string peer_notice(Stream& s);
  // `early` holds the first bytes of the notice, read together with its header.
  [[noreturn]] void read_abort_notice(Stream& s, const RecvPart& part, std::span<const std::byte> early);
  void absorb_payload(Stream& s, RecvPart& part, std::size_t n);
  void fail(std::exception_ptr error);
  std::string where(std::string_view action, const Tag& tag) const;

  int self_;
  int peer_;
  std::string peer_name_;
  std::vector<Stream> streams_;
  RequestPool requests_;
  std::exception_ptr broken_;
};

}  // namespace braid
