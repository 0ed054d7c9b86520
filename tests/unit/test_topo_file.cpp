// Planning from hwloc XML topologies checked into tests/unit/topologies/
// (topology/topo_plan.hpp) and the topology file that carries them
// (topology/topo_file.hpp): NUMA-aware ring order, each rank's nearest NIC
// and GPU, several hosts, the round trip dump -> load, and every bad input
// with the error that names it.
//
// 2socket-2nic-8gpu.xml: 2 packages of 4 cores (CPUs 0-3 on NUMA 0, 4-7 on
// NUMA 1), eth0 and cuda0-3 on package 0, eth1 and cuda4-7 on package 1
// (hwloc's synthetic "pack:2 [numa] core:4 pu:1" with PCI devices added by
// hand). 1socket-4core.xml: "pack:1 [numa] core:4 pu:1", no I/O.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "collectives/registry.hpp"
#include "core/settings.hpp"
#include "core/text.hpp"
#include "topology/topo_file.hpp"
#include "topology/topo_plan.hpp"
#include "made_up_ranks.hpp"

namespace braid {
namespace {

using testing::crossings;
using testing::host_id_of;
using testing::ranks_on;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string topology_xml(const std::string& name) {
  return read_text(cat(BRAID_SOURCE_ROOT, "/tests/unit/topologies/", name));
}

// Rank r on host hosts[r], bound to the CPUs cpus[r] ("" for none).
TopoFile job(const std::vector<int>& hosts, const std::vector<std::string>& cpus) {
  TopoFile f;
  f.ranks = ranks_on(hosts, "node-", 4000);
  for (std::size_t r = 0; r < hosts.size(); ++r) f.ranks[r].cpus = parse_cpu_list(cpus.empty() ? "" : cpus[r], "test");
  return f;
}

void add_machine(TopoFile& f, int host, const std::string& xml) { f.machines.push_back({host_id_of(host), xml}); }

// Times the ring steps from one NUMA node to another (inside one host).
int numa_crossings(const TopoPlan& tp) {
  int n = 0;
  const auto& ring = tp.plan.ring;
  for (std::size_t i = 0; i < ring.size(); ++i)
    n += tp.places[ring[i]].numa != tp.places[ring[(i + 1) % ring.size()]].numa;
  return n;
}

TEST_CASE("topo file: 2 sockets, 2 NICs, 8 GPUs, ranks bound alternately: NUMA-aware ring, nearest NIC and GPU") {
  // Rank r on CPU (r % 2) * 4 + r / 2: even ranks on socket 0, odd on socket 1.
  std::vector<std::string> cpus;
  for (int r = 0; r < 8; ++r) cpus.push_back(cat((r % 2) * 4 + r / 2));
  TopoFile f = job({0, 0, 0, 0, 0, 0, 0, 0}, cpus);
  add_machine(f, 0, topology_xml("2socket-2nic-8gpu.xml"));
  const TopoPlan tp = plan_topology(f, Settings{}, "test", algorithm_costs());
  CHECK(tp.plan.ring == std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7});
  CHECK(numa_crossings(tp) == 2);  // rank order would cross at each of the 8 steps
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r);
    const RankPlace& p = tp.places[r];
    CHECK(p.numa == r % 2);
    CHECK(p.nic == (r % 2 == 0 ? "eth0" : "eth1"));
    CHECK(p.gpu == cat("cuda", (r % 2) * 4 + r / 2));  // each rank its own GPU, on its socket
    CHECK(p.gpu_local);
  }
  const std::string text = describe_topology_plan(f, tp);
  CHECK_THAT(text, Catch::Contains("rank 3: CPUs 5, NUMA 1, NIC eth1, GPU cuda5\n"));
  CHECK_THAT(text, Catch::Contains("ring: 0 2 4 6 1 3 5 7\n"));
}

TEST_CASE("topo file: 2 sockets, one rank per socket, and a rank that spans both") {
  TopoFile f = job({0, 0, 0}, {"4-7", "0-3", "0-7"});
  add_machine(f, 0, topology_xml("2socket-2nic-8gpu.xml"));
  const TopoPlan tp = plan_topology(f, Settings{}, "test", algorithm_costs());
  CHECK(tp.places[0].numa == 1);
  CHECK(tp.places[0].nic == "eth1");
  CHECK(tp.places[0].gpu == "cuda4");
  CHECK(tp.places[1].numa == 0);
  CHECK(tp.places[1].nic == "eth0");
  CHECK(tp.places[1].gpu == "cuda0");
  // On both sockets: no NUMA node of its own, the first NIC, the host's GPUs round robin.
  CHECK(tp.places[2].numa == -1);
  CHECK(tp.places[2].nic == "eth0");
  CHECK(tp.places[2].gpu == "cuda2");
  CHECK_FALSE(tp.places[2].gpu_local);
  CHECK(tp.plan.ring == std::vector<int>{2, 1, 0});  // unknown NUMA first, then by node
}

