// Data-parallel training of a small model with each braid::mirrored strategy.
//
//   braid-run -n 4 braid-train                                   # MultiWorkerMirrored, 4 processes
//   braid-run -n 2 braid-train --strategy mirrored --local-replicas 2   # 2 processes x 2 threads
//   braid-run -n 4 braid-train --strategy central_storage
//   braid-run -n 4 braid-train --strategy parameter_server --servers 1
//
// The model is a 2-layer perceptron (16 inputs, 32 tanh units, a logistic
// output) learning a teacher network's labels on generated data. Every rank
// generates the same dataset from a seed and trains on its replica's share of
// each global batch (DataShard). Per-replica gradients are sums over the
// replica's samples divided by the global batch size, and the strategy sums
// them over replicas: the exact mean gradient of the global batch, as one
// replica would compute it. So the chief also trains a 1-replica reference
// with the same global batches in-process, and prints both loss curves: the
// synchronous strategies match it up to float summation order. Each epoch
// prints the replica hash and verify_replicas()'s verdict. With --per-rank,
// every rank also prints its own line per epoch (its replica hash, the step
// time and samples/s), so that two machines each show the same hash: the
// two-laptop demo (README, Two machines). --hidden N widens the hidden layer
// (default 32), so that the gradient, 18 N + 1 floats, loads a network link;
// --bucket-kib K fuses gradients into buckets of K KiB (default 4: several
// buckets even for the small model, to show the mechanism).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "braid/mirrored.hpp"

namespace mr = braid::mirrored;

