#include "transport/shm/shm_transport.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/log.hpp"
#include "core/text.hpp"
#include "core/wire.hpp"
#include "transport/message.hpp"

namespace braid {
namespace {

constexpr std::uint32_t kAddressVersion = 1;
constexpr std::uint64_t kPairMagic = 0x62726169645f7072ull;  // "braid_pr"
constexpr std::size_t kPage = 4096;
constexpr std::size_t kNoticeText = kPage - 8;

// Page 0 of a pair segment.
struct PairHeader {
  std::uint64_t magic;  // stored last, with release
  std::int32_t low_rank;
  std::int32_t high_rank;
  std::array<std::byte, 16> comm_id;
};
// Pages 1 and 2: why a side gave up.
struct Notice {
  std::uint32_t bytes;  // stored after the text, with release
  std::uint32_t unused;
  char text[kNoticeText];
};
static_assert(sizeof(Notice) == kPage);

std::size_t pair_bytes(RingGeometry g) { return 3 * kPage + 2 * ShmRing::bytes_needed(g); }

std::string pair_label(const CommId& id, int low, int high) { return cat(id.to_hex(), "-", low, "-", high); }

int open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

DoorbellWord* map_word(int fd) {
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<DoorbellWord*>(p);
}

}  // namespace

// ---- per process ----------------------------------------------------------------

ShmPeerProcess::ShmPeerProcess(int pid, int bell_fd, std::string_view who, DoorbellWord* own_word) : pid_(pid) {
  if (pid == ::getpid()) {
    // Ranks of one process (threads) ring the process's own word.
    own_ = true;
    word_ = own_word;
    return;
  }
  const std::string path = cat("/proc/", pid, "/fd/", bell_fd);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    // Its fd table is gone: the process exited or is exiting.
    if (err == ENOENT) throw PeerLost(cat("shm: ", who, " (pid ", pid, ") exited"));
    throw SystemError(cat("shm: cannot open the doorbell of ", who, " (", path, "): ", errno_text(err),
                          "; the ranks must run as the same user in the same PID namespace for shared memory "
                          "(set BRAID_TRANSPORT=tcp otherwise)"));
  }
  word_ = map_word(fd);
  int err = errno;
  ::close(fd);
  if (word_ == nullptr) throw SystemError(cat("shm: cannot map the doorbell of ", who, ": ", errno_text(err)));
  pidfd_ = open_pidfd(pid);
}

ShmPeerProcess::~ShmPeerProcess() {
  if (!own_ && word_ != nullptr) ::munmap(word_, kPage);
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool ShmPeerProcess::alive() const {
  if (own_) return true;
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;  // readable once the process exited
  }
  return ::kill(pid_, 0) == 0 || errno != ESRCH;
}

std::shared_ptr<ShmContext> ShmContext::get() {
  static std::mutex mutex;
  static std::weak_ptr<ShmContext> current;
  std::lock_guard lock(mutex);
  auto context = current.lock();
  // After fork the child would share its parent's word: it gets its own.
  if (!context || context->pid_ != ::getpid()) {
    context = std::shared_ptr<ShmContext>(new ShmContext());
    current = context;
  }
  return context;
}

ShmContext::ShmContext() : pid_(::getpid()) {
  // Segments whose creator died before it could unlink them (a kill -9
  // during connection set-up) go now.
  if (int removed = ShmSegment::remove_orphans(); removed > 0)
    log_info("shm: removed ", removed, " segment(s) of exited processes from /dev/shm");
  fd_ = ::memfd_create("braid-doorbell", MFD_CLOEXEC);
  if (fd_ < 0) throw SystemError(cat("shm: cannot create the process's doorbell (memfd_create): ", errno_text(errno)));
  if (::ftruncate(fd_, static_cast<off_t>(kPage)) != 0 || (word_ = map_word(fd_)) == nullptr) {
    int err = errno;
    ::close(fd_);
    throw SystemError(cat("shm: cannot size or map the process's doorbell: ", errno_text(err)));
  }
}

