// The planner (topology/plan.cpp) from made-up rank infos: host numbers and
// the ring's host crossings, the algorithm per size from the cost model with
// the built-in link parameters (hierarchical all-reduce on several alike
// hosts when large, never elsewhere), BRAID_ALGO, and the same plan whatever
// order the rank infos come from. test_cost_model.cpp checks the model's
// choices from made-up link parameters.
#include <catch2/catch.hpp>

#include <set>

#include "core/settings.hpp"
#include "core/text.hpp"
#include "collectives/registry.hpp"
#include "topology/plan.hpp"
#include "made_up_ranks.hpp"

namespace braid {
namespace {

using testing::crossings;
using testing::ranks_on;

// Two namespace hosts of 2 ranks, as bench/auto_vs_forced.py --hosts 2x2 runs
// them: two host names, one kernel, 2 CPUs for 4 ranks, a 1 MiB L2 each;
// ranks numbered host by host.
std::vector<RankInfo> namespace_hosts_2x2() {
  auto infos = ranks_on({0, 0, 1, 1});
  for (auto& info : infos) {
    info.kernel_id = 42;
    info.cpus = {info.rank % 2 == 0 ? 1u : 2u};
    info.cache_kib = 1024;
  }
  return infos;
}

TEST_CASE("plan: 2 hosts x 2 ranks, interleaved: few hops when small, hierarchical when large") {
  const Plan plan = make_plan(ranks_on({0, 1, 0, 1}), Settings{}, algorithm_costs());
  CHECK(plan.hosts == std::vector<int>{0, 1, 0, 1});
  CHECK(plan.ring == std::vector<int>{0, 2, 1, 3});
  CHECK(plan.uniform_hosts);
  CHECK(plan.host_count == 2);
  CHECK(crossings(plan) == 2);
  const std::string_view small = plan.algorithm_for("all_reduce", 8);
  CHECK((small == "direct" || small == "recdbl"));
  // From the built-in parameters the flat tree (10 levels, every hop priced
  // as tcp) stays close up to 16 MiB; 64 MiB is hierarchical.
  CHECK(plan.algorithm_for("all_reduce", 64 << 20) == "hierarchical");
  CHECK(plan.algorithm_for("all_reduce", 64 << 20) == "hierarchical");
  INFO(plan.describe());
  CHECK(plan.describe().find("hierarchical from") != std::string::npos);
}

TEST_CASE("plan: 2 namespace hosts x 2 ranks on one 2-core kernel: recdbl when small, hierarchical when large") {
  const Plan plan = make_plan(namespace_hosts_2x2(), Settings{}, algorithm_costs());
  INFO(plan.describe());
  CHECK(plan.oversubscribed);
  CHECK(plan.host_count == 2);
  CHECK(plan.local_rounds == 1);
  CHECK(plan.cache_bytes == 512 * 1024);  // a 1 MiB L2 per core, 2 ranks per core
  // Measured there (bench/figures/auto_vs_forced_2x2.txt): recursive
  // doubling, 2 messages with one inside a host, is the fastest up to tens
  // of KiB; hierarchical, which sends the least across, from 512 KiB.
  for (std::size_t bytes : {8, 1024, 16 << 10})
    CHECK(plan.algorithm_for("all_reduce", bytes) == "recdbl");
  for (std::size_t bytes : {1 << 20, 16 << 20, 64 << 20})
    CHECK(plan.algorithm_for("all_reduce", bytes) == "hierarchical");
  // The description says what bounds each band.
  CHECK(plan.bound("all_reduce", "recdbl", 8) == "tcp latency");
  CHECK(plan.bound("all_reduce", "hierarchical", 64 << 20) == "tcp bytes");
  CHECK(plan.describe().find("recdbl to ") != std::string::npos);
  CHECK(plan.describe().find("[tcp bytes]") != std::string::npos);
  // Dealt to hosts in turn, recursive doubling's first round crosses too.
  CHECK(make_plan(ranks_on({0, 1, 0, 1}), Settings{}, algorithm_costs()).local_rounds == 0);
}

TEST_CASE("plan: the network cards' speed prices the link between hosts (1 Gbit/s: hierarchical from a few KiB)") {
  // The namespace hosts above, now as two laptops whose Ethernet cards say
  // 1000 Mbit/s (RankInfo::link_mbps): measured on namespaces shaped to
  // 1 Gbit/s (bench/figures/auto_vs_forced_2x2_1gbit.txt) hierarchical,
  // which moves half of recdbl's bytes across, was 2x recdbl's speed from
  // 8 KiB.
  auto infos = namespace_hosts_2x2();
  const Plan unknown = make_plan(infos, Settings{}, algorithm_costs());
  CHECK(unknown.inter_link_gbps == 0);
  CHECK(unknown.algorithm_for("all_reduce", 32 << 10) == "recdbl");
  for (auto& info : infos) info.link_mbps = info.rank == 3 ? 1000 : 10000;  // the slowest card counts
  const Plan gigabit = make_plan(infos, Settings{}, algorithm_costs());
  INFO(gigabit.describe());
  CHECK(gigabit.inter_link_gbps == Approx(0.125));
  CHECK(gigabit.cost_inputs(1 << 20).inter.bandwidth_gbps == Approx(0.125));
  CHECK(gigabit.cost_inputs(1 << 20).intra == unknown.cost_inputs(1 << 20).intra);  // shm is no card
  CHECK(gigabit.algorithm_for("all_reduce", 8) == "recdbl");
  for (std::size_t bytes : {std::size_t{32} << 10, std::size_t{1} << 20, std::size_t{64} << 20})
    CHECK(gigabit.algorithm_for("all_reduce", bytes) == "hierarchical");
  CHECK(gigabit.describe().find("hosts linked at 1 Gbit/s") != std::string::npos);
  // A faster card than the model's rate changes nothing.
  for (auto& info : infos) info.link_mbps = 100000;
  CHECK(make_plan(infos, Settings{}, algorithm_costs()).cost_inputs(1 << 20).inter ==
        unknown.cost_inputs(1 << 20).inter);
}

TEST_CASE("plan: one host, or hosts of different sizes: never hierarchical, a buffer per rank when large") {
  for (const auto& hosts : {std::vector<int>{0, 0, 0, 0}, std::vector<int>{0, 0, 0, 1, 1}, std::vector<int>{0, 1, 2},
                            std::vector<int>{0, 1}}) {
    const Plan plan = make_plan(ranks_on(hosts), Settings{}, algorithm_costs());
    INFO("hosts of ranks: " << plan.describe());
    CHECK_FALSE(plan.uniform_hosts);
    for (std::size_t bytes = 1; bytes <= (std::size_t{1} << 30); bytes *= 4)
      CHECK(plan.algorithm_for("all_reduce", bytes) != "hierarchical");
    // One of the algorithms that move about a buffer per rank, not log2(n) or n-1 of them.
    const std::string_view large = plan.algorithm_for("all_reduce", 64 << 20);
    CHECK((large == "tree" || large == "ring" || large == "rabenseifner"));
  }
}

TEST_CASE("plan: 3 hosts with uneven ranks keep each host together in the ring") {
  const Plan plan = make_plan(ranks_on({2, 0, 1, 0, 2, 2, 1}), Settings{}, algorithm_costs());
  CHECK(plan.hosts == std::vector<int>{0, 1, 2, 1, 0, 0, 2});  // numbered by lowest rank
  CHECK(plan.ring == std::vector<int>{0, 4, 5, 1, 3, 2, 6});
  CHECK(crossings(plan) == 3);
}

TEST_CASE("plan: 1024 ranks on 128 hosts: hierarchical, and the ring crosses once per host") {
  std::vector<int> hosts;
  for (int r = 0; r < 1024; ++r) hosts.push_back((r * 37) % 128);  // 8 per host, scattered
  const Plan plan = make_plan(ranks_on(hosts), Settings{}, algorithm_costs());
  CHECK(plan.uniform_hosts);
  CHECK(crossings(plan) == 128);
  CHECK(std::set<int>(plan.ring.begin(), plan.ring.end()).size() == 1024);
  // From the built-in parameters the flat tree (10 levels, every hop priced
  // as tcp) stays close up to 16 MiB; 64 MiB is hierarchical.
  CHECK(plan.algorithm_for("all_reduce", 64 << 20) == "hierarchical");
}

TEST_CASE("plan: BRAID_ALGO forces hierarchical, and every rank gets the same plan") {
  Settings s;
  s.algo = "all_reduce:hierarchical";
  const auto infos = ranks_on({1, 0, 1, 0, 2, 2});
  const Plan plan = make_plan(infos, s, algorithm_costs());
  CHECK(plan.algorithm_for("all_reduce", 8) == "hierarchical");
  // Whatever a rank knows of itself first, the inputs are the gathered infos
  // by rank: the same plan from the same inputs.
  for (int i = 0; i < 3; ++i) {
    const Plan again = make_plan(infos, s, algorithm_costs());
    CHECK(again.ring == plan.ring);
    CHECK(again.hosts == plan.hosts);
  }
  s.algo = "all_reduce:nosuch";
  CHECK_THROWS_WITH(make_plan(infos, s, algorithm_costs()), Catch::Contains("hierarchical"));
}

}  // namespace
}  // namespace braid
