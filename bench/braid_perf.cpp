// braid-perf: an nccl-tests style benchmark. Run it under braid-run:
//
//   braid-run -n 4 braid-perf all_reduce -b 8 -e 64M -f 4
//
// For each size it times `iters` back-to-back operations after `warmup`
// untimed ones, out of place and then in place, and prints nccl-tests' row:
// size, count, type, redop, root, then time, algbw, busbw and #wrong for each
// placement, and its footer ("# Out of bounds values", "# Avg bus
// bandwidth"), so scripts written for nccl-tests read it unchanged. The time
// of a row comes from the ranks' average iteration times as -a says (the mean
// over ranks by default, as nccl-tests). The sizes, busbw factors and output
// forms are in perf_report.hpp; the command line in perf_options.hpp.
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "braid/braid.hpp"
#include "tools/command_line.hpp"
#include "core/device.hpp"
#include "core/rank_info.hpp"
#include "core/settings.hpp"
#include "tools/job_ranks.hpp"
#include "perf_case.hpp"
#include "perf_options.hpp"
#include "perf_report.hpp"
#include "perf_tune.hpp"
#include "collectives/registry.hpp"
#include "topology/plan.hpp"

namespace {

using namespace braid::perf;
using Clock = std::chrono::steady_clock;

// The algorithm a row runs: the plan's choice for its size, as the schedule
// that the registry builds from it names itself (a builder hands a shape it
// cannot run to another algorithm: forced hierarchical on one host is the
// ring), which is what the communicator runs from the same plan.
std::string algorithm_at(const CaseSpec& s, const braid::Plan& plan, std::size_t bytes, int n) {
  if (const char* fixed = fixed_algorithm(s.collective->kind)) return fixed;
  const std::string_view chosen = plan.algorithm_for(s.collective->name, bytes);
  braid::CollectiveShape shape;
  shape.rank = 0;
  shape.ranks = n;
  shape.ring = plan.ring;
  shape.hosts = plan.hosts;
  shape.count = std::max<std::size_t>(1, bytes / braid::size_of(s.type));
  shape.type = s.type;
  shape.op = s.op;
  shape.root = s.root;
  return braid::build_schedule(s.collective->name, chosen, shape).algorithm;
}

// "ring (--algo)", or "direct 8..2048 B, ring 8192..67108864 B (auto)"
// when the size decides.
std::string algorithm_text(const Options& o, const CaseSpec& s, const braid::Plan& plan, int n) {
  if (s.collective->kind == Kind::sendrecv) return "point to point (send and recv, ordered by rank parity)";
  if (const char* fixed = fixed_algorithm(s.collective->kind))
    return std::string(fixed) + " (the uneven call, with equal counts)";
  const std::string name = s.collective->name;
  if (plan.forced.count(name)) return plan.forced.at(name) + (o.algo.empty() ? " (forced by BRAID_ALGO)" : " (--algo)");
  struct Run {
    std::string algo;
    std::size_t first, last;
  };
  std::vector<Run> runs;
  for (std::size_t requested : sweep_sizes(o.min_bytes, o.max_bytes, o.factor, o.step)) {
    const std::size_t bytes = count_for(s, n, requested) * braid::size_of(s.type);  // what the call moves
    std::string algo = algorithm_at(s, plan, bytes, n);
    if (!runs.empty() && runs.back().algo == algo) runs.back().last = bytes;
    else runs.push_back({algo, bytes, bytes});
  }
  if (runs.size() == 1) return runs[0].algo + " (auto)";
  std::string text;
  for (const auto& r : runs) {
    text.append(text.empty() ? "" : ", ").append(r.algo).append(" ").append(std::to_string(r.first));
    if (r.last != r.first) text.append("..").append(std::to_string(r.last));
    text.append(" B");
  }
  return text + " (auto)";
}

// Where the ranks run: every rank's host name and pid, gathered.
struct Placement {
  std::vector<std::string> hosts;  // per rank: the host name, or BRAID_HOST_ID's name of a simulated host
  std::vector<int> pids;
  std::vector<braid::RankInfo> infos;  // per rank, as the communicator sees them
  std::map<std::string, int> ranks_per_host;
};

Placement gather_placement(braid::Comm& comm) {
  braid::JobRanks job = braid::gather_job_ranks(comm);
  Placement p;
  for (std::size_t r = 0; r < job.infos.size(); ++r) {
    p.pids.push_back(job.infos[r].pid);
    ++p.ranks_per_host[job.hosts[r]];
  }
  p.hosts = std::move(job.hosts);
  p.infos = std::move(job.infos);
  return p;
}

// The transports the plan picks for the pairs of ranks that include `rank`
// (every pair when -1), comma-separated: "shm", or "shm,tcp" across hosts.
// Ranks are told apart by host name, as the communicator tells hosts apart.
std::string transports_used(const braid::Plan& plan, const Placement& where, int rank = -1) {
  const int n = static_cast<int>(where.hosts.size());
  const std::vector<braid::RankInfo>& infos = where.infos;
  std::vector<std::string> kinds;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      if (rank >= 0 && a != rank && b != rank) continue;
      std::string kind(plan.transport_between(infos[a], infos[b]));
      if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
    }
  if (kinds.empty()) return "none";
  std::string out;
  for (const auto& k : kinds) out += (out.empty() ? "" : ",") + k;
  return out;
}

