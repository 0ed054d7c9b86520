// Multi-process checks of the mirrored layer, run under braid-run:
//
//   braid-run -n 4 mirrored_check --strategy multi_worker_mirrored
//   braid-run -n 2 mirrored_check --strategy mirrored --local-replicas 2
//   braid-run -n 3 mirrored_check --strategy central_storage
//   braid-run -n 4 mirrored_check --strategy parameter_server --servers 2
//   braid-run -n 4 mirrored_check --strategy multi_worker_mirrored --save DIR/ckpt
//   braid-run -n 2 mirrored_check --strategy multi_worker_mirrored --restore DIR/ckpt
//
// Each section checks a property with values whose exact result is known
// (small integers in floats, so every summation order gives the same bits).
// Every rank prints what failed; the exit status is the verdict.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "braid/mirrored.hpp"

namespace mr = braid::mirrored;

namespace {

int g_rank = 0;
int g_failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
}

// fn must throw a braid::Error whose message contains `needle`.
void expect_error(const std::function<void()>& fn, const std::string& needle, const std::string& what) {
  try {
    fn();
    check(false, what + ": no error");
  } catch (const braid::Error& e) {
    check(std::string(e.what()).find(needle) != std::string::npos,
          what + ": error '" + e.what() + "' does not mention '" + needle + "'");
  }
}

struct Config {
  std::string strategy = "multi_worker_mirrored";
  int local_replicas = 2;
  int servers = 1;
  std::string save_path, restore_path;
};

std::unique_ptr<mr::Strategy> make(const Config& cfg, braid::Comm comm, mr::StrategyOptions options = {}) {
  if (cfg.strategy == "multi_worker_mirrored") return std::make_unique<mr::MultiWorkerMirrored>(std::move(comm), options);
  if (cfg.strategy == "mirrored") return std::make_unique<mr::Mirrored>(std::move(comm), cfg.local_replicas, options);
  if (cfg.strategy == "central_storage") return std::make_unique<mr::CentralStorage>(std::move(comm), options);
  throw braid::InvalidArgument("unknown strategy " + cfg.strategy);
}

std::vector<float> iota_values(std::size_t n, float start) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i % 7);
  return v;
}

// ---- synchronous strategies -----------------------------------------------------

