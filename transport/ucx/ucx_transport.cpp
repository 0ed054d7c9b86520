#include "transport/ucx/ucx_transport.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>

#include "core/check.hpp"
#include "core/log.hpp"
#include "core/rank_info.hpp"
#include "core/reduce.hpp"
#include "core/text.hpp"
#include "core/wire.hpp"
#include "core/process.hpp"
#include "core/settings.hpp"
#include "transport/registry.hpp"

namespace braid {
namespace {

constexpr std::uint32_t kAddressVersion = 1;
// The most any address field may take (UCX worker addresses are a few
// hundred bytes; with many devices a few KiB).
constexpr std::size_t kMaxWorkerAddress = 64 * 1024;

struct UcxAddress {
  std::uint64_t kernel_id = 0;
  int pid = 0;
  std::string pid_namespace;
  std::vector<std::byte> worker;
};

UcxAddress parse_address(std::span<const std::byte> bytes, std::string_view who) {
  try {
    WireReader r(bytes, "ucx address");
    if (auto v = r.u32(); v != kAddressVersion)
      throw ProtocolMismatch(cat("ucx address version ", v, ", this braid speaks ", kAddressVersion));
    UcxAddress a;
    a.kernel_id = r.u64();
    a.pid = static_cast<int>(r.u32());
    a.pid_namespace = r.str(64);
    const std::uint32_t n = r.u32();
    if (n == 0 || n > kMaxWorkerAddress) throw ProtocolMismatch(cat("a worker address of ", n, " bytes"));
    auto w = r.bytes(n);
    a.worker.assign(w.begin(), w.end());
    r.expect_end();
    return a;
  } catch (const ProtocolMismatch& e) {
    throw ProtocolMismatch(cat("ucx: the address ", who, " published is not readable: ", e.what()));
  }
}

Fd open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  return Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#else
  (void)pid;
  return Fd();
#endif
}

void on_send_done(void*, ucs_status_t status, void* user_data) {
  auto* op = static_cast<UcxOp*>(user_data);
  op->status = status;
  op->done = true;
}

void on_recv_done(void*, ucs_status_t status, std::size_t, void* user_data) {
  auto* op = static_cast<UcxOp*>(user_data);
  op->status = status;
  op->done = true;
}

// The parameters of a send whose completion UCX reports into `op`.
ucp_request_param_t send_param(UcxOp& op, std::uint32_t flags) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = flags;
  param.cb.send = &on_send_done;
  param.user_data = &op;
  return param;
}

// Takes UCX's answer to a non-blocking call into `op`.
void take_result(UcxOp& op, ucs_status_ptr_t result) {
  if (result == nullptr) {
    op.done = true;
  } else if (UCS_PTR_IS_ERR(result)) {
    op.status = UCS_PTR_STATUS(result);
    op.done = true;
  } else {
    op.request = result;
  }
}

}  // namespace

struct UcxTransport::LinkSet {
  std::vector<UcxLink*> links;  // guarded by the context's mutex
};

class UcxLink final : public Link {
 public:
  UcxLink(int self, const CommId& comm_id, const RankInfo& peer, const UcxAddress& address, bool watch_pid,
          std::shared_ptr<UcxContext> context, std::shared_ptr<UcxTransport::LinkSet> set)
      : context_(std::move(context)), set_(std::move(set)), self_(self), peer_(peer.rank), comm_id_(comm_id.bytes),
        peer_name_(cat("rank ", peer.rank, " (", peer.hostname, ", ucx pid ", address.pid, ")")) {
    if (watch_pid) pidfd_ = open_pidfd(address.pid);
    std::lock_guard lock(context_->mutex());
    inbox_ = context_->inbox(comm_id_, self_, peer_);
    // UCX's peer-failure mode (UCP_ERR_HANDLING_MODE_PEER) admits a
    // rendezvous lane only where its memory domain can invalidate a
    // registration (UCX 1.13's wireup, ucp_wireup_add_rma_bw_lanes): RDMA
    // devices can, tcp, cma and posix cannot. So in that mode a rendezvous
    // over UCX's tcp or shared memory moves as active-message fragments:
    // 64 KiB segments over tcp, each copied out of UCX's receive buffer,
    // and bounce-buffer copies over posix with no CMA read at all. A peer in
    // this kernel is watched through its pidfd, so its endpoint goes without
    // that mode (UCP_ERR_HANDLING_MODE_NONE): rendezvous then moves a slice
    // as one put (one sendmsg) over tcp or one process_vm_readv over CMA, as
    // Open MPI's UCX path does. The error handler is still installed: UCX
    // calls it in either mode when a transport reports the peer gone (a
    // reset socket, a failed CMA read), and the pidfd covers the silent
    // cases that UCX's keepalive would. A peer elsewhere keeps the
    // peer-failure mode (and its keepalive); RDMA has its rendezvous lanes
    // in it. The endpoint is the process's, shared with every other link to
    // that peer (ucx_context.hpp): the first link to it chooses the mode,
    // the same for every link to one process.
    // A peer in this kernel is reached through UCX's shared memory and CMA
    // when UCX_TLS allows them (UCX prefers them there); else through a
    // socket (or RDMA).
    over_socket_ = !(watch_pid && context_->shared_memory());
    ucs_status_t s = UCS_OK;
    remote_ = context_->peer(address.worker, pidfd_ ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER, s);
    if (!remote_) {
      context_->drop_inbox(comm_id_, self_, peer_);
      throw PeerLost(cat("rank ", self_, ": ucx cannot reach ", peer_name_, ": ucp_ep_create failed: ",
                         ucs_status_string(s), " (do both ranks' UCX_TLS and UCX_NET_DEVICES reach each other?)"));
    }
    set_->links.push_back(this);
  }

