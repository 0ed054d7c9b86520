// ShmLink: one peer over the pair's segment of the shared-memory transport
// (shm_context.hpp has the layout, the doorbells and how pairs close).
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "transport/shm/shm_context.hpp"
#include "transport/shm/shm_ring.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

namespace braid {

/// Page 0 of a pair's segment says whether the rank that opened it made its
/// link (shm_context.cpp): from then on that rank tells the creator through
/// the rings if it gives up, and until then only through the store.
void mark_pair_joined(ShmSegment& segment);
bool pair_joined(const ShmSegment& segment);

class ShmLink final : public Link {
 public:
  /// `created`: this rank created the pair's segment, and the peer may not
  /// have opened it yet.
  ShmLink(int self, const RankInfo& peer, std::shared_ptr<ShmSegment> segment, bool created, RingGeometry geometry,
          ShmContext& context, std::shared_ptr<ShmPeerProcess> process);
  ~ShmLink() override;

  int peer() const override { return peer_; }
  std::string describe_peer() const override { return peer_name_; }

  Request send(ConstMemView src, Tag tag) override { return post(sends_, OutgoingMessage{tag, src}); }
  Request recv(MemView dst, Tag tag) override { return post(recvs_, IncomingMessage{tag, dst}); }
  Request recv_reduce(MemView dst, ConstMemView local, DataType type, ReduceOp op, Tag tag) override {
    return post(recvs_, IncomingMessage{tag, dst, local.data, type, op});
  }
  bool can_reduce() const override { return true; }

  // The short path: straight into (or out of) the ring when nothing of that
  // direction is queued, so no request, no queue entry and no progress pass.
  std::size_t short_message_bytes() const override { return sender_.short_bytes(); }
  bool send_now(ConstMemView src, const Tag& tag) override;
  bool recv_now(MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag) override;

  bool progress() override;
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }
  void attach(Poller&) override {}
  void goodbye() override;
  void abort(std::string_view reason) override;
  std::optional<std::string> departed() override;
  std::optional<Tag> waiting_tag() override;
  bool one_sided() override;

  /// Whether progress() would move something now (the sleep protocol).
  bool has_news();

 private:
  struct PendingSend {
    OutgoingMessage message;
    Request request;
  };
  struct PendingRecv {
    IncomingMessage message;
    Request request;
  };

  // Queues `message` behind the others of its direction; on a broken link
  // the request fails at once with the link's error.
  template <typename Pending, typename Message>
  Request post(std::deque<Pending>& queue, Message message) {
    Request request = requests_.take();
    if (broken_) request->fail(broken_);
    else queue.push_back({std::move(message), request});
    return request;
  }

  std::span<std::byte> ring_region(int which, RingGeometry g) const;
  struct Notice;
  Notice* notice_of(int side) const;
  std::string peer_notice() const;
  std::string explain_loss(std::string_view ring_text) const;
  // Looks (every kLivenessEvery) whether the peer's process still runs;
  // when it does not, fails every request and returns false.
  bool peer_alive();
  void fail(std::exception_ptr error);

  int self_;
  int peer_;
  ShmContext& context_;
  std::shared_ptr<ShmPeerProcess> process_;
  std::shared_ptr<ShmSegment> segment_;
  bool peer_opened_;  // the peer mapped the segment (it opened it, or created it)
  std::string peer_name_;
  ShmRingSender sender_;
  ShmRingReceiver receiver_;
  std::deque<PendingSend> sends_;
  std::deque<PendingRecv> recvs_;
  RequestPool requests_;
  std::exception_ptr broken_;
  bool aborted_ = false;
  bool closed_ = false;  // goodbye or abort closed the rings
  Clock::time_point next_look_{};
};

/// The bytes of a pair segment of this geometry: three pages and two rings.
std::size_t shm_pair_bytes(RingGeometry geometry);

}  // namespace braid
