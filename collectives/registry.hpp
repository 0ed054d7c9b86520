// The algorithm registry: every algorithm braid has, once. Per collective
// and algorithm: its name (BRAID_ALGO, braid-perf --algo, logs), its wire id
// (OpDescriptor::algorithm, so that two ranks running different algorithms
// are told apart), the builder of its schedule, and its alpha-beta cost
// function (algorithm_costs.hpp). The planner (topology/plan.hpp) chooses by
// the costs, the comm layer builds by the builders, braid-perf lists and
// names by the names, the BRAID_ALGO parser checks against them.
//
// The planner sits below this layer, so it cannot include this file: the
// comm layer (and the tools) hand it algorithm_costs(), plain (collective,
// name, cost) entries of a type the planner declares (topology/cost_model.hpp).
// That keeps the choice in the planner, where docs/architecture.md puts it, and the
// plan a value that tests make from made-up costs.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "collectives/schedule.hpp"
#include "topology/cost_model.hpp"

namespace braid {

struct AlgorithmEntry {
  std::string_view collective;  // "all_reduce", ...; "send/recv" for point to point
  std::string_view name;
  /// The same for every collective's algorithm of one name; 0 means unknown.
  std::uint8_t wire_id = 0;
  /// nullptr: built by its own call (the uneven collectives take block
  /// layouts, point to point its peers); such entries cannot be forced.
  Schedule (*build)(const CollectiveShape&) = nullptr;
  /// nullptr: not chosen by cost (the collective's only algorithm).
  CostFunction cost = nullptr;
};

/// Every entry, each collective's default first.
std::span<const AlgorithmEntry> algorithm_registry();

/// The entry of `collective`'s `name`, or nullptr.
const AlgorithmEntry* find_algorithm(std::string_view collective, std::string_view name);

/// The algorithms BRAID_ALGO may force for `collective` (those with a
/// builder), the default first; empty for an unknown collective.
std::vector<std::string_view> algorithms_of(std::string_view collective);

/// The planner's view of the registry: every entry that has a builder.
std::vector<AlgorithmCost> algorithm_costs();

/// Builds `collective`'s schedule by `name`; Error(internal) for a name the
/// registry does not have (the plan only holds names it has checked).
Schedule build_schedule(std::string_view collective, std::string_view name, const CollectiveShape& shape);

/// The wire id of an algorithm name (0 for names braid does not have), and back.
std::uint8_t algorithm_wire_id(std::string_view name);
std::string_view algorithm_of_wire_id(std::uint8_t id);

}  // namespace braid
