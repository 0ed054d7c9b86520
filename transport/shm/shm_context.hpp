// The shared-memory transport: ranks on one host talk through rings in
// shared memory (shm_ring.hpp) instead of the kernel's TCP stack.
//
// Per process (ShmContext, shared by every communicator and split child of
// the process): one doorbell word (doorbell.hpp) in a memfd and the pipe the
// process's engine sleeps on whatever shm link it waits for, and the peers'
// doorbells and pipes, opened once per peer process. A peer maps this
// process's word and opens its pipe through /proc/<pid>/fd/<fd> (allowed to
// processes of the same user; no name in /dev/shm, so nothing is left behind
// by a crash).
//
// Per pair of ranks of a communicator, one segment (ShmSegment) under a name
// both derive and nobody else can (/braid-<lower rank's pid>-<pid ns>-<keyed
// hash of both processes' 128-bit secrets, the comm id and the two ranks>;
// each process publishes its secret with its address through the store),
// created by whichever of the two connects first, with O_EXCL and mode 0600;
// the opener refuses a file another user owns or with another mode at once
// (shm_segment.hpp):
//
//   page 0   pair header: magic (published last), the two ranks, comm id
//   page 1   the lower rank's abort notice, page 2 the higher rank's
//   then     the ring lower -> higher, then the ring higher -> lower
//
// The creator goes on at once (its peer may connect much later, for a
// point-to-point message); the other opens the segment by name and removes
// the name, so from then on a kill -9 leaves nothing in /dev/shm. Both sides
// publish into the ring they produce and ring the other process's doorbell;
// the receiver reduces straight from the slot.
//
// Closing: a rank that finalizes closes its rings (a goodbye: closed without
// a notice); the peer reads what they still hold and only a receive beyond
// that fails. A creator that finalizes before its peer opened the segment
// leaves the name for it, even past its own exit: the data it sent is in
// the segment, and the peer, opening it late, reads it and removes the name.
// A rank that gives up writes the reason into its notice page and closes
// both rings: the peer's requests fail with PeerLost carrying the reason. A
// peer that dies without closing (kill -9) is noticed through a pidfd (or
// kill(pid, 0)) that a busy link checks every kLivenessEvery.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm_id.hpp"
#include "core/deadline.hpp"
#include "core/process.hpp"
#include "core/socket.hpp"
#include "transport/shm/doorbell.hpp"
#include "transport/shm/shared_memory.hpp"
#include "transport/shm/shm_ring.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

namespace braid {

/// Another process on this host whose doorbell this process rings.
class ShmPeerProcess {
 public:
  /// Maps the doorbell of process `pid` and opens its pipe; for this process,
  /// uses `own_word` and `own_pipe`. PeerLost when the process is gone.
  ShmPeerProcess(int pid, int bell_fd, int pipe_fd, std::string_view who, DoorbellWord* own_word, int own_pipe);
  /// A process that exited already: a word nobody sleeps on, nothing to ring.
  explicit ShmPeerProcess(int pid);
  ~ShmPeerProcess();
  ShmPeerProcess(const ShmPeerProcess&) = delete;
  ShmPeerProcess& operator=(const ShmPeerProcess&) = delete;
  DoorbellWord* word() const { return word_; }
  /// The write end of its pipe, -1 for one that exited.
  int pipe() const { return pipe_; }
  int pid() const { return watch_.pid(); }
  /// False once the process exited (or was killed).
  bool alive() const { return !exited_ && watch_.alive(); }
  /// Its shared allocations this process mapped (mapped messages).
  PeerMappings& mappings() { return mappings_; }

 private:
  ProcessWatch watch_;
  DoorbellWord* word_ = nullptr;
  int pipe_ = -1;
  bool own_ = false;     // this process: the word and pipe are the context's
  bool exited_ = false;  // made for a process that was gone already
  PeerMappings mappings_;
};

class ShmLink;

/// The 128 random bits a process publishes with its shm address.
using ShmSecret = std::array<std::byte, 16>;

class ShmContext final : public TransportContext {
 public:
  static constexpr std::chrono::milliseconds kLivenessEvery{10};

  /// `single_copy_bytes`: the smallest message sent by one copy (shm_ring.hpp;
  /// BRAID_SHM_SINGLE_COPY), 0 for none. `mapped`: whether this process's
  /// links take mapped messages (shared_memory.hpp; BRAID_SHM_MAPPED).
  /// `stores`: how producers fill slots (RingCopy::adaptive, cached or
  /// streaming; BRAID_SHM_STORES).
  explicit ShmContext(RingGeometry geometry = {}, std::size_t single_copy_bytes = 0, bool mapped = true,
                      RingCopy stores = RingCopy::adaptive);
  ~ShmContext() override;
  ShmContext(const ShmContext&) = delete;
  ShmContext& operator=(const ShmContext&) = delete;

