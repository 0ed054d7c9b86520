#include "perf_options.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "tools/command_line.hpp"
#include "core/settings.hpp"
#include "collectives/registry.hpp"

namespace braid::perf {
namespace {

constexpr std::string_view kUsage =
    R"(usage: braid-perf COLLECTIVE [options]     (run it under braid-run: braid-run -n 4 braid-perf all_reduce)
       braid-perf --tune FILE              (braid-run -n 4 braid-perf --tune tuning.json)

  COLLECTIVE  all_reduce broadcast reduce all_gather reduce_scatter all_to_all gather scatter
              sendrecv (each rank sends to the next, receives from the previous);
              all_to_allv all_gatherv reduce_scatterv gatherv scatterv (the uneven calls,
              with equal counts); nccl-tests' names (allreduce, all_reduce_perf, ...) work too.
              Run as all_reduce_perf, all_gather_perf, ... (installed beside braid-perf, links
              to it), braid-perf takes the collective from its name, as nccl-tests' binaries do

Options take "-x VALUE", "-xVALUE", "--name VALUE" or "--name=VALUE", as in nccl-tests:
  -b, --minbytes SIZE      smallest size (8, 1K, 64M, 1G); default 8
  -e, --maxbytes SIZE      largest size; default 64M
  -f, --stepfactor N       multiply the size by N each row; default 2
  -i, --stepbytes SIZE     add SIZE each row instead (when -f is not given)
  -n, --iters N            timed iterations per size; default 20. 0: scaled to the size
                           (200 up to 1M, then about 256 MiB a row, at least 5), and the
                           warm-up a tenth of that
  -w, --warmup_iters N     untimed iterations first; default 5
  -c, --check 0|1          check every result against independently computed values
                           (#wrong); default 1. --check alone means 1
  -d, --datatype TYPE|all  f16 bf16 f32 f64 i8 u8 i32 u32 i64 u64 (or nccl-tests' half
                           bfloat16 float double int8 uint8 int32 uint32 int64 uint64); default f32
  -o, --op OP|all          sum prod min max avg (reducing collectives); default sum
  -r, --root RANK|all      root rank (broadcast reduce gather scatter); default 0
  -a, --average 0|1|2|3    the time of a row from the ranks' average iteration times:
                           0 rank 0's, 1 the mean over ranks (default), 2 the fastest rank's,
                           3 the slowest rank's (nccl-tests' meanings)
  -z, --blocking 0|1       1 (default): blocking calls; 0: start the iterations asynchronously
                           and wait for all of them (the communicator still runs them in order)
  --algo NAME              force the collective's algorithm (adds COLLECTIVE:NAME to BRAID_ALGO):
%s  --transport NAME         force the transport (sets BRAID_TRANSPORT): shm, tcp, or a list
  --tune FILE              measure every all_reduce algorithm at a few sizes (in communicators
                           of their own, BRAID_ALGO forced), fit the cost model's latency and
                           bandwidths of the transport the job's ranks use, and add them to FILE
                           (JSON, read through BRAID_TUNING_FILE) as the profile of this rank
                           and host count; prints measured against predicted times
  --device                 buffers in GPU memory (device local_rank modulo the devices; a braid
                           built with CUDA), checked on the host after each checked run
  --json                   one JSON object per size and placement instead of the table
  --csv                    CSV (a header, then one line per size and placement) instead
  --no-progress            no progress lines on stderr (printed every 2 s in long sweeps)
  --inplace                accepted for old scripts: every row has both placements
  -m, --agg_iters N        operations per timed iteration, issued as one group (braid::group;
                           one after the other on device buffers); the time is per operation.
                           Default 1
  -N, --run_cycles N       run and print the whole sweep N times; 0: until stopped. Default 1
  -C, --report_cputime 0|1 1: the time column is the CPU time the process spent per operation
                           (every thread), not the elapsed time; default 0
  -T, --timeout SECONDS    bound every wait by SECONDS (BRAID_TIMEOUT for this run): a stuck
                           operation fails then, naming who it waited for. 0 (default): BRAID_TIMEOUT
  -M, --memory_report 0|1  1: after the sweep, each rank's peak resident memory; default 0
  -g 1, -t 1               nccl-tests' GPUs and threads per process: braid has one rank per
                           process, so only 1 is accepted; braid-run -n sets the ranks
  -p 0, -G 0               nccl-tests' parallel init and CUDA graph launches: braid has
                           neither, so only 0 is accepted
  -R, --local_register 0|1 1: host buffers from braid::mem_alloc, registered with the
                           communicator, which ranks of one host read in place (shm's mapped
                           messages, above 64K); default 0 (heap memory)
  --version                braid's version
  -h, --help               this text

Each row times the out-of-place and the in-place form (output aliasing input as the API
defines it for each collective; sendrecv and all_to_allv have no in-place form: N/A). The size is the whole
buffer, as in nccl-tests: n x the per-rank block for all_gather, gather (output),
reduce_scatter (input), all_to_all and scatter (root's input). algbw = size / time;
busbw = algbw x 2(n-1)/n (all_reduce), x (n-1)/n (all_gather, reduce_scatter, all_to_all,
gather, scatter), x 1 (broadcast, reduce, sendrecv). The footer has nccl-tests'
"# Out of bounds values" and "# Avg bus bandwidth" (mean busbw over every row and
placement) lines. Exit status 1 when an element is wrong.
)";

int parse_count(std::string_view name, std::string_view text, int lo) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > 1000000000)
    throw UsageError(std::string(name) + " '" + std::string(text) + "' is not a whole number of at least " +
                     std::to_string(lo));
  return value;
}

