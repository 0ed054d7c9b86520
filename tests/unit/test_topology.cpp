// The machine as hwloc sees it (topology/machine.hpp) and what ranks tell
// each other about their CPUs (RankInfo::cpus, shared_cpus), and the RDMA
// ports libibverbs sees.
#include <hwloc.h>
#include <sched.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>

#include "core/rank_info.hpp"
#include "topology/machine.hpp"

namespace braid {
namespace {

// The XML of an hwloc synthetic topology (which, unlike a real one, can say
// which caches there are).
std::string synthetic_xml(const char* description) {
  hwloc_topology_t t = nullptr;
  REQUIRE(hwloc_topology_init(&t) == 0);
  REQUIRE(hwloc_topology_set_synthetic(t, description) == 0);
  REQUIRE(hwloc_topology_load(t) == 0);
  char* buffer = nullptr;
  int length = 0;
  REQUIRE(hwloc_topology_export_xmlbuffer(t, &buffer, &length, 0) == 0);
  std::string xml(buffer, static_cast<std::size_t>(length - 1));
  hwloc_free_xmlbuffer(t, buffer);
  hwloc_topology_destroy(t);
  return xml;
}

}  // namespace

TEST_CASE("the cache a core has to itself: its L2, not the L3 its package shares") {
  const Machine m = Machine::from_xml(synthetic_xml("pack:1 l3:1(size=33554432) l2:4(size=2097152) l1d:1(size=49152) core:1 pu:2"),
                                     {}, "synthetic");
  CHECK(m.private_cache_bytes == std::uint64_t{2} << 20);
  CHECK(m.private_cache_level == 2);
  CHECK(m.describe().find("; 2 MiB of L2 cache for one core of this process\n") != std::string::npos);
  // An L2 that two cores share is not private: the L1 is.
  const Machine shared = Machine::from_xml(synthetic_xml("pack:1 l2:2(size=4194304) l1d:2(size=32768) core:1 pu:1"), {}, "synthetic");
  CHECK(shared.private_cache_bytes == std::uint64_t{32} << 10);
  // No caches known: none.
  CHECK(Machine::from_xml(synthetic_xml("pack:1 core:2 pu:1"), {}, "synthetic").private_cache_bytes == 0);
}

TEST_CASE("the cost model's cache: shared by no cores but the process's, and believable in size") {
  // A VM's hwloc giving each core its own 508 MiB L3: not believed, the L2 is taken, and the text says why.
  const Machine vm = Machine::from_xml(
      synthetic_xml("pack:1 l3:2(size=532676608) l2:1(size=1048576) l1d:1(size=49152) core:1 pu:1"), {}, "synthetic");
  CHECK(vm.private_cache_bytes == std::uint64_t{1} << 20);
  CHECK(vm.private_cache_level == 2);
  CHECK(vm.private_cache_text().find("its L3 (508 MiB for 1 core) is more than any CPU has per core") !=
        std::string::npos);
  // A process bound to both cores under one L2 has that L2 to itself; bound to one, its L1.
  const std::string xml = synthetic_xml("pack:1 l2:2(size=4194304) l1d:2(size=32768) core:1 pu:1");
  const std::uint64_t two_cores = 0b11, one_core = 0b1;
  const Machine pair = Machine::from_xml(xml, std::span(&two_cores, 1), "synthetic");
  CHECK(pair.private_cache_bytes == std::uint64_t{4} << 20);
  CHECK(pair.private_cache_cores == 2);
  CHECK(pair.private_cache_text() == "4 MiB of L2 cache for 2 cores of this process");
  CHECK(Machine::from_xml(xml, std::span(&one_core, 1), "synthetic").private_cache_bytes == std::uint64_t{32} << 10);
  // An L3 of 96 MiB for 8 cores (12 MiB each) is believed, for a process bound to all 8 of a 16-core machine.
  const std::uint64_t eight = 0xff;
  const Machine stacked = Machine::from_xml(
      synthetic_xml("pack:1 l3:2(size=100663296) l2:8(size=1048576) core:1 pu:1"), std::span(&eight, 1), "synthetic");
  CHECK(stacked.private_cache_bytes == std::uint64_t{96} << 20);
  CHECK(stacked.private_cache_level == 3);
}

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
