#include "topology/topo_plan.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <set>

#include "braid/types.hpp"
#include "core/text.hpp"
#include "topology/machine.hpp"

namespace braid {
namespace {

int popcount(const std::vector<std::uint64_t>& mask) {
  int n = 0;
  for (auto w : mask) n += std::popcount(w);
  return n;
}

const HostMachine* machine_of(const TopoFile& inputs, std::uint64_t host_id) {
  for (const HostMachine& m : inputs.machines)
    if (m.host_id == host_id) return &m;
  return nullptr;
}

// Each rank's NUMA node, and the machine it saw, from its host's XML.
std::vector<RankPlace> place(const TopoFile& inputs, std::string_view name) {
  const std::size_t n = inputs.ranks.size();
  std::vector<RankPlace> places(n);
  std::vector<Machine> machines(n);
  std::vector<bool> known(n, false);
  // One hwloc load per host and binding.
  std::map<std::pair<std::uint64_t, std::vector<std::uint64_t>>, Machine> seen;
  for (std::size_t r = 0; r < n; ++r) {
    const RankInfo& info = inputs.ranks[r];
    const HostMachine* host = machine_of(inputs, info.host_id);
    if (host == nullptr) continue;
    auto key = std::make_pair(info.host_id, info.cpus);
    auto it = seen.find(key);
    if (it == seen.end())
      it = seen.emplace(key, Machine::from_xml(host->xml, info.cpus,
                                               cat(name, ": the machine of host ", info.hostname, " (rank ", r, ")")))
               .first;
    const Machine& m = it->second;
    if (!info.cpus.empty() && m.bound_pus != popcount(info.cpus))
      throw InvalidArgument(cat(name, ": rank ", r, " may run on ", popcount(info.cpus),
                                " CPUs, but only ", m.bound_pus, " of them (", m.bound_cpus.empty() ? "none" : m.bound_cpus,
                                ") are on the machine given for its host ", info.hostname, " (", m.pus,
                                " hardware threads): the machine section describes another machine"));
    machines[r] = m;
    known[r] = true;
    if (m.bound_numa.size() == 1) places[r].numa = m.bound_numa.front();
    places[r].cache_bytes = m.private_cache_bytes;
  }
  // NIC and GPU: the k-th rank of a host's NUMA node takes the k-th GPU of
  // that node (round robin), else the k-th rank of the host the k-th GPU.
  std::map<std::pair<std::uint64_t, int>, int> next_on_numa;
  std::map<std::uint64_t, int> next_on_host;
  for (std::size_t r = 0; r < n; ++r) {
    if (!known[r]) continue;
    const Machine& m = machines[r];
    RankPlace& p = places[r];
    const std::uint64_t host = inputs.ranks[r].host_id;
    const int k_host = next_on_host[host]++;
    const int k_numa = next_on_numa[{host, p.numa}]++;
    std::vector<const NetworkInterface*> physical, local;
    for (const auto& nic : m.nics)
      if (!nic.loopback && !nic.is_virtual) {
        physical.push_back(&nic);
        if (p.numa >= 0 && nic.numa == p.numa) local.push_back(&nic);
      }
    if (!local.empty()) p.nic = local[static_cast<std::size_t>(k_numa) % local.size()]->name;
    else if (!physical.empty()) p.nic = physical.front()->name;
    std::vector<const Gpu*> near;
    for (const auto& gpu : m.gpus)
      if (p.numa >= 0 && gpu.numa == p.numa) near.push_back(&gpu);
    if (!near.empty()) {
      p.gpu = near[static_cast<std::size_t>(k_numa) % near.size()]->name;
      p.gpu_local = true;
    } else if (!m.gpus.empty()) {
      p.gpu = m.gpus[static_cast<std::size_t>(k_host) % m.gpus.size()].name;
    }
  }
  return places;
}

// Inside each host's run of the ring, the ranks by NUMA node (stable: rank
// order within a node), so the ring crosses between sockets as few times as it can.
void order_ring_by_numa(Plan& plan, const std::vector<RankPlace>& places) {
  auto& ring = plan.ring;
  for (std::size_t begin = 0; begin < ring.size();) {
    std::size_t end = begin;
    const int host = plan.hosts[static_cast<std::size_t>(ring[begin])];
    while (end < ring.size() && plan.hosts[static_cast<std::size_t>(ring[end])] == host) ++end;
    std::stable_sort(ring.begin() + static_cast<std::ptrdiff_t>(begin), ring.begin() + static_cast<std::ptrdiff_t>(end),
                     [&](int a, int b) {
                       return places[static_cast<std::size_t>(a)].numa < places[static_cast<std::size_t>(b)].numa;
                     });
    begin = end;
  }
}

}  // namespace

void check_host_id_overrides(std::span<const RankInfo> ranks, std::string_view where) {
  std::vector<int> named, unnamed;
  for (const RankInfo& i : ranks) (i.host_id_from_env ? named : unnamed).push_back(i.rank);
  if (!named.empty() && !unnamed.empty())
    throw InvalidArgument(cat(where, ": BRAID_HOST_ID is set on ", describe_ranks(named), " but not on ",
                              describe_ranks(unnamed), ": set it on every rank (to simulate hosts) or on none"));
}

TopoPlan plan_topology(const TopoFile& inputs, const Settings& settings, std::string_view name,
                       std::span<const AlgorithmCost> algorithms) {
  check_host_id_overrides(inputs.ranks, name);
  for (std::size_t r = 0; r < inputs.ranks.size(); ++r)
    if (inputs.ranks[r].rank != static_cast<int>(r))
      throw InvalidArgument(cat(name, ": the rank info at position ", r, " is rank ", inputs.ranks[r].rank));
  TopoPlan out;
  out.places = place(inputs, name);
  // A rank's cache is its host's, as the machine section says: a file's
  // rank lines do not carry it (0), a live job's rank infos do.
  std::vector<RankInfo> ranks = inputs.ranks;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].cache_kib == 0) ranks[r].cache_kib = Machine::cache_kib(out.places[r].cache_bytes);
  out.plan = make_plan(ranks, settings, algorithms);
  order_ring_by_numa(out.plan, out.places);
  return out;
}