void print_header(const Options& o, const braid::Comm& comm, const Placement& where, const braid::Plan& plan) {
  const int n = comm.size();
  std::string per_host;
  for (const auto& [host, ranks] : where.ranks_per_host)
    per_host += (per_host.empty() ? "" : ", ") + host + ": " + std::to_string(ranks);
  std::printf("# braid-perf %s: %d ranks on %zu host(s) (ranks per host: %s); transports %s (order %s)\n",
              o.collective->name, n, where.ranks_per_host.size(), per_host.c_str(), transports_used(plan, where).c_str(),
              plan.transport_names().c_str());
  std::printf("# nThread 1 nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
              "validation: %d graph: 0\n",
              o.device ? 1 : 0, o.min_bytes, o.max_bytes, o.factor >= 2 ? o.factor : o.step, o.factor >= 2 ? "factor" : "bytes", o.warmup,
              o.iters, o.agg_iters, o.check ? 1 : 0);
  std::printf("# time: %s (-a %d) of the %s per operation, %s calls%s\n#\n# Using devices\n",
              std::string(name_of(o.average)).c_str(), static_cast<int>(o.average),
              o.cpu_time ? "process's CPU time" : "elapsed time", o.blocking ? "blocking" : "asynchronous",
              o.agg_iters == 1 ? ""
              : o.device        ? ", -m operations one after the other (device buffers are not grouped)"
                                : ", -m operations grouped");
  for (int r = 0; r < n; ++r)
    std::printf("#  Rank %2d Group  0 Pid %6d on %10s device %s [%s]\n", r, where.pids[r], where.hosts[r].c_str(),
                o.device ? "gpu" : "cpu", transports_used(plan, where, r).c_str());
  if (o.device) std::printf("# buffers in GPU memory: %s\n", braid::device::status().c_str());
  std::printf("#\n# %s\n", comm.describe().c_str());
}