  ~UcxLink() override {
    std::lock_guard lock(context_->mutex());
    std::erase(set_->links, this);
    if (busy()) fail(std::make_exception_ptr(Aborted(cat("rank ", self_, ": the link to ", peer_name_, " closed"))));
    // The endpoint stays, the process's; what the peer sends this link from
    // now on is not wanted.
    context_->drop_inbox(comm_id_, self_, peer_);
  }

  int peer() const override { return peer_; }
  std::string describe_peer() const override { return peer_name_; }
  bool can_reduce() const override { return false; }

  Request send(ConstMemView src, Tag tag) override {
    std::lock_guard lock(context_->mutex());
    Request request = requests_.take();
    if (broken_) {
      request->fail(broken_);
      return request;
    }
    auto op = std::make_unique<UcxOp>();
    op->header = UcxWireHeader{comm_id_, self_, peer_, send_sequence_++, header_for(tag, src.bytes)};
    sent_context_ = tag.context;
    const ucp_request_param_t param =
        send_param(*op, src.bytes <= UcxTransport::kEagerBytes ? UCP_AM_SEND_FLAG_EAGER : UCP_AM_SEND_FLAG_RNDV);
    take_result(*op, ucp_am_send_nbx(remote_->ep, kUcxMessageId, &op->header, sizeof op->header, src.data, src.bytes,
                                     &param));
    sends_.push_back({std::move(op), request, tag});
    return request;
  }

  Request recv(MemView dst, Tag tag) override {
    std::lock_guard lock(context_->mutex());
    Request request = requests_.take();
    if (broken_) request->fail(broken_);
    else recvs_.push_back({dst, tag, receive_sequence_++, nullptr, request});
    return request;
  }

  Request recv_reduce(MemView, ConstMemView, DataType, ReduceOp, Tag) override {
    throw InvalidArgument("ucx links do not reduce as they receive (can_reduce() is false)");
  }

  // The short path (Link::send_now, recv_now). A small message leaves by
  // UCX's eager protocol inside the call, or is copied and queued inside
  // UCX; one that arrived is copied or reduced out of the inbox. Through the
  // request path an 8-byte all-reduce over posix,cma took 0.4 us against
  // Open MPI's 0.2, its time spread over the queues, the requests and their
  // locks. Up to 8 KiB, UCX's eager copy segment over its shared memory and
  // tcp: 2 ranks, posix,cma, this VM's slow state, all-reduce through the
  // request path against this one: 512 B 1.56-1.80 us against 1.22-1.25,
  // 4 KiB 2.19-2.35 against 1.82 (Open MPI 1.11-1.32 and 3.14-3.25).
  static constexpr std::size_t kShortBytes = 8192;
  std::size_t short_message_bytes() const override { return kShortBytes; }

