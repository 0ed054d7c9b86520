// braid-overlap: does overlapping the gradient all-reduce with the backward
// pass cut the time a training step waits on communication? Run it under
// braid-run:
//
//   braid-run -n 2 braid-overlap --grad-mib 100 --layers 50 --steps 5
//
// Two MultiWorkerMirrored strategies hold the same model, --layers f32
// variables of equal size that add up to --grad-mib MiB, one with
// GradientOptions::overlap on and one with it off. Each gets its own
// communicator, split from the one braid-run's environment describes, so the
// two never share a connection or a queue. A step is a simulated backward
// pass followed by apply_gradients(Sgd): for each layer, last created first,
// the replica computes that layer's gradient with real arithmetic (a chain of
// multiply-adds per element) and marks it ready, which lets a full bucket
// start its all-reduce in the background when overlap is on. With overlap
// off every bucket starts inside synchronize().
//
// How much arithmetic: by default the backward pass is sized to take as long
// as one all-reduce of every gradient on its own (measured once at start), the
// case where overlap can hide the most; --compute-ms-per-layer or
// --flops-per-element choose it instead. The chain length is found by timing
// whole backward passes over the real gradient buffers, every rank at once,
// the slowest rank deciding, so that every rank does the same work.
//
// The modes take turns step by step, in the order (off, on), (on, off), ...,
// so that drift (other load, page cache, frequency) falls on both alike.
// Per step and rank: wall time, backward time, and the time synchronize()
// blocked waiting on communication (Strategy::last_step_stats()); "other" is
// the rest of apply_gradients (the mean's division, the optimizer update,
// zeroing the gradients). Each column is the mean over steps, then the
// maximum over ranks (the slowest rank, as nccl-tests reports time).
//
// Reading the result: overlap hides communication only where it has
// resources of its own. Over TCP the communication is CPU work too (kernel
// copies, the reduction), so where ranks x 2 busy threads exceed the cores,
// the wait moves into a longer backward pass rather than vanishing: compare
// the step column, not only the wait. With overlap on, the wait cannot fall
// below the last bucket's all-reduce (the first layers' gradients, ready only
// when the backward pass ends); smaller --bucket-mib lowers that floor.
//
// Checking: rank r's gradient element i of layer l is h(l, i) + (2r - n + 1),
// small integers whose mean over the n ranks is exactly h(l, i). Variables
// start at 0 and plain SGD with a power-of-two learning rate keeps every value
// exact, so after U updates each element must equal -U x rate x h(l, i)
// exactly; #wrong counts the elements that differ, over all ranks, and
// verify_replicas() must find the replicas identical. Any wrong element or
// diverged replica makes the exit status 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "braid/mirrored.hpp"
#include "tools/command_line.hpp"

namespace mr = braid::mirrored;

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kLearningRate = 0.125;  // a power of two: updates stay exact
constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Options {
  double grad_mib = 100;
  int layers = 50;
  double bucket_mib = 25;
  int steps = 5;
  int warmup = 1;
  double compute_ms_per_layer = -1;  // < 0: as long as the all-reduce alone, over the layers
  int flops_per_element = -1;        // < 0: from compute_ms_per_layer
  bool json = false;
};

const char* kUsage =
    "usage: braid-overlap [--grad-mib MIB] [--layers N] [--bucket-mib MIB] [--steps N] [--warmup N]\n"
    "                     [--compute-ms-per-layer MS | --flops-per-element F] [--json]\n"
    "  --grad-mib     gradient MiB per replica, f32, over --layers equal variables; default 100\n"
    "  --layers       trainable variables (layers); default 50\n"
    "  --bucket-mib   GradientOptions::bucket_bytes in MiB; default 25\n"
    "  --steps        timed steps per mode (overlap off and on take turns); default 5\n"
    "  --warmup       untimed steps per mode first (connections, page faults); default 1\n"
    "  --compute-ms-per-layer  backward arithmetic per layer; default: the time one all-reduce\n"
    "                 of every gradient takes alone, divided by --layers\n"
    "  --flops-per-element     backward arithmetic per gradient element (2 per multiply-add);\n"
    "                 overrides --compute-ms-per-layer\n"
    "  --json         one JSON object per mode and one for the comparison, instead of the table\n"
    "  --version      braid's version\n"
    "Run under braid-run (braid-run -n 2 braid-overlap) or with BRAID_RANK, BRAID_WORLD_SIZE and\n"
    "BRAID_STORE_ADDR set. Exit status 1 when a gradient is wrong or replicas diverged.\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "braid-overlap: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

