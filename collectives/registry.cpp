#include "collectives/registry.hpp"

#include <algorithm>

#include "collectives/algorithm_costs.hpp"
#include "collectives/algorithms.hpp"
#include "core/check.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// Wire ids are part of the protocol (OpDescriptor's byte 3): a name keeps
// its id for ever, and a new algorithm takes the next free one.
constexpr std::uint8_t kRing = 1, kDirect = 2, kRecdbl = 3, kRabenseifner = 4, kTree = 5, kChain = 6, kBinomial = 7,
                       kPairwise = 8, kP2p = 9, kHierarchical = 10;

// Each collective's entries together, its default first: the algorithm it
// runs when nothing has a cost. On a tie of costs the earlier entry wins:
// all_reduce lists the tree before the ring (algorithm_costs.cpp says why)
// and direct before recursive doubling (one hop each on 2 ranks).
constexpr AlgorithmEntry kRegistry[] = {
    {"all_reduce", "tree", kTree, tree_all_reduce, cost::tree_all_reduce},
    {"all_reduce", "ring", kRing, ring_all_reduce, cost::ring_all_reduce},
    {"all_reduce", "direct", kDirect, direct_all_reduce, cost::direct_all_reduce},
    {"all_reduce", "recdbl", kRecdbl, recursive_doubling_all_reduce, cost::recursive_doubling_all_reduce},
    {"all_reduce", "rabenseifner", kRabenseifner, rabenseifner_all_reduce, cost::rabenseifner_all_reduce},
    {"all_reduce", "hierarchical", kHierarchical, hierarchical_all_reduce, cost::hierarchical_all_reduce},
    {"broadcast", "chain", kChain, chain_broadcast, cost::chain_broadcast},
    {"broadcast", "binomial", kBinomial, binomial_broadcast, cost::binomial_broadcast},
    {"broadcast", "tree", kTree, tree_broadcast, cost::tree_broadcast},
    {"reduce", "binomial", kBinomial, binomial_reduce, nullptr},
    {"all_gather", "ring", kRing, ring_all_gather, nullptr},
    {"reduce_scatter", "ring", kRing, ring_reduce_scatter, nullptr},
    {"all_to_all", "pairwise", kPairwise, pairwise_all_to_all, nullptr},
    {"gather", "direct", kDirect, direct_gather, nullptr},
    {"scatter", "direct", kDirect, direct_scatter, nullptr},
    {"barrier", "ring", kRing, ring_barrier, nullptr},
    // Built by their own calls (block layouts, peers): named and numbered only.
    {"all_to_allv", "pairwise", kPairwise, nullptr, nullptr},
    {"all_gatherv", "pairwise", kPairwise, nullptr, nullptr},
    {"reduce_scatterv", "pairwise", kPairwise, nullptr, nullptr},
    {"gatherv", "direct", kDirect, nullptr, nullptr},
    {"scatterv", "direct", kDirect, nullptr, nullptr},
    {"send/recv", "p2p", kP2p, nullptr, nullptr},
};

}  // namespace

std::span<const AlgorithmEntry> algorithm_registry() { return kRegistry; }

const AlgorithmEntry* find_algorithm(std::string_view collective, std::string_view name) {
  for (const auto& e : kRegistry)
    if (e.collective == collective && e.name == name) return &e;
  return nullptr;
}

std::vector<std::string_view> algorithms_of(std::string_view collective) {
  std::vector<std::string_view> out;
  for (const auto& e : kRegistry)
    if (e.collective == collective && e.build != nullptr) out.push_back(e.name);
  return out;
}

std::vector<AlgorithmCost> algorithm_costs() {
  std::vector<AlgorithmCost> out;
  for (const auto& e : kRegistry)
    if (e.build != nullptr) out.push_back({e.collective, e.name, e.cost});
  return out;
}

Schedule build_schedule(std::string_view collective, std::string_view name, const CollectiveShape& shape) {
  const AlgorithmEntry* e = find_algorithm(collective, name);
  BRAID_CHECK(e != nullptr && e->build != nullptr, "the algorithm registry has no ", collective, " algorithm '", name, "'");
  return e->build(shape);
}

std::uint8_t algorithm_wire_id(std::string_view name) {
  for (const auto& e : kRegistry)
    if (e.name == name) return e.wire_id;
  return 0;
}

std::string_view algorithm_of_wire_id(std::uint8_t id) {
  for (const auto& e : kRegistry)
    if (e.wire_id == id) return e.name;
  return {};
}

}  // namespace braid