// Microseconds on the clock a row's time comes from: the elapsed time, or
// with -C 1 the CPU time of the whole process (its progress thread too).
double now_us(bool cpu_time) {
  if (!cpu_time) return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

// One timed iteration: -m operations, issued as one group as nccl-tests
// issues them between ncclGroupStart and ncclGroupEnd. Device buffers cannot
// be grouped yet, so there they run one after the other.
template <typename Call>
void aggregated(const Options& o, const PerfBuffers& buffers, Call&& call) {
  if (o.agg_iters == 1) {
    call();
  } else if (buffers.device()) {
    for (int k = 0; k < o.agg_iters; ++k) call();
  } else {
    braid::group([&] {
      for (int k = 0; k < o.agg_iters; ++k) call();
    });
  }
}

// -M 1: every rank's peak resident set (getrusage), gathered, on rank 0.
void report_memory(braid::Comm& comm, std::FILE* out) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::int64_t mine = usage.ru_maxrss;  // KiB on Linux
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(&mine, all.data(), 1, braid::DataType::i64);
  if (comm.rank() != 0) return;
  std::fprintf(out, "# Memory: peak resident set per rank (MiB):");
  for (std::size_t r = 0; r < all.size(); ++r) std::fprintf(out, " %zu: %.1f", r, static_cast<double>(all[r]) / 1024);
  std::fprintf(out, "\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    auto parsed = parse_options(std::vector<std::string_view>(argv + 1, argv + argc), argv[0]);
    if (parsed.help) {
      std::fputs(usage().c_str(), stdout);
      return 0;
    }
    o = parsed.options;
    apply_to_environment(o);
  } catch (const braid::UsageError& e) {
    std::fprintf(stderr, "braid-perf: %s\n(braid-perf --help lists the options)\n", e.what());
    return 2;
  }
  try {
    braid::Comm comm = braid::Comm::from_env();
    const int rank = comm.rank(), n = comm.size();
    const Kind kind = o.collective->kind;
    if (!o.all_roots && o.root >= n) {
      std::fprintf(stderr, "braid-perf: -r %d is not a rank of %d\n", o.root, n);
      return 2;
    }
    if (kind == Kind::sendrecv && n < 2) {
      std::fprintf(stderr, "braid-perf: sendrecv needs at least 2 ranks\n");
      return 2;
    }
    const std::vector<std::size_t> sizes = sweep_sizes(o.min_bytes, o.max_bytes, o.factor, o.step);
    std::vector<int> roots;
    if (!o.collective->rooted) roots = {0};
    else if (o.all_roots) for (int r = 0; r < n; ++r) roots.push_back(r);
    else roots = {o.root};
    // Buffers for the largest row of any type: whole elements, at least one per block.
    const std::size_t blocks = o.collective->blocked ? static_cast<std::size_t>(n) : 1;
    std::size_t buffer_bytes = 0;
    for (auto t : o.types)
      buffer_bytes = std::max(buffer_bytes, std::max<std::size_t>(1, o.max_bytes / braid::size_of(t) / blocks) * blocks *
                                                braid::size_of(t));
    PerfBuffers buffers(buffer_bytes, o.device, comm.local_rank(), o.local_register ? &comm : nullptr);
    // The plan the communicator made from the same rank infos and settings
    // (topology/plan.hpp, with the registry's costs), for naming the algorithm
    // of each row.
    const Placement where = gather_placement(comm);
    const braid::Plan plan = braid::make_plan(where.infos, braid::Settings::from_env(), braid::algorithm_costs());
    if (!o.tune.empty()) return tune(comm, plan, where.infos.front().hostname, o);

    if (rank == 0) {
      if (o.output == Output::table) {
        print_header(o, comm, where, plan);
        for (auto t : o.types) {
          const CaseSpec s{o.collective, t, o.ops[0], roots[0], false};
          std::printf("# algorithm%s: %s\n", o.types.size() > 1 ? (" (" + std::string(braid::name_of(t)) + ")").c_str() : "",
                      algorithm_text(o, s, plan, n).c_str());
        }
        std::printf("#\n%s", table_header().c_str());
      } else if (o.output == Output::csv) {
        std::fputs(csv_header().c_str(), stdout);
      }
      std::fflush(stdout);
    }

    Summary summary;
    const std::size_t total_rows =
        o.types.size() * o.ops.size() * roots.size() * sizes.size() * static_cast<std::size_t>(std::max(o.cycles, 1));
    std::size_t rows_done = 0;
    const auto sweep_start = Clock::now();
    auto last_progress = sweep_start;
    std::vector<double> per_rank(static_cast<std::size_t>(n));

    // Times one placement of one row on every rank; nullopt for sendrecv in place.
    auto run_placement = [&](const CaseSpec& s, std::size_t bytes) -> std::optional<Measurement> {
      if (s.in_place && (kind == Kind::sendrecv || kind == Kind::all_to_allv)) return std::nullopt;
      Case one(s, comm, buffers, bytes);
      const int iters = o.iters > 0 ? o.iters : auto_iterations(one.size_bytes());
      const int warmup = o.iters > 0 ? o.warmup : auto_warmup(one.size_bytes());
      one.prepare();
      for (int i = 0; i < warmup; ++i) {
        one.run_once();
        if (s.in_place) one.prepare();
      }
      // In place, every iteration works on the previous result: correct data
      // only matters for the checked run below.
      comm.barrier();
      const double start_us = now_us(o.cpu_time);
      if (o.blocking) {
        for (int i = 0; i < iters; ++i) aggregated(o, buffers, [&] { one.run_once(); });
      } else {
        std::vector<braid::Work> works;
        for (int i = 0; i < iters; ++i) aggregated(o, buffers, [&] { one.start(works); });
        for (auto& w : works) w.wait();
      }
      double local_us = (now_us(o.cpu_time) - start_us) / (static_cast<double>(iters) * o.agg_iters);
      comm.all_gather(&local_us, per_rank.data(), 1, braid::DataType::f64);
      std::optional<long long> wrong;
      if (o.check) {
        one.prepare();
        one.run_once();
        long long mine = static_cast<long long>(one.count_wrong()), all = 0;
        comm.all_reduce(&mine, &all, 1, braid::DataType::i64, braid::ReduceOp::sum);
        wrong = all;
      }
      return measure(one.size_bytes(), aggregate_time(per_rank, o.average), kind, n, wrong);
    };

    for (int cycle = 0; o.cycles == 0 || cycle < o.cycles; ++cycle) {
      for (auto type : o.types)
        for (auto op : o.ops)
          for (int root : roots) {
            std::size_t previous_size = SIZE_MAX;
            for (std::size_t bytes : sizes) {
              ++rows_done;
              const CaseSpec out_of_place{o.collective, type, op, root, false};
              const CaseSpec in_place{o.collective, type, op, root, true};
              Case probe(out_of_place, comm, buffers, bytes);
              if (probe.size_bytes() == previous_size) continue;  // sizes below one element per rank
              previous_size = probe.size_bytes();
              Row row;
              row.collective = o.collective->name;
              row.algorithm = algorithm_at(out_of_place, plan, probe.count_bytes(), n);
              row.transport = transports_used(plan, where);
              row.ranks = n;
              row.hosts = static_cast<int>(where.ranks_per_host.size());
              row.size = probe.size_bytes();
              row.count = row.size / braid::size_of(type);
              row.type = braid::name_of(type);
              row.redop = o.collective->reduces ? std::string(braid::name_of(op)) : "none";
              row.root = o.collective->rooted ? root : -1;
              row.out_of_place = run_placement(out_of_place, bytes);
              row.in_place = run_placement(in_place, bytes);
              for (const auto& m : {row.out_of_place, row.in_place})
                if (m) summary.add(*m);
              if (rank != 0) continue;
              switch (o.output) {
                case Output::table: std::fputs(table_row(row).c_str(), stdout); break;
                case Output::csv: std::fputs(csv_lines(row).c_str(), stdout); break;
                case Output::json: std::fputs(json_lines(row).c_str(), stdout); break;
              }
              std::fflush(stdout);
              const auto now = Clock::now();
              if (o.progress && now - last_progress >= std::chrono::seconds(2) && rows_done < total_rows) {
                std::fprintf(stderr, "braid-perf: %zu of %zu rows done (%zu B), %.0f s\n", rows_done, total_rows, row.size,
                             std::chrono::duration<double>(now - sweep_start).count());
                last_progress = now;
              }
            }
          }
    }
    if (o.memory_report) report_memory(comm, o.output == Output::table ? stdout : stderr);
    if (rank == 0 && o.output == Output::table) std::fputs(table_footer(summary).c_str(), stdout);
    return summary.wrong() == 0 ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-perf: %s\n", e.what());
    return 1;
  }
}