double parse_number(std::string_view text, std::string_view what) {
  const std::string copy(text);
  char* end = nullptr;
  double v = std::strtod(copy.c_str(), &end);
  if (copy.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
    usage_error(std::string(what) + " '" + copy + "' is not a number");
  return v;
}

int parse_count(std::string_view text, std::string_view what) {
  double v = parse_number(text, what);
  if (v != std::floor(v) || v > 1e9) usage_error(std::string(what) + " '" + std::string(text) + "' is not a count");
  return static_cast<int>(v);
}

// The parser every braid tool uses (tools/command_line.hpp): "--steps 5" and
// "--steps=5" alike.
Options parse(int argc, char** argv) {
  Options o;
  bool help = false;
  braid::CommandLine cli;
  cli.flag({"-h", "--help"}, [&] { help = true; })
      .version("braid-overlap")
      .option({"--grad-mib"}, [&](auto name, auto v) { o.grad_mib = parse_number(v, name); })
      .option({"--layers"}, [&](auto name, auto v) { o.layers = parse_count(v, name); })
      .option({"--bucket-mib"}, [&](auto name, auto v) { o.bucket_mib = parse_number(v, name); })
      .option({"--steps"}, [&](auto name, auto v) { o.steps = parse_count(v, name); })
      .option({"--warmup"}, [&](auto name, auto v) { o.warmup = parse_count(v, name); })
      .option({"--compute-ms-per-layer"}, [&](auto name, auto v) { o.compute_ms_per_layer = parse_number(v, name); })
      .option({"--flops-per-element"}, [&](auto name, auto v) { o.flops_per_element = parse_count(v, name); })
      .flag({"--json"}, [&] { o.json = true; });
  try {
    cli.parse(argc, argv, braid::CommandLine::Positionals::interleaved);
  } catch (const braid::UsageError& e) {
    usage_error(e.what());
  }
  if (help) {
    std::fputs(kUsage, stdout);
    std::exit(0);
  }
  if (o.layers < 1) usage_error("--layers must be at least 1");
  if (o.steps < 1) usage_error("--steps must be at least 1");
  if (o.bucket_mib <= 0) usage_error("--bucket-mib must be positive");
  if (o.grad_mib * kMiB / sizeof(float) < o.layers) usage_error("--grad-mib is less than one f32 per layer");
  return o;
}

// The gradient values: rank r's element i of layer l is h(l, i) + shift(r),
// where the shifts of the n ranks add up to 0, so the mean is exactly h(l, i).
float pattern(int layer, std::size_t i) { return static_cast<float>(static_cast<int>((layer * 7u + i) % 13u) - 6); }
float shift_of(int rank, int n) { return static_cast<float>(2 * rank - (n - 1)); }

// Read at run time, so the compiler cannot fold the multiply-adds away
// (x * 1 + 0 leaves every value exact).
volatile float g_one = 1.0f;
volatile float g_zero = 0.0f;

// One layer's backward pass: each element gets its value, then goes through
// `chain` dependent multiply-adds. Lanes of 32 independent chains keep the
// vector units busy instead of waiting on one chain's latency.
void backward_layer(std::span<float> gradient, int layer, float shift, int chain) {
  constexpr std::size_t kLanes = 32;
  const float a = g_one, b = g_zero;
  const std::size_t count = gradient.size();
  std::size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    float x[kLanes];
    for (std::size_t j = 0; j < kLanes; ++j) x[j] = pattern(layer, i + j) + shift;
    for (int k = 0; k < chain; ++k)
      for (std::size_t j = 0; j < kLanes; ++j) x[j] = x[j] * a + b;
    for (std::size_t j = 0; j < kLanes; ++j) gradient[i + j] = x[j];
  }
  for (; i < count; ++i) {
    float x = pattern(layer, i) + shift;
    for (int k = 0; k < chain; ++k) x = x * a + b;
    gradient[i] = x;
  }
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double max_over_ranks(braid::Comm& comm, double value) {
  comm.all_reduce(std::span<double>(&value, 1), braid::ReduceOp::max);
  return value;
}

// The time of one all-reduce of `bytes` of f32 on its own (slowest rank,
// best of two after a warm-up): what overlap can hide at most.
double all_reduce_alone_seconds(braid::Comm& comm, std::size_t bytes) {
  std::vector<float> buffer(bytes / sizeof(float), 1.0f);
  comm.all_reduce(std::span<float>(buffer), braid::ReduceOp::sum);
  double best = 1e300;
  for (int i = 0; i < 2; ++i) {
    comm.barrier();
    auto t0 = Clock::now();
    comm.all_reduce(std::span<float>(buffer), braid::ReduceOp::sum);
    best = std::min(best, max_over_ranks(comm, seconds_since(t0)));
  }
  return best;
}

struct StepTimes {
  double step = 0, backward = 0, wait = 0;  // other = step - backward - wait
  std::size_t buckets = 0, bytes = 0;
};

// One strategy, its variables, and what its steps took on this rank.
struct Mode {
  bool overlap;
  std::unique_ptr<mr::MultiWorkerMirrored> strategy;
  std::vector<mr::MirroredVariable<float>> layers;
  std::vector<StepTimes> timed;
  std::int64_t updates = 0;
};

Mode make_mode(braid::Comm& world, bool overlap, const Options& o, std::size_t layer_count) {
  mr::StrategyOptions options;
  options.gradients.overlap = overlap;
  options.gradients.bucket_bytes = static_cast<std::size_t>(o.bucket_mib * kMiB);
  options.gradients.aggregation = mr::Aggregation::mean;
  Mode mode{.overlap = overlap,
            .strategy = std::make_unique<mr::MultiWorkerMirrored>(world.split(0, world.rank()), options),
            .layers = {}, .timed = {}, .updates = 0};
  const std::vector<float> zero(layer_count, 0.f);
  {
    auto scope = mode.strategy->scope();
    for (int l = 0; l < o.layers; ++l)
      mode.layers.push_back(mode.strategy->create_variable<float>(
          "layer" + std::to_string(l) + "/kernel", {static_cast<std::int64_t>(layer_count)}, zero));
  }
  return mode;
}

// Seconds one backward pass over `mode`'s gradient buffers takes with
// `chain` multiply-adds per element: the best of two, on the slowest rank,
// every rank computing at once as in the steps. It runs on the real buffers
// because a hot 2 MiB buffer runs several times faster than 100 MiB of them.
double backward_seconds(braid::Comm& world, Mode& mode, int chain) {
  double best = 1e300;
  mode.strategy->run([&](mr::ReplicaContext& ctx) {
    for (int i = 0; i < 2; ++i) {
      world.barrier();
      auto t0 = Clock::now();
      for (int l = static_cast<int>(mode.layers.size()) - 1; l >= 0; --l)
        backward_layer(ctx.gradients().of(mode.layers[static_cast<std::size_t>(l)]), l, 0.f, chain);
      best = std::min(best, seconds_since(t0));
    }
    ctx.gradients().zero();
  });
  return max_over_ranks(world, best);
}

struct Sizing {
  int chain;
  double seconds;  // a backward pass with that chain, measured
};

// The chain whose backward pass takes about `target` seconds. The time is
// not linear in the chain (memory traffic hides the first multiply-adds), so
// a line through chain 0 and the latest probe is refined until within 10%.
// Other load can make a probe look no slower than chain 0, so one step never
// moves the chain more than 8x.
Sizing size_backward(braid::Comm& world, Mode& mode, double target) {
  const double fixed = backward_seconds(world, mode, 0);
  if (target <= fixed) return {0, fixed};
  Sizing probe{64, backward_seconds(world, mode, 64)};
  for (int round = 0; round < 4 && std::abs(probe.seconds - target) > 0.1 * target; ++round) {
    const double above = probe.seconds - fixed;
    const double wanted = above > 0 ? probe.chain * (target - fixed) / above : probe.chain * 8.0;
    const double bounded = std::clamp(wanted, std::max(1.0, probe.chain / 8.0), probe.chain * 8.0);
    const int chain = static_cast<int>(std::lround(bounded));
    if (chain == probe.chain) break;
    probe = {chain, backward_seconds(world, mode, chain)};
  }
  return probe;
}

// One training step of `mode`: the backward pass, layer by layer from the
// last, then apply_gradients.
void run_step(braid::Comm& world, Mode& mode, mr::Sgd& sgd, int chain, bool timed) {
  const float shift = shift_of(world.rank(), world.size());
  mode.strategy->run([&](mr::ReplicaContext& ctx) {
    world.barrier();  // every rank starts the step together
    auto t0 = Clock::now();
    for (int l = static_cast<int>(mode.layers.size()) - 1; l >= 0; --l) {
      backward_layer(ctx.gradients().of(mode.layers[static_cast<std::size_t>(l)]), l, shift, chain);
      ctx.gradients().ready(mode.layers[static_cast<std::size_t>(l)]);
    }
    const double backward = seconds_since(t0);
    ctx.apply_gradients(sgd);
    const double step = seconds_since(t0);
    ++mode.updates;
    if (!timed) return;
    const mr::StepStats stats = mode.strategy->last_step_stats();
    mode.timed.push_back({.step = step, .backward = backward, .wait = stats.wait_seconds, .buckets = stats.buckets,
                          .bytes = stats.bytes});
  });
}

// Elements of this rank's variables that are not -updates x rate x h(l, i).
std::int64_t count_wrong(const Mode& mode) {
  std::int64_t wrong = 0;
  const double updates = static_cast<double>(mode.updates);
  for (std::size_t l = 0; l < mode.layers.size(); ++l) {
    auto value = mode.layers[l].value();
    for (std::size_t i = 0; i < value.size(); ++i) {
      const float expected = static_cast<float>(-updates * kLearningRate * pattern(static_cast<int>(l), i));
      if (value[i] != expected) ++wrong;
    }
  }
  return wrong;
}

// A mode's row: means over its timed steps, then the slowest rank's.
struct Row {
  double step_ms, backward_ms, wait_ms, other_ms;
  double buckets, bytes;
  std::int64_t wrong;
  bool consistent;
  std::string replicas;
};

Row summarize(braid::Comm& world, Mode& mode) {
  double sums[6] = {0, 0, 0, 0, 0, 0};
  for (const StepTimes& t : mode.timed) {
    sums[0] += t.step;
    sums[1] += t.backward;
    sums[2] += t.wait;
    sums[3] += t.step - t.backward - t.wait;
    sums[4] += static_cast<double>(t.buckets);
    sums[5] += static_cast<double>(t.bytes);
  }
  for (double& s : sums) s /= static_cast<double>(mode.timed.size());
  world.all_reduce(std::span<double>(sums), braid::ReduceOp::max);
  std::int64_t wrong = count_wrong(mode);
  world.all_reduce(std::span<std::int64_t>(&wrong, 1), braid::ReduceOp::sum);
  const mr::ReplicaReport report = mode.strategy->verify_replicas();
  return Row{.step_ms = sums[0] * 1e3, .backward_ms = sums[1] * 1e3, .wait_ms = sums[2] * 1e3,
             .other_ms = sums[3] * 1e3, .buckets = sums[4], .bytes = sums[5], .wrong = wrong,
             .consistent = report.consistent(), .replicas = report.describe()};
}

int run(const Options& o) {
  braid::Comm world = braid::Comm::from_env();
  const int rank = world.rank(), n = world.size();
  const auto grad_elements = static_cast<std::size_t>(o.grad_mib * static_cast<double>(kMiB) / sizeof(float));
  const std::size_t layer_count = grad_elements / static_cast<std::size_t>(o.layers);
  const std::size_t grad_bytes = layer_count * sizeof(float) * static_cast<std::size_t>(o.layers);

  const double alone_s = n > 1 ? all_reduce_alone_seconds(world, grad_bytes) : 0.0;
  mr::Sgd sgd(kLearningRate);
  Mode modes[2] = {make_mode(world, false, o, layer_count), make_mode(world, true, o, layer_count)};
  Sizing backward;
  std::string sized_by;
  if (o.flops_per_element >= 0) {
    backward.chain = o.flops_per_element / 2;
    backward.seconds = backward_seconds(world, modes[0], backward.chain);
    sized_by = "--flops-per-element";
  } else if (o.compute_ms_per_layer >= 0) {
    backward = size_backward(world, modes[0], o.compute_ms_per_layer * 1e-3 * o.layers);
    sized_by = "--compute-ms-per-layer";
  } else {
    backward = size_backward(world, modes[0], alone_s);
    sized_by = "the all-reduce alone";
  }
  const int chain = backward.chain;

  if (rank == 0 && !o.json) {
    std::printf("# braid-overlap: %d ranks, %s, %d layers x %.2f MiB f32 = %.2f MiB of gradients per replica, "
                "buckets of %.2f MiB\n",
                n, std::string(modes[0].strategy->name()).c_str(), o.layers,
                static_cast<double>(layer_count * sizeof(float)) / kMiB, static_cast<double>(grad_bytes) / kMiB,
                o.bucket_mib);
    std::printf("# all-reduce of every gradient alone: %.1f ms (slowest rank)\n", alone_s * 1e3);
    std::printf("# backward: %d multiply-adds per element (%d flops), %.1f ms per step when calibrated "
                "(sized by %s)\n",
                chain, 2 * chain, backward.seconds * 1e3, sized_by.c_str());
    std::printf("# %d timed steps per mode after %d warm-up, taking turns (off, on), (on, off), ...; "
                "per step: mean over steps, max over ranks\n",
                o.steps, o.warmup);
    std::printf("# %s\n#\n", world.describe().c_str());
    std::fflush(stdout);
  }

  for (int s = 0; s < o.warmup; ++s)
    for (Mode& m : modes) run_step(world, m, sgd, chain, false);
  for (int s = 0; s < o.steps; ++s)
    for (int k = 0; k < 2; ++k) run_step(world, modes[s % 2 == 0 ? k : 1 - k], sgd, chain, true);

  Row rows[2] = {summarize(world, modes[0]), summarize(world, modes[1])};
  const Row& off = rows[0];
  const Row& on = rows[1];
  const double less = off.wait_ms > 0 ? 100.0 * (off.wait_ms - on.wait_ms) / off.wait_ms : 0.0;
  const bool ok = off.wrong == 0 && on.wrong == 0 && off.consistent && on.consistent;
  if (rank == 0) {
    if (o.json) {
      for (int k = 0; k < 2; ++k) {
        const Row& r = rows[k];
        std::printf("{\"overlap\":%s,\"ranks\":%d,\"layers\":%d,\"grad_bytes\":%zu,\"bucket_bytes\":%zu,\"steps\":%d,"
                    "\"flops_per_element\":%d,\"step_ms\":%.3f,\"backward_ms\":%.3f,\"wait_ms\":%.3f,\"other_ms\":%.3f,"
                    "\"buckets\":%.2f,\"bytes\":%.0f,\"wrong\":%lld,\"replicas_consistent\":%s}\n",
                    modes[k].overlap ? "true" : "false", n, o.layers, grad_bytes,
                    static_cast<std::size_t>(o.bucket_mib * kMiB), o.steps, 2 * chain, r.step_ms, r.backward_ms,
                    r.wait_ms, r.other_ms, r.buckets, r.bytes, static_cast<long long>(r.wrong),
                    r.consistent ? "true" : "false");
      }
      std::printf("{\"comparison\":true,\"ranks\":%d,\"all_reduce_alone_ms\":%.3f,\"wait_off_ms\":%.3f,"
                  "\"wait_on_ms\":%.3f,\"wait_reduction_pct\":%.2f,\"step_off_ms\":%.3f,\"step_on_ms\":%.3f,\"ok\":%s}\n",
                  n, alone_s * 1e3, off.wait_ms, on.wait_ms, less, off.step_ms, on.step_ms, ok ? "true" : "false");
    } else {
      std::printf("# %7s %10s %12s %10s %10s %8s %10s %8s\n", "overlap", "step(ms)", "backward(ms)", "wait(ms)",
                  "other(ms)", "buckets", "MiB/step", "#wrong");
      for (int k = 0; k < 2; ++k) {
        const Row& r = rows[k];
        std::printf("  %7s %10.1f %12.1f %10.1f %10.1f %8.1f %10.2f %8lld\n", modes[k].overlap ? "on" : "off",
                    r.step_ms, r.backward_ms, r.wait_ms, r.other_ms, r.buckets, r.bytes / kMiB,
                    static_cast<long long>(r.wrong));
      }
      std::printf("# overlap off: %s; overlap on: %s\n", off.replicas.c_str(), on.replicas.c_str());
      if (!ok) std::printf("# FAILED: wrong gradients or diverged replicas (see #wrong and replicas above)\n");
      if (n == 1) std::printf("# 1 rank: nothing to communicate, so nothing to overlap\n");
      std::printf("overlap on: waited %.1f ms per step vs %.1f ms with overlap off (%.0f%% %s); "
                  "step %.1f ms vs %.1f ms\n",
                  on.wait_ms, off.wait_ms, std::abs(less), less >= 0 ? "less" : "more", on.step_ms, off.step_ms);
    }
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid-overlap: %s\n", e.what());
    return 1;
  }
}
