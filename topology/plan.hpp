// The Plan: which transport each peer uses, the ring order, and which
// algorithm each collective runs. It is a plain value so it can be printed,
// tested from made-up rank infos, and overridden from the environment. This is
// the thin first planner (TCP everywhere, ring for all-reduce, chain for
// broadcast); the hwloc planner issue replaces make_plan's insides.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/rank_info.hpp"
#include "core/settings.hpp"

namespace braid {

struct Plan {
  std::string transport = "tcp";
  std::vector<int> ring;  // ranks in ring order
  std::string all_reduce = "ring";
  std::string broadcast = "chain";
  std::string barrier = "ring";

  std::string describe() const;
};

/// Ring order keeps the ranks of one host next to each other (hosts in the
/// order of their lowest rank), so a ring crosses between hosts as few times
/// as possible. BRAID_ALGO and BRAID_TRANSPORT are checked here: an unknown
/// name throws InvalidArgument listing the known ones.
Plan make_plan(std::span<const RankInfo> ranks, const Settings& settings);

}  // namespace braid
