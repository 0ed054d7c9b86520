// The shared-memory transport: ranks on one host talk through rings in
// shared memory (shm_ring.hpp) instead of the kernel's TCP stack.
//
// Per process (ShmContext, shared by every communicator and split child of
// the process): one doorbell word (doorbell.hpp) in a memfd, on which the
// process's engine sleeps whatever shm link it waits for, and the peers'
// doorbells, mapped once per peer process. A peer maps this process's word
// by opening /proc/<pid>/fd/<fd> (allowed to processes of the same user; no
// name in /dev/shm, so nothing is left behind by a crash).
//
// Per pair of ranks, one segment (ShmSegment) under a name both derive
// (/braid-<lower rank's pid>-<pid ns>-<comm id>-<lo>-<hi>), created by
// whichever of the two connects first:
//
//   page 0   pair header: magic (published last), the two ranks, comm id
//   page 1   the lower rank's abort notice, page 2 the higher rank's
//   then     the ring lower -> higher, then the ring higher -> lower
//
// The creator goes on at once (its peer may connect much later, for a
// point-to-point message); the other opens the segment by name and removes
// the name, so from then on a kill -9 leaves nothing in /dev/shm. Both sides publish into the ring they produce and ring the
// other process's doorbell; the receiver reduces straight from the slot.
//
// Failures: an abort writes the reason into the rank's notice page and
// closes both rings; the peer's requests fail with PeerLost carrying the
// reason. A peer that dies without closing (kill -9) is noticed through a
// pidfd (or kill(pid, 0)) that a busy link checks every kLivenessEvery.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm_id.hpp"
#include "core/deadline.hpp"
#include "transport/shm/doorbell.hpp"
#include "transport/shm/shm_ring.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

namespace braid {

/// Another process on this host whose doorbell this process rings.
class ShmPeerProcess {
 public:
  /// Maps the doorbell of process `pid`; for this process, uses `own_word`.
  ShmPeerProcess(int pid, int bell_fd, std::string_view who, DoorbellWord* own_word);
  ~ShmPeerProcess();
  ShmPeerProcess(const ShmPeerProcess&) = delete;
  ShmPeerProcess& operator=(const ShmPeerProcess&) = delete;
  DoorbellWord* word() const { return word_; }
  int pid() const { return pid_; }
  /// False once the process exited (or was killed).
  bool alive() const;

 private:
  int pid_;
  int pidfd_ = -1;
  DoorbellWord* word_ = nullptr;
  bool own_ = false;  // this process: the word is the context's, not a mapping
};

/// The process's part of the shm transport.
class ShmContext {
 public:
  /// The context of this process (made on first use, and again after fork).
  static std::shared_ptr<ShmContext> get();
  ~ShmContext();
  ShmContext(const ShmContext&) = delete;
  ShmContext& operator=(const ShmContext&) = delete;

  DoorbellWord* own_word() const { return word_; }
  int bell_fd() const { return fd_; }
  int pid() const { return pid_; }
  /// The doorbell of process `pid`, mapped once and shared by its links.
  std::shared_ptr<ShmPeerProcess> peer(int pid, int bell_fd, std::string_view who);
  /// A pair segment this process created and closed before its peer opened
  /// it: the name stays for the peer (still connecting: the pair's
  /// communicator was made and closed here first), which opens it, finds the
  /// rings closed and removes the name. The context removes what is left
  /// when it goes (a peer that never came).
  void leave_name(std::string name);

 private:
  ShmContext();
  int pid_;
  int fd_ = -1;
  DoorbellWord* word_ = nullptr;
  std::mutex mutex_;
  std::vector<std::weak_ptr<ShmPeerProcess>> peers_;
  std::vector<std::string> left_names_;
};

class ShmLink;

class ShmTransport final : public Transport {
 public:
  static constexpr std::chrono::milliseconds kLivenessEvery{10};
  /// The longest a sleeping engine waits before it looks at its peers again.
  static constexpr std::chrono::milliseconds kLongestWait{20};

  ShmTransport(int rank, const CommId& comm_id, RingGeometry geometry = {});
  ~ShmTransport() override;

  std::string_view name() const override { return "shm"; }
  std::vector<std::byte> local_address() const override;
  std::vector<std::unique_ptr<Link>> connect_all(std::span<const PeerRef> peers, Deadline deadline,
                                                 const PeerWatch& watch) override;
  std::string describe() const override;
  void set_identity(int rank, int, const CommId& comm_id) override {
    rank_ = rank;
    comm_id_ = comm_id;
  }

  bool wakes_poller() const override { return false; }
  bool arm() override;
  void disarm() override;
  void wait(std::chrono::microseconds timeout) override;
  void wake() override;

  /// The links of this transport that are alive (ShmLink registers itself).
  struct LinkSet;

 private:
  /// The peer's process is gone: throws the reason it published (watch),
  /// or PeerLost saying so.
  std::unique_ptr<Link> connect_one(const PeerRef& peer, const std::string& own_ns, Deadline deadline,
                                    const PeerWatch& watch);
  [[noreturn]] void gone(const RankInfo& peer, int pid, const PeerWatch& watch);
  std::shared_ptr<ShmSegment> open_pair(const std::string& name, int low, int high, const RankInfo& peer,
                                        const ShmPeerProcess& process, Deadline deadline, const PeerWatch& watch);

  int rank_;
  CommId comm_id_;
  RingGeometry geometry_;
  std::shared_ptr<ShmContext> context_;
  std::shared_ptr<LinkSet> links_;
  Doorbell bell_;
  std::uint32_t ticket_ = 0;
};

}  // namespace braid
