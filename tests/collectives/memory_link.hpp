// An in-memory transport for schedule tests: a MemoryFabric holds N ranks and
// one FIFO queue of messages per ordered pair of ranks; MemoryLink is one
// rank's end of the connection to one peer. The schedules of all N ranks then
// run against each other in one process, on one thread, with no network.
//
// A receive completes in progress() once the head message of its pair queue
// is there; its tag and size must match exactly, or the receive fails with
// ProtocolMismatch naming both tags, as the real transports do. How sends
// complete is a fabric option (MemoryFabricOptions::sends):
//   eager       the bytes are copied into the queue and the send completes
//               inside send(), so the executor sees requests that are done at
//               post time (a transport with unlimited buffering);
//   lazy        the send stays posted until a later progress() copies it into
//               the queue, one send and one receive per call, so requests
//               stay posted across many advance() calls;
//   rendezvous  nothing is copied at send(): the receiver reads the sender's
//               memory when it takes the message, and the send completes only
//               on the second progress() of the sender after that, as with a
//               transport that pulls large messages (RDMA read). A send that
//               the peer has not asked for never completes, so a schedule that
//               counts on buffering deadlocks here, and a schedule that writes
//               a region while a send from it is still posted either sends
//               the wrong bytes or, if it writes after the read, fails the
//               send with Error(internal) when the fabric sees the change.
// The fabric counts every change it makes (activity()), so a driver can tell
// a stuck set of schedules from a slow one, and reports the messages nobody
// received (undelivered(), which must be zero after a collective).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "core/reduce.hpp"
#include "core/text.hpp"
#include "transport/transport.hpp"

namespace braid::test {

enum class SendCompletion : std::uint8_t { eager, lazy, rendezvous };

struct MemoryFabricOptions {
  SendCompletion sends = SendCompletion::eager;
  bool reduces = true;  // false: links say they cannot reduce, so the executor receives to scratch and reduces
  std::size_t short_bytes = 0;  // messages up to this size may take the short path (Link::send_now, recv_now)
};

inline std::string_view name_of(SendCompletion sends) {
  switch (sends) {
    case SendCompletion::eager: return "eager";
    case SendCompletion::lazy: return "lazy";
    case SendCompletion::rendezvous: return "rendezvous";
  }
  return "?";
}

/// A rendezvous send: queued by reference, read by the receiver.
struct RendezvousSend {
  ConstMemView src;
  Tag tag;
  Request request;
  std::vector<std::byte> read;  // what the receiver read, to see later changes
  bool taken = false;
  int progress_since_taken = 0;
};

class MemoryFabric;

class MemoryLink final : public Link {
 public:
  MemoryLink(MemoryFabric& fabric, int self, int peer) : fabric_(fabric), self_(self), peer_(peer) {}

  int peer() const override { return peer_; }
  Request send(ConstMemView src, Tag tag) override;
  Request recv(MemView dst, Tag tag) override { return post_recv(dst, {}, false, DataType::u8, ReduceOp::sum, tag); }
  Request recv_reduce(MemView dst, ConstMemView local, DataType type, ReduceOp op, Tag tag) override {
    return post_recv(dst, local, true, type, op, tag);
  }
  bool progress() override;
  bool busy() const override { return !sends_.empty() || !rendezvous_.empty() || !recvs_.empty(); }
  bool can_reduce() const override;
  std::size_t short_message_bytes() const override;
  bool send_now(ConstMemView src, const Tag& tag) override;
  bool recv_now(MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag) override;
  void attach(Poller&) override {}
  std::string describe_peer() const override { return cat("rank ", peer_, " (memory)"); }

 private:
  struct PendingSend {
    ConstMemView src;
    Tag tag;
    Request request;
  };
  struct PendingRecv {
    MemView dst;
    ConstMemView local;
    bool reduce;
    DataType type;
    ReduceOp op;
    Tag tag;
    Request request;
  };

  Request post_recv(MemView dst, ConstMemView local, bool reduce, DataType type, ReduceOp op, Tag tag);
  void deliver(const PendingSend& send);
  bool complete_head_recv();
  bool complete_rendezvous_sends();

  MemoryFabric& fabric_;
  int self_;
  int peer_;
  std::deque<PendingSend> sends_;  // lazy sends not yet delivered
  std::deque<std::shared_ptr<RendezvousSend>> rendezvous_;  // not yet completed
  std::deque<PendingRecv> recvs_;
};

class MemoryFabric {
 public:
  struct Message {
    Tag tag;
    std::vector<std::byte> bytes;                 // eager and lazy: a copy
    std::shared_ptr<RendezvousSend> rendezvous;  // rendezvous: read when taken
    std::size_t size() const { return rendezvous ? rendezvous->src.bytes : bytes.size(); }
  };

