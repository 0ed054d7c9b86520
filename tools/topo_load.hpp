// braid-topo --load FILE (and BRAID_TOPO_FILE): a job's topology file
// (topology/topo_file.hpp) read and planned here, without the job or its
// hardware, and printed.
#pragma once

#include <string>
#include <vector>

#include "core/settings.hpp"
#include "topology/topo_file.hpp"
#include "topology/topo_plan.hpp"

namespace braid {

struct LoadedTopology {
  std::string path;
  TopoFile file;
  TopoPlan planned;
  std::vector<std::string> hosts;  // each rank's host as shown ("host 0 (node-a)")
};

/// Reads and plans the file; InvalidArgument names the file, line and field.
LoadedTopology load_topology(const std::string& path, const Settings& settings);

/// Each host's machine (from its XML), the ranks with their placement, the
/// plan and ring; a note when the file's own plan section differs from the
/// plan derived now (another BRAID_ALGO or BRAID_TRANSPORT, another braid).
std::string describe_loaded(const LoadedTopology& loaded);

}  // namespace braid
