// The transport interface (DESIGN.md): a Transport connects this rank to a
// peer and returns a Link; a Link moves tagged messages to and from that one
// peer. Every call returns at once. Completion is observed through a Request
// after progress(), which the communicator's progress engine calls; a Link
// never blocks and never knows which collective is running.
//
// Matching rule: messages on a Link are matched to receives in the order
// they were sent and posted (the k-th send meets the k-th receive). Requests
// may be seen to complete out of that order (a link striped over several
// sockets finishes a small later message before a large earlier one), so
// callers check each request. The tag of each
// incoming message must equal the tag of the receive it lands in; anything
// else is a ProtocolMismatch, so a late or foreign message is detected rather
// than silently reduced. A receive must name the exact size of the message.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/types.hpp"
#include "core/comm_id.hpp"
#include "core/deadline.hpp"
#include "core/device.hpp"
#include "core/rank_info.hpp"

namespace braid {

class Poller;

/// A region of memory a link reads from or writes to.
struct MemView {
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  MemKind kind = MemKind::host;
};
struct ConstMemView {
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  MemKind kind = MemKind::host;
};

/// Identifies one message. `id` is the operation's sequence number and the
/// index of the step inside its schedule; `context` is 16 bytes that the
/// layer above fills with a description of the operation (which collective,
/// type, operator, count, root). Transports carry both and refuse a message
/// whose id, context or size differs from the receive's, so ranks that run
/// different operations fail with a TagMismatch instead of mixing data.
struct Tag {
  std::uint64_t id = 0;
  std::array<std::byte, 16> context{};
  bool operator==(const Tag&) const = default;
};
constexpr Tag make_tag(std::uint32_t sequence, std::uint32_t index, const std::array<std::byte, 16>& context = {}) {
  return Tag{(static_cast<std::uint64_t>(sequence) << 32) | index, context};
}
std::string describe_tag(const Tag& tag);  // "op #17 step 3"

/// A message arrived that is not the one a receive expected: thrown by links
/// so the layer that knows what the contexts mean can explain the mismatch.
class TagMismatch : public ProtocolMismatch {
 public:
  TagMismatch(const std::string& message, Tag expected_tag, std::size_t expected_size, Tag received_tag,
              std::size_t received_size)
      : ProtocolMismatch(message), expected(expected_tag), expected_bytes(expected_size), received(received_tag),
        received_bytes(received_size) {}
  Tag expected;
  std::size_t expected_bytes;
  Tag received;
  std::size_t received_bytes;
};

/// Completion state of one send or receive, shared between the Link that
/// works on it and whoever waits for it.
class RequestState {
 public:
  bool done() const { return done_; }
  bool failed() const { return error_ != nullptr; }
  void rethrow_if_failed() const {
    if (error_) std::rethrow_exception(error_);
  }
  std::exception_ptr error() const { return error_; }

  void complete() { done_ = true; }
  void fail(std::exception_ptr error) {
    if (!error_) error_ = std::move(error);
    done_ = true;
  }
  /// Back to not done, for reuse (RequestPool).
  void reset() {
    done_ = false;
    error_ = nullptr;
  }

 private:
  bool done_ = false;
  std::exception_ptr error_;
};
using Request = std::shared_ptr<RequestState>;

/// The requests of one link, reused once nobody but the pool holds them, so
/// that a small message allocates nothing. Used by the driving thread only,
/// like the link.
class RequestPool {
 public:
  Request take() {
    for (auto& r : kept_)
      if (r.use_count() == 1) {
        r->reset();
        return r;
      }
    auto r = std::make_shared<RequestState>();
    if (kept_.size() < kKept) kept_.push_back(r);
    return r;
  }

 private:
  static constexpr std::size_t kKept = 8;
  std::vector<Request> kept_;
};

/// One connected peer.
class Link {
 public:
  virtual ~Link() = default;
  virtual int peer() const = 0;
  /// Queues `src` to be sent as one message with `tag`. src must stay valid
  /// and unchanged until the request is done.
  virtual Request send(ConstMemView src, Tag tag) = 0;
  /// Queues a receive of exactly dst.bytes into dst.
  virtual Request recv(MemView dst, Tag tag) = 0;
  /// Queues a receive that combines as it arrives: dst[i] = local[i] op in[i].
  /// dst may equal local. The size of the message is dst.bytes. Only called
  /// when can_reduce() holds.
  virtual Request recv_reduce(MemView dst, ConstMemView local, DataType type, ReduceOp op, Tag tag) = 0;
  /// Whether this link reduces as it receives. When it does not (a transport
  /// that only moves bytes, or memory it cannot read), the executor receives
  /// into scratch and reduces there itself.
  virtual bool can_reduce() const { return true; }
  /// Whether send and receive take memory of `kind` (every link takes host
  /// memory; a link that takes device memory reads and writes it itself).
  /// Device buffers over a link that does not are staged through host memory
  /// by the communicator.
  virtual bool accepts(MemKind kind) const { return kind == MemKind::host; }

