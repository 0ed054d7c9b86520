// braid-topo: what braid sees of the machine, and under braid-run the plan of
// the whole job, with the algorithm per size band and its predicted time.
//
//   braid-topo                      this host: packages, NUMA nodes, cores,
//                                   the binding, interfaces, GPUs (hwloc)
//   braid-run -n 4 braid-topo       every rank joins; rank 0 prints each
//                                   host's machine once, which ranks run
//                                   where and on which CPUs, the transport of
//                                   every pair, the ring and the algorithm
//                                   per size band (the communicator's plan)
//   ... braid-topo --dot FILE       also writes the plan as a Graphviz graph:
//                                   a box per host, a node per rank, the ring's
//                                   edges coloured by transport
//   braid-topo --load FILE          the plan of a job's topology file
//                                   (BRAID_TOPO_DUMP_FILE wrote it), without the
//                                   job or its hardware; BRAID_TOPO_FILE=FILE
//                                   does the same, and under braid-run makes the
//                                   job plan from it
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "braid/braid.hpp"
#include "collectives/registry.hpp"
#include "command_line.hpp"
#include "job_ranks.hpp"
#include "topo_load.hpp"
#include "core/settings.hpp"
#include "core/text.hpp"
#include "topology/machine.hpp"
#include "topology/plan.hpp"

namespace {

constexpr const char* kUsage = R"(usage: braid-topo [--load FILE] [--dot FILE]

Prints this host's topology as braid sees it (hwloc): packages, NUMA nodes,
cores, the CPUs this process may run on, network interfaces and GPUs. Under
braid-run (BRAID_RANK set) every rank joins the communicator and rank 0
prints the job's plan: hosts and their ranks with their CPUs, the transport
between each pair of ranks, the ring order and the algorithm per size band.

With --load FILE (or BRAID_TOPO_FILE=FILE) it reads a topology file that
BRAID_TOPO_DUMP_FILE wrote and prints its hosts' machines, the ranks with their
NUMA node, nearest NIC and GPU, and the plan derived from them, on any machine.
Under braid-run with BRAID_TOPO_FILE set the job plans from the file, and
rank 0 prints that plan.

options:
  --load FILE  plan from this topology file instead of this host or job
  --dot FILE   also write the plan as a Graphviz graph (dot -Tpng FILE)
  --version    print braid's version
  -h, --help   print this help
)";

// What each rank tells rank 0 beyond its RankInfo (job_ranks.hpp), fixed
// size for one all_gather.
struct RankRecord {
  char cpus[64];      // its binding, as hwloc writes it
  std::int32_t numa;  // its first NUMA node, -1 if unknown
};

std::string text_of(const char* field, std::size_t size) { return std::string(field, strnlen(field, size)); }

void write_dot(const std::string& path, const std::vector<braid::RankInfo>& infos, const std::vector<std::string>& hosts,
               const braid::Plan& plan) {
  std::ofstream out(path);
  if (!out) throw braid::SystemError(braid::cat("braid-topo: cannot write ", path));
  out << "graph braid {\n  node [shape=circle];\n";
  std::map<std::string, std::vector<int>> by_host;
  for (std::size_t r = 0; r < hosts.size(); ++r) by_host[hosts[r]].push_back(static_cast<int>(r));
  int cluster = 0;
  for (const auto& [host, ranks] : by_host) {
    out << "  subgraph cluster_" << cluster++ << " {\n    label=\"" << host << "\";\n";
    for (int r : ranks) out << "    r" << r << " [label=\"" << r << "\"];\n";
    out << "  }\n";
  }
  const auto& ring = plan.ring;
  for (std::size_t i = 0; ring.size() > 1 && i < ring.size(); ++i) {
    const int a = ring[i], b = ring[(i + 1) % ring.size()];
    if (ring.size() == 2 && i == 1) break;
    const std::string kind(plan.transport_between(infos[a], infos[b]));
    out << "  r" << a << " -- r" << b << " [label=\"" << kind << "\", color=\""
        << (kind == "shm" ? "forestgreen" : kind == "tcp" ? "steelblue" : "darkorange") << "\"];\n";
  }
  out << "}\n";
}

void print_loaded(const braid::LoadedTopology& loaded, const std::string& dot) {
  std::printf("%s", braid::describe_loaded(loaded).c_str());
  if (!dot.empty()) {
    write_dot(dot, loaded.file.ranks, loaded.hosts, loaded.planned.plan);
    std::printf("wrote %s (render: dot -Tpng %s -o plan.png)\n", dot.c_str(), dot.c_str());
  }
}

// busbw as braid-perf computes it: algbw x 2(n-1)/n for all_reduce, x 1 for broadcast.
double bus_factor(std::string_view collective, int n) { return collective == "all_reduce" ? 2.0 * (n - 1) / n : 1.0; }

