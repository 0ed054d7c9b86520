// The transport interface (docs/architecture.md): a TransportContext (one per
// kind per process) connects a rank of a communicator to a peer and returns a
// Link; a Link moves tagged messages to and from that one peer. Every call
// returns at once. Completion is observed through a Request after
// progress(), which the process's progress engine calls; a Link never blocks
// and never knows which collective is running.
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
#include "core/eager.hpp"
#include "core/device.hpp"
#include "core/rank_info.hpp"
#include "core/socket.hpp"

namespace braid {

class Poller;
struct ContextSetup;

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
  ///   send_now: true when `src` is in the peer's hands, or copied to leave
  ///             in order behind the link's sends (src may be reused; a
  ///             failure then breaks the link); false when it cannot go now
  ///             (no room, something queued): nothing was sent, and the
  ///             caller uses send().
  ///   recv_now: true when the message had arrived whole and is now in dst
  ///             (copied, or dst = local op message when `local` is not
  ///             null, on every link with a short path, whether or not
  ///             can_reduce()); false when it has not arrived (dst
  ///             untouched). It throws what a failed receive would
  ///             (TagMismatch, PeerLost).
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
  /// Takes them out again (the link is leaving the engine: retired, closed).
  virtual void detach(Poller& poller) { (void)poller; }
  /// This rank finalized the communicator in order: tells the peer, best
  /// effort and briefly, that no more messages come from this side. Called
  /// once, with nothing queued. The peer's departed() does not report it (it
  /// is no failure); a receive the peer posts after it fails with PeerLost
  /// saying that this rank finalized (the ranks ran different operations).
  virtual void goodbye() {}
  /// Tells the peer, best effort and without blocking, that this rank gave up
  /// on the communicator and why, then closes the connection. The peer's
  /// pending and later requests fail with PeerLost carrying `reason`, so a
  /// failure spreads to every rank in about one hop per link instead of each
  /// rank waiting out its timeout.
  virtual void abort(std::string_view reason) { (void)reason; }
  /// On an idle link (nothing queued): the peer's word that it gave up, if
  /// it came (an abort notice, or the end of the connection without a
  /// goodbye), read without blocking; nullopt otherwise, and for a peer that
  /// finalized in order. Lets a rank that waits for another peer (a
  /// connection being made) learn at once that this one failed.
  virtual std::optional<std::string> departed() { return std::nullopt; }
  /// On an idle link: the tag of the peer's next message if it arrived
  /// and no receive took it, read without taking it (nullopt if none, or if
  /// the link cannot tell: the default). Lets a rank that waits for another
  /// peer to connect see that a linked peer already runs another operation.
  virtual std::optional<Tag> waiting_tag() { return std::nullopt; }
  /// True while the peer has not made its side of this link yet (shm: it has
  /// not made its link over the pair's segment, mark_pair_joined), so it
  /// could not tell this rank through the link that it gave up; the engine
  /// then looks for its notice in the store.
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

/// Who a link speaks for: one communicator of this process, this rank in it,
/// and the settings its links take (every rank of a communicator has the same).
struct LinkOwner {
  CommId comm_id;
  int rank = -1;  // -1 while not known yet: a split child before its members are counted
  int size = 0;
  int tcp_streams = 1;
  // BRAID_TCP_BUFFER: 0 leaves the kernel's autotuning alone; unset: auto,
  // tcp_context.cpp's choice per peer.
  std::optional<std::size_t> tcp_buffer_bytes = 0;
  Millis timeout{300000};
  /// Made by its members without an exchange (Comm::shrink): a peer may not
  /// have made its side yet when this side dials, and is asked again.
  bool derived = false;
};

/// One kind of connection (tcp, shm, ucx, cuda_ipc) for the whole process: a
/// context is made once per process (comm/runtime.hpp) and every
/// communicator and split child links through it. It owns what the kind
/// keeps per process (tcp: the one listener; shm: the doorbell; ucx: the
/// worker) and publishes one address for all of them; a hello or header
/// names the communicator, so one listener or worker serves them all.
///
/// Connecting never waits for another rank's progress engine: connect()
/// makes what it can now (a dial the peer's service thread answers, a
/// segment this rank creates) and returns the links that are ready; a link
/// the peer must make its side of first (it dials this rank; its greeting
/// has not come) is returned by a later call, and the context wakes the
/// engine when that may be.
///
/// Sleeping (the progress engine, docs/architecture.md): when nothing moved,
/// the engine calls arm() on every context; arm() returns false when news
/// already waits, or when the context wants polling a while longer (ucx
/// while a transfer moves): then nobody sleeps. When all armed, the engine
/// sleeps in one epoll over every link's fds and every context's wait_fd(),
/// so news on any transport wakes it at once, then calls disarm() on each.
class TransportContext {
 public:
  virtual ~TransportContext() = default;
  virtual std::string_view name() const = 0;
  /// What peers need to connect to this process, published in the store of
  /// every communicator that links through it; `advertise` is the IP that
  /// communicator advertises (tcp's listener may serve several).
  virtual std::vector<std::byte> local_address(const SockAddr& advertise) const = 0;
  /// Whether a communicator made with `setup` can link through this context
  /// (tcp: the same key and TLS, a listener that covers its address); else
  /// the runtime makes another context of this kind for it.
  virtual bool serves(const ContextSetup& setup) const {
    (void)setup;
    return true;
  }
  /// From now on peers may connect for `owner` (called before its address is
  /// published, so that no peer ever finds it unknown). Called again when a
  /// rank that was -1 becomes known.
  virtual void enroll(const LinkOwner& owner) { (void)owner; }
  /// That rank of the communicator is gone from this process: a peer that
  /// connects to it from now on is refused (`failed`: it gave up, `why`
  /// says why; else it finalized), and what was made for it and never taken
  /// is closed after a notice (`why`, or a goodbye) where the transport can
  /// give one, so that a peer that dialed it learns why and not only that
  /// the connection closed.
  virtual void withdraw(const LinkOwner& owner, bool failed, std::string_view why) {
    (void)owner, (void)failed, (void)why;
  }
  /// Links to those of `peers` that are ready now (see above); call again for
  /// the rest. Throws naming the peer when one cannot be reached (PeerLost
  /// for a peer known to be gone, Timeout at `deadline`, ProtocolMismatch);
  /// `watch` lets the caller give up early.
  virtual std::vector<std::unique_ptr<Link>> connect(const LinkOwner& owner, std::span<const PeerRef> peers,
                                                     Deadline deadline, const PeerWatch& watch) = 0;
  /// Takes a link whose communicator finalized (Link::goodbye was called)
  /// and keeps what the peer may still read from it for up to `linger`;
  /// the default closes it at once.
  virtual void retire(std::unique_ptr<Link> link, Clock::duration linger) {
    (void)linger;
    link.reset();
  }
  /// "tcp (2 streams)": for a communicator's description.
  virtual std::string describe(const LinkOwner& owner) const {
    (void)owner;
    return std::string(name());
  }
  /// Work of the context itself, outside any link (liveness of peers, a
  /// worker's progress); true if it changed anything. Called by the engine
  /// when nothing moved.
  virtual bool progress() { return false; }
  /// The smallest slice worth one message on this transport, whether or not
  /// this rank uses it (every rank must cut a collective alike): pipelined
  /// schedules cut buffers no finer while a pair of the communicator uses
  /// it. 0: no floor beyond the engine's own.
  virtual std::size_t min_slice_bytes() const { return 0; }
  /// An fd the engine's epoll watches for this context's news beyond its
  /// links' own fds (shm's doorbell, ucx's worker), or -1.
  virtual int wait_fd() const { return -1; }
  /// The sleep protocol above.
  virtual bool arm() { return true; }
  virtual void disarm() {}
};

}  // namespace braid