int parse_choice(std::string_view name, std::string_view text, int lo, int hi) {
  int value = parse_count(name, text, 0);
  if (value < lo || value > hi)
    throw UsageError(std::string(name) + " '" + std::string(text) + "' must be " + std::to_string(lo) + ".." +
                     std::to_string(hi));
  return value;
}

std::size_t parse_size(std::string_view name, std::string_view text) {
  try {
    return parse_bytes(text, name);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// nccl-tests' type names next to braid's.
DataType parse_type(std::string_view text) {
  static constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
      {"half", "f16"},   {"float16", "f16"}, {"bfloat16", "bf16"}, {"float", "f32"},   {"float32", "f32"},
      {"double", "f64"}, {"float64", "f64"}, {"int8", "i8"},       {"uint8", "u8"},    {"int32", "i32"},
      {"int", "i32"},    {"uint32", "u32"},  {"int64", "i64"},     {"uint64", "u64"},
  };
  for (auto [alias, name] : kAliases)
    if (text == alias) text = name;
  try {
    return parse_data_type(text);
  } catch (const Error& e) {
    throw UsageError(std::string("-d: ") + e.what());
  }
}

// nccl-tests' options for what braid has none of: 0, their "off", is
// accepted; another value up to `most` is refused saying `why`.
auto only_zero(int most, std::string_view why) {
  return [most, why](std::string_view name, std::string_view value) {
    if (parse_choice(name, value, 0, most) != 0)
      throw UsageError(std::string(name) + " " + std::string(value) + " " + std::string(why));
  };
}

}  // namespace

std::string usage() {
  std::string algorithms;
  for (const auto& c : collectives()) {
    if (fixed_algorithm(c.kind)) continue;
    algorithms.append("                             ").append(c.name).append(":");
    for (auto a : algorithms_of(c.name)) algorithms.append(" ").append(a);
    algorithms.append("\n");
  }
  const std::size_t at = kUsage.find("%s");
  return std::string(kUsage.substr(0, at)).append(algorithms).append(kUsage.substr(at + 2));
}

