// The process's part of the UCX transport: one UCP context and one worker,
// shared by every communicator (and split child) of the process, as the shm
// transport shares its doorbell. Each communicator's UcxTransport holds it.
//
// Every braid message is one UCX active message whose header (UcxWireHeader)
// names the communicator, the sending and receiving rank, the message's
// sequence number on that pair and braid's MessageHeader (tag, 16-byte
// descriptor, size). A short message whose descriptor is its predecessor's
// carries a 16-byte UcxShortHeader instead (see there). The worker's
// active-message handler files each arrival
// in the Inbox of its (communicator, receiver, sender) triple, made on first
// use by whichever comes first, the message or the link, so a message that
// overtakes its link's creation waits for it. Small messages arrive whole
// (eager) and stay in UCX's buffer until matched; large ones arrive as a
// rendezvous descriptor, and the payload moves into the receiver's buffer
// only once a matching receive exists (ucp_am_recv_data_nbx: zero-copy where
// the UCX transport can, e.g. CMA within a host). So a message whose header
// does not match never writes a byte into the receiver's buffer.
//
// Each peer process is reached through one endpoint (UcxPeer), shared by
// every link of every communicator to it and open while the context lives.
// Each side making at most one matters: UCX pairs the endpoints two workers
// make to each other by the order they were made in (its wire-up's
// connection numbers), so an extra endpoint on one side (made for a split
// child that the other side left before it connected) would pair every later
// one wrongly, and a rendezvous on such a pair waits forever.
//
// Threads: UCX's worker runs in serialized mode and every call into it, and
// every inbox, is guarded by mutex(); the handlers run inside
// ucp_worker_progress, with it held.
#pragma once

#include <sys/types.h>
#include <ucp/api/ucp.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/socket.hpp"
#include "core/spin.hpp"
#include "transport/message.hpp"

namespace braid {

/// The active-message header of every braid message over UCX.
struct UcxWireHeader {
  std::array<std::byte, 16> comm_id{};
  std::int32_t from = 0;  // sender's rank
  std::int32_t to = 0;    // receiver's rank
  std::uint64_t sequence = 0;  // 0, 1, 2... per direction of a pair
  MessageHeader message;       // kAbortTag: an abort notice, its payload the reason
};
static_assert(sizeof(UcxWireHeader) == 64);

/// The header of a short message (UcxLink::send_now) whose descriptor
/// (MessageHeader::context) is the one of the message before it on its link,
/// as in a loop of like collectives: the receiver's inbox by the route its
/// side named in its hello, the low half of the sequence number, the tag.
/// The size is the message's, the descriptor its predecessor's
/// (UcxArrivals::put_following). Why 16 bytes: UCX's shared-memory FIFO
/// element is 128 bytes, 28 of them its own header, then UCP's 8-byte
/// active-message header, the payload and braid's header. With the 64-byte
/// header an 8-byte message filled two cache lines of the element and one
/// of 32 bytes or more no longer fitted it (UCX then copies it through a
/// descriptor of its own): 2 ranks, posix,cma, this VM in its slow state,
/// all-reduce 8 B 0.77 us, 32 B 0.99, 64 B 1.17 against Open MPI's 0.67,
/// 0.67, 0.69, whose 8-byte tag header keeps one line up to 28 bytes.
struct UcxShortHeader {
  std::uint32_t route = 0;     // UcxInbox::route of the receiving side
  std::uint32_t sequence = 0;  // the low 32 bits of the message's number
  std::uint64_t tag = 0;       // Tag::id
};
static_assert(sizeof(UcxShortHeader) == 16);

/// One message that arrived and waits for its receive.
struct UcxArrival {
  /// Eager data UCX cannot keep past its handler (its short messages, over
  /// shared memory and tcp alike) is copied: up to this many bytes into the
  /// arrival itself, larger into `copy`. The malloc and free of a vector
  /// per 8-byte message were 2% of an all-reduce's profile.
  static constexpr std::size_t kInlineBytes = 256;
  MessageHeader header;
  void* data = nullptr;   // UCX's: eager data to release, or a rendezvous descriptor
  std::size_t length = 0;
  bool rendezvous = false;
  std::vector<std::byte> copy;  // eager data UCX could not keep, past kInlineBytes
  std::array<std::byte, kInlineBytes> inline_copy;

