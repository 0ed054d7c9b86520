// The machine as hwloc sees it (topology/machine.hpp) and what ranks tell
// each other about their CPUs (RankInfo::cpus, shared_cpus), and the RDMA
// ports libibverbs sees.
#include <sched.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>

#include "core/rank_info.hpp"
#include "topology/machine.hpp"

namespace braid {

TEST_CASE("hwloc's view of this host is consistent with the kernel's") {
  const Machine m = Machine::discover();
  CHECK(m.packages >= 1);
  CHECK(m.numa_nodes >= 1);
  CHECK(m.cores >= 1);
  CHECK(m.pus >= m.cores);
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(m.bound_pus == CPU_COUNT(&set));
  CHECK(m.bound_cores >= 1);
  CHECK(m.bound_cores <= m.cores);
  bool loopback = false;
  for (const auto& nic : m.nics) loopback = loopback || (nic.name == "lo" && nic.loopback && !nic.is_virtual);
  CHECK(loopback);
  const std::string text = m.describe();
  CHECK(text.find("this process may run on CPUs " + m.bound_cpus) != std::string::npos);
}

TEST_CASE("the binding is read again, and ranks' CPU masks travel and add up per kernel") {
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const Machine bound = Machine::local();
  const RankInfo a = RankInfo::local(0);
  REQUIRE(sched_setaffinity(0, sizeof all, &all) == 0);
  CHECK(bound.bound_pus == 1);
  CHECK(bound.bound_cpus == std::to_string(first));
  CHECK(Machine::local().bound_pus == CPU_COUNT(&all));

  const RankInfo back = RankInfo::decode(a.encode());
  CHECK(back.cpus == a.cpus);
  const RankInfo b = RankInfo::local(1);
  const RankInfo pair[] = {a, b};
  CHECK(RankInfo::shared_cpus(pair, a.kernel_id) == CPU_COUNT(&all));
  const RankInfo only_a[] = {a, a};
  CHECK(RankInfo::shared_cpus(only_a, a.kernel_id) == 1);
  CHECK(RankInfo::shared_cpus(pair, a.kernel_id + 1) == 0);
}

}  // namespace braid

namespace braid {

TEST_CASE("RDMA ports: libibverbs' devices are the kernel's, and none is said plainly") {
  const Machine m = Machine::discover();
  std::set<std::string> listed;
  for (const RdmaPort& p : m.rdma) {
    listed.insert(p.device);
    CHECK_FALSE(p.state.empty());
    if (p.port > 0) CHECK_FALSE(p.link_layer.empty());
  }
  std::set<std::string> kernel;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/class/infiniband", ec))
    kernel.insert(entry.path().filename().string());
  if (m.rdma_note.find("without libibverbs") == std::string::npos) CHECK(listed == kernel);
  if (m.rdma.empty()) {
    CHECK_FALSE(m.rdma_note.empty());
    CHECK_THAT(m.describe(), Catch::Contains("no RDMA device: " + m.rdma_note));
  }
}

}  // namespace braid
