#include "transport/shm/shm_link.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/text.hpp"

namespace braid {
namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kNoticeText = kPage - 8;

}  // namespace

// Pages 1 and 2 of a pair segment: why a side gave up.
struct ShmLink::Notice {
  std::uint32_t bytes;  // stored after the text, with release
  std::uint32_t unused;
  char text[kNoticeText];
};

namespace {
static_assert(sizeof(std::array<char, kNoticeText>) + 8 == kPage, "a notice fills its page");
}

std::size_t shm_pair_bytes(RingGeometry g) { return 3 * kPage + 2 * ShmRing::bytes_needed(g); }

ShmLink::ShmLink(int self, const RankInfo& peer, std::shared_ptr<ShmSegment> segment, bool created,
                 RingGeometry geometry, ShmContext& context, std::shared_ptr<ShmPeerProcess> process)
    : self_(self), peer_(peer.rank), context_(context), process_(std::move(process)), segment_(std::move(segment)),
      peer_opened_(!created), peer_name_(cat("rank ", peer.rank, " (", peer.hostname, ", shm pid ", peer.pid, ")")),
      sender_(ring_region(self < peer.rank ? 0 : 1, geometry), cat("rank ", self, ": shm ring to ", peer_name_),
              context_.stores(), context_.own_word(), process_->word(), context_.single_copy_bytes()),
      receiver_(ring_region(self < peer.rank ? 1 : 0, geometry), cat("rank ", self, ": shm ring from ", peer_name_),
                RingCopy::by_size, context_.own_word(), process_->word(), context_.single_copy_bytes() > 0,
                context_.mapped() ? &process_->mappings() : nullptr) {
  sender_.wake_peer_through(process_->pipe());
  receiver_.wake_peer_through(process_->pipe());
  context_.add_link(this);
}

ShmLink::~ShmLink() {
  context_.remove_link(this);
  // The peer learns that this side is gone: a goodbye unless a notice said
  // why it gave up (its waits end with PeerLost once the rings are empty).
  sender_.close();
  receiver_.close();
  // Finalized before the peer opened the segment, with messages in it: the
  // peer may still be connecting (a slower rank of this communicator), and
  // it must find what this side sent, even after this process exits. It
  // removes the name when it opens it. Without messages for it (or after a
  // failure) the name goes with the segment: the peer then makes its own.
  if (segment_->owns_name() && segment_->attached() == 0 && !aborted_ && !sender_.drained() && process_->alive())
    context_.leave_name(segment_->keep_name(), process_);
}

std::span<std::byte> ShmLink::ring_region(int which, RingGeometry g) const {
  const std::size_t ring = ShmRing::bytes_needed(g);
  return segment_->bytes().subspan(3 * kPage + static_cast<std::size_t>(which) * ring, ring);
}

ShmLink::Notice* ShmLink::notice_of(int side) const {
  return reinterpret_cast<Notice*>(segment_->data() + kPage * (1 + side));
}

std::string ShmLink::peer_notice() const {
  const Notice* notice = notice_of(self_ < peer_ ? 1 : 0);
  auto n = std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(notice->bytes)).load(std::memory_order_acquire);
  return std::string(notice->text, std::min<std::size_t>(n, kNoticeText));
}

std::string ShmLink::explain_loss(std::string_view ring_text) const {
  std::string why = peer_notice();
  if (!why.empty()) return cat("rank ", self_, ": was told by ", peer_name_, " that it gave up: ", why);
  return cat(ring_text, " (", peer_name_, " finalized its communicator or exited while this rank still expects "
             "messages from it: the ranks ran different operations, or it failed)");
}

bool ShmLink::send_now(ConstMemView src, const Tag& tag) {
  if (!sends_.empty() || broken_ || src.bytes > sender_.short_bytes()) return false;
  try {
    return sender_.push_small(src, tag);
  } catch (const PeerLost& e) {
    fail(std::make_exception_ptr(PeerLost(explain_loss(e.what()))));
    std::rethrow_exception(broken_);
  }
}

bool ShmLink::recv_now(MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag) {
  if (broken_) std::rethrow_exception(broken_);
  if (!recvs_.empty() || dst.bytes > receiver_.short_bytes()) return false;
  try {
    return receiver_.pop_small(dst, local, type, op, tag);
  } catch (const PeerLost& e) {
    fail(std::make_exception_ptr(PeerLost(explain_loss(e.what()))));
    std::rethrow_exception(broken_);
  } catch (const Error&) {
    fail(std::current_exception());
    throw;
  }
}

