// The planner's alpha-beta cost model: what a link costs (latency, bandwidth,
// and the bandwidth of the local reduction next to it), what an algorithm's
// cost function sees of a job, and the (collective, algorithm, cost) entries
// the planner chooses among.
//
// The entries come from the algorithm registry (collectives/registry.hpp),
// one layer up: topology/ may not include collectives/ (DESIGN.md), so the
// registry hands its entries down through make_plan's argument, in the types
// declared here, and the planner stays the one that decides.
#pragma once

#include <cstddef>
#include <string_view>

namespace braid {

/// One transport's link as the cost model sees it: a message of m bytes takes
/// latency_us + m / bandwidth, and reducing m bytes into a buffer m / reduce
/// bandwidth. Bandwidths are in GB/s (bytes per ns).
struct LinkParams {
  double latency_us = 0;
  double bandwidth_gbps = 0;
  double reduce_gbps = 0;

  /// Microseconds to move `bytes` (without the latency).
  double transfer_us(double bytes) const { return bytes / (bandwidth_gbps * 1e3); }
  /// Microseconds to reduce `bytes` locally.
  double reduce_us(double bytes) const { return bytes / (reduce_gbps * 1e3); }
  bool operator==(const LinkParams&) const = default;
};

/// What a cost function knows about one call: the buffer, the job's shape and
/// the links inside a host and between hosts (equal on one host).
struct CostInputs {
  std::size_t bytes = 0;
  int ranks = 1;
  int hosts = 1;
  /// Ranks per host when every host has as many (else 0): the shape the
  /// hierarchical schedules need.
  int uniform_ranks_per_host = 0;
  LinkParams intra;  // between ranks of one host
  LinkParams inter;  // between hosts (= intra on one host)
  /// How the communicator slices the pipelined schedules (comm_impl.cpp's
  /// shape()): shares cut in 16 slices, or 2 when the ranks of a host
  /// outnumber its cores, of 32 KiB up to slice_limit (BRAID_SLICE_BYTES).
  bool oversubscribed = false;
  std::size_t slice_limit = 512 * 1024;

  /// The link a flat algorithm's critical path crosses: the slower one.
  const LinkParams& flat() const { return hosts > 1 ? inter : intra; }
};

/// Predicted microseconds for one call, or +infinity when the algorithm
/// cannot run on this shape (it would fall back to another one).
using CostFunction = double (*)(const CostInputs&);

/// One algorithm of one collective, as the planner sees it.
struct AlgorithmCost {
  std::string_view collective;  // "all_reduce", "broadcast", ...
  std::string_view name;        // "ring", "recdbl", ...
  /// nullptr: never chosen by cost; the collective's first entry is its
  /// default when none of its entries has a cost.
  CostFunction cost = nullptr;
};

}  // namespace braid
