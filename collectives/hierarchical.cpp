// Hierarchical all-reduce, for ranks on several hosts.
//
// A flat ring crosses between hosts once per host, and every one of those
// crossings carries 2(n-1)/n of the buffer; the links inside a host (shared
// memory) are far faster than the ones between hosts. So, with L ranks on
// each of H hosts:
//   1. inside each host, a ring reduce-scatter over its L ranks: the rank at
//      local position p then holds chunk p+1 of the buffer summed over its host;
//   2. across hosts, the H ranks that hold the same chunk (one per host, the
//      same local position) all-reduce it with a ring of their own, all L
//      such rings in parallel (over L links between hosts, where a host has
//      several NICs);
//   3. inside each host, a ring all-gather spreads the reduced chunks.
// Bytes crossing between hosts, summed over the ranks: 2(H-1)/H of the
// buffer per rank-ring, L of them on chunks of 1/L: 2(H-1) buffers in all,
// against the flat ring's H x 2(n-1)/n (with n = H x L: 3 buffers against 2
// for 2 hosts of 2 ranks, 7.9 against 6 for 4 hosts of 8). Local traffic
// grows instead, which is what shared memory is for.
//
// The three phases are the ring's own pieces (ring_pieces.hpp) on subsets of
// the ranks and on a region of the buffer; a phase's first steps wait for the
// steps of the one before that wrote what they read. The result is the same
// on every rank (every chunk is reduced in one fixed order and then copied),
// and avg divides once, by every rank's count, at the owner of each piece of
// the cross-host all-reduce.
//
// Hosts of different sizes, one host, or one rank per host: the plain ring
// (the descriptor then says ring).
#include <algorithm>

#include "collectives/algorithms.hpp"
#include "collectives/ring_pieces.hpp"
#include "core/check.hpp"

namespace braid {

HostGroups HostGroups::of(std::span<const int> ring, std::span<const int> host_of) {
  HostGroups g;
  if (host_of.empty()) return g;
  std::vector<int> seen;  // host numbers in ring order
  for (int r : ring) {
    const int h = host_of[static_cast<std::size_t>(r)];
    auto it = std::find(seen.begin(), seen.end(), h);
    if (it == seen.end()) {
      seen.push_back(h);
      g.hosts.emplace_back();
      it = seen.end() - 1;
    }
    g.hosts[static_cast<std::size_t>(it - seen.begin())].push_back(r);
  }
  return g;
}

bool HostGroups::uniform() const {
  if (hosts.size() < 2 || hosts.front().size() < 2) return false;
  return std::all_of(hosts.begin(), hosts.end(), [&](const auto& h) { return h.size() == hosts.front().size(); });
}

Schedule hierarchical_all_reduce(const CollectiveShape& shape) {
  const HostGroups groups = HostGroups::of(shape.ring, shape.hosts);
  if (!groups.uniform() || shape.count == 0) return ring_all_reduce(shape);
  Schedule sched = Schedule::for_shape(shape, "hierarchical");
  // This rank's host and its position there.
  std::size_t host = 0;
  int local_pos = -1;
  for (; host < groups.hosts.size(); ++host) {
    const auto& h = groups.hosts[host];
    if (auto it = std::find(h.begin(), h.end(), shape.rank); it != h.end()) {
      local_pos = static_cast<int>(it - h.begin());
      break;
    }
  }
  BRAID_CHECK(local_pos >= 0, "hierarchical_all_reduce: rank is on no host");
  const std::size_t element = size_of(shape.type);

  const RingPiece local{.ring = groups.hosts[host], .pos = local_pos, .count = shape.count, .element = element,
                        .slice_bytes = shape.slice_bytes};  // one host: no flow window
  RingState local_state = append_ring_reduce_scatter(sched, local, BufferId::input, {});

  // The ranks that own the same chunk, one per host, in host order.
  std::vector<int> across;
  for (const auto& h : groups.hosts) across.push_back(h[static_cast<std::size_t>(local_pos)]);
  const std::size_t owned = local.owned_chunk();
  // The rings across hosts are where a flow window applies (ring_pieces.hpp).
  const RingPiece cross = with_flow_window({.ring = across, .pos = static_cast<int>(host),
                                            .first = local.chunks().begin(owned), .count = local.chunks().size(owned),
                                            .element = element, .slice_bytes = shape.slice_bytes,
                                            .tag_base = local.tags()},
                                           shape);
  const auto cross_from = static_cast<std::uint32_t>(sched.steps.size());
  if (cross.count > 0) {
    std::vector<std::uint32_t> entry;
    for (std::size_t j = 0; j < local_state.last.size(); ++j)
      if (local_state.has_last[j]) entry.push_back(local_state.last[j]);
    RingState cross_state = append_ring_reduce_scatter(sched, cross, BufferId::output, entry);
    if (shape.op == ReduceOp::avg) append_ring_average(sched, cross, cross_state);
    append_ring_all_gather(sched, cross, cross_state, {});
  }
  const std::vector<std::uint32_t> reduced = writes_since(sched, cross_from);
  append_ring_all_gather(sched, local, local_state, reduced);
  return sched;
}

}  // namespace braid