  bool send_now(ConstMemView src, const Tag& tag) override {
    if (src.bytes > kShortBytes || src.kind != MemKind::host) return false;
    std::lock_guard lock(context_->mutex());
    if (!sends_.empty() || broken_ || remote_->status != UCS_OK) return false;
    if (!spare_) spare_ = std::make_unique<UcxOp>();
    UcxOp& op = *spare_;
    // The short header when the peer named its route and the receiver can
    // take the descriptor from the message before this one (UcxShortHeader).
    const bool following = send_sequence_ > 0 && inbox_->peer_route != 0 && tag.context == sent_context_;
    const void* header = &op.header;
    std::size_t header_bytes = sizeof op.header;
    if (following) {
      op.short_header = UcxShortHeader{inbox_->peer_route, static_cast<std::uint32_t>(send_sequence_), tag.id};
      header = &op.short_header;
      header_bytes = sizeof op.short_header;
    } else {
      op.header = UcxWireHeader{comm_id_, self_, peer_, send_sequence_, header_for(tag, src.bytes)};
    }
    // First UCX's short protocol, which sends within the call or not at all
    // (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL: no request).
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    param.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t s = ucp_am_send_nbx(remote_->ep, kUcxMessageId, header, header_bytes, src.data, src.bytes, &param);
    // A request is never returned in that mode; one that was would still be
    // in flight, and sending the message again would send it twice.
    BRAID_CHECK(!UCS_PTR_IS_PTR(s), "rank ", self_, ": ucp_am_send_nbx to ", peer_name_,
                " returned a request under UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL");
    if (UCS_PTR_STATUS(s) == UCS_ERR_NO_RESOURCE) {
      // Past UCX's short limit (about 100 bytes over its shared memory), or
      // its queue to the peer is full: a copy of the payload goes by UCX's
      // eager copy protocol, now or once UCX can. The request path took
      // 0.48 us for a 128-byte all-reduce over posix,cma against Open MPI's
      // 0.26. A message UCX keeps is this link's pending send; later sends
      // queue behind it.
      const auto* bytes = static_cast<const std::byte*>(src.data);
      op.payload.assign(bytes, bytes + src.bytes);
      param = send_param(op, UCP_AM_SEND_FLAG_EAGER);
      s = ucp_am_send_nbx(remote_->ep, kUcxMessageId, header, header_bytes, op.payload.data(), src.bytes, &param);
      if (UCS_PTR_IS_PTR(s)) {
        op.request = s;
        sends_.push_back({std::move(spare_), requests_.take(), tag});
        s = UCS_STATUS_PTR(UCS_OK);
      }
    }
    // Failed: send() goes the long way and reports the failure.
    if (UCS_PTR_STATUS(s) != UCS_OK) return false;
    ++send_sequence_;
    sent_context_ = tag.context;
    return true;
  }

  bool recv_now(MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag) override {
    if (dst.bytes > kShortBytes || dst.kind != MemKind::host) return false;
    std::lock_guard lock(context_->mutex());
    if (broken_) std::rethrow_exception(broken_);
    if (!recvs_.empty()) return false;
    UcxArrival* found = inbox_->arrivals.find(receive_sequence_);
    if (found == nullptr && context_->progress_once_locked()) found = inbox_->arrivals.find(receive_sequence_);
    if (found == nullptr || found->rendezvous) return false;
    // Used in place: the arrival is copied or reduced out of its slot.
    UcxArrival& arrival = *found;
    try {
      check_arrival(arrival, tag, dst.bytes);
      if (local != nullptr && dst.bytes % size_of(type) != 0)
        throw InvalidArgument(cat("rank ", self_, ": a reduce of ", dst.bytes, " bytes from ", peer_name_,
                                  " is not a whole number of ", name_of(type), " elements"));
    } catch (const Error&) {
      context_->release(arrival);
      inbox_->arrivals.remove(receive_sequence_);
      fail(std::current_exception());
      throw;
    }
    if (dst.bytes > 0) {
      if (local == nullptr) std::memcpy(dst.data, arrival.bytes(), dst.bytes);
      else reduce(type, op, dst.data, local, arrival.bytes(), dst.bytes / size_of(type));
    }
    context_->release(arrival);
    inbox_->arrivals.remove(receive_sequence_++);
    return true;
  }