  /// The short path, for small host messages (the executor uses it for
  /// messages of at most short_message_bytes()): a transfer done at once,
  /// without a request or a queue, when nothing of its direction is queued on
  /// the link before it. It keeps the matching rule (k-th send meets k-th
  /// receive, tag and size checked before dst is touched).
  ///   send_now: true when `src` is in the peer's hands (src may be reused);
  ///             false when it cannot go now (no room, something queued):
  ///             nothing was sent, and the caller uses send().
  ///   recv_now: true when the message had arrived whole and is now in dst
  ///             (copied, or dst = local op message when `local` is not
  ///             null); false when it has not arrived (dst untouched). It
  ///             throws what a failed receive would (TagMismatch, PeerLost).
  /// A caller that polls recv_now instead of posting recv() must post the
  /// receive before it sleeps: only a queued receive makes busy() true and
  /// brings the link's news to the sleeping engine.
  /// 0: the link has no short path (the defaults refuse every message).
  virtual std::size_t short_message_bytes() const { return 0; }
  virtual bool send_now(ConstMemView src, const Tag& tag) {
    (void)src, (void)tag;
    return false;
  }
  virtual bool recv_now(MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag) {
    (void)dst, (void)local, (void)type, (void)op, (void)tag;
    return false;
  }

  /// Moves as many bytes as the sockets take without blocking; completes or
  /// fails requests. Returns true if anything moved.
  virtual bool progress() = 0;
  /// True while any send or receive is queued and not done.
  virtual bool busy() const = 0;
  /// Registers the descriptors this link waits on with the engine's poller.
  virtual void attach(Poller& poller) = 0;
  /// Tells the peer, best effort and without blocking, that this rank gave up
  /// on the communicator and why, then closes the connection. The peer's
  /// pending and later requests fail with PeerLost carrying `reason`, so a
  /// failure spreads to every rank in about one hop per link instead of each
  /// rank waiting out its timeout.
  virtual void abort(std::string_view reason) { (void)reason; }
  /// On an idle link (nothing queued): the peer's word that it left, if it
  /// came (an abort notice, or the end of the connection), read without
  /// blocking; nullopt otherwise. Lets a rank that waits for another peer (a
  /// connection being made) learn at once that this one gave up.
  virtual std::optional<std::string> departed() { return std::nullopt; }
  /// On an idle link: the tag of the peer's next message if it arrived
  /// and no receive took it, read without taking it (nullopt if none, or if
  /// the link cannot tell: the default). Lets a rank that waits for another
  /// peer to connect see that a linked peer already runs another operation.
  virtual std::optional<Tag> waiting_tag() { return std::nullopt; }
  /// True while the peer has not made its side of this link yet (shm: it has
  /// not opened the pair's segment), so it could not tell this rank through
  /// the link that it gave up; the engine then looks for its notice in the
  /// store.
  virtual bool one_sided() { return false; }
  /// "rank 1 (host-a, 10.0.0.2:40123)": names the peer in errors.
  virtual std::string describe_peer() const = 0;
};

/// A peer to connect to: who it is and the address its transport published.
struct PeerRef {
  const RankInfo* info;
  std::span<const std::byte> address;
};

/// Called while connecting to `peer`, about every 10 ms, and with urgent set
/// when the transport learnt the peer is probably gone (so a reason it
/// published can be read now): throws to give up (Aborted, or PeerLost
/// carrying the reason).
using PeerWatch = std::function<void(int peer, bool urgent)>;

/// One kind of connection (tcp, shm, ucx, cuda_ipc) for one communicator: it
/// publishes this rank's address and connects Links. What a kind shares
/// across the communicators of a process (shm's doorbell, a UCX worker) is
/// its per-process context, which each Transport of that kind holds.
///
/// Sleeping (the progress engine, DESIGN.md): when nothing moved, the engine
/// calls arm() on every transport with a busy link; arm() returns false when
/// news already waits, or when the transport wants polling a while longer
/// (ucx while a transfer moves): then nobody sleeps. When all armed, the engine
/// sleeps on its Poller if every armed transport wakes_poller() (its links
/// registered fds through Link::attach), or on the one transport that does
/// not (wait()), or, when both kinds are armed, in short alternating naps on
/// each, never longer than kMixedNap on either. Any thread may call wake().
class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  /// What peers need to connect to this rank; published through the store.
  virtual std::vector<std::byte> local_address() const = 0;
  /// Connects to every peer of `peers` (each calls this for this rank too),
  /// in an order that cannot deadlock. Throws naming the peer it could not
  /// reach; `watch` lets the caller give up early.
  virtual std::vector<std::unique_ptr<Link>> connect_all(std::span<const PeerRef> peers, Deadline deadline,
                                                         const PeerWatch& watch) = 0;
  /// Sets who this transport speaks for, before any connection: a split
  /// communicator makes its transports before it knows its rank there.
  virtual void set_identity(int rank, int world_size, const CommId& comm_id) = 0;
  /// "tcp (2 streams)": for the communicator's description.
  virtual std::string describe() const { return std::string(name()); }
  /// After a failure: refuse new connections, so a peer that tries learns
  /// at once that this rank is gone.
  virtual void stop_accepting() {}
  /// Work of the transport itself, outside any link (liveness of peers);
  /// true if it changed anything. Called by the engine when nothing moved.
  virtual bool progress() { return false; }
  /// The smallest slice worth one message on this transport, whether or not
  /// this rank uses it (every rank must cut a collective alike): pipelined
  /// schedules cut buffers no finer while a pair of the communicator uses
  /// it. 0: no floor beyond the engine's own.
  virtual std::size_t min_slice_bytes() const { return 0; }

  static constexpr std::chrono::microseconds kMixedNap{200};
  /// Whether news on this transport's links wakes the engine's Poller.
  virtual bool wakes_poller() const { return true; }
  virtual bool arm() { return true; }
  virtual void disarm() {}
  /// After arm() returned true (transports that do not wake the poller):
  /// sleeps until news, wake() or the timeout.
  virtual void wait(std::chrono::microseconds timeout) { (void)timeout; }
  /// Ends a wait() now; safe from any thread.
  virtual void wake() {}
};

}  // namespace braid