namespace {

constexpr int kInputs = 16;

struct Config {
  std::string strategy = "multi_worker_mirrored";
  int local_replicas = 2;
  int servers = 1;
  int staleness = 2;
  int epochs = 5;
  std::int64_t samples = 4096;
  std::int64_t global_batch = 64;
  double learning_rate = 0.5;
  double momentum = 0.9;
  std::string compression = "none";
  std::string save_path;
  std::string restore_path;
  bool reference = true;
  bool per_rank = false;  // --per-rank: every rank prints a line per epoch
  int hidden = 32;        // --hidden: tanh units; the gradient is 18 x hidden + 1 floats
  std::size_t bucket_bytes = 4096;  // --bucket-kib: small by default, to show several buckets
};

// The dataset: the same on every rank (seeded), labels from a fixed teacher.
struct Dataset {
  std::vector<float> x;  // samples x kInputs
  std::vector<float> y;  // 0 or 1
};

Dataset make_dataset(std::int64_t samples) {
  std::mt19937 rng(20261122);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> teacher(kInputs * 4 + 4);
  for (auto& t : teacher) t = normal(rng);
  Dataset d;
  d.x.resize(static_cast<std::size_t>(samples) * kInputs);
  d.y.resize(static_cast<std::size_t>(samples));
  for (std::int64_t s = 0; s < samples; ++s) {
    float* x = &d.x[static_cast<std::size_t>(s) * kInputs];
    for (int i = 0; i < kInputs; ++i) x[i] = normal(rng);
    float out = 0;
    for (int h = 0; h < 4; ++h) {
      float a = teacher[static_cast<std::size_t>(kInputs * 4 + h)];
      for (int i = 0; i < kInputs; ++i) a += teacher[static_cast<std::size_t>(h * kInputs + i)] * x[i];
      out += (h % 2 ? -1.f : 1.f) * std::tanh(a);
    }
    d.y[static_cast<std::size_t>(s)] = out > 0 ? 1.f : 0.f;
  }
  return d;
}

// Parameters and gradients as spans: w1 [in, hidden], b1 [hidden], w2 [hidden], b2 [1].
struct Params {
  std::span<float> w1, b1, w2, b2;
};

// Adds the gradient of sum(loss over `batch`) / scale into g, returns the loss sum.
double forward_backward(const Dataset& d, std::span<const std::int64_t> batch, const Params& p, const Params& g,
                        double scale) {
  double loss = 0;
  const int kHidden = static_cast<int>(p.b1.size());
  thread_local std::vector<float> hidden;
  hidden.resize(p.b1.size());
  for (std::int64_t s : batch) {
    const float* x = &d.x[static_cast<std::size_t>(s) * kInputs];
    float z = p.b2[0];
    for (int h = 0; h < kHidden; ++h) {
      float a = p.b1[static_cast<std::size_t>(h)];
      for (int i = 0; i < kInputs; ++i) a += p.w1[static_cast<std::size_t>(i * kHidden + h)] * x[i];
      hidden[h] = std::tanh(a);
      z += p.w2[static_cast<std::size_t>(h)] * hidden[h];
    }
    const float y = d.y[static_cast<std::size_t>(s)];
    const float prob = 1.f / (1.f + std::exp(-z));
    loss += -(y * std::log(std::max(prob, 1e-7f)) + (1 - y) * std::log(std::max(1 - prob, 1e-7f)));
    const float dz = static_cast<float>((prob - y) / scale);
    g.b2[0] += dz;
    for (int h = 0; h < kHidden; ++h) {
      g.w2[static_cast<std::size_t>(h)] += dz * hidden[h];
      const float da = dz * p.w2[static_cast<std::size_t>(h)] * (1 - hidden[h] * hidden[h]);
      g.b1[static_cast<std::size_t>(h)] += da;
      for (int i = 0; i < kInputs; ++i) g.w1[static_cast<std::size_t>(i * kHidden + h)] += da * x[i];
    }
  }
  return loss;
}

std::vector<float> initial_values(std::size_t count, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> v(count);
  for (auto& x : v) x = normal(rng);
  return v;
}

// The 1-replica reference: plain SGD with momentum over the same global batches.
std::vector<double> reference_losses(const Config& cfg, const Dataset& d, const std::vector<std::vector<float>>& init) {
  std::vector<std::vector<float>> p = init, v, g;
  for (auto& x : p) v.emplace_back(x.size(), 0.f), g.emplace_back(x.size(), 0.f);
  Params params{p[0], p[1], p[2], p[3]}, grads{g[0], g[1], g[2], g[3]};
  mr::DataShard shard(mr::ShardOptions{.dataset_size = cfg.samples, .global_batch_size = cfg.global_batch, .seed = 7},
                      0, 1);
  std::vector<double> losses;
  for (int epoch = 0; epoch < cfg.epochs; ++epoch) {
    double total = 0, count = 0;
    for (std::int64_t b = 0; b < shard.batches_per_epoch(); ++b) {
      auto batch = shard.batch(epoch, b);
      for (auto& x : g) std::fill(x.begin(), x.end(), 0.f);
      total += forward_backward(d, batch, params, grads, static_cast<double>(shard.global_batch_samples(b)));
      count += static_cast<double>(batch.size());
      for (std::size_t t = 0; t < p.size(); ++t)
        for (std::size_t i = 0; i < p[t].size(); ++i) {
          double step = cfg.momentum * static_cast<double>(v[t][i]) + static_cast<double>(g[t][i]);
          v[t][i] = static_cast<float>(step);
          p[t][i] = static_cast<float>(static_cast<double>(p[t][i]) - cfg.learning_rate * step);
        }
    }
    losses.push_back(total / count);
  }
  return losses;
}

mr::Compression parse_compression(const std::string& text) {
  if (text == "none") return mr::Compression::none;
  if (text == "f16") return mr::Compression::f16;
  if (text == "bf16") return mr::Compression::bf16;
  throw braid::InvalidArgument("--compression '" + text + "' is not none, f16 or bf16");
}

std::unique_ptr<mr::Strategy> make_strategy(const Config& cfg, std::shared_ptr<mr::Optimizer> optimizer) {
  mr::StrategyOptions options;
  options.gradients.aggregation = mr::Aggregation::sum;  // gradients are already divided by the global batch
  options.gradients.compression = parse_compression(cfg.compression);
  options.gradients.bucket_bytes = cfg.bucket_bytes;
  if (cfg.strategy == "multi_worker_mirrored") return mr::MultiWorkerMirrored::from_env(options);
  if (cfg.strategy == "mirrored") return std::make_unique<mr::Mirrored>(braid::Comm::from_env(), cfg.local_replicas, options);
  if (cfg.strategy == "central_storage")
    return std::make_unique<mr::CentralStorage>(braid::Comm::from_env(), options);
  if (cfg.strategy == "parameter_server") {
    mr::ParameterServerOptions ps;
    ps.servers = cfg.servers;
    ps.staleness = cfg.staleness;
    ps.optimizer = std::move(optimizer);
    ps.strategy = options;
    return mr::ParameterServer::from_env(ps);
  }
  throw braid::InvalidArgument("--strategy '" + cfg.strategy +
                               "' is not multi_worker_mirrored, mirrored, central_storage or parameter_server");
}

Config parse_args(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw braid::InvalidArgument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--strategy") cfg.strategy = value();
    else if (a == "--local-replicas") cfg.local_replicas = std::stoi(value());
    else if (a == "--servers") cfg.servers = std::stoi(value());
    else if (a == "--staleness") cfg.staleness = std::stoi(value());
    else if (a == "--epochs") cfg.epochs = std::stoi(value());
    else if (a == "--samples") cfg.samples = std::stoll(value());
    else if (a == "--global-batch") cfg.global_batch = std::stoll(value());
    else if (a == "--lr") cfg.learning_rate = std::stod(value());
    else if (a == "--momentum") cfg.momentum = std::stod(value());
    else if (a == "--compression") cfg.compression = value();
    else if (a == "--save") cfg.save_path = value();
    else if (a == "--restore") cfg.restore_path = value();
    else if (a == "--no-reference") cfg.reference = false;
    else if (a == "--per-rank") cfg.per_rank = true;
    else if (a == "--bucket-kib") cfg.bucket_bytes = static_cast<std::size_t>(std::stoul(value())) * 1024;
    else if (a == "--hidden") {
      cfg.hidden = std::stoi(value());
      if (cfg.hidden < 1 || cfg.hidden > (1 << 20)) throw braid::InvalidArgument("--hidden must be in [1, 1048576]");
    }
    else throw braid::InvalidArgument("unknown argument '" + a + "' (see the comment at the top of train_mirrored.cpp)");
  }
  return cfg;
}

