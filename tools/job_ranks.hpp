// What the tools that print a job's layout (braid-perf's header, braid-topo)
// need of every rank: its RankInfo, as the communicator's plan sees it, and
// the name of its host for people (BRAID_HOST_ID's when set, so simulated
// hosts show as such). Gathered with one all_gather of RankInfo's own wire
// form.
#pragma once

#include <string>
#include <vector>

#include "braid/braid.hpp"
#include "core/rank_info.hpp"

namespace braid {

struct JobRanks {
  std::vector<RankInfo> infos;     // by rank
  std::vector<std::string> hosts;  // by rank
};

/// Collective: every rank of `comm` calls it and gets every rank's entry.
JobRanks gather_job_ranks(Comm& comm);

}  // namespace braid
