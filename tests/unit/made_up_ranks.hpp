// Made-up jobs for the planner's unit tests (test_plan, test_cost_model,
// test_topo_file): rank infos on named hosts, and the ring's host crossings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/rank_info.hpp"
#include "core/text.hpp"
#include "topology/plan.hpp"

namespace braid::testing {

/// A host id for host k: distinct, and not in the order of k.
inline std::uint64_t host_id_of(int host) { return 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(host + 1); }

/// `hosts[r]` is rank r's host, named "<host_prefix><k>"; rank r's pid is
/// first_pid + r.
inline std::vector<RankInfo> ranks_on(const std::vector<int>& hosts, std::string_view host_prefix = "host",
                                      int first_pid = 1000) {
  std::vector<RankInfo> infos;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    RankInfo info;
    info.rank = static_cast<int>(r);
    info.hostname = cat(host_prefix, hosts[r]);
    info.host_id = host_id_of(hosts[r]);
    info.kernel_id = info.host_id;
    info.pid = first_pid + static_cast<int>(r);
    infos.push_back(info);
  }
  return infos;
}

/// Times the ring steps from one host to another, the step back to the start included.
inline int crossings(const Plan& plan) {
  int n = 0;
  for (std::size_t i = 0; i < plan.ring.size(); ++i)
    n += plan.hosts[plan.ring[i]] != plan.hosts[plan.ring[(i + 1) % plan.ring.size()]];
  return n;
}

}  // namespace braid::testing