  /// The payload of an eager message.
  const std::byte* bytes() const {
    if (data != nullptr) return static_cast<const std::byte*>(data);
    return length <= kInlineBytes ? inline_copy.data() : copy.data();
  }
};

/// The arrivals of one link by sequence number: a ring whose first slot is
/// the oldest message not yet taken. Receives take messages in order (each
/// one its sequence number), so the ring stays as short as the sends that
/// ran ahead of them, and grows only when more than its slots did. It
/// replaced a std::map, whose node per message (a malloc in the handler, a
/// free at the receive) was 2.5% of an 8-byte all-reduce's profile.
///
/// A message with a short header (UcxShortHeader) takes its descriptor from
/// the message before it. Until that one arrived it is held but not found;
/// the descriptor of the last message the ring moved past is kept for the
/// one after it.
class UcxArrivals {
 public:
  /// The slot to fill for message `sequence` (its header set to `header`),
  /// null when that number arrived before.
  UcxArrival* put(std::uint64_t sequence, const MessageHeader& header);
  /// The same for a message that came with a short header: `low` is its
  /// number's low 32 bits, its descriptor that of the message before it.
  UcxArrival* put_following(std::uint32_t low, std::uint64_t tag, std::uint64_t bytes);
  /// Message `sequence`, or null when it has not arrived (or was taken, or
  /// waits for the descriptor of the message before it).
  UcxArrival* find(std::uint64_t sequence);
  bool contains(std::uint64_t sequence) { return find(sequence) != nullptr; }
  /// Takes message `sequence`, which find() returned.
  UcxArrival take(std::uint64_t sequence);
  /// Forgets message `sequence`, which find() returned and whose data was
  /// used (and released) in place.
  void remove(std::uint64_t sequence);
  /// Calls `f` on every message not taken, then forgets them all.
  template <typename F>
  void drain(F&& f) {
    for (Slot& slot : slots_)
      if (slot.state != State::empty && slot.state != State::taken) f(slot.arrival);
    slots_.clear();
    base_ = 0;
    retired_context_ = {};
  }

 private:
  // following: held, its descriptor not known yet (its predecessor has not
  // arrived). A taken slot keeps its header until the ring moves past it.
  enum class State : std::uint8_t { empty, held, following, taken };
  struct Slot {
    State state = State::empty;
    UcxArrival arrival;
  };
  Slot& slot(std::uint64_t sequence) { return slots_[sequence & (slots_.size() - 1)]; }
  UcxArrival* claim(std::uint64_t sequence);
  // The descriptor of message `sequence` - 1 when it is known.
  const std::array<std::byte, 16>* before(std::uint64_t sequence);
  // Message `sequence`'s descriptor is known: gives it to the short-header
  // messages after it that were waiting for it.
  void pass_on(std::uint64_t sequence);
  void grow(std::uint64_t span);
  std::vector<Slot> slots_;  // a power of two of them, made at the first put
  std::uint64_t base_ = 0;   // the oldest sequence number not taken
  std::array<std::byte, 16> retired_context_{};  // message base_ - 1's descriptor
};

/// What the worker has learnt for one link: the messages that arrived, the
/// peer's abort notice, and whether its endpoint failed.
struct UcxInbox {
  UcxArrivals arrivals;
  std::uint32_t route = 0;       // this inbox's number in its context (UcxShortHeader::route)
  std::uint32_t peer_route = 0;  // the peer's inbox for this link, from its hello; 0 until then
  std::string notice;       // the peer's abort reason
  bool noticed = false;
  bool said_goodbye = false;  // the peer finalized in order (Link::goodbye)
  bool greeted = false;     // the peer's hello came (its endpoint to this rank exists)
};

/// The endpoint to one peer process's worker, shared by every link to it.
struct UcxPeer {
  ucp_ep_h ep = nullptr;
  ucp_err_handling_mode_t err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ucs_status_t status = UCS_OK;  // set by the endpoint's error handler
};

/// A send or a rendezvous receive in UCX's hands; the completion callbacks
/// fill it in. Owned by its link, or by the context once its link is gone.
struct UcxOp {
  void* request = nullptr;  // UCX's request, freed once complete
  bool done = false;
  ucs_status_t status = UCS_OK;
  UcxWireHeader header;          // a send's header lives until completion
  UcxShortHeader short_header;   // or this one (UcxLink::send_now)
  std::vector<std::byte> payload;  // an abort notice's text, or send_now's copy
};

class UcxContext {
 public:
  /// The context of this process (made on first use, and again after fork).
  static std::shared_ptr<UcxContext> get();
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  SpinMutex& mutex() { return mutex_; }
  ucp_worker_h worker() const { return worker_; }
  int pid() const { return pid_; }
  /// The worker's address, for peers (ucp_worker_get_address).
  const std::vector<std::byte>& worker_address() const { return address_; }
  /// "UCX 1.13.1, UCX_TLS=tcp": UCX and the transports it was allowed.
  const std::string& transports() const { return transports_; }
  /// Whether UCX_TLS lets UCX use its shared-memory transports (and CMA).
  bool shared_memory() const { return shared_memory_; }

