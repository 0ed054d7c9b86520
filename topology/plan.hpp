// The Plan: which transport each peer uses, the ring order, and which
// algorithm each collective runs at each size. It is a plain value so it can
// be printed, tested from made-up rank infos, and overridden from the
// environment. This is the thin first planner (TCP everywhere, algorithms by
// size thresholds); the hwloc planner issue replaces make_plan's insides with
// a cost model.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rank_info.hpp"
#include "core/settings.hpp"

namespace braid {

struct TransportKind;

struct Plan {
  /// BRAID_TRANSPORT's order (every compiled transport by default); each pair
  /// of ranks uses the first that reaches it.
  std::vector<const TransportKind*> transports;
  std::string transport_setting;  // BRAID_TRANSPORT as given, for messages
  std::vector<int> ring;                      // ranks in ring order
  std::vector<int> hosts;                     // host number of each rank (0, 1, ... by lowest rank)
  /// 2 or more hosts, each with the same number, 2 or more, of ranks: the
  /// shape hierarchical all-reduce takes.
  bool uniform_hosts = false;
  std::map<std::string, std::string> forced;  // collective -> algorithm (BRAID_ALGO)

  /// The algorithm for one `collective` ("all_reduce", "broadcast", ...) of
  /// `bytes` over `ranks` ranks: the forced one, else the size rule.
  std::string_view algorithm_for(std::string_view collective, std::size_t bytes, int ranks) const;
  std::string describe() const;
  /// The transport a pair of ranks uses; InvalidArgument when none reaches.
  std::string_view transport_between(const RankInfo& a, const RankInfo& b) const;
  /// The transports of the order, comma-separated ("tcp"), for headers.
  std::string transport_names() const;

  /// Size rules until the cost model: see plan.cpp for the measurements.
  static constexpr std::size_t kSmallBytes = 32 * 1024;
  static constexpr std::size_t kMediumBytes = 1024 * 1024;
  /// From here on, on uniform hosts, all-reduce is hierarchical.
  static constexpr std::size_t kHierarchicalBytes = 1024 * 1024;
};

/// The algorithms each collective has, first the default.
std::span<const std::string_view> algorithms_of(std::string_view collective);

/// Ring order keeps the ranks of one host next to each other (hosts in the
/// order of their lowest rank), so a ring crosses between hosts as few times
/// as possible. BRAID_ALGO ("ring", or per collective "all_reduce:tree,
/// broadcast:binomial") and BRAID_TRANSPORT are checked here: an unknown name
/// throws InvalidArgument listing the known ones.
Plan make_plan(std::span<const RankInfo> ranks, const Settings& settings);

}  // namespace braid
