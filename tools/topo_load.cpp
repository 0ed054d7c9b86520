#include "topo_load.hpp"

#include <map>

#include "collectives/registry.hpp"
#include "core/text.hpp"
#include "topology/machine.hpp"

namespace braid {

LoadedTopology load_topology(const std::string& path, const Settings& settings) {
  LoadedTopology out;
  out.path = path;
  out.file = read_topo_file(path);
  out.planned = plan_topology(out.file, settings, path, algorithm_costs());
  for (std::size_t r = 0; r < out.file.ranks.size(); ++r)
    out.hosts.push_back(cat("host ", out.planned.plan.hosts[r], " (", out.file.ranks[r].hostname, ")"));
  return out;
}

std::string describe_loaded(const LoadedTopology& loaded) {
  const TopoFile& file = loaded.file;
  std::string out = cat("braid-topo: ", file.ranks.size(), " ranks from ", loaded.path, "\n");
  for (const HostMachine& m : file.machines) {
    std::vector<int> ranks;
    for (const RankInfo& r : file.ranks)
      if (r.host_id == m.host_id) ranks.push_back(r.rank);
    const Machine machine = Machine::from_xml(m.xml, {}, cat(loaded.path, ": the machine of ", describe_ranks(ranks)));
    out += cat("\n", loaded.hosts[static_cast<std::size_t>(ranks.front())], ", ", describe_ranks(ranks), ":\n  ",
               machine.describe());
  }
  const std::string derived = describe_topology_plan(file, loaded.planned);
  out += cat("\n", derived);
  if (!file.plan.empty() && file.plan != derived)
    out += cat("note: the file's plan section differs from the plan derived now (other BRAID_ALGO or "
               "BRAID_TRANSPORT settings, or another braid wrote it); the file says:\n",
               file.plan);
  return out;
}

}  // namespace braid