bool ShmLink::progress() {
  if (broken_) return false;
  bool moved = false;
  try {
    while (!sends_.empty()) {
      auto& front = sends_.front();
      const std::size_t before = front.message.pushed;
      const bool started = front.message.started;
      if (!sender_.try_push(front.message)) {
        moved |= front.message.pushed != before || front.message.started != started;
        break;
      }
      front.request->complete();
      sends_.pop_front();
      moved = true;
    }
    while (!recvs_.empty()) {
      auto& front = recvs_.front();
      const std::size_t before = front.message.received;
      const bool started = front.message.started;
      if (!receiver_.try_pop(front.message)) {
        moved |= front.message.received != before || front.message.started != started;
        break;
      }
      front.request->complete();
      recvs_.pop_front();
      moved = true;
    }
    if (!moved && busy() && !peer_alive()) return true;
  } catch (const PeerLost& e) {
    fail(std::make_exception_ptr(PeerLost(explain_loss(e.what()))));
    return true;
  } catch (const Error&) {
    fail(std::current_exception());
    return true;
  }
  return moved;
}

void ShmLink::goodbye() {
  closed_ = true;
  sender_.close();
  receiver_.close();
}

void ShmLink::abort(std::string_view reason) {
  if (!aborted_) {
    aborted_ = true;
    closed_ = true;
    auto* notice = notice_of(self_ < peer_ ? 0 : 1);
    const std::size_t n = std::min(reason.size(), kNoticeText);
    std::memcpy(notice->text, reason.data(), n);
    std::atomic_ref<std::uint32_t>(notice->bytes).store(static_cast<std::uint32_t>(n), std::memory_order_release);
    sender_.close();
    receiver_.close();
  }
  fail(std::make_exception_ptr(Aborted(cat("rank ", self_, ": link to ", peer_name_, " closed: ", reason))));
}

std::optional<std::string> ShmLink::departed() {
  if (busy() || broken_) return std::nullopt;
  std::string why = peer_notice();
  if (!why.empty()) return cat(peer_name_, ": it gave up: ", why);
  // Rings closed without a notice: it finalized, which is no failure.
  if (sender_.peer_closed() || receiver_.peer_closed()) return std::nullopt;
  if (!process_->alive()) return cat(peer_name_, ": its process exited or was killed without closing the link");
  return std::nullopt;
}

std::optional<Tag> ShmLink::waiting_tag() {
  if (busy() || broken_) return std::nullopt;
  return receiver_.waiting_tag();
}

bool ShmLink::one_sided() {
  // Not when the peer opened the segment, but once it made its link: a peer
  // that opened it and then gave up before its link existed (it learnt of
  // another rank's failure while connecting) never closes the rings with a
  // notice, and this side learns why only from the store (lifecycle
  // abort-thread-4 named the wrong rank 1 time in ~150 until then).
  if (!peer_opened_) peer_opened_ = pair_joined(*segment_);
  return !peer_opened_;
}

bool ShmLink::has_news() {
  if (broken_) return false;
  if (!recvs_.empty() && (receiver_.has_data() || receiver_.peer_closed())) return true;
  if (!sends_.empty() && (sender_.can_move(sends_.front().message) || sender_.peer_closed())) return true;
  return false;
}

bool ShmLink::peer_alive() {
  auto now = Clock::now();
  if (now < next_look_) return true;
  next_look_ = now + ShmContext::kLivenessEvery;
  if (process_->alive()) return true;
  // It may have closed properly just before it exited: the rings say so, and
  // what they still hold is read first.
  if (sender_.peer_closed() || receiver_.peer_closed()) return true;
  const Tag& tag = !recvs_.empty() ? recvs_.front().message.tag : sends_.front().message.tag;
  fail(std::make_exception_ptr(PeerLost(cat("rank ", self_, ": lost the connection to ", peer_name_, " (",
                                            describe_tag(tag), "): its process exited or was killed"))));
  return false;
}

void ShmLink::fail(std::exception_ptr error) {
  if (!broken_) broken_ = error;
  for (auto& s : sends_) s.request->fail(broken_);
  for (auto& r : recvs_) r.request->fail(broken_);
  sends_.clear();
  recvs_.clear();
}

}  // namespace braid