// Replicas start from the chief's values, stay identical over K steps, and
// gradients aggregate to the exact mean (or sum).
void check_training(mr::Strategy& s, mr::Aggregation aggregation) {
  const int n = s.num_replicas_in_sync();
  mr::MirroredVariable<float> a, b;
  {
    auto scope = s.scope();
    auto init = iota_values(1000, static_cast<float>(g_rank * 100));  // differs per rank: the chief's must win
    a = s.create_variable<float>("a", {10, 100}, init);
    b = s.create_variable<float>("b", {37}, std::span<const float>(init).first(37));
  }
  for (int r = 0; r < s.local_replicas(); ++r)
    check(a.value(r)[5] == 5.f && b.value(r)[36] == 1.f, std::string(s.name()) + std::string(": initial value is the chief's"));
  mr::Sgd sgd(0.5);
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<float>> seen(static_cast<std::size_t>(s.local_replicas()));
    s.run([&](mr::ReplicaContext& ctx) {
      auto ga = ctx.gradients().of(a), gb = ctx.gradients().of(b);
      for (std::size_t i = 0; i < ga.size(); ++i) ga[i] = static_cast<float>(2 * (ctx.replica_id() + 1));
      ctx.gradients().ready(a);
      for (std::size_t i = 0; i < gb.size(); ++i) gb[i] = static_cast<float>(4 * ctx.replica_id());
      ctx.gradients().synchronize();
      seen[static_cast<std::size_t>(ctx.local_replica())] = {ga[0], ga[999], gb[0], gb[36]};
      ctx.apply_gradients(sgd);
    });
    // sum over replicas of 2(id+1) = n(n+1); of 4 id = 2n(n-1)
    const float sum_a = static_cast<float>(n * (n + 1)), sum_b = static_cast<float>(2 * n * (n - 1));
    const float want_a = aggregation == mr::Aggregation::mean ? sum_a / static_cast<float>(n) : sum_a;
    const float want_b = aggregation == mr::Aggregation::mean ? sum_b / static_cast<float>(n) : sum_b;
    // CentralStorage reduces to the chief only: the others keep their own gradient.
    const bool aggregated_here = s.name() != std::string_view("CentralStorage") || s.is_chief();
    for (const auto& v : seen)
      if (aggregated_here) check(v == std::vector<float>{want_a, want_a, want_b, want_b},
            std::string(s.name()) + ": aggregated gradient " + std::to_string(v[0]) + "/" + std::to_string(v[2]) +
                " (want " + std::to_string(want_a) + "/" + std::to_string(want_b) + ")");
  }
  // synchronize() then apply_gradients() aggregates once: a started at 0 and
  // took 4 steps of 0.5 x the aggregated gradient.
  const float sum_a = static_cast<float>(n * (n + 1));
  const float want_a = aggregation == mr::Aggregation::mean ? sum_a / static_cast<float>(n) : sum_a;
  for (int r = 0; r < s.local_replicas(); ++r)
    check(a.value(r)[0] == -4 * 0.5f * want_a, std::string(s.name()) + ": a[0] = " + std::to_string(a.value(r)[0]) +
                                                   " after 4 steps, want " + std::to_string(-2 * want_a));
  auto report = s.verify_replicas();
  check(report.consistent() && report.variables_checked == 2, std::string(s.name()) + ": " + report.describe());
  // Every replica applied the same updates: the hashes agree everywhere.
  std::vector<std::uint64_t> hashes;
  for (int r = 0; r < s.local_replicas(); ++r) hashes.push_back(s.replica_hash(r));
  auto all = s.gather<std::uint64_t>(hashes);
  check(std::set<std::uint64_t>(all.begin(), all.end()).size() == 1, std::string(s.name()) + ": replica hashes differ");
}

// Bucketed gradients equal unbucketed ones, with and without overlap, and
// equal one plain all-reduce of the same values.
void check_buckets(const Config& cfg, braid::Comm& parent) {
  std::vector<std::vector<float>> results;
  for (auto [bucket, overlap] : {std::pair<std::size_t, bool>{1 << 30, false}, {512, true}, {4096, false}, {64, true}}) {
    mr::StrategyOptions options;
    options.gradients.bucket_bytes = bucket;
    options.gradients.overlap = overlap;
    options.gradients.aggregation = mr::Aggregation::sum;
    auto s = make(cfg, parent.split(0, parent.rank()), options);
    std::vector<mr::MirroredVariable<float>> vars;
    {
      auto scope = s->scope();
      for (int v = 0; v < 9; ++v) vars.push_back(s->create_variable<float>(std::string("v").append(std::to_string(v)), {v * 13 + 1}, iota_values(static_cast<std::size_t>(v * 13 + 1), 0)));
    }
    std::vector<float> flat;
    s->run([&](mr::ReplicaContext& ctx) {
      for (int v = 8; v >= 0; --v) {
        auto g = ctx.gradients().of(vars[static_cast<std::size_t>(v)]);
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((ctx.replica_id() + 1) * (v + 1) + static_cast<int>(i % 5));
        ctx.gradients().ready(vars[static_cast<std::size_t>(v)]);
      }
      ctx.gradients().synchronize();
      if (ctx.local_replica() == 0)
        for (auto& var : vars) {
          auto g = ctx.gradients().of(var);
          flat.insert(flat.end(), g.begin(), g.end());
        }
    });
    results.push_back(flat);
    if (results.size() == 1) {
      // The same values through one plain all-reduce of the public API.
      std::vector<float> manual;
      for (int v = 0; v < 9; ++v)
        for (int i = 0; i < v * 13 + 1; ++i) {
          float total = 0;
          for (int id = 0; id < s->num_replicas_in_sync(); ++id) total += static_cast<float>((id + 1) * (v + 1) + i % 5);
          manual.push_back(total);
        }
      if (s->name() != std::string_view("CentralStorage") || s->is_chief())  // reduced to the chief only
        check(flat == manual, "one-bucket gradients equal the exact sums");
    }
  }
  for (std::size_t i = 1; i < results.size(); ++i) check(results[i] == results[0], "bucketed gradients equal unbucketed (" + std::to_string(i) + ")");
}

