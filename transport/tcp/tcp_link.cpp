#include "transport/tcp/tcp_link.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>

#include "core/check.hpp"
#include "core/poller.hpp"
#include "core/reduce.hpp"
#include "core/text.hpp"

namespace braid {

static_assert(std::endian::native == std::endian::little,
              "frame headers are sent in host order; braid supports little-endian hosts");

namespace {
constexpr std::size_t kHeaderBytes = sizeof(MessageHeader);
constexpr int kMaxIov = 64;

std::vector<Socket> in_clear(std::vector<Fd> fds) {
  std::vector<Socket> sockets;
  for (auto& fd : fds) sockets.emplace_back(std::move(fd));
  return sockets;
}

}  // namespace

TcpLink::TcpLink(int self_rank, int peer_rank, std::string peer_name, std::vector<Fd> sockets)
    : TcpLink(self_rank, peer_rank, std::move(peer_name), in_clear(std::move(sockets))) {}

TcpLink::TcpLink(int self_rank, int peer_rank, std::string peer_name, std::vector<Socket> sockets)
    : self_(self_rank), peer_(peer_rank), peer_name_(std::move(peer_name)) {
  BRAID_CHECK(!sockets.empty());
  streams_.resize(sockets.size());
  for (std::size_t i = 0; i < sockets.size(); ++i) {
    streams_[i].socket = std::move(sockets[i]);
    streams_[i].bounce.resize(kBounceBytes);
    if (streams_[i].socket.tls()) streams_[i].stage.reserve(kTlsStageBytes);
  }
}

TcpLink::~TcpLink() = default;

void TcpLink::attach(Poller& poller) {
  for (auto& s : streams_) poller.add(s.fd());
}

void TcpLink::detach(Poller& poller) {
  for (auto& s : streams_) poller.remove(s.fd());
}

void TcpLink::goodbye() {
  if (broken_) return;
  // On every stream, so that whichever the peer reads next tells it. The
  // frame is tiny and the streams idle: it fits the socket at once, except
  // where the peer stopped reading, which the grace bounds.
  FrameHeader header{kGoodbyeTag, 0, {}};
  for (auto& s : streams_) {
    try {
      s.socket.send_all(&header, kHeaderBytes, Deadline::after(kAbortGrace), "goodbye");
    } catch (const Error&) {
    }
  }
}

bool TcpLink::busy() const {
  for (const auto& s : streams_)
    if (!s.sends.empty() || !s.recvs.empty()) return true;
  return false;
}

std::size_t TcpLink::parts_for(std::size_t bytes) const {
  return bytes >= kStripeMinBytes ? streams_.size() : 1;
}

std::size_t TcpLink::cut(std::size_t bytes, std::size_t parts, std::size_t i) const {
  if (i >= parts) return bytes;
  std::size_t at = (bytes / parts) * i;
  return at & ~std::size_t{63};
}

std::string TcpLink::where(std::string_view action, const Tag& tag) const {
  return cat("rank ", self_, ": ", action, " ", peer_name_, " (", describe_tag(tag), ")");
}

Request TcpLink::send(ConstMemView src, Tag tag) {
  Request request = requests_.take();
  if (broken_) {
    request->fail(broken_);
    return request;
  }
  std::size_t parts = parts_for(src.bytes);
  auto message = std::make_shared<Message>(Message{request, static_cast<int>(parts)});
  for (std::size_t i = 0; i < parts; ++i) {
    std::size_t begin = cut(src.bytes, parts, i), end = cut(src.bytes, parts, i + 1);
    streams_[i].sends.push_back(SendPart{message, FrameHeader{tag.id, end - begin, tag.context}, src.data + begin});
  }
  return request;
}

Request TcpLink::recv(MemView dst, Tag tag) { return post_recv(dst, nullptr, DataType::u8, ReduceOp::sum, tag); }

Request TcpLink::recv_reduce(MemView dst, ConstMemView local, DataType type, ReduceOp op, Tag tag) {
  BRAID_CHECK(local.bytes == dst.bytes, "recv_reduce operands differ in size");
  BRAID_CHECK(dst.bytes % size_of(type) == 0, "recv_reduce of a partial element");
  return post_recv(dst, local.data, type, op, tag);
}

Request TcpLink::post_recv(MemView dst, const std::byte* local, DataType type, ReduceOp op, Tag tag) {
  Request request = requests_.take();
  if (broken_) {
    request->fail(broken_);
    return request;
  }
  std::size_t parts = parts_for(dst.bytes);
  auto message = std::make_shared<Message>(Message{request, static_cast<int>(parts)});
  for (std::size_t i = 0; i < parts; ++i) {
    std::size_t begin = cut(dst.bytes, parts, i), end = cut(dst.bytes, parts, i + 1);
    RecvPart part{message, tag, dst.data + begin, local ? local + begin : nullptr, end - begin, type, op};
    streams_[i].recvs.push_back(part);
  }
  return request;
}

void TcpLink::finish_part(const std::shared_ptr<Message>& message) {
  if (--message->parts_left == 0) message->request->complete();
}

void TcpLink::fail(std::exception_ptr error) {
  if (!broken_) broken_ = error;
  for (auto& s : streams_) {
    for (auto& p : s.sends) p.message->request->fail(broken_);
    for (auto& p : s.recvs) p.message->request->fail(broken_);
    s.sends.clear();
    s.recvs.clear();
    s.stage.clear();  // the parts it covered are gone
    s.stage_sent = 0;
    s.staged_whole = 0;
    s.staged_header = false;
  }
}

bool TcpLink::progress() {
  bool moved = false;
  try {
    for (auto& s : streams_) {
      if (!s.sends.empty()) moved |= s.socket.tls() ? progress_tls_sends(s) : progress_sends(s);
      if (!s.recvs.empty()) moved |= progress_recvs(s);
    }
  } catch (const Error&) {
    fail(std::current_exception());
    moved = true;
  }
  return moved;
}

bool TcpLink::progress_sends(Stream& s) {
  bool moved = false;
  while (!s.sends.empty()) {
    iovec iov[kMaxIov];
    int count = 0;
    for (auto it = s.sends.begin(); it != s.sends.end() && count + 2 <= kMaxIov; ++it) {
      if (it->sent < kHeaderBytes) {
        iov[count++] = {reinterpret_cast<char*>(&it->header) + it->sent, kHeaderBytes - it->sent};
        if (it->header.bytes > 0) iov[count++] = {const_cast<std::byte*>(it->data), it->header.bytes};
      } else {
        iov[count++] = {const_cast<std::byte*>(it->data) + (it->sent - kHeaderBytes),
                        it->header.bytes - (it->sent - kHeaderBytes)};
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(count);
    ssize_t n = ::sendmsg(s.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      const FrameHeader& h = s.sends.front().header;
      int err = errno;
      std::string why = peer_notice(s);
      throw PeerLost(cat(where("lost the connection to", Tag{h.tag, h.context}), " while sending: ",
                         why.empty() ? errno_text(err) : why));
    }
    moved = true;
    auto left = static_cast<std::size_t>(n);
    std::size_t requested = 0;
    for (int i = 0; i < count; ++i) requested += iov[i].iov_len;
    while (left > 0) {
      SendPart& part = s.sends.front();
      std::size_t total = kHeaderBytes + part.header.bytes;
      std::size_t take = std::min(left, total - part.sent);
      part.sent += take;
      left -= take;
      if (part.sent == total) {
        auto message = part.message;
        s.sends.pop_front();
        finish_part(message);
      }
    }
    // Zero-length parts are whole once their header is out.
    while (!s.sends.empty() && s.sends.front().sent == kHeaderBytes && s.sends.front().header.bytes == 0) {
      auto message = s.sends.front().message;
      s.sends.pop_front();
      finish_part(message);
    }
    if (static_cast<std::size_t>(n) < requested) break;  // the socket buffer is full
  }
  return moved;
}

// The TLS send path: the stage first, else the front part's payload from the
// caller's memory, else stage the next parts. A write that would block is
// retried with the same bytes, as OpenSSL requires.
bool TcpLink::progress_tls_sends(Stream& s) {
  TlsSession& tls = *s.socket.tls();
  bool moved = false;
  while (true) {
    const std::byte* data = nullptr;
    std::size_t length = 0;
    const bool staged = !s.stage.empty();
    if (staged) {
      data = s.stage.data() + s.stage_sent;
      length = s.stage.size() - s.stage_sent;
    } else {
      if (s.sends.empty()) break;
      SendPart& front = s.sends.front();
      if (front.sent == 0) {
        stage_front_parts(s);
        continue;
      }
      std::size_t offset = front.sent - kHeaderBytes;
      data = front.data + offset;
      length = std::min(front.header.bytes - offset, kTlsChunkBytes);
    }
    long n = 0;
    try {
      n = tls.write(data, length);
    } catch (const Error& e) {
      const FrameHeader& h = s.sends.front().header;
      throw PeerLost(cat(where("lost the connection to", Tag{h.tag, h.context}), " while sending: ", e.what()));
    }
    s.tls_write_pending = n == TlsSession::kWouldBlock;
    if (s.tls_write_pending) break;
    moved = true;
    auto put = static_cast<std::size_t>(n);
    if (staged) {
      s.stage_sent += put;
      if (s.stage_sent < s.stage.size()) continue;
      for (std::size_t i = 0; i < s.staged_whole; ++i) {
        auto message = s.sends.front().message;
        s.sends.pop_front();
        finish_part(message);
      }
      if (s.staged_header) s.sends.front().sent = kHeaderBytes;
      s.stage.clear();
      s.stage_sent = 0;
      s.staged_whole = 0;
      s.staged_header = false;
    } else {
      SendPart& front = s.sends.front();
      front.sent += put;
      if (front.sent == kHeaderBytes + front.header.bytes) {
        auto message = front.message;
        s.sends.pop_front();
        finish_part(message);
      }
    }
  }
  return moved;
}

// Copies the headers of the parts at the front of the queue (none of them
// started), and their payloads up to kTlsInlineBytes, into the empty stage; a
// larger payload ends the stage after its header.
void TcpLink::stage_front_parts(Stream& s) {
  for (auto& part : s.sends) {
    std::size_t payload = part.header.bytes;
    bool whole = payload <= kTlsInlineBytes;
    std::size_t need = kHeaderBytes + (whole ? payload : 0);
    if (!s.stage.empty() && s.stage.size() + need > kTlsStageBytes) break;
    auto* header = reinterpret_cast<const std::byte*>(&part.header);
    s.stage.insert(s.stage.end(), header, header + kHeaderBytes);
    if (!whole) {
      s.staged_header = true;
      break;
    }
    s.stage.insert(s.stage.end(), part.data, part.data + payload);
    ++s.staged_whole;
  }
}

ssize_t TcpLink::tls_readv(TlsSession& tls, const iovec* iov, int count) {
  std::size_t total = 0;
  for (int i = 0; i < count; ++i) {
    auto* p = static_cast<std::byte*>(iov[i].iov_base);
    std::size_t filled = 0;
    while (filled < iov[i].iov_len) {
      long n = tls.read(p + filled, iov[i].iov_len - filled);
      if (n > 0) {
        filled += static_cast<std::size_t>(n);
        continue;
      }
      if (total + filled > 0) return static_cast<ssize_t>(total + filled);
      if (n == 0) return 0;
      errno = EAGAIN;
      return -1;
    }
    total += filled;
  }
  return static_cast<ssize_t>(total);
}

void TcpLink::send_withdrawal(Socket& socket, bool failed, std::string_view why) {
  const std::string text(failed ? why.substr(0, kMaxAbortReason) : std::string_view());
  const MessageHeader header{failed ? kAbortTag : kGoodbyeTag, text.size(), {}};
  std::vector<std::byte> notice(sizeof header + text.size());
  std::memcpy(notice.data(), &header, sizeof header);
  if (!text.empty()) std::memcpy(notice.data() + sizeof header, text.data(), text.size());
  try {
    socket.send_all(notice.data(), notice.size(), Deadline::after(kAbortGrace), "withdraw notice");
  } catch (const Error&) {
  }
}

void TcpLink::abort(std::string_view reason) {
  std::string text(reason.substr(0, kMaxAbortReason));
  for (auto& s : streams_) {
    bool mid_frame = !s.sends.empty() && s.sends.front().sent > 0;
    FrameHeader header{kAbortTag, text.size(), {}};
    if (TlsSession* tls = s.socket.tls()) {
      // Over TLS: where a write waits to be retried, or a staged frame is
      // partly out, another record cannot be slipped in; skip the notice.
      if (!mid_frame && s.stage.empty() && !s.tls_write_pending) {
        std::vector<std::byte> notice(kHeaderBytes + text.size());
        std::memcpy(notice.data(), &header, kHeaderBytes);
        std::memcpy(notice.data() + kHeaderBytes, text.data(), text.size());
        try {
          (void)tls->write(notice.data(), notice.size());
        } catch (const Error&) {
        }
      }
    } else {
      if (mid_frame) {
        // Finish the half-sent frame (briefly, blocking) so the notice can
        // follow it: during a large transfer a frame is almost always half
        // out, and without the notice the peer only sees a closed socket.
        SendPart& part = s.sends.front();
        try {
          Deadline grace = Deadline::after(kAbortGrace);
          if (part.sent < kHeaderBytes)
            send_all(s.fd(), reinterpret_cast<const std::byte*>(&part.header) + part.sent, kHeaderBytes - part.sent, grace,
                     "abort notice");
          std::size_t done = part.sent > kHeaderBytes ? part.sent - kHeaderBytes : 0;
          send_all(s.fd(), part.data + done, part.header.bytes - done, grace, "abort notice");
          mid_frame = false;
        } catch (const Error&) {
        }
      }
      if (mid_frame) {
        ::shutdown(s.fd(), SHUT_RDWR);
        continue;
      }
      std::vector<std::byte> notice(kHeaderBytes + text.size());
      std::memcpy(notice.data(), &header, kHeaderBytes);
      std::memcpy(notice.data() + kHeaderBytes, text.data(), text.size());
      try {
        send_all(s.fd(), notice.data(), notice.size(), Deadline::after(kAbortGrace), "abort notice");
      } catch (const Error&) {
      }
    }
    ::shutdown(s.fd(), SHUT_RDWR);
  }
  fail(std::make_exception_ptr(Aborted(cat("rank ", self_, ": link to ", peer_name_, " closed: ", reason))));
}

std::optional<std::string> TcpLink::departed() {
  if (busy() || broken_) return std::nullopt;
  for (auto& s : streams_) {
    if (s.socket.tls() != nullptr) continue;
    FrameHeader header{};
    const ssize_t n = ::recv(s.fd(), &header, kHeaderBytes, MSG_PEEK | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(kHeaderBytes) && header.tag == kGoodbyeTag) continue;  // it finalized: no failure
    std::string why = peer_notice(s);
    if (!why.empty()) return cat(describe_peer(), ": ", why);
    if (n == 0) return cat(describe_peer(), ": it closed the connection without a goodbye (its process exited or failed)");
  }
  return std::nullopt;
}

std::optional<Tag> TcpLink::waiting_tag() {
  if (busy() || broken_) return std::nullopt;
  // Idle, so no frame is half-read: the next inbound bytes are a header.
  for (auto& s : streams_) {
    if (s.socket.tls() != nullptr) return std::nullopt;
    FrameHeader header{};
    if (::recv(s.fd(), &header, kHeaderBytes, MSG_PEEK | MSG_DONTWAIT) == static_cast<ssize_t>(kHeaderBytes) &&
        header.tag != kAbortTag && header.tag != kGoodbyeTag)
      return header.as_tag();
  }
  return std::nullopt;
}

std::string TcpLink::peer_notice(Stream& s) {
  // Only in clear, and only when no received frame is half-read, can the
  // next inbound bytes be a notice rather than the middle of something else.
  if (s.socket.tls() != nullptr || (!s.recvs.empty() && s.recvs.front().header_got > 0)) return {};
  FrameHeader header{};
  ssize_t n = ::recv(s.fd(), &header, kHeaderBytes, MSG_PEEK | MSG_DONTWAIT);
  if (n != static_cast<ssize_t>(kHeaderBytes) || header.tag != kAbortTag) return {};
  std::vector<std::byte> frame(kHeaderBytes + std::min<std::size_t>(header.bytes, kMaxAbortReason));
  try {
    s.socket.recv_all(frame.data(), frame.size(), Deadline::after(kAbortGrace), "abort notice");
  } catch (const Error&) {
    return {};
  }
  return cat("it gave up: ", std::string_view(reinterpret_cast<const char*>(frame.data()) + kHeaderBytes,
                                              frame.size() - kHeaderBytes));
}

void TcpLink::read_abort_notice(Stream& s, const RecvPart& part, std::span<const std::byte> early) {
  std::size_t length = std::min<std::size_t>(part.header.bytes, kMaxAbortReason);
  std::size_t have = std::min(length, early.size());
  std::string reason(reinterpret_cast<const char*>(early.data()), have);
  reason.resize(length);
  // The notice was sent in one piece just before the peer closed; take what
  // arrived within a short grace.
  try {
    s.socket.recv_all(reason.data() + have, length - have, Deadline::after(std::chrono::milliseconds(200)),
                      "abort notice");
  } catch (const Error&) {
    reason.resize(have);
    reason += " (rest of the reason not received)";
  }
  throw PeerLost(cat(where("was told by", part.tag), " that it gave up: ", reason));
}

void TcpLink::absorb_payload(Stream& s, RecvPart& part, std::size_t n) {
  if (part.local == nullptr) {
    part.done += n;
    return;
  }
  s.bounce_fill += n;
  std::size_t element = size_of(part.type);
  std::size_t whole = s.bounce_fill - s.bounce_fill % element;
  if (whole == 0) return;
  reduce(part.type, part.op, part.dst + part.done, part.local + part.done, s.bounce.data(), whole / element);
  part.done += whole;
  std::size_t rest = s.bounce_fill - whole;
  if (rest > 0) std::memmove(s.bounce.data(), s.bounce.data() + whole, rest);
  s.bounce_fill = rest;
}

bool TcpLink::progress_recvs(Stream& s) {
  bool moved = false;
  while (!s.recvs.empty()) {
    RecvPart& part = s.recvs.front();
    iovec iov[2];
    int count = 0;
    if (part.header_got < kHeaderBytes)
      iov[count++] = {reinterpret_cast<char*>(&part.header) + part.header_got, kHeaderBytes - part.header_got};
    std::size_t pending = part.bytes - part.done - s.bounce_fill;  // payload not yet read
    // Until its header is checked, a message's payload lands in the bounce
    // buffer, never in dst: a message of another operation must not touch
    // the receiver's buffer.
    const bool staged = part.local == nullptr && part.header_got < kHeaderBytes;
    if (pending > 0) {
      if (staged)
        iov[count++] = {s.bounce.data(), std::min(pending, s.bounce.size())};
      else if (part.local == nullptr)
        iov[count++] = {part.dst + part.done, pending};
      else
        iov[count++] = {s.bounce.data() + s.bounce_fill, std::min(pending, s.bounce.size() - s.bounce_fill)};
    }
    std::size_t requested = 0;
    for (int i = 0; i < count; ++i) requested += iov[i].iov_len;
    if (requested > 0) {
      ssize_t n = 0;
      if (TlsSession* tls = s.socket.tls()) {
        try {
          n = tls_readv(*tls, iov, count);
        } catch (const Error& e) {
          throw PeerLost(cat(where("lost the connection to", part.tag), " while receiving: ", e.what()));
        }
      } else {
        n = ::readv(s.fd(), iov, count);
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        throw PeerLost(cat(where("lost the connection to", part.tag), " while receiving: ", errno_text(errno)));
      }
      if (n == 0)
        throw PeerLost(cat(where("lost the connection to", part.tag),
                           " while receiving: the peer closed the connection (did it exit or fail?)"));
      moved = true;
      auto got = static_cast<std::size_t>(n);
      std::size_t to_header = std::min(got, kHeaderBytes - part.header_got);
      part.header_got += to_header;
      if (to_header > 0 && part.header_got == kHeaderBytes) {
        if (part.header.tag == kAbortTag)
          read_abort_notice(s, part, std::span(static_cast<const std::byte*>(iov[count - 1].iov_base), got - to_header));
        if (part.header.tag == kGoodbyeTag)
          throw PeerLost(cat(where("was told by", part.tag), " that it finalized the communicator, while this rank "
                             "still waits for this message from it: the ranks ran different operations (it stopped "
                             "earlier)"));
        check_match(part.header, part.tag, part.bytes, [&] { return where("received from", part.tag); });
      }
      if (got > to_header && staged) {
        std::memcpy(part.dst + part.done, s.bounce.data(), got - to_header);
        part.done += got - to_header;
      } else if (got > to_header) {
        absorb_payload(s, part, got - to_header);
      }
      if (part.done < part.bytes && got < requested) break;  // drained for now
    }
    if (part.header_got == kHeaderBytes && part.done == part.bytes) {
      auto message = part.message;
      s.recvs.pop_front();
      finish_part(message);
    }
  }
  return moved;
}

}  // namespace braid
