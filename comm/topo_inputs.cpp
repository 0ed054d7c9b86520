// The world communicator's plan when a topology file is involved
// (BRAID_TOPO_FILE, BRAID_TOPO_DUMP_FILE; topology/topo_file.hpp).
//
// Dumping: the lowest rank of each host publishes its host's hwloc XML in the
// store; every rank reads them all, so that every rank plans from the same
// inputs (the machines order each host's ranks by NUMA node), and rank 0 (or
// every rank, with %r in the path) writes the file. Loading: every rank reads
// the file and plans from it; another rank count is an error, other hosts a
// warning. Split communicators plan from their own rank infos as before.
#include "topo_inputs.hpp"

#include <map>

#include "collectives/registry.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "topology/machine.hpp"
#include "topology/topo_file.hpp"
#include "topology/topo_plan.hpp"

namespace braid {

std::optional<Plan> plan_from_topology_settings(const Settings& settings, int rank, std::span<const RankInfo> infos,
                                                Store& store, const std::function<std::string(int)>& xml_key) {
  if (!settings.topo_file.empty()) {
    const TopoFile file = read_topo_file(settings.topo_file);
    const std::string warning = check_file_matches_job(file, infos, settings.topo_file);
    if (!warning.empty() && rank == 0) log_warn(warning);
    TopoPlan planned = plan_topology(file, settings, settings.topo_file, algorithm_costs());
    if (rank == 0) log_info("planned from BRAID_TOPO_FILE=", settings.topo_file, ": ", planned.plan.describe());
    return std::move(planned.plan);
  }
  if (settings.topo_dump_file.empty()) return std::nullopt;

  // The lowest rank of each host speaks for its machine.
  std::map<std::uint64_t, int> first_of_host;
  for (const RankInfo& i : infos) first_of_host.emplace(i.host_id, i.rank);  // infos are in rank order
  if (first_of_host.at(infos[static_cast<std::size_t>(rank)].host_id) == rank) {
    const std::string xml = Machine::export_xml();
    store.set(xml_key(rank), std::as_bytes(std::span(xml.data(), xml.size())));
  }
  TopoFile inputs;
  inputs.ranks.assign(infos.begin(), infos.end());
  for (const auto& [host, first] : first_of_host) {
    const Store::Bytes xml = store.get(xml_key(first), settings.timeout);
    inputs.machines.push_back(
        HostMachine{host, std::string(reinterpret_cast<const char*>(xml.data()), xml.size())});
  }
  TopoPlan planned = plan_topology(inputs, settings, "this job", algorithm_costs());
  const bool each = settings.topo_dump_file.find("%r") != std::string::npos;
  if (rank == 0 || each) {
    inputs.plan = describe_topology_plan(inputs, planned);
    const std::string path = topo_dump_path(settings.topo_dump_file, rank);
    write_topo_file(path, inputs);
    log_info("wrote the planner's inputs and plan to ", path, " (BRAID_TOPO_DUMP_FILE)");
  }
  return std::move(planned.plan);
}

}  // namespace braid
