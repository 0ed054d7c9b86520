// The algorithm builders: each returns one rank's Schedule for a collective.
// One file per family; each file opens with how its algorithms work and when
// they win.
//
// What CollectiveShape::count means, per collective (n = shape.ranks):
//   all_reduce, reduce, broadcast   elements in the buffer
//   all_gather, gather              elements each rank contributes; output holds n x count
//   reduce_scatter                  elements each rank receives; input holds n x count
//   scatter                         elements each rank receives; the root's input holds n x count
//   all_to_all                      elements per block; input and output hold n x count,
//                                   block p of the input goes to rank p
// Rank r's block of an n x count buffer starts at element r x count. Buffers
// that are only significant at the root (reduce's output, gather's output,
// scatter's input) are ignored elsewhere. Schedules must be correct when the
// output aliases the input (in place: same pointer for all_reduce, reduce,
// broadcast, all_to_all; the caller's block of the output for all_gather and
// gather; the caller's block of the input for reduce_scatter).
#pragma once

#include "collectives/schedule.hpp"

namespace braid {

// all_reduce
/// Ring (ring.cpp): reduce-scatter then all-gather, pipelined.
Schedule ring_all_reduce(const CollectiveShape& shape);
/// Direct (direct.cpp): one round of whole-buffer exchanges, local reduction.
Schedule direct_all_reduce(const CollectiveShape& shape);
/// Recursive doubling (recursive_doubling.cpp), any n.
Schedule recursive_doubling_all_reduce(const CollectiveShape& shape);
/// Recursive halving-doubling, Rabenseifner (rabenseifner.cpp), any n.
Schedule rabenseifner_all_reduce(const CollectiveShape& shape);
/// Double binary tree, pipelined (double_tree.cpp).
Schedule tree_all_reduce(const CollectiveShape& shape);
/// Ring reduce-scatter inside each host, ring all-reduce of each chunk across
/// hosts, ring all-gather inside each host (hierarchical.cpp). Needs
/// shape.hosts with the same number (2 or more) of ranks on each of 2 or more
/// hosts; otherwise it is the ring.
Schedule hierarchical_all_reduce(const CollectiveShape& shape);

/// The ranks of each host, hosts in the order the ring meets them, each
/// host's ranks in ring order.
struct HostGroups {
  std::vector<std::vector<int>> hosts;
  /// From the ring and each rank's host number (empty: no groups).
  static HostGroups of(std::span<const int> ring, std::span<const int> host_of);
  /// 2 or more hosts, each with the same number, 2 or more, of ranks.
  bool uniform() const;
};

// broadcast
/// Pipelined chain from the root along the ring (chain.cpp).
Schedule chain_broadcast(const CollectiveShape& shape);
/// Double binary tree, pipelined (double_tree.cpp).
Schedule tree_broadcast(const CollectiveShape& shape);
/// Binomial tree (binomial.cpp).
Schedule binomial_broadcast(const CollectiveShape& shape);

// reduce
/// Binomial tree to shape.root (binomial.cpp).
Schedule binomial_reduce(const CollectiveShape& shape);

// reduce_scatter, all_gather (ring_gather_scatter.cpp)
Schedule ring_reduce_scatter(const CollectiveShape& shape);
Schedule ring_all_gather(const CollectiveShape& shape);

// all_to_all, gather, scatter (exchange.cpp)
/// Pairwise exchange: in round k rank r sends to r+k and receives from r-k.
Schedule pairwise_all_to_all(const CollectiveShape& shape);
/// Every rank sends its block to the root, which receives them all at once.
Schedule direct_gather(const CollectiveShape& shape);
/// The root sends every rank its block at once.
Schedule direct_scatter(const CollectiveShape& shape);

// The uneven collectives (uneven.cpp). A BlockLayout places each rank's block
// in a buffer (bytes, by rank); blocks may be empty and need not be in rank
// order. CollectiveShape::count is unused by them.
struct BlockLayout {
  std::vector<std::size_t> offset;  // bytes from the buffer's start, by rank
  std::vector<std::size_t> bytes;   // by rank
  Region at(BufferId buffer, int rank) const;
  /// The end of the furthest non-empty block: the buffer size it needs.
  std::size_t extent() const;
};
/// Block p of the input to rank p; block p of the output from rank p.
Schedule pairwise_all_to_allv(const CollectiveShape& shape, const BlockLayout& send, const BlockLayout& recv);
/// The whole input (recv.bytes[rank]) to every rank; block p of the output from rank p.
Schedule pairwise_all_gatherv(const CollectiveShape& shape, const BlockLayout& recv);
/// Output (send.bytes[rank]) = op over ranks of their input block `rank`.
Schedule pairwise_reduce_scatterv(const CollectiveShape& shape, const BlockLayout& send);
/// The root's output block p = rank p's input (send_bytes); `recv` is read at the root only.
Schedule direct_gatherv(const CollectiveShape& shape, std::size_t send_bytes, const BlockLayout& recv);
/// Rank p's output (recv_bytes) = the root's input block p; `send` is read at the root only.
Schedule direct_scatterv(const CollectiveShape& shape, const BlockLayout& send, std::size_t recv_bytes);

// barrier
/// Ring barrier (chain.cpp): n-1 rounds of empty messages around the ring.
Schedule ring_barrier(const CollectiveShape& shape);

}  // namespace braid