  bool progress() override {
    std::lock_guard lock(context_->mutex());
    // What UCX did inside (a keepalive, a retry) is not news for the engine,
    // which would otherwise spin past its deadline; requests are.
    context_->progress_locked();
    return update();
  }

  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }
  void attach(Poller&) override {}

  void abort(std::string_view reason) override {
    std::lock_guard lock(context_->mutex());
    if (!aborted_ && remote_->status == UCS_OK) {
      aborted_ = true;
      // Best effort: the notice leaves eagerly, and the endpoint stays open
      // (until the link goes) for it to arrive.
      // The wait lets it leave before a failure closes the endpoint at once.
      post_control(kAbortTag, reason, kDrain);
    }
    aborted_ = true;
    fail(std::make_exception_ptr(Aborted(cat("rank ", self_, ": link to ", peer_name_, " closed: ", reason))));
  }

  void goodbye() override {
    std::lock_guard lock(context_->mutex());
    if (broken_ || remote_->status != UCS_OK) return;
    post_control(kGoodbyeTag, "", kDrain);
  }

  std::optional<std::string> departed() override {
    std::lock_guard lock(context_->mutex());
    if (busy() || broken_) return std::nullopt;
    context_->progress_locked();
    if (inbox_->noticed) return cat(peer_name_, ": it gave up: ", inbox_->notice);
    if (inbox_->said_goodbye) return std::nullopt;  // it finalized: no failure
    if (remote_->status != UCS_OK)
      return cat(peer_name_, ": UCX reports its endpoint failed (", ucs_status_string(remote_->status),
                 "): it exited or failed");
    if (!peer_process_alive()) return cat(peer_name_, ": its process exited or was killed");
    return std::nullopt;
  }

  std::optional<Tag> waiting_tag() override {
    std::lock_guard lock(context_->mutex());
    if (busy() || broken_) return std::nullopt;
    context_->progress_locked();
    // Idle, so every receive posted took its message: the next one the peer
    // sent is the next sequence number's, eager or a rendezvous descriptor.
    const UcxArrival* found = inbox_->arrivals.find(receive_sequence_);
    if (found == nullptr) return std::nullopt;
    return found->header.as_tag();
  }

  /// Sends the hello that tells the peer this side's endpoint exists.
  /// Its number is this side's route (UcxShortHeader).
  void greet() {
    std::lock_guard lock(context_->mutex());
    post_control(kUcxHelloTag, "", {}, inbox_->route);
  }

  /// While connecting: true once the peer's hello came; throws PeerLost when
  /// the peer is gone. Progresses the worker.
  bool greeted() {
    std::lock_guard lock(context_->mutex());
    context_->progress_locked();
    if (inbox_->greeted) return true;
    if (inbox_->noticed) throw PeerLost(cat("rank ", self_, ": ", peer_name_, " gave up while connecting: ", inbox_->notice));
    if (remote_->status != UCS_OK)
      throw PeerLost(cat("rank ", self_, ": ucx could not connect to ", peer_name_, ": UCX reports ",
                         ucs_status_string(remote_->status)));
    if (!peer_process_alive())
      throw PeerLost(cat("rank ", self_, ": ", peer_name_, " exited or was killed before the ucx link to it was made"));
    return false;
  }

  /// Whether a send or a rendezvous receive of this link is in UCX's hands
  /// and moves through a socket, which both ranks must keep pumping (mutex
  /// held). A CMA read within a host is the receiver's alone.
  bool transferring() const {
    if (!over_socket_) return false;
    for (const auto& s : sends_)
      if (!s.op->done && s.op->request != nullptr) return true;
    for (const auto& r : recvs_)
      if (r.op && !r.op->done) return true;
    return false;
  }

  /// Whether update() would move something now (mutex held).
  bool has_news() const {
    for (const auto& s : sends_)
      if (s.op->done) return true;
    for (const auto& r : recvs_) {
      if (r.op ? r.op->done : inbox_->arrivals.contains(r.sequence)) return true;
    }
    return busy() && (inbox_->noticed || remote_->status != UCS_OK);
  }

  /// Completes what UCX finished and matches arrived messages to receives
  /// (mutex held); true if anything changed.
  bool update() {
    if (broken_) return false;
    bool moved = false;
    try {
      for (auto it = sends_.begin(); it != sends_.end();) {
        if (!it->op->done) {
          ++it;
          continue;
        }
        if (it->op->status != UCS_OK) lost(it->tag, it->op->status);
        finish(*it->op);
        it->request->complete();
        it = sends_.erase(it);
        moved = true;
      }
      for (auto it = recvs_.begin(); it != recvs_.end();) {
        if (!it->op) {
          if (!start_receive(*it)) {
            ++it;
            continue;
          }
          moved = true;
        }
        if (!it->op->done) {
          ++it;
          continue;
        }
        if (it->op->status != UCS_OK) lost(it->tag, it->op->status);
        finish(*it->op);
        it->request->complete();
        it = recvs_.erase(it);
        moved = true;
      }
      if (busy()) {
        if (inbox_->noticed)
          throw PeerLost(cat("rank ", self_, ": was told by ", peer_name_, " that it gave up: ", inbox_->notice));
        if (remote_->status != UCS_OK) lost(first_pending_tag(), remote_->status);
        if (!moved && !peer_process_alive())
          throw PeerLost(cat("rank ", self_, ": lost the connection to ", peer_name_, " (",
                             describe_tag(first_pending_tag()), "): its process exited or was killed"));
      }
    } catch (const Error&) {
      fail(std::current_exception());
      return true;
    }
    return moved;
  }

 private:
  static constexpr std::chrono::milliseconds kDrain{500};

  struct PendingSend {
    std::unique_ptr<UcxOp> op;
    Request request;
    Tag tag;
  };
  struct PendingRecv {
    MemView dst;
    Tag tag;
    std::uint64_t sequence;
    std::unique_ptr<UcxOp> op;  // once its message arrived
    Request request;
  };

  // Throws TagMismatch or ProtocolMismatch unless `arrival` is the message a
  // receive of `bytes` with `tag` expects, whole.
  void check_arrival(const UcxArrival& arrival, const Tag& tag, std::size_t bytes) const {
    check_match(arrival.header, tag, bytes, [&] {
      return cat("rank ", self_, ": received from ", peer_name_, " (", describe_tag(tag), ")");
    });
    if (arrival.length != arrival.header.bytes)
      throw ProtocolMismatch(cat("rank ", self_, ": a message from ", peer_name_, " announced ", arrival.header.bytes,
                                 " bytes and carried ", arrival.length));
  }

  // Takes the receive's message if it arrived: checks its header, then
  // copies it (eager) or starts moving it into place (rendezvous).
  bool start_receive(PendingRecv& r) {
    if (!inbox_->arrivals.contains(r.sequence)) return false;
    UcxArrival arrival = inbox_->arrivals.take(r.sequence);
    r.op = std::make_unique<UcxOp>();
    try {
      check_arrival(arrival, r.tag, r.dst.bytes);
    } catch (...) {
      context_->release(arrival);
      throw;
    }
    if (arrival.rendezvous) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.recv_am = &on_recv_done;
      param.user_data = r.op.get();
      // UCX owns the descriptor from here on, whatever the outcome.
      take_result(*r.op, ucp_am_recv_data_nbx(context_->worker(), arrival.data, r.dst.data, r.dst.bytes, &param));
    } else {
      if (r.dst.bytes > 0)
        std::memcpy(r.dst.data, arrival.bytes(), r.dst.bytes);
      context_->release(arrival);
      r.op->done = true;
    }
    return true;
  }

  // A message outside the sequence (a hello, an abort notice), sent eagerly
  // and left to the context once this side no longer cares (mutex held).
  void post_control(std::uint64_t tag, std::string_view text, std::chrono::milliseconds wait = {},
                    std::uint64_t number = 0) {
    if (remote_->ep == nullptr) return;
    auto op = std::make_unique<UcxOp>();
    const std::size_t n = std::min(text.size(), kMaxAbortReason);
    op->payload.assign(reinterpret_cast<const std::byte*>(text.data()), reinterpret_cast<const std::byte*>(text.data()) + n);
    op->header = UcxWireHeader{comm_id_, self_, peer_, number, MessageHeader{tag, n, {}}};
    const ucp_request_param_t param = send_param(*op, UCP_AM_SEND_FLAG_EAGER);
    take_result(*op,
                ucp_am_send_nbx(remote_->ep, kUcxMessageId, &op->header, sizeof op->header, op->payload.data(), n, &param));
    const Deadline deadline = Deadline::after(wait);
    do context_->progress_locked();
    while (!op->done && !deadline.expired());
    if (!op->done) context_->adopt(std::move(op));
    else finish(*op);
  }

  void finish(UcxOp& op) {
    if (op.request != nullptr) ucp_request_free(op.request);
    op.request = nullptr;
  }

  void cancel(std::unique_ptr<UcxOp> op) {
    if (!op) return;
    if (op->request != nullptr && !op->done) {
      ucp_request_cancel(context_->worker(), op->request);
      context_->adopt(std::move(op));
    } else {
      finish(*op);
    }
  }

  [[noreturn]] void lost(const Tag& tag, ucs_status_t status) {
    // A peer that gave up closed its side: its notice, when it came, says why.
    context_->progress_locked();
    if (inbox_->noticed)
      throw PeerLost(cat("rank ", self_, ": was told by ", peer_name_, " that it gave up: ", inbox_->notice));
    if (inbox_->said_goodbye)
      throw PeerLost(cat("rank ", self_, ": ", peer_name_, " finalized the communicator while this rank still "
                         "expects ", describe_tag(tag), " from it: the ranks ran different operations"));
    throw PeerLost(cat("rank ", self_, ": lost the connection to ", peer_name_, " (", describe_tag(tag),
                       "): UCX reports ", ucs_status_string(status), " (it exited, failed or closed its side)"));
  }

  const Tag& first_pending_tag() const { return !recvs_.empty() ? recvs_.front().tag : sends_.front().tag; }

  // Every kLivenessEvery, whether the peer's process still runs (only for
  // a peer in this kernel and PID namespace; true otherwise).
  bool peer_process_alive() {
    if (!pidfd_) return true;
    auto now = Clock::now();
    if (now < next_look_) return true;
    next_look_ = now + UcxTransport::kLivenessEvery;
    pollfd p{pidfd_.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;  // readable once the process exited
  }

  void fail(std::exception_ptr error) {
    if (!broken_) broken_ = error;
    std::vector<const UcxOp*> in_flight;
    for (auto& s : sends_) {
      s.request->fail(broken_);
      if (s.op->request != nullptr && !s.op->done) in_flight.push_back(s.op.get());
    }
    for (auto& r : recvs_) {
      r.request->fail(broken_);
      if (r.op && r.op->request != nullptr && !r.op->done) in_flight.push_back(r.op.get());
    }
    if (!in_flight.empty()) {
      // UCX may still read a send's buffer or write a rendezvous receive's,
      // which the caller frees once the request failed: they are given a
      // moment to end (a live peer that drops this link's messages gives
      // their rendezvous back; a dead one reads and writes no more). The
      // endpoint is the process's and stays.
      const Deadline drain = Deadline::after(kDrain);
      auto pending = [&] {
        return std::any_of(in_flight.begin(), in_flight.end(), [](const UcxOp* op) { return !op->done; });
      };
      while (pending() && !drain.expired()) context_->progress_locked();
    }
    for (auto& s : sends_) cancel(std::move(s.op));
    for (auto& r : recvs_) cancel(std::move(r.op));
    sends_.clear();
    recvs_.clear();
  }

  std::shared_ptr<UcxContext> context_;
  std::shared_ptr<UcxTransport::LinkSet> set_;
  int self_;
  int peer_;
  std::array<std::byte, 16> comm_id_;
  std::string peer_name_;
  std::shared_ptr<UcxPeer> remote_;
  bool over_socket_ = true;
  std::shared_ptr<UcxInbox> inbox_;
  Fd pidfd_;
  Clock::time_point next_look_{};
  std::uint64_t send_sequence_ = 0;
  std::array<std::byte, 16> sent_context_{};  // the descriptor of message send_sequence_ - 1
  std::uint64_t receive_sequence_ = 0;
  std::deque<PendingSend> sends_;
  std::unique_ptr<UcxOp> spare_;  // send_now's headers and copy, kept for the next one
  std::deque<PendingRecv> recvs_;
  RequestPool requests_;
  std::exception_ptr broken_;
  bool aborted_ = false;
};

