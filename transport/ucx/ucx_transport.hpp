// The UCX transport: links over UCX's UCP layer, which speaks RDMA
// (InfiniBand, RoCE) where a device exists and TCP or shared memory
// elsewhere. It is chosen between hosts whose UCX sees an RDMA device, and
// anywhere when BRAID_TRANSPORT names it (registry.cpp).
//
// Per process: one UCP context and worker (ucx_context.hpp) and this
// transport context over it; its address is this process's address in the
// store of every communicator, with the process id and PID namespace.
// Per pair of ranks: one UCP endpoint to the peer's worker, with an error
// handler, so a peer that dies fails the link instead of leaving UCX
// retrying. A peer on another kernel gets UCP_ERR_HANDLING_MODE_PEER (UCX's
// keepalive); a peer in this kernel is watched through a pidfd every
// kLivenessEvery instead, and its endpoint goes without that mode, which in
// UCX 1.13 would deny rendezvous its tcp put and CMA lanes (the
// constructor in ucx_transport.cpp says why).
//
// A send is one active message carrying braid's header (UcxWireHeader, or
// the 16-byte UcxShortHeader for a short message like the one before it),
// eager up to kEagerBytes and by rendezvous above; the
// k-th receive posted takes the k-th message of the peer, checks its header
// with check_match(), then copies an eager message out of UCX's buffer or
// lets a rendezvous one land in place. Links move bytes only (can_reduce()
// is false): the executor receives into scratch and reduces there.
//
// Connecting: each side makes its endpoint and sends a hello (naming its
// inbox's route for short headers); the link is ready once the peer's hello came (its endpoint exists, so a peer that
// leaves at once has let this side connect). connect() returns it then, on
// a later call, and never waits for it.
//
// Sleeping: the worker's event fd is in the engine's epoll; arm() arms the
// worker (ucp_worker_arm). While a transfer moves, arm() declines the sleep
// (kRendezvousPoll). A rank that finalizes sends a goodbye before it closes
// its endpoint: the peer does not count that as a failure.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "core/comm_id.hpp"
#include "transport/transport.hpp"
#include "transport/ucx/ucx_context.hpp"

namespace braid {

class UcxLink;

class UcxTransport final : public TransportContext {
 public:
  static constexpr std::chrono::milliseconds kLivenessEvery{10};
  static constexpr std::chrono::milliseconds kLongestWait{20};
  /// While a send or a rendezvous receive is in UCX's hands and the worker
  /// did something within this long, arm() declines the engine's sleep, so
  /// the engine keeps polling. A rendezvous is a chain of handshakes (RTS,
  /// RTR, the data in pieces as the socket drains, ATS) in which both ranks
  /// must run; a rank asleep at each link of it pays a wake-up per link.
  /// A transfer that stalls (the peer is late) lets the rank sleep after
  /// this long. The engine's own polling still yields the core when ranks
  /// outnumber cores. Only transfers through a socket count: a CMA read
  /// within a host needs nobody else, and polling there took turns from the
  /// ranks that copy (4 ranks on 2 cores, posix,cma, median of 4-6 rounds:
  /// 1 MiB 826 us without, 891 with; 16 MiB 20655 without, 22616 with).
  /// Measured at 1 MiB all-reduce over UCX_TLS=tcp (2
  /// cores, load 4-6, 4-5 interleaved rounds, median / best us): 2 ranks
  /// 3168 / 2500 without, 1784 / 1306 at 200 us, 1722 / 1532 at 500 us,
  /// 2530 / 2084 at 2 ms; 4 ranks 5336 / 3443 without, 3410 / 2298 at
  /// 200 us, 3117 / 1876 at 500 us; 2 ranks posix,cma 488 / 185 without,
  /// 426 / 170 at 500 us. 16 MiB: 2 ranks 45130 / 32467 without, 40726 /
  /// 30048 at 500 us; 4 ranks 122957 / 78940 without, 93568 / 83000. A
  /// later run at load 4 (socket links only): 1 MiB, 2 ranks 863 / 690
  /// without, 480 / 473 with; 4 ranks 2231 / 1459 without, 2337 / 1767
  /// with (4 ranks swing with the load more than with the setting).
  static constexpr std::chrono::microseconds kRendezvousPoll{500};
  /// Messages up to this size go eagerly: their send completes without a
  /// receive posted on the other side, as a schedule may expect of small
  /// messages (direct all-reduce in place sends before it receives), like
  /// the buffering of a TCP socket or a shm ring. Larger ones go by
  /// rendezvous, zero-copy where UCX can (CMA, RDMA), and their send
  /// completes once the receiver took them.
  static constexpr std::size_t kEagerBytes = kEagerSendBytes;  // core/eager.hpp
  /// Pipelined schedules over UCX cut slices no finer than this (unless
  /// BRAID_SLICE_BYTES is smaller): every slice moves by rendezvous, one
  /// put over tcp or one CMA read within a host, and each costs a round
  /// of handshakes (RTS, RTR, the data, ATS) in which both ranks must run.
  /// Fewer, larger slices won over finer pipelining, as Open MPI's UCX path
  /// moves 1 MiB on 2 ranks as two 512 KiB messages. Measured at 1 MiB
  /// (2 cores, load 7-9, 4 interleaved rounds, time in us, 128/256/512 KiB
  /// floors): 2 ranks tcp 4153-6922 / 3569-6259 / 3374-5502; 4 ranks tcp
  /// 8634-15476 / 10589-12846 / 7057-8729; 2 ranks posix,cma 1086-2221 /
  /// 932-1713 / 667-1400; 4 ranks posix,cma 3247-5882 / 2775-8026 /
  /// 2590-6934 (mixed: the round's load swings more than the floor does).
  /// (Before the endpoints had their rendezvous lanes, 128 KiB slices had
  /// beaten 32 KiB eager ones 2-3x over posix,cma at 1 MiB.)
  static constexpr std::size_t kSliceFloor = 512 * 1024;

  /// Not `active`, it makes no UCX context, publishes an empty address
  /// and connects nobody (the registry chose it for no pair).
  explicit UcxTransport(bool active);
  ~UcxTransport() override;

  std::string_view name() const override { return "ucx"; }
  std::vector<std::byte> local_address(const SockAddr& advertise) const override;
  bool serves(const ContextSetup& setup) const override;
  std::vector<std::unique_ptr<Link>> connect(const LinkOwner& owner, std::span<const PeerRef> peers,
                                             Deadline deadline, const PeerWatch& watch) override;
  void withdraw(const LinkOwner& owner, bool failed, std::string_view why) override;
  std::string describe(const LinkOwner& owner) const override;
  bool progress() override;
  std::size_t min_slice_bytes() const override { return kSliceFloor; }
  int wait_fd() const override;
  bool arm() override;

  struct LinkSet;

 private:
  std::shared_ptr<UcxContext> context_;
  std::shared_ptr<LinkSet> links_;
  // Links whose hello went out and whose peer's has not come yet, by
  // communicator, this rank and the peer (connect() runs on the engine and
  // on threads making communicators).
  std::mutex greeting_mutex_;
  std::map<std::tuple<CommId, int, int>, std::unique_ptr<UcxLink>> greeting_;
};

}  // namespace braid
