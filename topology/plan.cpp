#include "topology/plan.hpp"

#include <algorithm>
#include <map>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {

std::string Plan::describe() const {
  std::string order;
  for (std::size_t i = 0; i < ring.size() && i < 16; ++i) order += cat(i ? " " : "", ring[i]);
  if (ring.size() > 16) order += " ...";
  std::string reduce_algo = all_reduce == "auto" ? cat("direct up to ", kDirectMaxBytes, " B, ring above") : all_reduce;
  return cat("transport ", transport, ", all_reduce ", reduce_algo, ", broadcast ", broadcast, ", ring ", order);
}

std::string_view Plan::all_reduce_for(std::size_t bytes, int ranks) const {
  if (all_reduce != "auto") return all_reduce;
  return bytes <= kDirectMaxBytes && ranks <= kDirectMaxRanks ? "direct" : "ring";
}

Plan make_plan(std::span<const RankInfo> ranks, const Settings& settings) {
  Plan plan;
  if (!settings.transport.empty() && settings.transport != "tcp")
    throw InvalidArgument(cat("BRAID_TRANSPORT='", settings.transport, "' is not a transport built into braid (known: tcp)"));
  if (!settings.algo.empty()) {
    if (settings.algo == "ring" || settings.algo == "direct") plan.all_reduce = settings.algo;
    else if (settings.algo == "chain") plan.broadcast = "chain";
    else
      throw InvalidArgument(cat("BRAID_ALGO='", settings.algo, "' is not an algorithm braid has (known: ring, direct, chain)"));
  }
  std::map<std::uint64_t, int> first_rank_of_host;
  for (const auto& r : ranks) {
    auto [it, fresh] = first_rank_of_host.emplace(r.host_id, r.rank);
    if (!fresh) it->second = std::min(it->second, r.rank);
  }
  plan.ring.reserve(ranks.size());
  for (const auto& r : ranks) plan.ring.push_back(r.rank);
  std::stable_sort(plan.ring.begin(), plan.ring.end(), [&](int a, int b) {
    return first_rank_of_host[ranks[a].host_id] < first_rank_of_host[ranks[b].host_id];
  });
  return plan;
}

}  // namespace braid