// MEAN equals SUM / N, for replica-context all-reduce, on_write updates and
// on_read reads; only_first_replica takes replica 0's value.
void check_aggregations(mr::Strategy& s) {
  const int n = s.num_replicas_in_sync();
  mr::MirroredVariable<double> w_sum, w_mean, w_first, r_sum, r_mean;
  {
    auto scope = s.scope();
    const std::vector<double> zero{0.0};
    using mr::Aggregation, mr::Synchronization;
    auto opt = [](Synchronization sync, Aggregation agg) { return mr::VariableOptions{sync, agg, false}; };
    w_sum = s.create_variable<double>("w_sum", {}, zero, opt(Synchronization::on_write, Aggregation::sum));
    w_mean = s.create_variable<double>("w_mean", {}, zero, opt(Synchronization::on_write, Aggregation::mean));
    w_first = s.create_variable<double>("w_first", {}, zero, opt(Synchronization::on_write, Aggregation::only_first_replica));
    r_sum = s.create_variable<double>("r_sum", {}, zero, opt(Synchronization::on_read, Aggregation::sum));
    r_mean = s.create_variable<double>("r_mean", {}, zero, opt(Synchronization::on_read, Aggregation::mean));
  }
  std::vector<double> sums(static_cast<std::size_t>(s.local_replicas())), means(sums.size());
  std::vector<std::vector<int>> gathered(sums.size());
  s.run([&](mr::ReplicaContext& ctx) {
    const double mine = ctx.replica_id() + 1.0;
    sums[static_cast<std::size_t>(ctx.local_replica())] = ctx.all_reduce(braid::ReduceOp::sum, mine);
    means[static_cast<std::size_t>(ctx.local_replica())] = ctx.all_reduce(braid::ReduceOp::avg, mine);
    const int id = ctx.replica_id();
    gathered[static_cast<std::size_t>(ctx.local_replica())] = ctx.all_gather<int>(std::span<const int>(&id, 1));
    ctx.assign_add(w_sum, std::span<const double>(&mine, 1));
    ctx.assign_add(w_mean, std::span<const double>(&mine, 1));
    const double first = 100.0 + ctx.replica_id();
    ctx.assign(w_first, std::span<const double>(&first, 1));
    ctx.assign_add(r_sum, std::span<const double>(&mine, 1));
    ctx.assign_add(r_mean, std::span<const double>(&mine, 1));
  });
  const double sum = n * (n + 1) / 2.0;
  for (std::size_t r = 0; r < sums.size(); ++r) {
    check(sums[r] == sum && means[r] == sum / n, "replica all_reduce: sum " + std::to_string(sums[r]) + ", mean " + std::to_string(means[r]));
    std::vector<int> ids(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i;
    check(gathered[r] == ids, "replica all_gather in replica-id order");
    check(w_sum.value(static_cast<int>(r))[0] == sum, "on_write sum: " + std::to_string(w_sum.value(static_cast<int>(r))[0]));
    check(w_mean.value(static_cast<int>(r))[0] == sum / n, "on_write mean equals sum / N");
    check(w_first.value(static_cast<int>(r))[0] == 100.0, "on_write only_first_replica takes replica 0's value");
  }
  check(s.read(r_sum)[0] == sum, "on_read sum read: " + std::to_string(s.read(r_sum)[0]));
  check(s.read(r_mean)[0] == sum / n, "on_read mean read equals sum / N");
  std::vector<double> per_local(static_cast<std::size_t>(s.local_replicas()));
  for (int r = 0; r < s.local_replicas(); ++r) per_local[static_cast<std::size_t>(r)] = s.first_replica_id() + r + 1.0;
  check(s.reduce<double>(braid::ReduceOp::sum, per_local) == sum, "strategy.reduce(SUM)");
  check(s.reduce<double>(braid::ReduceOp::avg, per_local) == sum / n, "strategy.reduce(MEAN) equals SUM / N");
  check(s.reduce<double>(braid::ReduceOp::max, per_local) == n, "strategy.reduce(MAX)");
  check(s.reduce<double>(braid::ReduceOp::min, per_local) == 1, "strategy.reduce(MIN)");
  // A replica that diverges is caught and named.
  auto report = s.verify_replicas();
  check(report.consistent(), "consistent before the fault: " + report.describe());
  const int bad_replica = n - 1;
  if (bad_replica >= s.first_replica_id() && bad_replica < s.first_replica_id() + s.local_replicas())
    w_sum.value(bad_replica - s.first_replica_id())[0] += 1;
  report = s.verify_replicas();
  check(report.divergences.size() == 1 && report.divergences[0].variable == "w_sum" &&
            report.divergences[0].replicas == std::vector<int>{bad_replica},
        "verify_replicas names the diverged variable and replica: " + report.describe());
  check(report.describe().find("w_sum") != std::string::npos, "the report names the variable");
  s.assign(w_sum.variable(), std::as_bytes(std::span<const double>(&sum, 1)));
  check(s.verify_replicas().consistent(), "consistent again after assign");
}

// f16 / bf16 compression: close to the exact mean, and error feedback keeps
// the running sum of applied gradients close to the exact running sum.
void check_compression(const Config& cfg, braid::Comm& parent, mr::Compression compression) {
  mr::StrategyOptions options;
  options.gradients.compression = compression;
  auto s = make(cfg, parent.split(0, parent.rank()), options);
  mr::MirroredVariable<float> v;
  {
    auto scope = s->scope();
    v = s->create_variable<float>("v", {256}, std::vector<float>(256, 0.f));
  }
  const int n = s->num_replicas_in_sync();
  std::vector<double> applied(256, 0.0), exact(256, 0.0);
  for (int step = 0; step < 20; ++step) {
    s->run([&](mr::ReplicaContext& ctx) {
      auto g = ctx.gradients().of(v);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.001f * static_cast<float>(i + 1) / 3.f + 0.1f * static_cast<float>(ctx.replica_id());
      ctx.gradients().synchronize();
      if (ctx.replica_id() == 0)
        for (std::size_t i = 0; i < g.size(); ++i) {
          applied[i] += g[i];
          exact[i] += 0.001 * static_cast<double>(i + 1) / 3.0 + 0.1 * (n - 1) / 2.0;
        }
      ctx.gradients().zero();
    });
  }
  if (s->first_replica_id() == 0) {
    double worst = 0;
    for (std::size_t i = 0; i < 256; ++i) worst = std::max(worst, std::abs(applied[i] - exact[i]) / exact[i]);
    // Feedback removes the sender's rounding; the sum's own rounding on the
    // wire (one per hop, in the wire type) remains, a few units of 2^-8 for bf16.
    check(worst < (compression == mr::Compression::bf16 ? 1.5e-2 : 2e-3),
          std::string("compression ") + std::string(mr::name_of(compression)) + ": running sum off by " + std::to_string(worst));
  }
}

void check_bad_input(mr::Strategy& s, const Config& cfg) {
  expect_error([&] { s.create_variable<float>("outside", {2}, std::vector<float>(2)); }, "outside the strategy's scope",
               "variable created outside the scope");
  expect_error([&] { mr::MirroredVariable<float> none; (void)none.value(); }, "not created through a strategy",
               "a MirroredVariable that is not a strategy's");
  auto scope = s.scope();
  expect_error([&] { s.create_variable<float>("short", {4}, std::vector<float>(3)); }, "initial value holds",
               "initial value of the wrong size");
  // Shapes that differ across ranks: every rank fails, naming both shapes.
  if (s.comm() && s.comm()->size() > 1)
    expect_error([&] { s.create_variable<float>("mismatch", {g_rank == 1 ? 3 : 2}, std::vector<float>(g_rank == 1 ? 3 : 2)); },
                 "rank 1 has 'mismatch' f32 [3]", "shapes that differ across ranks");
  auto plain = s.create_variable<float>("plain", {2}, std::vector<float>(2));
  s.run([&](mr::ReplicaContext& ctx) {
    std::vector<float> x(2, 1.f);
    expect_error([&] { ctx.assign_add(plain, std::span<const float>(x)); }, "aggregation none",
                 "on_write aggregation none updated in replica context");
    ctx.gradients().synchronize();
    expect_error([&] { ctx.gradients().ready(plain); }, "after synchronize()", "ready() after synchronize()");
    ctx.gradients().zero();
  });
  (void)cfg;
}

// Checkpoints: round trip here, another model, a corrupted file.
void check_checkpoint(mr::Strategy& s, const std::string& dir) {
  mr::MirroredVariable<float> w;
  mr::MirroredVariable<std::int64_t> counter;
  {
    auto scope = s.scope();
    w = s.create_variable<float>("ckpt/w", {3, 5}, iota_values(15, 1));
    counter = s.create_variable<std::int64_t>("ckpt/counter", {}, std::vector<std::int64_t>{42},
                                              {mr::Synchronization::on_write, mr::Aggregation::none, false});
  }
  mr::Sgd sgd(0.1, 0.9);
  s.create_slots(sgd);
  s.run([&](mr::ReplicaContext& ctx) {
    auto g = ctx.gradients().of(w);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i);
    ctx.apply_gradients(sgd);
  });
  const std::string path = dir + "/roundtrip.ckpt";
  std::vector<float> saved(w.value().begin(), w.value().end());
  const std::uint64_t hash = s.replica_hash();
  s.save(path, {.step = 7, .epoch = 2, .batch_in_epoch = 3});
  for (int r = 0; r < s.local_replicas(); ++r) {
    w.value(r)[0] = -1;
    auto slot = s.variable("ckpt/w/sgd/momentum").replica_bytes(r);  // empty where slots live on the chief only
    if (!slot.empty()) slot[0] = std::byte{0x7f};
  }
  auto restored = s.restore(path);
  check(restored.position.step == 7 && restored.position.epoch == 2 && restored.position.batch_in_epoch == 3,
        "checkpoint position round trip");
  check(std::vector<float>(w.value().begin(), w.value().end()) == saved && s.replica_hash() == hash,
        "checkpoint restores every variable and slot");
  check(s.verify_replicas().consistent(), "replicas consistent after restore");
  // Corrupted on disk: every rank fails, naming the file and the checksum.
  if (s.is_chief()) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    char c = 0;
    f.read(&c, 1);
    f.seekp(40);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  expect_error([&] { s.restore(path); }, "roundtrip.ckpt", "a corrupted checkpoint");
}