ShmContext::~ShmContext() {
  if (pid_ == ::getpid())
    for (const auto& name : left_names_) ::shm_unlink(name.c_str());  // ENOENT: the peer took it
  if (word_ != nullptr && pid_ == ::getpid()) ::munmap(word_, kPage);
  if (fd_ >= 0) ::close(fd_);
}

void ShmContext::leave_name(std::string name) {
  std::lock_guard lock(mutex_);
  left_names_.push_back(std::move(name));
}

std::shared_ptr<ShmPeerProcess> ShmContext::peer(int pid, int bell_fd, std::string_view who) {
  std::lock_guard lock(mutex_);
  std::erase_if(peers_, [](const auto& w) { return w.expired(); });
  for (auto& w : peers_)
    if (auto p = w.lock(); p && p->pid() == pid) return p;
  auto p = std::make_shared<ShmPeerProcess>(pid, bell_fd, who, word_);
  peers_.push_back(p);
  return p;
}


// ---- the link ----------------------------------------------------------------------

struct ShmTransport::LinkSet {
  std::mutex mutex;
  std::vector<ShmLink*> links;
};

class ShmLink final : public Link {
 public:
  /// `created`: this rank created the pair's segment, and the peer may not
  /// have opened it yet.
  ShmLink(int self, const RankInfo& peer, std::shared_ptr<ShmSegment> segment, bool created, RingGeometry geometry,
          std::shared_ptr<ShmContext> context, std::shared_ptr<ShmPeerProcess> process,
          std::shared_ptr<ShmTransport::LinkSet> set)
      : self_(self), peer_(peer.rank), context_(std::move(context)), process_(std::move(process)), set_(std::move(set)),
        segment_(std::move(segment)), peer_opened_(!created),
        peer_name_(cat("rank ", peer.rank, " (", peer.hostname, ", shm pid ", peer.pid, ")")),
        sender_(ring_region(self < peer.rank ? 0 : 1, geometry), cat("rank ", self, ": shm ring to ", peer_name_),
                RingCopy::by_size, context_->own_word(), process_->word()),
        receiver_(ring_region(self < peer.rank ? 1 : 0, geometry), cat("rank ", self, ": shm ring from ", peer_name_),
                  RingCopy::by_size, context_->own_word(), process_->word()) {
    std::lock_guard lock(set_->mutex);
    set_->links.push_back(this);
  }