TEST_CASE("topo file: 2 hosts x 4 ranks, interleaved: hosts contiguous in the ring, hierarchical shape") {
  TopoFile f = job({0, 1, 0, 1, 0, 1, 0, 1}, {"0", "0", "1", "1", "2", "2", "3", "3"});
  add_machine(f, 0, topology_xml("1socket-4core.xml"));
  add_machine(f, 1, topology_xml("1socket-4core.xml"));
  const TopoPlan tp = plan_topology(f, Settings{}, "test", algorithm_costs());
  CHECK(tp.plan.hosts == std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1});
  CHECK(tp.plan.ring == std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7});
  CHECK(tp.plan.uniform_hosts);
  CHECK(crossings(tp.plan) == 2);
  for (const RankPlace& p : tp.places) {
    CHECK(p.numa == 0);
    CHECK(p.nic.empty());
    CHECK(p.gpu.empty());
  }
}

TEST_CASE("topo file: 3 hosts with uneven ranks, one without a machine section") {
  TopoFile f = job({2, 0, 1, 0, 2, 2, 1}, {"4", "0", "0", "1", "0", "5", "1"});
  add_machine(f, 0, topology_xml("1socket-4core.xml"));
  add_machine(f, 2, topology_xml("2socket-2nic-8gpu.xml"));
  const TopoPlan tp = plan_topology(f, Settings{}, "test", algorithm_costs());
  CHECK(tp.plan.hosts == std::vector<int>{0, 1, 2, 1, 0, 0, 2});
  // Host 0 (ranks 0, 4, 5): rank 4 on NUMA 0 goes first, then 0 and 5 on NUMA 1.
  CHECK(tp.plan.ring == std::vector<int>{4, 0, 5, 1, 3, 2, 6});
  CHECK(crossings(tp.plan) == 3);
  CHECK_FALSE(tp.plan.uniform_hosts);
  CHECK(tp.places[4].gpu == "cuda0");
  CHECK(tp.places[0].gpu == "cuda4");
  CHECK(tp.places[5].gpu == "cuda5");
  CHECK(tp.places[2].numa == -1);  // host 1 has no machine section: no placement
  CHECK(tp.places[2].gpu.empty());
  CHECK_THAT(describe_topology_plan(f, tp), Catch::Contains("host 2 (node-1, no machine section): ranks 2, 6"));
}

TEST_CASE("topo file: dump -> load gives the same inputs and the same plan") {
  TopoFile f = job({0, 1, 0, 1, 0, 1, 0, 1}, {"0", "4", "1", "5", "2", "6", "3-7", ""});
  f.ranks[3].host_id_from_env = false;
  f.ranks[5].gpus = 3;
  f.ranks[6].rdma = true;
  add_machine(f, 0, topology_xml("2socket-2nic-8gpu.xml"));
  add_machine(f, 1, topology_xml("2socket-2nic-8gpu.xml"));
  const TopoPlan before = plan_topology(f, Settings{}, "test", algorithm_costs());
  f.plan = describe_topology_plan(f, before);
  const std::string text = format_topo_file(f);

  const TopoFile g = parse_topo_file(text, "dump.topo");
  REQUIRE(g.ranks.size() == f.ranks.size());
  for (std::size_t r = 0; r < f.ranks.size(); ++r) {
    INFO("rank " << r);
    CHECK(g.ranks[r].rank == f.ranks[r].rank);
    CHECK(g.ranks[r].hostname == f.ranks[r].hostname);
    CHECK(g.ranks[r].host_id == f.ranks[r].host_id);
    CHECK(g.ranks[r].kernel_id == f.ranks[r].kernel_id);
    CHECK(g.ranks[r].host_id_from_env == f.ranks[r].host_id_from_env);
    CHECK(g.ranks[r].pid == f.ranks[r].pid);
    CHECK(g.ranks[r].gpus == f.ranks[r].gpus);
    CHECK(g.ranks[r].rdma == f.ranks[r].rdma);
    CHECK(cpu_list_of(g.ranks[r].cpus) == cpu_list_of(f.ranks[r].cpus));
  }
  REQUIRE(g.machines.size() == 2);
  CHECK(g.machines[0].xml == f.machines[0].xml);
  CHECK(g.plan == f.plan);
  CHECK(format_topo_file(g) == text);

  const TopoPlan after = plan_topology(g, Settings{}, "dump.topo", algorithm_costs());
  CHECK(after.plan.ring == before.plan.ring);
  CHECK(after.plan.hosts == before.plan.hosts);
  CHECK(after.plan.describe() == before.plan.describe());
  CHECK(describe_topology_plan(g, after) == f.plan);
  // Unknown NUMA node first (rank 6 spans both sockets, rank 7 is unbound), then by node.
  CHECK(after.plan.ring == std::vector<int>{6, 0, 2, 4, 7, 1, 3, 5});
}

