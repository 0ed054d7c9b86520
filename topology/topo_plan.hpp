// Planning from a job's full inputs (topo_file.hpp): every rank's RankInfo and
// each host's machine as hwloc XML. On top of make_plan (plan.hpp) the
// machines place each rank: its NUMA node (from its CPUs), its nearest NIC
// and GPU; and the ring orders the ranks of each host by NUMA node, so it
// crosses between sockets once per socket instead of at every step when
// ranks are bound alternately.
//
// The same function plans a live job that dumps its inputs
// (BRAID_TOPO_DUMP_FILE), a job that reads them (BRAID_TOPO_FILE) and
// braid-topo --load, so a dump loaded again gives the same plan.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rank_info.hpp"
#include "core/settings.hpp"
#include "topology/plan.hpp"
#include "topology/topo_file.hpp"

namespace braid {

/// Where a rank sits on its host's machine; -1 / "" where the inputs do not say.
struct RankPlace {
  int numa = -1;     // its NUMA node, when its CPUs are all on one
  std::string nic;   // the nearest physical NIC: on its NUMA node, else the first
  std::string gpu;   // its GPU: the k-th rank of a NUMA node gets that node's k-th GPU (round robin)
  bool gpu_local = false;  // the GPU hangs off the rank's NUMA node
  std::uint64_t cache_bytes = 0;  // its host's private cache per core (Machine::private_cache_bytes)
};

struct TopoPlan {
  Plan plan;
  std::vector<RankPlace> places;  // by rank
};

/// BRAID_HOST_ID set on some ranks and not others: InvalidArgument naming
/// both groups, prefixed by `where` (a rank, or a file).
void check_host_id_overrides(std::span<const RankInfo> ranks, std::string_view where);

/// The plan from `inputs`, `name` (the file, or "this job") naming it in
/// errors: BRAID_HOST_ID on some ranks only, a rank whose CPUs are not on its
/// host's machine, or XML that hwloc cannot read throw InvalidArgument.
TopoPlan plan_topology(const TopoFile& inputs, const Settings& settings, std::string_view name,
                       std::span<const AlgorithmCost> algorithms);

/// The plan as text: make_plan's summary, each host with its ranks and their
/// placement, the ring. What a topology file's plan section holds.
std::string describe_topology_plan(const TopoFile& inputs, const TopoPlan& plan);

/// A topology file for a live job of `job.size()` ranks: another rank count
/// throws InvalidArgument; other hosts (hostnames or kernels that differ)
/// return a warning saying the plan follows the file anyway; "" when alike.
std::string check_file_matches_job(const TopoFile& file, std::span<const RankInfo> job, std::string_view path);

}  // namespace braid