  explicit MemoryFabric(int ranks, MemoryFabricOptions options = {})
      : ranks_(ranks), options_(options), queues_(static_cast<std::size_t>(ranks) * ranks) {
    links_.resize(queues_.size());
    for (int a = 0; a < ranks; ++a)
      for (int b = 0; b < ranks; ++b)
        if (a != b) links_[index(a, b)] = std::make_unique<MemoryLink>(*this, a, b);
  }
  MemoryFabric(const MemoryFabric&) = delete;
  MemoryFabric& operator=(const MemoryFabric&) = delete;

  int ranks() const { return ranks_; }
  const MemoryFabricOptions& options() const { return options_; }

  /// Rank `self`'s link to `peer`; null when they are the same rank.
  Link* link(int self, int peer) { return links_[index(self, peer)].get(); }
  /// Rank `self`'s links indexed by peer, as the Executor takes them.
  std::vector<Link*> links_of(int self) {
    std::vector<Link*> out(static_cast<std::size_t>(ranks_));
    for (int p = 0; p < ranks_; ++p) out[p] = link(self, p);
    return out;
  }

  /// Messages sent from `from` to `to` and not yet received, oldest first.
  std::deque<Message>& queue(int from, int to) { return queues_[index(from, to)]; }

  /// Messages that were sent and never received, over all pairs.
  std::size_t undelivered() const {
    std::size_t n = 0;
    for (const auto& q : queues_) n += q.size();
    return n;
  }
  /// "rank 0 -> rank 1: op #3 step 4 (16 B)" for each undelivered message.
  std::string describe_undelivered() const {
    std::string out;
    for (int a = 0; a < ranks_; ++a)
      for (int b = 0; b < ranks_; ++b)
        for (const auto& m : queues_[index(a, b)])
          out += cat(out.empty() ? "" : "; ", "rank ", a, " -> rank ", b, ": ", describe_tag(m.tag), " (",
                     human_bytes(m.size()), ")");
    return out;
  }

  /// Grows by one with every message queued, delivered or request completed.
  std::uint64_t activity() const { return activity_; }
  void note_activity() { ++activity_; }

 private:
  std::size_t index(int a, int b) const {
    BRAID_CHECK(a >= 0 && a < ranks_ && b >= 0 && b < ranks_, "no ranks ", a, " and ", b, " in a fabric of ", ranks_);
    return static_cast<std::size_t>(a) * ranks_ + b;
  }

