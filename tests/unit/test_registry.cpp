// The algorithm registry (collectives/registry.hpp): one name and one wire id
// per algorithm, a builder whose schedule names itself as the entry does,
// and the lists every reader takes from it (BRAID_ALGO's checks, the plan's
// candidates, the operation descriptor's names).
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "collectives/registry.hpp"
#include "core/settings.hpp"
#include "core/text.hpp"
#include "topology/plan.hpp"

namespace braid {
namespace {

TEST_CASE("registry: a name has one wire id, an id one name, and 0 is nobody's") {
  std::map<std::string_view, std::uint8_t> id_of;
  std::map<std::uint8_t, std::string_view> name_of_id;
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (const auto& e : algorithm_registry()) {
    INFO(e.collective << ":" << e.name);
    CHECK(seen.insert({e.collective, e.name}).second);  // no entry twice
    CHECK(e.wire_id != 0);
    auto [it, fresh] = id_of.emplace(e.name, e.wire_id);
    CHECK(it->second == e.wire_id);
    auto [back, fresh_id] = name_of_id.emplace(e.wire_id, e.name);
    CHECK(back->second == e.name);
    CHECK(algorithm_wire_id(e.name) == e.wire_id);
    CHECK(algorithm_of_wire_id(e.wire_id) == e.name);
    CHECK(OpDescriptor::algorithm_id(e.name) == e.wire_id);
  }
  CHECK(algorithm_wire_id("nosuch") == 0);
  CHECK(algorithm_of_wire_id(0).empty());
  CHECK(algorithm_of_wire_id(255).empty());
  // The ids are on the wire: the ones peers already send keep their values.
  CHECK(algorithm_wire_id("ring") == 1);
  CHECK(algorithm_wire_id("hierarchical") == 10);
  OpDescriptor d{OpDescriptor::Kind::all_reduce, DataType::f32, ReduceOp::sum, algorithm_wire_id("rabenseifner"), -1, 4};
  CHECK(d.describe().find("rabenseifner") != std::string::npos);
}

TEST_CASE("registry: every builder's schedule is valid and names its entry") {
  for (const auto& e : algorithm_registry()) {
    if (e.build == nullptr) continue;
    for (int n : {1, 2, 3, 4, 5, 8}) {
      std::vector<int> ring(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) ring[static_cast<std::size_t>(r)] = r;
      for (int rank : {0, n - 1}) {
        INFO(e.collective << ":" << e.name << " on " << n << " ranks, rank " << rank);
        CollectiveShape shape;
        shape.rank = rank;
        shape.ranks = n;
        shape.ring = ring;
        shape.count = 1000;
        shape.type = DataType::f32;
        const Schedule s = build_schedule(e.collective, e.name, shape);
        // Without hosts, hierarchical hands its shape to the ring.
        CHECK(s.algorithm == (e.name == "hierarchical" ? std::string_view("ring") : e.name));
        const bool blocked = e.collective == "all_gather" || e.collective == "reduce_scatter" ||
                             e.collective == "all_to_all" || e.collective == "gather" || e.collective == "scatter";
        const std::size_t bytes = 4000 * (blocked ? static_cast<std::size_t>(n) : 1);
        CHECK_NOTHROW(validate(s, BufferSizes{bytes, bytes}, rank));
      }
    }
  }
  CHECK_THROWS_WITH(build_schedule("all_reduce", "nosuch", CollectiveShape{}), Catch::Contains("nosuch"));
}

TEST_CASE("registry: the lists the planner, BRAID_ALGO and braid-perf read") {
  const auto all_reduce = algorithms_of("all_reduce");
  REQUIRE_FALSE(all_reduce.empty());
  CHECK(all_reduce.front() == "tree");  // wins ties (algorithm_costs.cpp)
  CHECK(all_reduce.size() == 6);
  CHECK(algorithms_of("broadcast") == std::vector<std::string_view>{"chain", "binomial", "tree"});
  // The uneven calls and point to point build their own schedules: named, not forceable.
  CHECK(algorithms_of("all_to_allv").empty());
  CHECK(find_algorithm("all_to_allv", "pairwise") != nullptr);
  CHECK(algorithms_of("nosuch").empty());
  const auto costs = algorithm_costs();
  std::size_t buildable = 0;
  for (const auto& e : algorithm_registry()) buildable += e.build != nullptr;
  CHECK(costs.size() == buildable);
  for (const auto& c : costs)
    if (c.collective == "all_reduce" || c.collective == "broadcast") CHECK(c.cost != nullptr);

  // BRAID_ALGO is checked against the same entries.
  Settings s;
  s.algo = "all_reduce:nosuch";
  std::vector<RankInfo> infos(2);
  infos[0].rank = 0;
  infos[1].rank = 1;
  try {
    make_plan(infos, s, costs);
    FAIL("BRAID_ALGO='all_reduce:nosuch' was accepted");
  } catch (const InvalidArgument& e) {
    for (auto name : all_reduce) CHECK(std::string(e.what()).find(name) != std::string::npos);
  }
  s.algo = "tree";
  const Plan plan = make_plan(infos, s, costs);
  CHECK(plan.forced.at("all_reduce") == "tree");
  CHECK(plan.forced.at("broadcast") == "tree");
  CHECK(plan.forced.count("reduce") == 0);
}

}  // namespace
}  // namespace braid