void check_other_model(mr::Strategy& s, const std::string& dir) {
  {
    auto scope = s.scope();
    s.create_variable<float>("other/w", {4}, std::vector<float>(4));
  }
  s.save(dir + "/other.ckpt");
}

// A strategy of a user's own: the public header and the documented hooks only.
class CountingStrategy final : public mr::Strategy {
 public:
  explicit CountingStrategy(braid::Comm comm, mr::StrategyOptions options) : Strategy(std::move(comm), 1, options) {}
  std::string_view name() const override { return "Counting"; }
  int buckets_started = 0;

 protected:
  std::optional<braid::Work> start_bucket(void* data, std::size_t count, braid::DataType type) override {
    ++buckets_started;
    return Strategy::start_bucket(data, count, type);
  }
};

void check_custom_strategy(braid::Comm comm) {
  mr::StrategyOptions options;
  options.gradients.bucket_bytes = 256;
  CountingStrategy s(std::move(comm), options);
  std::vector<mr::MirroredVariable<float>> vars;
  {
    auto scope = s.scope();
    for (int v = 0; v < 4; ++v) vars.push_back(s.create_variable<float>("layer" + std::to_string(v), {64}, std::vector<float>(64)));
  }
  std::vector<float> seen;
  s.run([&](mr::ReplicaContext& ctx) {
    for (auto& v : vars) {
      auto g = ctx.gradients().of(v);
      std::fill(g.begin(), g.end(), static_cast<float>(2 * ctx.replica_id()));
      ctx.gradients().ready(v);
    }
    ctx.gradients().synchronize();
    seen.assign(ctx.gradients().of(vars[0]).begin(), ctx.gradients().of(vars[0]).end());
  });
  const int n = s.num_replicas_in_sync();
  check(s.buckets_started == 4, "custom strategy: its start_bucket ran for each of 4 buckets, not " + std::to_string(s.buckets_started));
  check(seen == std::vector<float>(64, static_cast<float>(n - 1)), "custom strategy: gradients averaged");
}