std::string braid_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

int train(const Config& cfg) {
  const Dataset data = make_dataset(cfg.samples);
  auto sgd = std::make_shared<mr::Sgd>(cfg.learning_rate, cfg.momentum);
  auto strategy = make_strategy(cfg, sgd);
  auto* ps = dynamic_cast<mr::ParameterServer*>(strategy.get());
  const bool chief = strategy->is_chief();

  // Every rank draws its own random initial values; the chief's win.
  Params params;
  mr::MirroredVariable<float> w1, b1, w2, b2;
  mr::MirroredVariable<double> loss_sum, seen;
  std::vector<std::vector<float>> init;
  {
    auto scope = strategy->scope();
    unsigned seed = 1000u + static_cast<unsigned>(strategy->comm()->rank());
    const std::int64_t kHidden = cfg.hidden;
    const auto units = static_cast<std::size_t>(cfg.hidden);
    init = {initial_values(kInputs * units, seed, 0.3f), std::vector<float>(units, 0.f),
            initial_values(units, seed + 1, 0.3f), std::vector<float>(1, 0.f)};
    w1 = strategy->create_variable<float>("dense1/kernel", {kInputs, kHidden}, init[0]);
    b1 = strategy->create_variable<float>("dense1/bias", {kHidden}, init[1]);
    w2 = strategy->create_variable<float>("dense2/kernel", {kHidden, 1}, init[2]);
    b2 = strategy->create_variable<float>("dense2/bias", {1}, init[3]);
    // The Mean metric: a sum and a count that each replica adds to locally
    // and that are summed over replicas when read.
    const mr::VariableOptions metric{.synchronization = mr::Synchronization::on_read,
                                     .aggregation = mr::Aggregation::sum, .trainable = false};
    const std::vector<double> zero{0.0};
    loss_sum = strategy->create_variable<double>("metrics/loss_sum", {}, zero, metric);
    seen = strategy->create_variable<double>("metrics/samples", {}, zero, metric);
  }
  // The reference starts from the values the replicas really start from.
  init = {std::vector<float>(w1.value().begin(), w1.value().end()), std::vector<float>(b1.value().begin(), b1.value().end()),
          std::vector<float>(w2.value().begin(), w2.value().end()), std::vector<float>(b2.value().begin(), b2.value().end())};
  strategy->create_slots(*sgd);
  int first_epoch = 0;
  if (!cfg.restore_path.empty()) {
    auto restored = strategy->restore(cfg.restore_path);
    first_epoch = static_cast<int>(restored.position.epoch);
    if (chief)
      std::printf("restored '%s' (step %lld, epoch %d, saved by %d replicas) onto %d replicas\n",
                  cfg.restore_path.c_str(), static_cast<long long>(restored.position.step), first_epoch,
                  restored.replicas_when_saved, strategy->num_replicas_in_sync());
  }

  if (ps != nullptr && ps->is_server()) {
    ps->serve();
    if (!cfg.save_path.empty()) strategy->save(cfg.save_path, {.epoch = cfg.epochs});
    std::printf("parameter server: applied %lld updates, largest staleness %d (bound %d)\n",
                static_cast<long long>(ps->updates_applied()), ps->max_staleness_seen(), cfg.staleness);
    return 0;
  }

  std::vector<double> reference;
  if (chief && cfg.reference && ps == nullptr && first_epoch == 0) reference = reference_losses(cfg, data, init);
  if (chief)
    std::printf("%s: %d replicas (%d per process), %lld samples, global batch %lld, compression %s\n",
                std::string(strategy->name()).c_str(), strategy->num_replicas_in_sync(), strategy->local_replicas(),
                static_cast<long long>(cfg.samples), static_cast<long long>(cfg.global_batch), cfg.compression.c_str());
  const mr::ShardOptions sharding{.dataset_size = cfg.samples, .global_batch_size = cfg.global_batch, .seed = 7};
  bool consistent = true;
  double worst = 0;
  for (int epoch = first_epoch; epoch < cfg.epochs; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    strategy->run([&](mr::ReplicaContext& ctx) {
      const mr::DataShard shard = strategy->shard(sharding, ctx);
      auto& grads = ctx.gradients();
      Params p{w1.value(ctx), b1.value(ctx), w2.value(ctx), b2.value(ctx)};
      Params g{grads.of(w1), grads.of(b1), grads.of(w2), grads.of(b2)};
      for (std::int64_t b = 0; b < shard.batches_per_epoch(); ++b) {
        auto batch = shard.batch(epoch, b);
        // Asynchronous workers apply their own gradients: a per-replica mean.
        double scale = ps ? static_cast<double>(batch.size()) : static_cast<double>(shard.global_batch_samples(b));
        double loss = forward_backward(data, batch, p, g, scale);
        ctx.assign_add(loss_sum, std::span<const double>(&loss, 1));
        double n = static_cast<double>(batch.size());
        ctx.assign_add(seen, std::span<const double>(&n, 1));
        ctx.apply_gradients(*sgd);
      }
    });
    double total = strategy->read(loss_sum).at(0), count = strategy->read(seen).at(0);
    const std::vector<double> zero{0.0};
    strategy->assign(loss_sum.variable(), std::as_bytes(std::span(zero)));
    strategy->assign(seen.variable(), std::as_bytes(std::span(zero)));
    if (ps != nullptr) {
      if (chief) std::printf("  epoch %d  loss %.6f  (asynchronous: replicas differ until finish)\n", epoch + 1, total / count);
      continue;
    }
    const double epoch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    auto report = strategy->verify_replicas();
    consistent = consistent && report.consistent();
    if (cfg.per_rank) {
      const long long steps = (cfg.samples + cfg.global_batch - 1) / cfg.global_batch;
      std::printf("rank %d on %s: epoch %d  replica hash %016llx  step %.2f ms  %.0f samples/s\n",
                  strategy->comm()->rank(), braid_host_name().c_str(), epoch + 1,
                  static_cast<unsigned long long>(strategy->replica_hash()), 1e3 * epoch_s / static_cast<double>(steps),
                  static_cast<double>(cfg.samples) / epoch_s);
      std::fflush(stdout);
    }
    if (chief) {
      std::printf("  epoch %d  loss %.6f", epoch + 1, total / count);
      if (static_cast<std::size_t>(epoch) < reference.size()) {
        double ref = reference[static_cast<std::size_t>(epoch)];
        double diff = std::abs(total / count - ref) / std::max(1e-12, std::abs(ref));
        worst = std::max(worst, diff);
        std::printf("  (1 replica: %.6f, rel. diff %.1e)", ref, diff);
      }
      std::printf("  replica hash %016llx  %s\n", static_cast<unsigned long long>(strategy->replica_hash()),
                  report.describe().c_str());
    }
  }
  if (ps != nullptr) {
    ps->finish();
    auto report = strategy->verify_replicas();
    consistent = report.consistent();
    if (chief)
      std::printf("  after finish: replica hash %016llx  %s\n", static_cast<unsigned long long>(strategy->replica_hash()),
                  report.describe().c_str());
  }
  if (!cfg.save_path.empty()) {
    strategy->save(cfg.save_path, {.epoch = cfg.epochs});
    if (chief) std::printf("saved '%s'\n", cfg.save_path.c_str());
  }
  if (chief) {
    std::printf("Summary: %s, %d replicas: replicas %s", std::string(strategy->name()).c_str(),
                strategy->num_replicas_in_sync(),
                !consistent ? "DIVERGED" : ps ? "identical after finish" : "identical after every epoch");
    if (!reference.empty()) std::printf(", loss within %.1e of the 1-replica run", worst);
    std::printf(".\n");
  }
  return consistent ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return train(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid-train: %s\n", e.what());
    return 1;
  }
}