  ~ShmLink() override {
    {
      std::lock_guard lock(set_->mutex);
      std::erase(set_->links, this);
    }
    // The peer learns that this side is gone (its waits end with PeerLost).
    sender_.close();
    receiver_.close();
    // Closed before the peer opened the segment: while its process lives it
    // may still be connecting (its communicator is the one this rank made
    // and closed a moment ago), and it must find the segment, not wait for
    // it until its timeout. It removes the name when it opens it.
    if (segment_->owns_name() && segment_->attached() == 0 && process_->alive())
      context_->leave_name(segment_->keep_name());
  }

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
  std::size_t short_message_bytes() const override { return ShmRing::kInlineBytes; }
  bool send_now(ConstMemView src, const Tag& tag) override {
    if (!sends_.empty() || broken_ || src.bytes > ShmRing::kInlineBytes) return false;
    try {
      return sender_.push_small(src, tag);
    } catch (const PeerLost& e) {
      fail(std::make_exception_ptr(PeerLost(explain_loss(e.what()))));
      std::rethrow_exception(broken_);
    }
  }
  bool recv_now(MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag) override {
    if (broken_) std::rethrow_exception(broken_);
    if (!recvs_.empty() || dst.bytes > ShmRing::kInlineBytes) return false;
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

  bool progress() override {
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

  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }
  void attach(Poller&) override {}

  void abort(std::string_view reason) override {
    if (!aborted_) {
      aborted_ = true;
      auto* notice = notice_of(self_ < peer_ ? 0 : 1);
      const std::size_t n = std::min(reason.size(), kNoticeText);
      std::memcpy(notice->text, reason.data(), n);
      std::atomic_ref<std::uint32_t>(notice->bytes).store(static_cast<std::uint32_t>(n), std::memory_order_release);
      sender_.close();
      receiver_.close();
    }
    fail(std::make_exception_ptr(Aborted(cat("rank ", self_, ": link to ", peer_name_, " closed: ", reason))));
  }

  std::optional<std::string> departed() override {
    if (busy() || broken_) return std::nullopt;
    if (sender_.peer_closed() || receiver_.peer_closed()) {
      std::string why = peer_notice();
      return cat(peer_name_, ": ", why.empty() ? "it closed the shared-memory link (it exited or failed)"
                                               : cat("it gave up: ", why));
    }
    if (!process_->alive()) return cat(peer_name_, ": its process exited or was killed");
    return std::nullopt;
  }

  std::optional<Tag> waiting_tag() override {
    if (busy() || broken_) return std::nullopt;
    return receiver_.waiting_tag();
  }

  bool one_sided() override {
    if (!peer_opened_) peer_opened_ = segment_->attached() > 0;
    return !peer_opened_;
  }

  /// Whether progress() would move something now (the sleep protocol).
  bool has_news() {
    if (broken_) return false;
    if (!recvs_.empty() && (receiver_.has_data() || receiver_.peer_closed())) return true;
    if (!sends_.empty() && (sender_.has_space() || sender_.peer_closed())) return true;
    return false;
  }

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

  std::span<std::byte> ring_region(int which, RingGeometry g) const {
    const std::size_t ring = ShmRing::bytes_needed(g);
    return segment_->bytes().subspan(3 * kPage + static_cast<std::size_t>(which) * ring, ring);
  }
  Notice* notice_of(int side) const { return reinterpret_cast<Notice*>(segment_->data() + kPage * (1 + side)); }

  std::string peer_notice() const {
    const Notice* notice = notice_of(self_ < peer_ ? 1 : 0);
    auto n = std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(notice->bytes)).load(std::memory_order_acquire);
    return std::string(notice->text, std::min<std::size_t>(n, kNoticeText));
  }

  std::string explain_loss(std::string_view ring_text) const {
    std::string why = peer_notice();
    if (!why.empty()) return cat("rank ", self_, ": was told by ", peer_name_, " that it gave up: ", why);
    return cat(ring_text, " (", peer_name_, " destroyed its communicator, failed or exited)");
  }

  // Looks (every kLivenessEvery) whether the peer's process still runs;
  // when it does not, fails every request and returns false.
  bool peer_alive() {
    auto now = Clock::now();
    if (now < next_look_) return true;
    next_look_ = now + ShmTransport::kLivenessEvery;
    if (process_->alive()) return true;
    // It may have closed properly just before it exited: the rings say so.
    if (sender_.peer_closed() || receiver_.peer_closed()) return true;
    const Tag& tag = !recvs_.empty() ? recvs_.front().message.tag : sends_.front().message.tag;
    fail(std::make_exception_ptr(PeerLost(cat("rank ", self_, ": lost the connection to ", peer_name_, " (", describe_tag(tag),
                                              "): its process exited or was killed"))));
    return false;
  }

  void fail(std::exception_ptr error) {
    if (!broken_) broken_ = error;
    for (auto& s : sends_) s.request->fail(broken_);
    for (auto& r : recvs_) r.request->fail(broken_);
    sends_.clear();
    recvs_.clear();
  }

  int self_;
  int peer_;
  std::shared_ptr<ShmContext> context_;
  std::shared_ptr<ShmPeerProcess> process_;
  std::shared_ptr<ShmTransport::LinkSet> set_;
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
  Clock::time_point next_look_{};
};

// ---- the transport -----------------------------------------------------------------