TEST_CASE("topo file: a file written to disk reads back, %r names each rank's file") {
  TopoFile f = job({0, 0}, {"0", "1"});
  add_machine(f, 0, topology_xml("1socket-4core.xml"));
  const std::string path = topo_dump_path("/tmp/braid-unit-topo.%r.topo", 1);
  CHECK(path == "/tmp/braid-unit-topo.1.topo");
  write_topo_file(path, f);
  const TopoFile g = read_topo_file(path);
  CHECK(g.ranks.size() == 2);
  CHECK(g.machines.size() == 1);
  std::remove(path.c_str());
  CHECK_THROWS_WITH(read_topo_file(path), Catch::Contains(cat("topology file ", path, ": cannot open it")));
}

TEST_CASE("topo file: the checked-in 2-socket job file (docs/algorithms.md's braid-topo --load example) plans as its XML says") {
  const TopoFile f = read_topo_file(cat(BRAID_SOURCE_ROOT, "/tests/unit/topologies/2socket-8ranks.topo"));
  REQUIRE(f.ranks.size() == 8);
  REQUIRE(f.machines.size() == 1);
  CHECK(f.ranks[5].gpus == 8);
  CHECK(f.ranks[5].rdma);
  const TopoPlan tp = plan_topology(f, Settings{}, "2socket-8ranks.topo", algorithm_costs());
  CHECK(tp.plan.ring == std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7});
  CHECK(tp.places[7].nic == "eth1");
  CHECK(tp.places[7].gpu == "cuda7");
  CHECK(tp.places[6].gpu == "cuda3");
}

// A good file's text with `from` replaced by `to` (which must occur).
std::string broken(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

TEST_CASE("topo file: a file that does not parse names the file, the line, the field and what was expected") {
  TopoFile f = job({0, 0}, {"0", "1"});
  add_machine(f, 0, topology_xml("1socket-4core.xml"));
  const std::string good = format_topo_file(f);
  REQUIRE_NOTHROW(parse_topo_file(good, "bad.topo"));
  // Line 3 is the header, 4 "ranks 2", 5 and 6 the ranks, 7 the machine.
  struct Case {
    std::string text;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"", "bad.topo:0: the file is empty: expected the header 'braid-topology 1'"},
      {"hello\n", "bad.topo:1: expected the header 'braid-topology 1', got 'hello'"},
      {broken(good, "braid-topology 1", "braid-topology 2"), "bad.topo:3: version 2 of the format"},
      {broken(good, "ranks 2", "ranks two"), "bad.topo:4: expected 'ranks N' with N from 1 to"},
      {broken(good, " pid=4001", ""), "bad.topo:6: rank 1: field 'pid' is missing"},
      {broken(good, "pid=4001", "pid=x"), "bad.topo:6: rank 1: field 'pid': expected a process id"},
      {broken(good, "gpus=0", "gpus=256"), "bad.topo:5: rank 0: field 'gpus': expected a count from 0 to 255, got '256'"},
      {broken(good, "host_id_env=0", "host_id_env=2"), "bad.topo:5: rank 0: field 'host_id_env': expected 0 or 1"},
      {broken(good, "cpus=1 ", "cpus=3-1 "), "bad.topo:6: rank 1: field 'cpus': expected a CPU list such as 0-3,8"},
      {broken(good, "link_mbps=0\nrank 1", "link_mbps=fast\nrank 1"),
       "bad.topo:5: rank 0: field 'link_mbps': expected a speed in Mbit/s"},
      {broken(good, "host_id=0x", "host_id=0xzz"), "bad.topo:5: rank 0: field 'host_id': expected a 64-bit number"},
      {broken(good, " rdma=0", " rdma=0 colour=red"), "bad.topo:5: rank 0: unknown field 'colour'"},
      {broken(good, " rdma=0", " rdma=0 rdma=1"), "bad.topo:5: rank 0: field 'rdma' given twice"},
      {broken(good, "rank 1 ", "rank 2 "), "bad.topo:6: expected 'rank R' with R a rank from 0 to 1, got '2'"},
      {broken(good, "rank 1 ", "rank 0 "), "bad.topo:6: rank 0 is described twice"},
      {broken(good, "ranks 2", "ranks 3"), "'ranks 3' but no line for rank 2"},
      {broken(good, "end machine\n", ""), "bad.topo:7: this machine section has no 'end machine' line"},
      {broken(good, "machine host_id", "machines host_id"), "bad.topo:7: expected 'ranks', 'rank', 'machine' or 'plan', got 'machines'"},
      {broken(good, "<topology", "<topolog"), "bad.topo:7: expected hwloc XML (a <topology> element)"},
  };
  for (const Case& c : cases) {
    INFO("file:\n" << c.text.substr(0, 600));
    CHECK_THROWS_WITH(parse_topo_file(c.text, "bad.topo"), Catch::Contains(c.error));
  }
  // link_mbps may be left out (files written before it): 0, unknown.
  f.ranks[1].link_mbps = 1000;
  const std::string with_speed = format_topo_file(f);
  CHECK(parse_topo_file(with_speed, "speed.topo").ranks[1].link_mbps == 1000);
  CHECK(parse_topo_file(broken(with_speed, " link_mbps=1000", ""), "old.topo").ranks[1].link_mbps == 0);
  // A machine no rank is on.
  CHECK_THROWS_WITH(parse_topo_file(broken(good, "machine host_id=0x9e", "machine host_id=0x8e"), "bad.topo"),
                    Catch::Contains("which no rank has"));
}