  std::string_view name() const override { return "shm"; }
  /// Pipelined schedules over shm cut slices of at least this much. A slice
  /// above kEagerSendBytes from braid_mem_alloc memory is read in place by
  /// the peer (one copy, no slot), one at or below it goes through the slots
  /// like any other, so with the engine's 32 KiB floor a 2-rank all-reduce
  /// never read in place below 2 MiB. Fewer, larger slices also won through
  /// the slots. Measured (2 ranks, braid-perf -n auto, 3 launches each,
  /// alternating, us): 32 KiB floor / 128 KiB floor, slots: 256 KiB
  /// 13.7-15.2 / 10.8-13.2, 1 MiB 60.9-63.7 / 47.8-52.1; braid_mem_alloc
  /// buffers (-R 1): 256 KiB 13.5-15.0 / 6.9-7.1, 1 MiB 61.2-64.8 /
  /// 29.1-32.6, 2 MiB 117-119 / 58-61. The same on every rank, whatever
  /// its settings: every rank cuts a collective alike.
  static constexpr std::size_t kSliceFloor = 128 * 1024;
  std::size_t min_slice_bytes() const override { return kSliceFloor; }
  std::vector<std::byte> local_address(const SockAddr& advertise) const override;
  std::vector<std::unique_ptr<Link>> connect(const LinkOwner& owner, std::span<const PeerRef> peers,
                                             Deadline deadline, const PeerWatch& watch) override;
  std::string describe(const LinkOwner& owner) const override;
  int wait_fd() const override { return pipe_read_.get(); }
  bool arm() override;
  void disarm() override;

  RingGeometry geometry() const { return geometry_; }
  std::size_t single_copy_bytes() const { return single_copy_bytes_; }
  bool mapped() const { return mapped_; }
  RingCopy stores() const { return stores_; }
  DoorbellWord* own_word() const { return word_; }
  int own_pipe() const { return pipe_write_.get(); }
  int pid() const { return pid_; }
  /// The doorbell of process `pid`, opened once and shared by its links.
  std::shared_ptr<ShmPeerProcess> peer(int pid, int bell_fd, int pipe_fd, std::string_view who);
  /// A pair segment this process created and closed before its peer opened
  /// it: the name stays for the peer (still connecting: the pair's
  /// communicator was made and closed here first), which opens it, reads
  /// what is left and removes the name. The context removes at its end the
  /// names whose peers are gone; those of live peers stay for them (a
  /// segment whose creator is gone is removed by remove_orphans() once its
  /// lower rank's process is gone too).
  void leave_name(std::string name, std::shared_ptr<ShmPeerProcess> peer);

  /// The links alive in this process (ShmLink registers itself), for arm().
  void add_link(ShmLink* link);
  void remove_link(ShmLink* link);

 private:
  std::unique_ptr<Link> connect_one(const LinkOwner& owner, const PeerRef& peer, const std::string& own_ns,
                                    Deadline deadline, const PeerWatch& watch);
  [[noreturn]] void gone(const LinkOwner& owner, const RankInfo& peer, int pid, const PeerWatch& watch);
  /// Waits (microseconds) for the pair's header in a segment the peer is
  /// formatting this moment, and checks it is this pair's.
  std::shared_ptr<ShmSegment> await_pair(const LinkOwner& owner, std::shared_ptr<ShmSegment> segment, int low,
                                         int high, const RankInfo& peer, const ShmPeerProcess& process,
                                         Deadline deadline, const PeerWatch& watch);

  RingGeometry geometry_;
  std::size_t single_copy_bytes_;
  bool mapped_;
  RingCopy stores_;
  int pid_;
  ShmSecret secret_;  // part of every pair name (pair_label)
  Fd bell_;  // the memfd holding word_
  DoorbellWord* word_ = nullptr;
  Fd pipe_read_;   // in the engine's epoll
  Fd pipe_write_;  // peers open it through /proc to ring this process
  Doorbell own_bell_;
  std::uint32_t ticket_ = 0;  // arm()'s
  std::mutex mutex_;  // guards the lists below
  std::vector<std::weak_ptr<ShmPeerProcess>> peers_;
  struct LeftName {
    std::string name;
    std::shared_ptr<ShmPeerProcess> peer;
  };
  std::vector<LeftName> left_names_;
  std::vector<ShmLink*> links_;
};

}  // namespace braid
