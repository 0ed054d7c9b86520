// The planner's alpha-beta cost model: what a link costs (latency, bandwidth,
// and the bandwidth of the local reduction next to it), what an algorithm's
// cost function sees of a job, and the (collective, algorithm, cost) entries
// the planner chooses among.
//
// The entries come from the algorithm registry (collectives/registry.hpp),
// one layer up: topology/ may not include collectives/ (docs/architecture.md), so the
// registry hands its entries down through make_plan's argument, in the types
// declared here, and the planner stays the one that decides.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace braid {

/// One transport's link as the cost model sees it: a message of m bytes takes
/// latency_us + m / bandwidth, and reducing m bytes into a buffer m / reduce
/// bandwidth. Bandwidths are in GB/s (bytes per ns).
///
/// Copies and reductions whose data stays in a core's cache run faster than
/// those that stream through memory: cache_bandwidth_gbps and
/// cache_reduce_gbps are the rates of a call whose working set fits in the
/// cache (0: as from memory). A call whose working set w exceeds the cache c
/// finds a share c / w of its bytes there (at(): time per byte blended by
/// that share), so the rates fall from the cache's to memory's as the
/// message grows instead of at one step.
struct LinkParams {
  double latency_us = 0;
  double bandwidth_gbps = 0;
  double reduce_gbps = 0;
  double cache_bandwidth_gbps = 0;
  double cache_reduce_gbps = 0;
  /// What a rank's core spends on each message of a batch that it sends or
  /// receives at once beyond the first (a socket's system calls, its
  /// wake-up), when the batch is priced as one latency (direct's n - 1
  /// messages); 0: nothing (shm's rings, read in one pass).
  double message_us = 0;

  /// Microseconds to move `bytes` (without the latency).
  double transfer_us(double bytes) const { return bytes / (bandwidth_gbps * 1e3); }
  /// Microseconds to reduce `bytes` locally.
  double reduce_us(double bytes) const { return bytes / (reduce_gbps * 1e3); }
  /// The parameters of a call whose working set is `working_set` bytes on a
  /// rank with `cache` bytes of cache to itself (0: unknown, memory's rates):
  /// bandwidth and reduce_gbps blended, the cache rates cleared.
  LinkParams at(double working_set, double cache) const;
  bool operator==(const LinkParams&) const = default;
};

/// The working set of one rank in a call of `bytes`: its send and receive
/// buffers (the transports' slots and the scratch are reused from call to
/// call and smaller).
inline double working_set_of(double bytes) { return 2 * bytes; }

/// What a cost function knows about one call: the buffer, the job's shape and
/// the links inside a host and between hosts (equal on one host).
struct CostInputs {
  std::size_t bytes = 0;
  int ranks = 1;
  int hosts = 1;
  /// Ranks per host when every host has as many (else 0): the shape the
  /// hierarchical schedules need.
  int uniform_ranks_per_host = 0;
  /// Recursive doubling's first rounds whose partners (rank q and q ^ 2^j,
  /// j < local_rounds) are always on one host: with hosts of 2^k ranks
  /// numbered host by host, k. 0 when n is no power of two or no round stays
  /// inside (ranks dealt to hosts in turn).
  int local_rounds = 0;
  LinkParams intra;  // between ranks of one host
  /// Between hosts (= intra on one host): the latency of one message across
  /// and the bandwidth of a host's link, which the ranks of a host that send
  /// across at once share (a NIC; on hosts that share a machine's cores,
  /// the kernel's copies).
  LinkParams inter;
  /// The cache each rank has to itself (Plan::cache_bytes; 0: unknown, the
  /// links' memory rates throughout).
  std::size_t cache_bytes = 0;
  /// How the communicator slices the pipelined schedules (pipeline_slice
  /// below): more ranks on a host than its cores cut fewer slices.
  bool oversubscribed = false;
  /// Every rank may run on one CPU only (Plan::ranks_bound): oversubscribed ranks
  /// then take turns on their cores in a fixed order (algorithm_costs.cpp).
  bool bound = false;
  std::size_t slice_limit = 512 * 1024;
  /// The transports' floor on slices (TransportContext::min_slice_bytes,
  /// Plan::slice_floor).
  std::size_t slice_floor = 0;
  /// The ring's pieces keep a flow window on the links between hosts
  /// (Plan::flow_window): the ring and the hierarchical all-reduce move
  /// across faster than the link's streaming rates (algorithm_costs.cpp).
  bool inter_window = false;

  /// intra and inter at this call's working set (LinkParams::at).
  LinkParams intra_at() const { return intra.at(working_set_of(static_cast<double>(bytes)), static_cast<double>(cache_bytes)); }
  LinkParams inter_at() const { return inter.at(working_set_of(static_cast<double>(bytes)), static_cast<double>(cache_bytes)); }
  /// The link a flat algorithm's critical path crosses: the slower one.
  LinkParams flat() const { return hosts > 1 ? inter_at() : intra_at(); }
  /// The most ranks one host has: those that cross to other hosts at once
  /// in a step where every rank does.
  int ranks_per_host() const {
    return uniform_ranks_per_host > 0 ? uniform_ranks_per_host : (ranks + hosts - 1) / std::max(1, hosts);
  }
};

/// The finest slice of the pipelined schedules.
inline constexpr std::size_t kMinPipelineSlice = 32 * 1024;

/// BRAID_FLOW_WINDOW's auto size, between hosts of one kernel
/// (collectives/ring_pieces.hpp says why and what it measured).
inline constexpr std::size_t kAutoFlowWindow = 64 * 1024;

/// The slice of the pipelined schedules, one rule for the communicator
/// (CommImpl::shape) and the cost model: a share of `bytes` / `ranks` cut in
/// 16 slices (2 when the ranks of a host outnumber its cores: every slice
/// costs a hand-over of the core), no finer than 32 KiB or the transports'
/// `floor`, and never larger than `limit` (BRAID_SLICE_BYTES). A 1 MiB
/// all-reduce on 2 ranks took 253 us in one 512 KiB slice per chunk and 203
/// us in 32 KiB slices (Open MPI: 200 us).
std::size_t pipeline_slice(std::size_t bytes, int ranks, bool oversubscribed, std::size_t floor, std::size_t limit);

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
