#include "transport/shm/shm_context.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>

#include "core/auth.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "core/wire.hpp"
#include "transport/shm/shm_link.hpp"

namespace braid {
namespace {

constexpr std::uint32_t kAddressVersion = 3;
constexpr std::uint64_t kPairMagic = 0x62726169645f7072ull;  // "braid_pr"
constexpr std::size_t kPage = 4096;

// Page 0 of a pair segment.
struct PairHeader {
  std::uint64_t magic;  // stored last, with release
  std::int32_t low_rank;
  std::int32_t high_rank;
  std::array<std::byte, 16> comm_id;
  // The opener made its link (mark_pair_joined): from then on it tells the
  // creator through the rings if it gives up.
  std::uint32_t joined;
};

// The pair's name in /dev/shm ends with a keyed hash of the secrets both
// processes published through the store (128 bits each), the communicator
// and the two ranks: a local user who cannot read the store cannot name the
// segment ahead of the job, so cannot plant one (docs/security.md).
std::string pair_label(const ShmSecret& low_secret, const ShmSecret& high_secret, const CommId& id, int low,
                       int high) {
  WireWriter w;
  w.bytes(high_secret);
  w.bytes(id.bytes);
  w.u32(static_cast<std::uint32_t>(low));
  w.u32(static_cast<std::uint32_t>(high));
  const std::vector<std::byte> message = w.take();
  const Digest digest = hmac_sha256(low_secret, message);
  return to_hex(std::span(digest).first(16));
}

DoorbellWord* map_word(int fd) {
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<DoorbellWord*>(p);
}

struct ShmAddress {
  int pid;
  int bell_fd;
  int pipe_fd;
  std::string pid_namespace;
  ShmSecret secret;
};

ShmAddress parse_address(std::span<const std::byte> bytes, std::string_view who) {
  try {
    WireReader r(bytes, "shm address");
    if (auto v = r.u32(); v != kAddressVersion)
      throw ProtocolMismatch(cat("shm address version ", v, ", this braid speaks ", kAddressVersion));
    ShmAddress a;
    a.pid = static_cast<int>(r.u32());
    a.bell_fd = static_cast<int>(r.u32());
    a.pipe_fd = static_cast<int>(r.u32());
    a.pid_namespace = r.str(64);
    auto secret = r.bytes(a.secret.size());
    std::copy(secret.begin(), secret.end(), a.secret.begin());
    r.expect_end();
    return a;
  } catch (const ProtocolMismatch& e) {
    throw ProtocolMismatch(cat("shm: the address ", who, " published is not readable: ", e.what()));
  }
}

}  // namespace

void mark_pair_joined(ShmSegment& segment) {
  std::atomic_ref<std::uint32_t>(reinterpret_cast<PairHeader*>(segment.data())->joined).store(1, std::memory_order_release);
}

bool pair_joined(const ShmSegment& segment) {
  return std::atomic_ref<std::uint32_t>(reinterpret_cast<PairHeader*>(segment.data())->joined)
             .load(std::memory_order_acquire) != 0;
}

// ---- another process ------------------------------------------------------------

ShmPeerProcess::ShmPeerProcess(int pid, int bell_fd, int pipe_fd, std::string_view who, DoorbellWord* own_word,
                               int own_pipe)
    : watch_(pid), mappings_(pid) {
  if (pid == ::getpid()) {
    // Ranks of one process (threads) ring the process's own word.
    own_ = true;
    word_ = own_word;
    pipe_ = own_pipe;
    return;
  }
  auto open_fd = [&](int fd, int flags, std::string_view what) {
    const std::string path = cat("/proc/", pid, "/fd/", fd);
    int opened = ::open(path.c_str(), flags | O_CLOEXEC);
    if (opened >= 0) return opened;
    int err = errno;
    // Its fd table is gone: the process exited or is exiting.
    if (err == ENOENT) throw PeerLost(cat("shm: ", who, " (pid ", pid, ") exited"));
    throw SystemError(cat("shm: cannot open the ", what, " of ", who, " (", path, "): ", errno_text(err),
                          "; the ranks must run as the same user in the same PID namespace for shared memory "
                          "(set BRAID_TRANSPORT=tcp otherwise)"));
  };
  int fd = open_fd(bell_fd, O_RDWR, "doorbell");
  word_ = map_word(fd);
  int err = errno;
  ::close(fd);
  if (word_ == nullptr) throw SystemError(cat("shm: cannot map the doorbell of ", who, ": ", errno_text(err)));
  try {
    pipe_ = open_fd(pipe_fd, O_WRONLY | O_NONBLOCK, "doorbell pipe");
  } catch (...) {
    ::munmap(word_, kPage);
    word_ = nullptr;
    throw;
  }
}

ShmPeerProcess::ShmPeerProcess(int pid) : watch_(pid), exited_(true), mappings_(pid) {
  // Nobody sleeps on this word: ringing it reads zero sleepers and stops.
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw SystemError(cat("shm: cannot map a page: ", errno_text(errno)));
  word_ = static_cast<DoorbellWord*>(p);
}

ShmPeerProcess::~ShmPeerProcess() {
  if (!own_ && word_ != nullptr) ::munmap(word_, kPage);
  if (!own_ && pipe_ >= 0) ::close(pipe_);
}

// ---- the process's context ----------------------------------------------------------

ShmContext::ShmContext(RingGeometry geometry, std::size_t single_copy_bytes, bool mapped, RingCopy stores)
    : geometry_(geometry), single_copy_bytes_(single_copy_bytes), mapped_(mapped), stores_(stores), pid_(::getpid()),
      secret_(CommId::random().bytes) {
  ShmRing::check(geometry_);
  // Segments whose creator died before it could unlink them (a kill -9
  // during connection set-up) go now.
  if (int removed = ShmSegment::remove_orphans(); removed > 0)
    log_info("shm: removed ", removed, " segment(s) of exited processes from /dev/shm");
  bell_ = Fd(::memfd_create("braid-doorbell", MFD_CLOEXEC));
  if (!bell_) throw SystemError(cat("shm: cannot create the process's doorbell (memfd_create): ", errno_text(errno)));
  if (::ftruncate(bell_.get(), static_cast<off_t>(kPage)) != 0 || (word_ = map_word(bell_.get())) == nullptr)
    throw SystemError(cat("shm: cannot size or map the process's doorbell: ", errno_text(errno)));
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw SystemError(cat("shm: cannot create the doorbell's pipe: ", errno_text(errno)));
  pipe_read_ = Fd(fds[0]);
  pipe_write_ = Fd(fds[1]);
  own_bell_ = Doorbell(word_);
}

ShmContext::~ShmContext() {
  if (pid_ == ::getpid()) {
    // A live peer may still come for what this side left it; one that is
    // gone never will.
    std::lock_guard lock(mutex_);
    for (const auto& left : left_names_)
      if (!left.peer->alive()) ::shm_unlink(left.name.c_str());  // ENOENT: the peer took it
  }
  if (word_ != nullptr && pid_ == ::getpid()) ::munmap(word_, kPage);
}

std::vector<std::byte> ShmContext::local_address(const SockAddr&) const {
  WireWriter w;
  w.u32(kAddressVersion);
  w.u32(static_cast<std::uint32_t>(pid_));
  w.u32(static_cast<std::uint32_t>(bell_.get()));
  w.u32(static_cast<std::uint32_t>(pipe_write_.get()));
  w.str(pid_namespace());
  w.bytes(secret_);
  return w.take();
}

std::string ShmContext::describe(const LinkOwner&) const {
  return cat("shm (", geometry_.slot_count, " x ", human_bytes(geometry_.slot_bytes), " slots per direction)");
}

void ShmContext::leave_name(std::string name, std::shared_ptr<ShmPeerProcess> peer) {
  std::lock_guard lock(mutex_);
  std::erase_if(left_names_, [](const LeftName& l) { return !l.peer->alive(); });
  left_names_.push_back(LeftName{std::move(name), std::move(peer)});
}

std::shared_ptr<ShmPeerProcess> ShmContext::peer(int pid, int bell_fd, int pipe_fd, std::string_view who) {
  std::lock_guard lock(mutex_);
  std::erase_if(peers_, [](const auto& w) { return w.expired(); });
  for (auto& w : peers_)
    if (auto p = w.lock(); p && p->pid() == pid && p->alive()) return p;
  auto p = std::make_shared<ShmPeerProcess>(pid, bell_fd, pipe_fd, who, word_, pipe_write_.get());
  peers_.push_back(p);
  return p;
}

void ShmContext::add_link(ShmLink* link) {
  std::lock_guard lock(mutex_);
  links_.push_back(link);
}

void ShmContext::remove_link(ShmLink* link) {
  std::lock_guard lock(mutex_);
  std::erase(links_, link);
}

std::vector<std::unique_ptr<Link>> ShmContext::connect(const LinkOwner& owner, std::span<const PeerRef> peers,
                                                       Deadline deadline, const PeerWatch& watch) {
  std::vector<std::unique_ptr<Link>> links;
  const std::string own_ns = pid_namespace();
  try {
    for (const PeerRef& p : peers) links.push_back(connect_one(owner, p, own_ns, deadline, watch));
  } catch (const std::exception& e) {
    // The peers already linked learn why this rank gives up, instead of
    // finding the rings closed without a word.
    for (auto& link : links) link->abort(cat("rank ", owner.rank, " gave up: ", e.what()));
    throw;
  }
  return links;
}

std::unique_ptr<Link> ShmContext::connect_one(const LinkOwner& owner, const PeerRef& p, const std::string& own_ns,
                                              Deadline deadline, const PeerWatch& watch) {
  const int peer = p.info->rank;
  const std::string who = cat("rank ", peer, " (", p.info->hostname, ")");
  ShmAddress a = parse_address(p.address, who);
  if (a.pid_namespace != own_ns)
    throw InvalidArgument(cat("rank ", owner.rank, ": shm cannot reach ", who, ": it runs in another PID namespace "
                              "(a container?) on this host; set BRAID_TRANSPORT=tcp"));
  const int low = std::min(owner.rank, peer), high = std::max(owner.rank, peer);
  const int low_pid = owner.rank == low ? pid_ : a.pid;
  // Whichever of the two comes first creates the pair's segment and goes
  // on at once (a peer may connect much later: a point-to-point message);
  // the second opens it and removes the name, which nobody needs from then
  // on. The name carries the lower rank's pid, so remove_orphans() clears
  // it once that process is gone if the second never came.
  const ShmSecret& low_secret = owner.rank == low ? secret_ : a.secret;
  const ShmSecret& high_secret = owner.rank == low ? a.secret : secret_;
  const std::string name =
      ShmSegment::name_for(low_pid, pair_label(low_secret, high_secret, owner.comm_id, low, high));
  std::shared_ptr<ShmPeerProcess> process;
  try {
    process = this->peer(a.pid, a.bell_fd, a.pipe_fd, who);
  } catch (const PeerLost&) {
    // Gone already. If it left the pair's segment (it finalized after
    // sending into it), what it sent is there to read; else it is lost.
    process = std::make_shared<ShmPeerProcess>(a.pid);
  }
  Clock::time_point next_watch{};
  while (true) {
    if (process->alive()) {
      if (auto created = ShmSegment::try_create(name, shm_pair_bytes(geometry_))) {
        auto segment = std::make_shared<ShmSegment>(std::move(*created));
        const std::size_t ring = ShmRing::bytes_needed(geometry_);
        ShmRing::format(segment->bytes().subspan(3 * kPage, ring), geometry_);
        ShmRing::format(segment->bytes().subspan(3 * kPage + ring, ring), geometry_);
        auto* header = reinterpret_cast<PairHeader*>(segment->data());
        header->low_rank = low;
        header->high_rank = high;
        header->comm_id = owner.comm_id.bytes;
        std::atomic_ref<std::uint64_t>(header->magic).store(kPairMagic, std::memory_order_release);
        return std::make_unique<ShmLink>(owner.rank, *p.info, std::move(segment), true, geometry_, *this,
                                         std::move(process));
      }
    }
    if (auto opened = ShmSegment::try_open(name)) {
      auto segment = await_pair(owner, std::make_shared<ShmSegment>(std::move(*opened)), low, high, *p.info, *process,
                                deadline, watch);
      segment->unlink();
      ShmSegment& pair = *segment;
      auto link = std::make_unique<ShmLink>(owner.rank, *p.info, std::move(segment), false, geometry_, *this,
                                            std::move(process));
      mark_pair_joined(pair);
      return link;
    }
    // Neither: its creator is sizing it this moment, or it went before this
    // side opened it (the peer closed its communicator first, with nothing in
    // it for this side), and this side makes a new one.
    if (!process->alive()) gone(owner, *p.info, a.pid, watch);
    if (deadline.expired())
      throw Timeout(cat("rank ", owner.rank, ": the shared-memory segment of ", who, " (/dev/shm", name,
                        ") could be neither made nor opened in time"));
    auto now = Clock::now();
    if (now >= next_watch) {
      next_watch = now + std::chrono::milliseconds(10);
      if (watch) watch(peer, false);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::shared_ptr<ShmSegment> ShmContext::await_pair(const LinkOwner& owner, std::shared_ptr<ShmSegment> segment,
                                                   int low, int high, const RankInfo& peer,
                                                   const ShmPeerProcess& process, Deadline deadline,
                                                   const PeerWatch& watch) {
  if (segment->size() != shm_pair_bytes(geometry_))
    throw ProtocolMismatch(cat("rank ", owner.rank, ": the shared-memory segment of rank ", peer.rank, " (",
                               segment->path(), ") holds ", segment->size(), " bytes, not ", shm_pair_bytes(geometry_),
                               ": the ranks run different braid builds"));
  // The peer created it a moment ago and formats its rings in the same call
  // (microseconds: no wait here depends on the peer's engine).
  Clock::time_point next_watch{};
  auto* header = reinterpret_cast<PairHeader*>(segment->data());
  while (std::atomic_ref<std::uint64_t>(header->magic).load(std::memory_order_acquire) != kPairMagic) {
    if (!process.alive()) gone(owner, peer, process.pid(), watch);
    if (deadline.expired())
      throw Timeout(cat("rank ", owner.rank, ": the shared-memory segment of rank ", peer.rank, " (", peer.hostname,
                        ") was not ready in time: the rings in ", segment->path(), " were not formatted"));
    auto now = Clock::now();
    if (now >= next_watch) {
      next_watch = now + std::chrono::milliseconds(10);
      if (watch) watch(peer.rank, false);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (header->low_rank != low || header->high_rank != high || header->comm_id != owner.comm_id.bytes)
    throw ProtocolMismatch(cat("rank ", owner.rank, ": the shared-memory segment ", segment->path(),
                               " belongs to another pair of ranks or another communicator"));
  return segment;
}

void ShmContext::gone(const LinkOwner& owner, const RankInfo& peer, int pid, const PeerWatch& watch) {
  // The reason it published, if any, says more than its absence.
  if (watch) watch(peer.rank, true);
  throw PeerLost(cat("rank ", owner.rank, ": rank ", peer.rank, " (", peer.hostname, ", pid ", pid,
                     ") exited before the shared-memory link to it was made"));
}

bool ShmContext::arm() {
  ticket_ = own_bell_.arm();
  std::lock_guard lock(mutex_);
  for (ShmLink* link : links_)
    if (link->has_news()) {
      own_bell_.disarm();
      return false;
    }
  return true;
}

void ShmContext::disarm() {
  // A peer bumps the sequence before it writes into the pipe: unchanged, the
  // pipe is empty, and no system call is spent finding that out.
  if (own_bell_.rung_since(ticket_)) {
    char drained[64];
    while (::read(pipe_read_.get(), drained, sizeof drained) > 0) {
    }
  }
  own_bell_.disarm();
}

}  // namespace braid