std::string describe_topology_plan(const TopoFile& inputs, const TopoPlan& tp) {
  std::string out = cat("plan: ", tp.plan.describe(), "\n");
  std::map<int, std::vector<int>> by_host;
  for (std::size_t r = 0; r < inputs.ranks.size(); ++r)
    by_host[tp.plan.hosts[r]].push_back(static_cast<int>(r));
  for (const auto& [host, ranks] : by_host) {
    const RankInfo& first = inputs.ranks[static_cast<std::size_t>(ranks.front())];
    out += cat("host ", host, " (", first.hostname, machine_of(inputs, first.host_id) ? "" : ", no machine section",
               "): ", describe_ranks(ranks), "\n");
    for (int r : ranks) {
      const RankInfo& info = inputs.ranks[static_cast<std::size_t>(r)];
      const RankPlace& p = tp.places[static_cast<std::size_t>(r)];
      out += cat("  rank ", r, ": CPUs ", info.cpus.empty() ? "(any)" : cpu_list_of(info.cpus),
                 p.numa >= 0 ? cat(", NUMA ", p.numa) : std::string(), p.nic.empty() ? "" : cat(", NIC ", p.nic),
                 p.gpu.empty() ? "" : cat(", GPU ", p.gpu, p.gpu_local ? "" : " (not on its NUMA node)"), "\n");
    }
  }
  std::string ring;
  for (int r : tp.plan.ring) ring += cat(ring.empty() ? "" : " ", r);
  out += cat("ring: ", ring, "\n");
  return out;
}

std::string check_file_matches_job(const TopoFile& file, std::span<const RankInfo> job, std::string_view path) {
  if (file.ranks.size() != job.size())
    throw InvalidArgument(cat("BRAID_TOPO_FILE=", path, " describes ", file.ranks.size(), " ranks, but this job has ",
                              job.size(), ": use a file dumped from a job of ", job.size(),
                              " ranks (BRAID_TOPO_DUMP_FILE), or unset BRAID_TOPO_FILE"));
  std::set<std::string> theirs, ours;
  bool same = true;
  for (std::size_t r = 0; r < job.size(); ++r) {
    theirs.insert(file.ranks[r].hostname);
    ours.insert(job[r].hostname);
    same = same && file.ranks[r].kernel_id == job[r].kernel_id && file.ranks[r].host_id == job[r].host_id &&
           file.ranks[r].hostname == job[r].hostname;
  }
  if (same) return "";
  auto names = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& h : s) out += cat(out.empty() ? "" : ", ", h);
    return out;
  };
  return cat("BRAID_TOPO_FILE=", path, " describes ranks on ", names(theirs), ", this job runs on ", names(ours),
             " (or the same hosts under other host ids): the plan (hosts, ring, algorithms) follows the file as asked; links still connect the ranks where "
             "they run");
}

}  // namespace braid