// ---- the transport -----------------------------------------------------------------

UcxTransport::UcxTransport(bool active)
    : context_(active ? UcxContext::get() : nullptr), links_(std::make_shared<LinkSet>()) {}

UcxTransport::~UcxTransport() = default;

std::vector<std::byte> UcxTransport::local_address(const SockAddr&) const {
  if (!context_) return {};
  static const std::uint64_t kernel_id = RankInfo::local(0).kernel_id;
  WireWriter w;
  w.u32(kAddressVersion);
  w.u64(kernel_id);
  w.u32(static_cast<std::uint32_t>(context_->pid()));
  w.str(pid_namespace());
  w.u32(static_cast<std::uint32_t>(context_->worker_address().size()));
  w.bytes(context_->worker_address());
  return w.take();
}

bool UcxTransport::serves(const ContextSetup& setup) const {
  // An idle context (no RDMA here) cannot serve a communicator that names ucx.
  return context_ != nullptr || setup.settings->transport.empty();
}

std::string UcxTransport::describe(const LinkOwner&) const {
  return context_ ? cat("ucx (", context_->transports(), ")") : std::string("ucx (idle: no RDMA device)");
}

int UcxTransport::wait_fd() const { return context_ ? context_->efd() : -1; }

void UcxTransport::withdraw(const LinkOwner& owner, bool failed, std::string_view why) {
  // Links still greeting: the peer may have this side's hello already and
  // count the link as made, so it hears why this rank went (or its
  // goodbye) instead of waiting on a silent endpoint until its timeout.
  std::vector<std::unique_ptr<UcxLink>> leaving;
  {
    std::lock_guard lock(greeting_mutex_);
    for (auto it = greeting_.begin(); it != greeting_.end();) {
      if (std::get<0>(it->first) == owner.comm_id && std::get<1>(it->first) == owner.rank) {
        leaving.push_back(std::move(it->second));
        it = greeting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& link : leaving) {
    if (failed) link->abort(why.empty() ? cat("rank ", owner.rank, " gave up") : std::string(why));
    else link->goodbye();
  }
}

std::vector<std::unique_ptr<Link>> UcxTransport::connect(const LinkOwner& owner, std::span<const PeerRef> peers,
                                                         Deadline deadline, const PeerWatch& watch) {
  if (!context_)
    throw InvalidArgument(cat("rank ", owner.rank, ": ucx was asked to connect ", peers.size(), " peer(s) but has no "
                              "UCX context (no RDMA device here and BRAID_TRANSPORT does not name ucx)"));
  static const std::uint64_t kernel_id = RankInfo::local(0).kernel_id;
  const std::string own_ns = pid_namespace();
  std::vector<std::unique_ptr<Link>> links;
  std::lock_guard lock(greeting_mutex_);
  for (const PeerRef& p : peers) {
    const auto key = std::make_tuple(owner.comm_id, owner.rank, p.info->rank);
    auto it = greeting_.find(key);
    if (it == greeting_.end()) {
      const UcxAddress a = parse_address(p.address, cat("rank ", p.info->rank, " (", p.info->hostname, ")"));
      const bool same_process_table = a.kernel_id == kernel_id && a.pid_namespace == own_ns && a.pid != ::getpid();
      auto link = std::make_unique<UcxLink>(owner.rank, owner.comm_id, *p.info, a, same_process_table,
                                            context_, links_);
      link->greet();
      it = greeting_.emplace(key, std::move(link)).first;
    }
    try {
      // Each side's hello proves its endpoint exists, so a peer that leaves
      // at once (a communicator made and destroyed) has let this side connect.
      if (it->second->greeted()) {
        links.push_back(std::move(it->second));
        greeting_.erase(it);
        continue;
      }
      if (deadline.expired())
        throw Timeout(cat("rank ", owner.rank, ": ucx: ", it->second->describe_peer(), " did not answer within the "
                          "timeout while connecting (it did not reach its side, or UCX cannot carry messages "
                          "between the two)"));
      if (watch) watch(p.info->rank, false);
    } catch (const std::exception& e) {
      it->second->abort(cat("rank ", owner.rank, " gave up: ", e.what()));
      greeting_.erase(it);
      for (auto& link : links) link->abort(cat("rank ", owner.rank, " gave up: ", e.what()));
      throw;
    }
  }
  return links;
}

bool UcxTransport::progress() {
  if (!context_) return false;
  std::lock_guard lock(context_->mutex());
  context_->progress_locked();
  bool moved = false;
  for (UcxLink* link : links_->links) moved |= link->update();
  return moved;
}

bool UcxTransport::arm() {
  if (!context_) return true;
  std::lock_guard lock(context_->mutex());
  context_->progress_locked();
  bool transferring = false;
  for (UcxLink* link : links_->links) {
    if (link->has_news()) return false;
    transferring |= link->transferring();
  }
  // Keep the engine polling while a transfer moves (see kRendezvousPoll).
  if (transferring && context_->active_within(kRendezvousPoll)) return false;
  return context_->arm_locked();
}

}  // namespace braid