  int ranks_;
  MemoryFabricOptions options_;
  std::vector<std::deque<Message>> queues_;         // [from * ranks + to]
  std::vector<std::unique_ptr<MemoryLink>> links_;  // [self * ranks + peer]
  std::uint64_t activity_ = 0;
};

inline bool MemoryLink::can_reduce() const { return fabric_.options().reduces; }
inline std::size_t MemoryLink::short_message_bytes() const { return fabric_.options().short_bytes; }

// The short path: a copy into the pair's queue now, or the head message out
// of it now, with the checks of a request (a mismatch consumes the message
// and throws, as a failed receive would).
inline bool MemoryLink::send_now(ConstMemView src, const Tag& tag) {
  // 0: no short path at all, as Link's defaults (not even an empty message).
  if (short_message_bytes() == 0 || src.bytes > short_message_bytes() || !sends_.empty() || !rendezvous_.empty())
    return false;
  MemoryFabric::Message m{tag, std::vector<std::byte>(src.bytes), nullptr};
  if (src.bytes > 0) std::memcpy(m.bytes.data(), src.data, src.bytes);
  fabric_.queue(self_, peer_).push_back(std::move(m));
  fabric_.note_activity();
  return true;
}

inline bool MemoryLink::recv_now(MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag) {
  auto& incoming = fabric_.queue(peer_, self_);
  if (short_message_bytes() == 0 || dst.bytes > short_message_bytes() || !recvs_.empty() || incoming.empty() ||
      incoming.front().rendezvous)
    return false;
  MemoryFabric::Message m = std::move(incoming.front());
  incoming.pop_front();
  fabric_.note_activity();
  if (m.tag != tag || m.bytes.size() != dst.bytes)
    throw ProtocolMismatch(cat("rank ", self_, " expected ", describe_tag(tag), " (", human_bytes(dst.bytes),
                               ") from rank ", peer_, " but received ", describe_tag(m.tag), " (",
                               human_bytes(m.bytes.size()), ")"));
  if (dst.bytes > 0) {
    if (local != nullptr) reduce(type, op, dst.data, local, m.bytes.data(), dst.bytes / size_of(type));
    else std::memcpy(dst.data, m.bytes.data(), dst.bytes);
  }
  return true;
}

inline Request MemoryLink::send(ConstMemView src, Tag tag) {
  auto request = std::make_shared<RequestState>();
  switch (fabric_.options().sends) {
    case SendCompletion::eager: deliver(PendingSend{src, tag, request}); break;
    case SendCompletion::lazy: sends_.push_back(PendingSend{src, tag, request}); break;
    case SendCompletion::rendezvous: {
      auto send = std::make_shared<RendezvousSend>(RendezvousSend{.src = src, .tag = tag, .request = request});
      fabric_.queue(self_, peer_).push_back(MemoryFabric::Message{tag, {}, send});
      rendezvous_.push_back(std::move(send));
      fabric_.note_activity();
      break;
    }
  }
  return request;
}

inline Request MemoryLink::post_recv(MemView dst, ConstMemView local, bool reduce, DataType type, ReduceOp op, Tag tag) {
  auto request = std::make_shared<RequestState>();
  recvs_.push_back(PendingRecv{dst, local, reduce, type, op, tag, request});
  return request;
}

inline void MemoryLink::deliver(const PendingSend& send) {
  MemoryFabric::Message m{send.tag, std::vector<std::byte>(send.src.bytes), nullptr};
  if (send.src.bytes > 0) std::memcpy(m.bytes.data(), send.src.data, send.src.bytes);
  fabric_.queue(self_, peer_).push_back(std::move(m));
  send.request->complete();
  fabric_.note_activity();
}

inline bool MemoryLink::complete_head_recv() {
  auto& incoming = fabric_.queue(peer_, self_);
  if (recvs_.empty() || incoming.empty()) return false;
  PendingRecv r = std::move(recvs_.front());
  recvs_.pop_front();
  MemoryFabric::Message m = std::move(incoming.front());
  incoming.pop_front();
  fabric_.note_activity();
  if (m.rendezvous) {  // read the sender's memory now
    RendezvousSend& send = *m.rendezvous;
    m.bytes.resize(send.src.bytes);
    if (send.src.bytes > 0) std::memcpy(m.bytes.data(), send.src.data, send.src.bytes);
    send.read = m.bytes;
    send.taken = true;
  }
  if (m.tag != r.tag || m.bytes.size() != r.dst.bytes) {
    r.request->fail(std::make_exception_ptr(ProtocolMismatch(
        cat("rank ", self_, " expected ", describe_tag(r.tag), " (", human_bytes(r.dst.bytes), ") from rank ", peer_,
            " but received ", describe_tag(m.tag), " (", human_bytes(m.bytes.size()), ")"))));
    return true;
  }
  if (r.dst.bytes > 0) {
    if (r.reduce) {
      const std::size_t element = size_of(r.type);
      BRAID_CHECK(r.dst.bytes % element == 0 && r.local.bytes == r.dst.bytes, "recv_reduce of ", r.dst.bytes,
                  " bytes of ", braid::name_of(r.type), " with a local region of ", r.local.bytes, " bytes");
      reduce(r.type, r.op, r.dst.data, r.local.data, m.bytes.data(), r.dst.bytes / element);
    } else {
      std::memcpy(r.dst.data, m.bytes.data(), r.dst.bytes);
    }
  }
  r.request->complete();
  return true;
}

inline bool MemoryLink::complete_rendezvous_sends() {
  bool moved = false;
  for (auto& send : rendezvous_)
    if (send->taken) {
      ++send->progress_since_taken;
      moved = true;
    }
  while (!rendezvous_.empty() && rendezvous_.front()->progress_since_taken >= 2) {
    RendezvousSend& send = *rendezvous_.front();
    if (send.src.bytes > 0 && std::memcmp(send.src.data, send.read.data(), send.src.bytes) != 0)
      send.request->fail(std::make_exception_ptr(
          Error(ErrorCode::internal, cat("rank ", self_, " changed the source of ", describe_tag(send.tag), " to rank ",
                                         peer_, " while the send was still posted"))));
    else
      send.request->complete();
    rendezvous_.pop_front();
  }
  if (moved) fabric_.note_activity();
  return moved;
}

inline bool MemoryLink::progress() {
  bool moved = false;
  switch (fabric_.options().sends) {
    case SendCompletion::eager:
      while (complete_head_recv()) moved = true;
      return moved;
    case SendCompletion::lazy:
      if (!sends_.empty()) {
        deliver(sends_.front());
        sends_.pop_front();
        moved = true;
      }
      return complete_head_recv() || moved;
    case SendCompletion::rendezvous:
      while (complete_head_recv()) moved = true;
      return complete_rendezvous_sends() || moved;
  }
  return moved;
}

}  // namespace braid::test