TEST_CASE("topo file: XML that hwloc cannot load, and a rank not on its machine") {
  TopoFile f = job({0, 0}, {"0", "1"});
  add_machine(f, 0, "<topology version=\"2.0\"><object type=\"Nonsense\"/></topology>\n");
  CHECK_THROWS_WITH(plan_topology(f, Settings{}, "bad.topo", algorithm_costs()),
                    Catch::Contains("bad.topo: the machine of host node-0 (rank 0): hwloc could not load it"));
  // A dump of an 8-CPU machine with ranks on CPUs 8-15: another machine's section.
  TopoFile g = job({0, 0}, {"0-7", "8-15"});
  add_machine(g, 0, topology_xml("2socket-2nic-8gpu.xml"));
  CHECK_THROWS_WITH(plan_topology(g, Settings{}, "bad.topo", algorithm_costs()),
                    Catch::Contains("bad.topo: rank 1 may run on 8 CPUs, but only 0 of them (none) are on the machine "
                                    "given for its host node-0 (8 hardware threads): the machine section describes "
                                    "another machine"));
}

TEST_CASE("topo file: BRAID_HOST_ID on some ranks only is refused, naming the ranks") {
  TopoFile f = job({0, 0, 1, 1}, {});
  f.ranks[0].host_id_from_env = true;
  f.ranks[2].host_id_from_env = true;
  CHECK_THROWS_WITH(plan_topology(f, Settings{}, "bad.topo", algorithm_costs()),
                    Catch::Contains("bad.topo: BRAID_HOST_ID is set on ranks 0, 2 but not on ranks 1, 3"));
  for (auto& r : f.ranks) r.host_id_from_env = true;
  CHECK_NOTHROW(plan_topology(f, Settings{}, "good.topo", algorithm_costs()));
}

TEST_CASE("topo file: a file for another rank count is refused, one of other hosts is used with a warning") {
  const TopoFile f = job({0, 0}, {"0", "1"});
  const TopoFile four = job({0, 0, 1, 1}, {});
  CHECK_THROWS_WITH(check_file_matches_job(f, four.ranks, "plan.topo"),
                    Catch::Contains("BRAID_TOPO_FILE=plan.topo describes 2 ranks, but this job has 4"));
  CHECK(check_file_matches_job(f, f.ranks, "plan.topo").empty());
  TopoFile elsewhere = job({5, 5}, {"0", "1"});
  const std::string warning = check_file_matches_job(f, elsewhere.ranks, "plan.topo");
  CHECK_THAT(warning, Catch::Contains("describes ranks on node-0, this job runs on node-5"));
  CHECK_THAT(warning, Catch::Contains("follows the file"));
}

}  // namespace
}  // namespace braid
