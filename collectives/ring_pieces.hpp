// The two halves of a ring all-reduce as pieces that other schedules compose
// (ring.cpp builds the ring all-reduce from them; hierarchical.cpp runs them
// on a host's ranks and across hosts). A RingPiece is a ring over some of
// the ranks, working on `count` elements of the output from element `first`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collectives/schedule.hpp"

namespace braid {

struct RingPiece {
  std::span<const int> ring;  // the ranks of this ring, in order (global rank numbers)
  int pos = 0;                // this rank's position in `ring`
  std::size_t first = 0;      // elements
  std::size_t count = 0;
  std::size_t element = 1;    // bytes per element
  std::size_t slice_bytes = 512 * 1024;
  std::uint32_t tag_base = 0;  // added to every tag_index (pieces sharing a peer must not overlap)
  // The flow window (CollectiveShape::ring_window): in each round, the send
  // of slice j waits for the receive of slice j - w, w = window / slice, so
  // at most `window_bytes` go out ahead of what came in (0: unbounded).
  //
  // Why: between hosts that share a kernel (network namespaces of one
  // machine in one PID namespace, RankInfo::kernel_id; bench/netns_hosts.py's
  // two hosts), the sender's CPU runs
  // the receiving side's TCP stack and queues the data in the receiver's
  // socket. A full-duplex exchange over a veth pair moved 64-256 KiB at
  // 5 GB/s each way, while 1 MiB streamed took 500 us: 2 GB/s, the same
  // exchange in 128 KiB steps 175 us (a plain C program, no braid). Bounded
  // to 64 KiB ahead, braid's ring over that pair ran 1.8-2x faster from 1 to
  // 4 MiB, and the hierarchical all-reduce on 2 hosts of 2 ranks 1.5x at
  // 1-16 MiB. Over loopback (one host, MTU 64 KiB) the window did not pay.
  std::size_t window_bytes = 0;
  // Whether this rank's link to its successor has the window (the piece's
  // slices are cut to the window on every rank alike; only the sends over
  // such a link wait).
  bool window_here = false;

  int n() const { return static_cast<int>(ring.size()); }
  /// The partition of the region into one chunk per ring position.
  Partition chunks() const { return Partition{count, static_cast<std::size_t>(n())}; }
  /// Slices per chunk: the same on every rank of the ring.
  std::size_t slices() const;
  /// How many slices this rank's sends in a round may run ahead of its
  /// receives (0: unbounded; else at least 1).
  std::size_t window_slices() const;
  /// Slice j of chunk c, in `buffer`.
  Region slice(BufferId buffer, std::size_t chunk, std::size_t j) const;
  /// The chunk this rank owns after reduce_scatter: (pos + 1) mod n.
  std::size_t owned_chunk() const { return static_cast<std::size_t>((pos + 1) % n()); }
  /// Tags used by the piece: [tag_base, tag_base + tags()).
  std::uint32_t tags() const;
};

/// `piece` with the flow window `shape` gives its ring (CollectiveShape::
/// ring_window): slices no larger than the window on every rank, and this
/// rank's sends bounded where its link to its successor has it.
RingPiece with_flow_window(RingPiece piece, const CollectiveShape& shape);

/// What a reduce-scatter leaves for the all-gather that follows it.
struct RingState {
  std::vector<std::uint32_t> last;     // by slice: the last step that wrote the owned chunk's slice
  std::vector<std::uint32_t> rs_send;  // by round x slice: the reduce-scatter's sends (a later receive overwrites what they read)
  std::vector<bool> has_last;          // by slice: false where the owned slice is empty
};

/// n-1 rounds: each rank sends a chunk to its successor and reduces the
/// next from its predecessor into the output; afterwards the owned chunk
/// holds the reduction over the ring's ranks. Round 0 reads `source` (the
/// input, or the output when an earlier piece left partial results there)
/// and waits for `entry` (steps of an earlier piece).
RingState append_ring_reduce_scatter(Schedule& sched, const RingPiece& piece, BufferId source,
                                     std::span<const std::uint32_t> entry);
/// Divides the owned chunk by the schedule's rank count (ReduceOp::avg).
void append_ring_average(Schedule& sched, const RingPiece& piece, RingState& state);
/// n-1 rounds that copy every rank's owned chunk to all; round 0's sends also
/// wait for `entry`.
void append_ring_all_gather(Schedule& sched, const RingPiece& piece, RingState& state,
                            std::span<const std::uint32_t> entry);
/// The steps of `sched` from index `from` on that write the output: what a
/// later piece reading that output must wait for.
std::vector<std::uint32_t> writes_since(const Schedule& sched, std::uint32_t from);

}  // namespace braid
