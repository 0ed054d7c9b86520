// braid-perf's command line, shaped like nccl-tests' (all_reduce_perf -b 8
// -e 128M -f 2 -c 1 ...) and parsed by the parser every braid tool uses
// (tools/command_line.hpp), so --name=value works too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "braid/types.hpp"
#include "perf_report.hpp"

namespace braid::perf {

enum class Output { table, csv, json };

struct Options {
  const CollectiveInfo* collective = nullptr;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::size_t factor = 2;  // -f; 1 when -i (a step) is given without -f
  std::size_t step = 0;    // -i
  std::vector<DataType> types{DataType::f32};
  std::vector<ReduceOp> ops{ReduceOp::sum};
  int root = 0;
  bool all_roots = false;  // -r all
  int iters = 20;  // 0: auto_iterations() per size, and auto_warmup()
  int warmup = 5;
  bool check = true;  // -c 1, as nccl-tests
  TimeAggregate average = TimeAggregate::mean;
  bool blocking = true;  // -z 1: blocking calls; -z 0: start every iteration, then wait for all
  int agg_iters = 1;     // -m: operations per timed iteration, issued as one group
  int cycles = 1;        // -N: run (and print) the sweep this many times; 0: until stopped
  bool cpu_time = false;      // -C 1: the process's CPU time per operation instead of the elapsed time
  int timeout_s = 0;          // -T: BRAID_TIMEOUT for this run, in seconds; 0 keeps the setting
  bool memory_report = false;  // -M 1: each rank's peak resident memory after the sweep
  Output output = Output::table;
  bool progress = true;
  std::string algo;       // --algo: COLLECTIVE:NAME added to BRAID_ALGO
  std::string transport;  // --transport: BRAID_TRANSPORT
  bool local_register = false;  // -R 1: host buffers from braid::mem_alloc, registered
  bool device = false;    // --device: buffers in GPU memory (device local_rank % devices)
  std::string tune;       // --tune FILE: fit the cost model's link parameters, write FILE (perf_tune.hpp)
};

struct ParsedCommandLine {
  Options options;
  bool help = false;
};

/// Throws UsageError naming the problem. `program` is argv[0]: run under a
/// name of nccl-tests' binaries, COLLECTIVE_perf (all_reduce_perf, ...,
/// installed as links to braid-perf), it names the collective, as
/// nccl-tests' binaries do.
ParsedCommandLine parse_options(const std::vector<std::string_view>& args, std::string_view program = "braid-perf");
/// The usage text, with the algorithms each collective has.
std::string usage();

/// Adds --algo to BRAID_ALGO and sets BRAID_TRANSPORT from --transport and
/// BRAID_TIMEOUT from -T, in this process's environment, which is where the
/// communicator reads its settings (entries of BRAID_ALGO for other
/// collectives stay).
void apply_to_environment(const Options& o);

}  // namespace braid::perf
