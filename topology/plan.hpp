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
  std::string all_reduce = "auto";  // ring, direct, or auto: by size
  std::string broadcast = "chain";
  std::string barrier = "ring";

  /// Largest all-reduce (bytes) that "auto" sends with the direct algorithm.
  /// Direct costs one message hop and (n-1) x size of traffic per rank; the
  /// ring costs 2(n-1) hops and 2(n-1)/n x size. On loopback TCP a hop is
  /// about 6 us and 4 KiB moves in about 1 us, so up to 4 KiB and 16 ranks
  /// the single hop wins. The planner issue replaces this with a cost model.
  static constexpr std::size_t kDirectMaxBytes = 4096;
  static constexpr int kDirectMaxRanks = 16;
  /// The all-reduce algorithm for a message of `bytes` over `ranks` ranks.
  std::string_view all_reduce_for(std::size_t bytes, int ranks) const;

  std::string describe() const;
};

/// Ring order keeps the ranks of one host next to each other (hosts in the
/// order of their lowest rank), so a ring crosses between hosts as few times
/// as possible. BRAID_ALGO and BRAID_TRANSPORT are checked here: an unknown
/// name throws InvalidArgument listing the known ones.
Plan make_plan(std::span<const RankInfo> ranks, const Settings& settings);

}  // namespace braid
