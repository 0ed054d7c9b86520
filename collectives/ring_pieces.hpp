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

  int n() const { return static_cast<int>(ring.size()); }
  /// The partition of the region into one chunk per ring position.
  Partition chunks() const { return Partition{count, static_cast<std::size_t>(n())}; }
  /// Slices per chunk: the same on every rank of the ring.
  std::size_t slices() const;
  /// Slice j of chunk c, in `buffer`.
  Region slice(BufferId buffer, std::size_t chunk, std::size_t j) const;
  /// The chunk this rank owns after reduce_scatter: (pos + 1) mod n.
  std::size_t owned_chunk() const { return static_cast<std::size_t>((pos + 1) % n()); }
  /// Tags used by the piece: [tag_base, tag_base + tags()).
  std::uint32_t tags() const;
};

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