ShmTransport::ShmTransport(int rank, const CommId& comm_id, RingGeometry geometry)
    : rank_(rank), comm_id_(comm_id), geometry_(geometry), context_(ShmContext::get()),
      links_(std::make_shared<LinkSet>()), bell_(context_->own_word()) {
  ShmRing::check(geometry_);
}

ShmTransport::~ShmTransport() = default;

std::vector<std::byte> ShmTransport::local_address() const {
  WireWriter w;
  w.u32(kAddressVersion);
  w.u32(static_cast<std::uint32_t>(context_->pid()));
  w.u32(static_cast<std::uint32_t>(context_->bell_fd()));
  w.str(ShmSegment::pid_namespace());
  return w.take();
}

std::string ShmTransport::describe() const {
  return cat("shm (", geometry_.slot_count, " x ", human_bytes(geometry_.slot_bytes), " slots per direction)");
}

namespace {

struct ShmAddress {
  int pid;
  int bell_fd;
  std::string pid_namespace;
};

ShmAddress parse_address(std::span<const std::byte> bytes, std::string_view who) {
  try {
    WireReader r(bytes, "shm address");
    if (auto v = r.u32(); v != kAddressVersion)
      throw ProtocolMismatch(cat("shm address version ", v, ", this braid speaks ", kAddressVersion));
    ShmAddress a;
    a.pid = static_cast<int>(r.u32());
    a.bell_fd = static_cast<int>(r.u32());
    a.pid_namespace = r.str(64);
    r.expect_end();
    return a;
  } catch (const ProtocolMismatch& e) {
    throw ProtocolMismatch(cat("shm: the address ", who, " published is not readable: ", e.what()));
  }
}

}  // namespace

std::vector<std::unique_ptr<Link>> ShmTransport::connect_all(std::span<const PeerRef> peers, Deadline deadline,
                                                             const PeerWatch& watch) {
  std::vector<std::unique_ptr<Link>> links;
  const std::string own_ns = ShmSegment::pid_namespace();
  try {
    for (const PeerRef& p : peers) links.push_back(connect_one(p, own_ns, deadline, watch));
  } catch (const std::exception& e) {
    // The peers already linked learn why this rank gives up, instead of
    // finding the rings closed without a word.
    for (auto& link : links) link->abort(cat("rank ", rank_, " gave up: ", e.what()));
    throw;
  }
  return links;
}

std::unique_ptr<Link> ShmTransport::connect_one(const PeerRef& p, const std::string& own_ns, Deadline deadline,
                                                const PeerWatch& watch) {
  const int peer = p.info->rank;
  const std::string who = cat("rank ", peer, " (", p.info->hostname, ")");
  ShmAddress a = parse_address(p.address, who);
  if (a.pid_namespace != own_ns)
    throw InvalidArgument(cat("rank ", rank_, ": shm cannot reach ", who, ": it runs in another PID namespace "
                              "(a container?) on this host; set BRAID_TRANSPORT=tcp"));
  std::shared_ptr<ShmPeerProcess> process;
  try {
    process = context_->peer(a.pid, a.bell_fd, who);
  } catch (const PeerLost&) {
    gone(*p.info, a.pid, watch);
  }
  const int low = std::min(rank_, peer), high = std::max(rank_, peer);
  const int low_pid = rank_ == low ? context_->pid() : a.pid;
  // Whichever of the two comes first creates the pair's segment and goes
  // on at once (a peer may connect much later: a point-to-point message);
  // the second opens it and removes the name, which nobody needs from then
  // on. The name carries the lower rank's pid, so remove_orphans() clears
  // it once that process is gone if the second never came.
  const std::string name = ShmSegment::name_for(low_pid, pair_label(comm_id_, low, high));
  std::shared_ptr<ShmSegment> segment;
  auto created = ShmSegment::try_create(name, pair_bytes(geometry_));
  if (created) {
    segment = std::make_shared<ShmSegment>(std::move(*created));
    const std::size_t ring = ShmRing::bytes_needed(geometry_);
    ShmRing::format(segment->bytes().subspan(3 * kPage, ring), geometry_);
    ShmRing::format(segment->bytes().subspan(3 * kPage + ring, ring), geometry_);
    auto* header = reinterpret_cast<PairHeader*>(segment->data());
    header->low_rank = low;
    header->high_rank = high;
    header->comm_id = comm_id_.bytes;
    std::atomic_ref<std::uint64_t>(header->magic).store(kPairMagic, std::memory_order_release);
  } else {
    segment = open_pair(name, low, high, *p.info, *process, deadline, watch);
    segment->unlink();
  }
  return std::make_unique<ShmLink>(rank_, *p.info, std::move(segment), created.has_value(), geometry_, context_,
                                   std::move(process), links_);
}