ParsedCommandLine parse_options(const std::vector<std::string_view>& args, std::string_view program) {
  ParsedCommandLine parsed;
  Options& o = parsed.options;
  std::string collective;
  const std::string_view base = program.substr(program.find_last_of('/') + 1);
  const bool named = base.ends_with("_perf");
  if (named && find_collective(base) == nullptr)
    throw UsageError("braid-perf runs as COLLECTIVE_perf (all_reduce_perf, ...), and '" + std::string(base) +
                     "' names no collective");
  bool factor_given = false;
  CommandLine cli;
  cli.flag({"-h", "--help"}, [&] { parsed.help = true; })
      .version("braid-perf")
      .option({"-b", "--minbytes"}, [&](auto name, auto v) { o.min_bytes = parse_size(name, v); })
      .option({"-e", "--maxbytes"}, [&](auto name, auto v) { o.max_bytes = parse_size(name, v); })
      .option({"-f", "--stepfactor"},
              [&](auto name, auto v) {
                o.factor = static_cast<std::size_t>(parse_count(name, v, 2));
                factor_given = true;
              })
      .option({"-i", "--stepbytes"},
              [&](auto name, auto v) {
                o.step = parse_size(name, v);
                if (o.step == 0) throw UsageError(std::string(name) + " must be at least 1 byte");
              })
      .option({"-n", "--iters"}, [&](auto name, auto v) { o.iters = parse_count(name, v, 0); })
      .option({"-w", "--warmup_iters"}, [&](auto name, auto v) { o.warmup = parse_count(name, v, 0); })
      .option({"-c"}, [&](auto name, auto v) { o.check = parse_choice(name, v, 0, 1) == 1; })
      .optional_value({"--check"}, "1", [&](auto name, auto v) { o.check = parse_choice(name, v, 0, 1) == 1; })
      .option({"-d", "--datatype"},
              [&](auto, std::string_view v) {
                if (v == "all")
                  o.types = {DataType::i8,  DataType::u8,  DataType::i32, DataType::u32, DataType::i64,
                             DataType::u64, DataType::f16, DataType::f32, DataType::f64, DataType::bf16};
                else o.types = {parse_type(v)};
              })
      .option({"-o", "--op"},
              [&](auto, std::string_view v) {
                if (v == "all") {
                  o.ops = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
                  return;
                }
                try {
                  o.ops = {parse_reduce_op(v)};
                } catch (const Error& e) {
                  throw UsageError(std::string("-o: ") + e.what());
                }
              })
      .option({"-r", "--root"},
              [&](auto name, std::string_view v) {
                o.all_roots = v == "all";
                if (!o.all_roots) o.root = parse_count(name, v, 0);
              })
      .option({"-a", "--average"},
              [&](auto name, auto v) { o.average = static_cast<TimeAggregate>(parse_choice(name, v, 0, 3)); })
      .option({"-z", "--blocking"}, [&](auto name, auto v) { o.blocking = parse_choice(name, v, 0, 1) == 1; })
      .option({"-g", "--ngpus", "-t", "--nthreads"}, [&](auto name, auto v) { parse_choice(name, v, 1, 1); })
      .option({"-m", "--agg_iters"}, [&](auto name, auto v) { o.agg_iters = parse_count(name, v, 1); })
      .option({"-N", "--run_cycles"}, [&](auto name, auto v) { o.cycles = parse_count(name, v, 0); })
      .option({"-C", "--report_cputime"}, [&](auto name, auto v) { o.cpu_time = parse_choice(name, v, 0, 1) == 1; })
      .option({"-T", "--timeout"}, [&](auto name, auto v) { o.timeout_s = parse_count(name, v, 0); })
      .option({"-M", "--memory_report"},
              [&](auto name, auto v) { o.memory_report = parse_choice(name, v, 0, 1) == 1; })
      .option({"-p", "--parallel_init"},
              only_zero(1, "initializes the communicators of a process's GPUs from threads; braid runs one rank "
                           "per process (braid-run -n sets the ranks), so there is nothing to initialize in "
                           "parallel: use -p 0"))
      .option({"-G", "--cudagraph"},
              only_zero(1000000000, "captures the iterations in a CUDA graph and launches it that many times; "
                                    "braid's calls are synchronous with the GPU and queue nothing on a stream, so "
                                    "there is nothing to capture: use -G 0"))
      .option({"-R", "--local_register"},
              [&](auto name, auto v) {
                const int mode = parse_choice(name, v, 0, 2);
                if (mode == 2)
                  throw UsageError(
                      "-R 2 registers symmetric memory (NCCL's window registration); braid has none: use -R 1 "
                      "(buffers from braid::mem_alloc, registered) or -R 0");
                o.local_register = mode == 1;
              })
      .option({"--algo"}, [&](auto, auto v) { o.algo = v; })
      .option({"--transport"}, [&](auto, auto v) { o.transport = v; })
      .option({"--tune"}, [&](auto, auto v) { o.tune = v; })
      .flag({"--device"}, [&] { o.device = true; })
      .flag({"--json"}, [&] { o.output = Output::json; })
      .flag({"--csv"}, [&] { o.output = Output::csv; })
      .flag({"--no-progress"}, [&] { o.progress = false; })
      .flag({"--inplace"}, [] {});
  cli.parse(args, CommandLine::Positionals::interleaved, [&](std::string_view a) {
    if (named) throw UsageError("unexpected argument '" + std::string(a) + "': " + std::string(base) + " runs " +
                                find_collective(base)->name);
    if (!collective.empty()) throw UsageError("unexpected argument '" + std::string(a) + "' after the collective");
    collective = a;
  });
  if (named) collective = base;
  if (parsed.help) return parsed;
  if (!o.tune.empty()) {
    if (!collective.empty() && find_collective(collective) != find_collective("all_reduce"))
      throw UsageError("--tune measures all_reduce's algorithms; leave out '" + collective + "'");
    if (!o.algo.empty()) throw UsageError("--tune measures every algorithm; leave out --algo");
    collective = "all_reduce";
  }
  if (collective.empty()) throw UsageError("missing the collective");
  o.collective = find_collective(collective);
  if (o.collective == nullptr) throw UsageError("unknown collective '" + collective + "'");
  if (o.step != 0 && !factor_given) o.factor = 1;
  if (o.min_bytes > o.max_bytes) throw UsageError("-b is larger than -e");
  if (!o.collective->reduces) o.ops = {ReduceOp::sum};  // not used; one pass
  if (fixed_algorithm(o.collective->kind) && !o.algo.empty())
    throw UsageError(std::string(o.collective->name) + " has one algorithm (" + fixed_algorithm(o.collective->kind) +
                     "), nothing to choose from");
  if (!o.algo.empty()) {
    auto known = algorithms_of(o.collective->name);
    if (std::find(known.begin(), known.end(), o.algo) == known.end()) {
      std::string list;
      for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      throw UsageError("--algo: " + std::string(o.collective->name) + " has no algorithm '" + o.algo +
                       "' (known: " + list + ")");
    }
  }
  return parsed;
}

void apply_to_environment(const Options& o) {
  if (!o.algo.empty()) {
    std::string spec = Settings::raw("BRAID_ALGO").value_or("");
    spec.append(spec.empty() ? "" : ",").append(o.collective->name).append(":").append(o.algo);
    if (setenv("BRAID_ALGO", spec.c_str(), 1) != 0) throw UsageError("cannot set BRAID_ALGO");
  }
  if (!o.transport.empty() && setenv("BRAID_TRANSPORT", o.transport.c_str(), 1) != 0)
    throw UsageError("cannot set BRAID_TRANSPORT");
  if (o.timeout_s > 0 && setenv("BRAID_TIMEOUT", (std::to_string(o.timeout_s) + "s").c_str(), 1) != 0)
    throw UsageError("cannot set BRAID_TIMEOUT");
}

}  // namespace braid::perf