// ---- the parameter server ----------------------------------------------------------

// Asynchronous SGD on a convex least-squares problem converges; staleness stays bounded.
void check_parameter_server(const Config& cfg, braid::Comm comm, const std::string& dir) {
  mr::ParameterServerOptions options;
  options.servers = cfg.servers;
  options.staleness = 1;
  options.optimizer = std::make_shared<mr::Sgd>(0.05);
  mr::ParameterServer ps(std::move(comm), options);
  constexpr int kDim = 24;
  std::vector<float> truth(kDim);
  for (int i = 0; i < kDim; ++i) truth[static_cast<std::size_t>(i)] = static_cast<float>((i % 5) - 2) * 0.5f;
  mr::MirroredVariable<float> w;
  {
    auto scope = ps.scope();
    w = ps.create_variable<float>("w", {kDim}, std::vector<float>(kDim, static_cast<float>(g_rank)));
  }
  check(w.value()[0] == 0.f, "parameter server: the chief's initial value wins");
  if (ps.is_server()) {
    ps.serve();
    check(ps.updates_applied() == 200 * ps.workers(), "server applied every push: " + std::to_string(ps.updates_applied()));
    check(ps.max_staleness_seen() <= 1, "staleness bounded by 1: saw " + std::to_string(ps.max_staleness_seen()));
  } else {
    double last_loss = 0;
    ps.run([&](mr::ReplicaContext& ctx) {
      std::uint64_t seed = 12345u + static_cast<std::uint64_t>(ctx.replica_id());
      for (int step = 0; step < 200; ++step) {
        auto g = ctx.gradients().of(w);
        auto p = w.value(ctx);
        double loss = 0;
        for (int sample = 0; sample < 8; ++sample) {
          float x[kDim], pred = 0, y = 0;
          for (int i = 0; i < kDim; ++i) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = static_cast<float>((seed >> 40) % 2001) / 1000.f - 1.f;
            pred += p[static_cast<std::size_t>(i)] * x[i];
            y += truth[static_cast<std::size_t>(i)] * x[i];
          }
          loss += (pred - y) * (pred - y) / 8;
          for (int i = 0; i < kDim; ++i) g[static_cast<std::size_t>(i)] += 2 * (pred - y) * x[i] / 8;
        }
        last_loss = loss;
        if (ctx.replica_id() == 0 && step % 50 == 49) {
          // A slow worker: the others run ahead, up to the staleness bound.
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ctx.apply_gradients(*options.optimizer);
      }
    });
    ps.finish();
    double error = 0;
    for (int i = 0; i < kDim; ++i) error = std::max(error, static_cast<double>(std::abs(w.value()[static_cast<std::size_t>(i)] - truth[static_cast<std::size_t>(i)])));
    check(error < 0.05, "asynchronous SGD converged: max |w - truth| = " + std::to_string(error) + ", last loss " + std::to_string(last_loss));
  }
  auto report = ps.verify_replicas();
  check(report.consistent(), "parameter server workers agree after finish: " + report.describe());
  ps.save(dir + "/ps.ckpt");
  std::vector<float> final_w(w.value().begin(), w.value().end());
  auto restored = ps.restore(dir + "/ps.ckpt");
  check(restored.replicas_when_saved == ps.workers(), "parameter server checkpoint records the worker count");
  if (!ps.is_server()) check(std::vector<float>(w.value().begin(), w.value().end()) == final_w, "parameter server checkpoint round trip");
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--strategy") cfg.strategy = v;
    else if (a == "--local-replicas") cfg.local_replicas = std::stoi(v);
    else if (a == "--servers") cfg.servers = std::stoi(v);
    else if (a == "--dir") dir = v;
    else if (a == "--save") cfg.save_path = v;
    else if (a == "--restore") cfg.restore_path = v;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    braid::Comm comm = braid::Comm::from_env();
    g_rank = comm.rank();
    if (cfg.strategy == "parameter_server") {
      check_parameter_server(cfg, std::move(comm), dir);
    } else if (!cfg.save_path.empty() || !cfg.restore_path.empty()) {
      // Restoring onto another replica count: save with N, restore with M.
      auto s = make(cfg, std::move(comm));
      mr::MirroredVariable<float> w;
      {
        auto scope = s->scope();
        w = s->create_variable<float>("model/w", {64}, iota_values(64, static_cast<float>(g_rank)));
      }
      mr::Sgd sgd(0.25, 0.5);
      s->create_slots(sgd);
      if (!cfg.save_path.empty()) {
        for (int step = 0; step < 3; ++step)
          s->run([&](mr::ReplicaContext& ctx) {
            auto g = ctx.gradients().of(w);
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(ctx.replica_id() + static_cast<int>(i));
            ctx.apply_gradients(sgd);
          });
        s->save(cfg.save_path, {.step = 3});
        std::ofstream(cfg.save_path + ".hash") << s->replica_hash() << "\n";
      } else {
        auto restored = s->restore(cfg.restore_path);
        std::uint64_t want = 0;
        std::ifstream(cfg.restore_path + ".hash") >> want;
        check(s->replica_hash() == want, "restored onto " + std::to_string(s->num_replicas_in_sync()) +
                                             " replicas: same values as saved by " +
                                             std::to_string(restored.replicas_when_saved));
        check(restored.replicas_when_saved != s->num_replicas_in_sync(), "the replica count changed between save and restore");
        check(s->verify_replicas().consistent(), "consistent after restoring onto another replica count");
      }
    } else {
      braid::Comm spare = comm.split(0, comm.rank());
      braid::Comm spare2 = comm.split(0, comm.rank());
      auto s = make(cfg, std::move(comm));
      check_training(*s, mr::Aggregation::mean);
      check_aggregations(*s);
      check_bad_input(*s, cfg);
      check_checkpoint(*s, dir);
      {
        mr::StrategyOptions sum;
        sum.gradients.aggregation = mr::Aggregation::sum;
        auto by_sum = make(cfg, spare2.split(0, spare2.rank()), sum);
        check_training(*by_sum, mr::Aggregation::sum);
        auto other = make(cfg, spare2.split(0, spare2.rank()));
        check_other_model(*other, dir);
        expect_error([&] { s->restore(dir + "/other.ckpt"); }, "does not match this model", "a checkpoint of another model");
      }
      check_buckets(cfg, spare);
      if (cfg.strategy == "multi_worker_mirrored") check_custom_strategy(spare.split(0, spare.rank()));
      check_compression(cfg, spare, mr::Compression::f16);
      check_compression(cfg, spare, mr::Compression::bf16);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", g_rank, e.what());
    return 1;
  }
  if (g_failures == 0 && g_rank == 0) std::printf("mirrored_check %s: all checks passed\n", cfg.strategy.c_str());
  return g_failures == 0 ? 0 : 1;
}
