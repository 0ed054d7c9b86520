// The world communicator's plan from a topology file (BRAID_TOPO_FILE), or
// with its inputs dumped to one (BRAID_TOPO_DUMP_FILE): topo_inputs.cpp.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>

#include "braid/store.hpp"
#include "core/rank_info.hpp"
#include "core/settings.hpp"
#include "topology/plan.hpp"

namespace braid {

/// nullopt when neither setting is set (the caller plans as usual).
/// `infos` are every rank's, in rank order; `xml_key(r)` is the store key
/// under which rank r publishes its host's hwloc XML. Throws InvalidArgument
/// for a file that does not parse or has another rank count.
std::optional<Plan> plan_from_topology_settings(const Settings& settings, int rank, std::span<const RankInfo> infos,
                                                Store& store, const std::function<std::string(int)>& xml_key);

}  // namespace braid