std::shared_ptr<ShmSegment> ShmTransport::open_pair(const std::string& name, int low, int high, const RankInfo& peer,
                                                    const ShmPeerProcess& process, Deadline deadline,
                                                    const PeerWatch& watch) {
  // The peer created the name a moment ago: it may still be sizing the
  // segment or formatting the rings (microseconds).
  Clock::time_point next_watch{};
  std::string waiting_for = cat("/dev/shm", name, " did not appear");
  // Opened once and kept: the creator counts this side as attached from
  // then on (and may remove the name), so the rings are awaited in this
  // mapping, never by opening the name again.
  std::shared_ptr<ShmSegment> segment;
  while (true) {
    if (!segment)
      if (auto opened = ShmSegment::try_open(name)) {
        segment = std::make_shared<ShmSegment>(std::move(*opened));
        if (segment->size() != pair_bytes(geometry_))
          throw ProtocolMismatch(cat("rank ", rank_, ": the shared-memory segment of rank ", peer.rank, " (",
                                     segment->path(), ") holds ", segment->size(), " bytes, not ",
                                     pair_bytes(geometry_), ": the ranks run different braid builds"));
        waiting_for = cat("the rings in /dev/shm", name, " were not formatted");
      }
    if (segment) {
      auto* header = reinterpret_cast<PairHeader*>(segment->data());
      if (std::atomic_ref<std::uint64_t>(header->magic).load(std::memory_order_acquire) == kPairMagic) {
        if (header->low_rank != low || header->high_rank != high || header->comm_id != comm_id_.bytes)
          throw ProtocolMismatch(cat("rank ", rank_, ": the shared-memory segment ", segment->path(),
                                     " belongs to another pair of ranks or another communicator"));
        return segment;
      }
    }
    if (!process.alive()) gone(peer, process.pid(), watch);
    if (deadline.expired())
      throw Timeout(cat("rank ", rank_, ": the shared-memory segment of rank ", peer.rank, " (", peer.hostname,
                        ") was not ready in time: ", waiting_for));
    auto now = Clock::now();
    if (now >= next_watch) {
      next_watch = now + std::chrono::milliseconds(10);
      if (watch) watch(peer.rank, false);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void ShmTransport::gone(const RankInfo& peer, int pid, const PeerWatch& watch) {
  // The reason it published, if any, says more than its absence.
  if (watch) watch(peer.rank, true);
  throw PeerLost(cat("rank ", rank_, ": rank ", peer.rank, " (", peer.hostname, ", pid ", pid,
                     ") exited before the shared-memory link to it was made"));
}

bool ShmTransport::arm() {
  ticket_ = bell_.arm();
  std::lock_guard lock(links_->mutex);
  for (ShmLink* link : links_->links)
    if (link->has_news()) {
      bell_.disarm();
      return false;
    }
  return true;
}

void ShmTransport::disarm() { bell_.disarm(); }

void ShmTransport::wait(std::chrono::microseconds timeout) {
  bell_.wait(ticket_, std::min<std::chrono::microseconds>(timeout, kLongestWait));
}

void ShmTransport::wake() { Doorbell(context_->own_word()).ring(); }

}  // namespace braid