  /// The inbox of one link, shared with the handler (mutex held).
  std::shared_ptr<UcxInbox> inbox(const std::array<std::byte, 16>& comm_id, int to, int from);
  /// Forgets an inbox whose link is gone (mutex held); arrivals left in it
  /// go back to UCX.
  void drop_inbox(const std::array<std::byte, 16>& comm_id, int to, int from);
  void release(UcxArrival& arrival);
  /// The endpoint to the worker at `address` (mutex held): made on first use,
  /// in `mode`, then shared. Null, with UCX's status in `error`, when UCX
  /// cannot make it.
  std::shared_ptr<UcxPeer> peer(const std::vector<std::byte>& address, ucp_err_handling_mode_t mode,
                                ucs_status_t& error);

  /// Runs the worker until it has nothing more to do (mutex held); true if
  /// anything happened. Also frees the finished operations of gone links.
  bool progress_locked();
  /// One pass of the worker (mutex held), for a receive that polls: true
  /// if it did something. progress_locked() ends with a pass that finds
  /// nothing, which a poll repeated at once does not need.
  bool progress_once_locked() {
    if (ucp_worker_progress(worker_) == 0) return false;
    ++activity_;
    return true;
  }
  /// Whether progress_locked() saw the worker do something within `span`
  /// (mutex held). The time is read here, when asked (as the engine is about
  /// to sleep), not at every progress that delivers: that clock read was 8%
  /// of an 8-byte all-reduce's profile. Activity counts from the first ask
  /// that noticed it, at most one engine spin late.
  bool active_within(Clock::duration span);
  /// Takes an unfinished operation of a link that is going away.
  void adopt(std::unique_ptr<UcxOp> op) { orphans_.push_back(std::move(op)); }

  /// The sleep protocol (mutex held for arm): false when news is waiting.
  bool arm_locked();
  /// The worker's event fd.
  int efd() const { return efd_; }

 private:
  UcxContext();
  void close_peers_locked();
  static ucs_status_t on_message(void* arg, const void* header, std::size_t header_length, void* data,
                                 std::size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t on_short_message(const void* header, void* data, std::size_t length, const ucp_am_recv_param_t* param);

  using Key = std::tuple<std::array<std::byte, 16>, int, int>;
  // The handler's inbox for a message: the one it found last when the
  // message is for the same link (every message on 2 ranks, runs of them on
  // more), else inbox()'s. A lookup in inboxes_ (a 24-byte key compared
  // lexicographically) and a shared_ptr copy per message were 12% of an
  // 8-byte all-reduce's profile.
  UcxInbox& inbox_for(const UcxWireHeader& h);
  int pid_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;  // the worker's, owned by UCX
  std::vector<std::byte> address_;
  std::string transports_;
  bool shared_memory_ = true;
  SpinMutex mutex_;
  std::map<Key, std::shared_ptr<UcxInbox>> inboxes_;
  // Every inbox made, by route (UcxInbox::route; 0 is none); a dropped one
  // is null, and its number is not given again.
  std::vector<UcxInbox*> routes_{nullptr};
  Key last_key_{};
  UcxInbox* last_inbox_ = nullptr;  // inboxes_'s entry for last_key_; reset by drop_inbox
  std::vector<std::unique_ptr<UcxOp>> orphans_;
  std::map<std::string, std::shared_ptr<UcxPeer>, std::less<>> peers_;  // by worker address (its bytes)
  std::uint64_t activity_ = 0;          // progress calls that did something
  std::uint64_t stamped_activity_ = 0;  // activity_ when last_activity_ was read
  Clock::time_point last_activity_{};
};

/// The active-message id of braid's messages.
inline constexpr unsigned kUcxMessageId = 0x62;
/// The tag of the hello each side of a link sends when it connects.
inline constexpr std::uint64_t kUcxHelloTag = kAbortTag - 1;

/// Whether UCX on this machine sees an RDMA device (InfiniBand or RoCE, UCX's
/// "ib" component): the condition for choosing UCX between hosts by default.
/// Asked once per process; false when UCX cannot tell.
bool ucx_sees_rdma();

}  // namespace braid