// Per size band (8 B to 64 MiB, powers of two), the algorithm the plan runs
// and the cost model's time and busbw at the band's first and last size.
void print_bands(const braid::Plan& plan, std::string_view collective) {
  const int n = static_cast<int>(plan.ring.size());
  if (n < 2) return;
  std::printf("\n%s by size (%s link parameters):\n", std::string(collective).c_str(), plan.links.source.c_str());
  std::printf("  %-13s %21s %23s %25s\n", "algorithm", "sizes", "predicted time (us)", "predicted busbw (GB/s)");
  for (const auto& band : plan.bands(collective, 8, std::size_t{64} << 20)) {
    auto at = [&](std::size_t bytes) { return plan.predict_us(collective, band.algorithm, bytes); };
    auto busbw = [&](std::size_t bytes, double us) { return bytes / (us * 1e3) * bus_factor(collective, n); };
    const auto first = at(band.first), last = at(band.last);
    const std::string sizes = braid::cat(braid::human_bytes(band.first), " - ", braid::human_bytes(band.last));
    if (!first || !last) {
      std::printf("  %-13s %21s %23s %25s\n", std::string(band.algorithm).c_str(), sizes.c_str(), "(no cost model)", "");
      continue;
    }
    std::printf("  %-13s %21s %10.1f - %10.1f %11.3f - %11.3f\n", std::string(band.algorithm).c_str(), sizes.c_str(),
                *first, *last, busbw(band.first, *first), busbw(band.last, *last));
  }
}

int run(int argc, char** argv) {
  std::string dot, load;
  bool help = false;
  braid::CommandLine cli;
  cli.flag({"-h", "--help"}, [&] { help = true; })
      .version("braid-topo")
      .option({"--dot"}, [&](std::string_view, std::string_view v) { dot = v; })
      .option({"--load"}, [&](std::string_view, std::string_view v) { load = v; });
  cli.parse(argc, argv, braid::CommandLine::Positionals::interleaved,
            [](std::string_view extra) { throw braid::UsageError(braid::cat("unexpected argument '", extra, "'")); });
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const bool in_job = std::getenv("BRAID_RANK") != nullptr || std::getenv("TF_CONFIG") != nullptr;
  const braid::Settings settings = braid::Settings::from_env();
  if (load.empty() && !in_job) load = settings.topo_file;
  if (!load.empty()) {
    if (in_job)
      throw braid::UsageError("--load plans from a file without a job: run it without braid-run "
                              "(under braid-run, set BRAID_TOPO_FILE)");
    print_loaded(braid::load_topology(load, settings), dot);
    return 0;
  }
  const braid::Machine machine = braid::Machine::local();
  if (!in_job) {
    std::printf("%s", machine.describe().c_str());
    if (!dot.empty()) std::fprintf(stderr, "braid-topo: --dot draws a job's plan: run under braid-run\n");
    return 0;
  }

  braid::Comm comm = braid::Comm::from_env();
  const int n = comm.size();
  const braid::JobRanks job = braid::gather_job_ranks(comm);
  RankRecord mine{};
  std::snprintf(mine.cpus, sizeof mine.cpus, "%s", machine.bound_cpus.c_str());
  mine.numa = machine.bound_numa.empty() ? -1 : machine.bound_numa.front();
  std::vector<RankRecord> all(static_cast<std::size_t>(n));
  comm.all_gather(&mine, all.data(), sizeof mine, braid::DataType::u8);
  // Each host's machine, told by its lowest rank.
  std::string own = machine.describe();
  own.resize(4096, '\0');
  std::vector<char> machines(4096 * static_cast<std::size_t>(n));
  comm.all_gather(own.data(), machines.data(), 4096, braid::DataType::u8);
  if (comm.rank() != 0) return 0;
  if (!settings.topo_file.empty()) {  // the communicator planned from the file too
    print_loaded(braid::load_topology(settings.topo_file, settings), dot);
    std::printf("communicator: %s\n", comm.describe().c_str());
    return 0;
  }

  const std::vector<braid::RankInfo>& infos = job.infos;
  const std::vector<std::string>& hosts = job.hosts;
  const braid::Plan plan = braid::make_plan(infos, settings, braid::algorithm_costs());
  std::printf("braid-topo: %d ranks\n", n);
  std::map<std::string, std::vector<int>> by_host;
  for (int r = 0; r < n; ++r) by_host[hosts[static_cast<std::size_t>(r)]].push_back(r);
  for (const auto& [host, ranks] : by_host) {
    const std::size_t first = static_cast<std::size_t>(ranks.front());
    std::printf("\nhost %s: %zu rank(s)\n  %s", host.c_str(), ranks.size(),
                text_of(machines.data() + 4096 * first, 4096).c_str());
    for (int r : ranks) {
      const RankRecord& rec = all[static_cast<std::size_t>(r)];
      const braid::RankInfo& info = infos[static_cast<std::size_t>(r)];
      std::printf("  rank %d: pid %d, CPUs %s%s, %d CUDA device(s)\n", r, info.pid,
                  text_of(rec.cpus, sizeof rec.cpus).c_str(),
                  rec.numa >= 0 ? braid::cat(", NUMA ", rec.numa).c_str() : "", int{info.gpus});
    }
  }
  std::printf("\nplan: %s\n", plan.describe().c_str());
  print_bands(plan, "all_reduce");
  print_bands(plan, "broadcast");
  std::printf("communicator: %s\n", comm.describe().c_str());
  if (!dot.empty()) {
    write_dot(dot, infos, hosts, plan);
    std::printf("wrote %s (render: dot -Tpng %s -o plan.png)\n", dot.c_str(), dot.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const braid::UsageError& e) {
    std::fprintf(stderr, "braid-topo: %s\nRun 'braid-topo --help' for usage.\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid-topo: %s\n", e.what());
    return 1;
  }
}
