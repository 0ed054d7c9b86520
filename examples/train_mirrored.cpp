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
// two-laptop demo (docs/two-machines.md). --trace FILE writes each rank's
// timeline (BRAID_TRACE, %r: the rank): every step's backward pass by layer
// beside its gradient buckets' all-reduces (docs/tracing.md).
// --elastic (under braid-run --elastic; docs/elastic.md): a replica that is
// lost leaves the others training from where they are, and the same command
// run again joins the running job and takes the chief's state; every rank
// prints its replica hash per epoch with --per-rank. --step-ms N pauses N ms
// after every step, a stand-in for a bigger model's compute.
// --hidden N widens the hidden layer
// (default 32), so that the gradient, 18 N + 1 floats, loads a network link;
// --bucket-kib K fuses gradients into buckets of K KiB (default 4: several
// buckets even for the small model, to show the mechanism).
//
// Checkpoints and a peer leaving: with --checkpoint-dir DIR --checkpoint-every
// N the chief writes DIR/braid-train.ckpt every N steps (global batches),
// atomically (the mirrored layer's save(): a temporary file, synced and
// renamed over the last one), with the position in the data (epoch and batch).
// If a peer is lost mid-training (killed, its machine or network gone), every
// surviving rank stops with one message naming the lost rank, where the last
// checkpoint stands (the chief reads it back and checks it), and the command
// that resumes from it; the exit status is 3. --resume restores that
// checkpoint (the chief reads it and broadcasts it, slots included) and
// continues at its epoch and batch with the same data order, so the weights
// at the end equal, bit for bit, those of a run that was never interrupted
// (with --compression none: a compressed run's error feedback is not in the
// checkpoint). Without a checkpoint in DIR yet, --resume starts from the
// beginning (or from --restore's file), so one command serves both.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.h"
#include "braid/mirrored.hpp"
#include "train_recovery.hpp"

namespace mr = braid::mirrored;

namespace {

constexpr int kInputs = 16;
// The exit status of a run that lost a peer: it can be resumed.
constexpr int kExitPeerLost = 3;
constexpr const char* kCheckpointFile = "braid-train.ckpt";

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
  std::string checkpoint_dir;         // --checkpoint-dir: where the chief writes braid-train.ckpt
  std::int64_t checkpoint_every = 0;  // --checkpoint-every N: steps (global batches) between checkpoints
  bool resume = false;                // --resume: continue from the checkpoint in checkpoint_dir
  std::string trace;                  // --trace FILE: BRAID_TRACE for this run (%r: the rank)
  bool elastic = false;               // --elastic: go on without a lost replica, take in one that joins
  int step_ms = 0;                    // --step-ms: a pause after every step (a bigger model's compute)
  std::string resume_command;         // this rank's command line with --resume, for the advice
  std::string checkpoint_path() const { return (std::filesystem::path(checkpoint_dir) / kCheckpointFile).string(); }
};

// Where training stands, kept outside the training function so that the
// advice after a lost peer can say it.
struct Progress {
  std::int64_t steps_per_epoch = 0;
  std::int64_t epoch = 0;  // 0-based index of the epoch being trained
  std::int64_t batch = 0;  // batches of it done
  std::optional<mr::TrainingPosition> checkpoint;  // the last one written (every rank learns it)
  bool saving = false;
};

// "step 200 (epoch 7, batch 8 of 32)"; at an epoch's end, "step 192 (end of epoch 6)".
std::string describe_position(std::int64_t epoch, std::int64_t batch, std::int64_t steps_per_epoch) {
  const std::int64_t step = epoch * steps_per_epoch + batch;
  std::string where = batch == 0 && epoch > 0 ? "end of epoch " + std::to_string(epoch)
                                              : "epoch " + std::to_string(epoch + 1) + ", batch " +
                                                    std::to_string(batch) + " of " + std::to_string(steps_per_epoch);
  return "step " + std::to_string(step) + " (" + where + ")";
}

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

// Adds the gradient of sum(loss over `batch`) / scale into g, returns the
// loss sum. The backward pass runs layer by layer, the output layer first,
// and says when each gradient is final (`ready`: b2 and w2, then b1, then
// w1), so a strategy can start a bucket's all-reduce while the rest of the
// pass runs (GradientOptions::overlap; braid-train --trace shows it). Each
// gradient sums its samples in batch order, as a one-pass loop would.
double forward_backward(const Dataset& d, std::span<const std::int64_t> batch, const Params& p, const Params& g,
                        double scale, const std::function<void(int layer)>& ready = {}) {
  double loss = 0;
  const int kHidden = static_cast<int>(p.b1.size());
  thread_local std::vector<float> hidden, dz;
  hidden.resize(batch.size() * p.b1.size());
  dz.resize(batch.size());
  {
    braid::TraceSpan span("output layer");
    for (std::size_t k = 0; k < batch.size(); ++k) {
      const float* x = &d.x[static_cast<std::size_t>(batch[k]) * kInputs];
      float* h_k = &hidden[k * p.b1.size()];
      float z = p.b2[0];
      for (int h = 0; h < kHidden; ++h) {
        float a = p.b1[static_cast<std::size_t>(h)];
        for (int i = 0; i < kInputs; ++i) a += p.w1[static_cast<std::size_t>(i * kHidden + h)] * x[i];
        h_k[h] = std::tanh(a);
        z += p.w2[static_cast<std::size_t>(h)] * h_k[h];
      }
      const float y = d.y[static_cast<std::size_t>(batch[k])];
      const float prob = 1.f / (1.f + std::exp(-z));
      loss += -(y * std::log(std::max(prob, 1e-7f)) + (1 - y) * std::log(std::max(1 - prob, 1e-7f)));
      dz[k] = static_cast<float>((prob - y) / scale);
      g.b2[0] += dz[k];
      for (int h = 0; h < kHidden; ++h) g.w2[static_cast<std::size_t>(h)] += dz[k] * h_k[h];
    }
  }
  if (ready) ready(2);
  // da = dz w2 (1 - tanh^2): the hidden layer's gradients, b1 first.
  auto da = [&](std::size_t k, int h) {
    const float t = hidden[k * p.b1.size() + static_cast<std::size_t>(h)];
    return dz[k] * p.w2[static_cast<std::size_t>(h)] * (1 - t * t);
  };
  {
    braid::TraceSpan span("hidden bias");
    for (std::size_t k = 0; k < batch.size(); ++k)
      for (int h = 0; h < kHidden; ++h) g.b1[static_cast<std::size_t>(h)] += da(k, h);
  }
  if (ready) ready(1);
  {
    braid::TraceSpan span("hidden weights");
    for (std::size_t k = 0; k < batch.size(); ++k) {
      const float* x = &d.x[static_cast<std::size_t>(batch[k]) * kInputs];
      for (int h = 0; h < kHidden; ++h) {
        const float a = da(k, h);
        for (int i = 0; i < kInputs; ++i) g.w1[static_cast<std::size_t>(i * kHidden + h)] += a * x[i];
      }
    }
  }
  if (ready) ready(0);
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
  options.elastic.enabled = cfg.elastic;
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
    if (a == "--version") {
      int v = 0;
      braid_get_version(&v);  // the library's, which may be newer than these headers
      std::printf("braid-train %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
      std::exit(0);
    }
    else if (a == "--strategy") cfg.strategy = value();
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
    else if (a == "--checkpoint-dir") cfg.checkpoint_dir = value();
    else if (a == "--checkpoint-every") {
      cfg.checkpoint_every = std::stoll(value());
      if (cfg.checkpoint_every < 1) throw braid::InvalidArgument("--checkpoint-every must be at least 1 (steps)");
    }
    else if (a == "--resume") cfg.resume = true;
    else if (a == "--elastic") cfg.elastic = true;
    else if (a == "--step-ms") {
      cfg.step_ms = std::stoi(value());
      if (cfg.step_ms < 0 || cfg.step_ms > 60000) throw braid::InvalidArgument("--step-ms must be in [0, 60000]");
    }
    else if (a == "--trace") cfg.trace = value();
    else if (a == "--bucket-kib") cfg.bucket_bytes = static_cast<std::size_t>(std::stoul(value())) * 1024;
    else if (a == "--hidden") {
      cfg.hidden = std::stoi(value());
      if (cfg.hidden < 1 || cfg.hidden > (1 << 20)) throw braid::InvalidArgument("--hidden must be in [1, 1048576]");
    }
    else throw braid::InvalidArgument("unknown argument '" + a + "' (see the comment at the top of train_mirrored.cpp)");
  }
  if ((cfg.checkpoint_every > 0 || cfg.resume) && cfg.checkpoint_dir.empty())
    throw braid::InvalidArgument("--checkpoint-every and --resume need --checkpoint-dir DIR");
  if ((!cfg.checkpoint_dir.empty() || cfg.resume) && cfg.strategy == "parameter_server")
    throw braid::InvalidArgument("--checkpoint-dir and --resume are for the synchronous strategies (a parameter "
                                 "server's asynchronous run cannot be resumed identically); use --save and --restore");
  if (cfg.elastic && cfg.strategy != "multi_worker_mirrored")
    throw braid::InvalidArgument("--elastic is for --strategy multi_worker_mirrored");
  if (cfg.elastic && (cfg.resume || cfg.checkpoint_every > 0))
    throw braid::InvalidArgument("--elastic goes on without a lost replica instead of resuming from a checkpoint: "
                                 "leave out --resume and --checkpoint-every");
  cfg.resume_command = braid_train::resume_command(argc, argv);
  return cfg;
}

std::string braid_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// Restores what --restore or --resume asks for; returns the position to start
// from (the beginning when there is nothing to restore).
mr::TrainingPosition restore_requested(const Config& cfg, mr::Strategy& strategy, std::int64_t steps_per_epoch) {
  std::string path = cfg.restore_path;
  if (cfg.resume) {
    // Only the chief reads checkpoints; it tells the others whether there is one.
    std::error_code unreadable;  // a checkpoint that cannot even be looked at is reported by restore()
    std::int32_t found =
        strategy.is_chief() && (std::filesystem::exists(cfg.checkpoint_path(), unreadable) || unreadable);
    if (braid::Comm* comm = strategy.comm(); comm != nullptr && comm->size() > 1)
      comm->broadcast(std::span(&found, 1), 0);
    if (found) path = cfg.checkpoint_path();
    else if (strategy.is_chief())
      std::printf("--resume: no checkpoint at '%s' yet: starting from %s\n", cfg.checkpoint_path().c_str(),
                  path.empty() ? "the beginning" : ("'" + path + "'").c_str());
  }
  if (path.empty()) return {};
  auto restored = strategy.restore(path);
  if (strategy.is_chief())
    std::printf("%s '%s': %s, saved by %d replicas, onto %d replicas\n",
                path == cfg.restore_path ? "restored" : "resumed from", path.c_str(),
                describe_position(restored.position.epoch, restored.position.batch_in_epoch, steps_per_epoch).c_str(),
                restored.replicas_when_saved, strategy.num_replicas_in_sync());
  return restored.position;
}

// The model's variables and its Mean metric (a sum and a count that each
// replica adds to locally and that are summed over replicas when read).
struct Model {
  mr::MirroredVariable<float> w1, b1, w2, b2;
  mr::MirroredVariable<double> loss_sum, seen;
};

// Batch `b` of `epoch` on this replica: forward and backward, the loss
// metric, the optimizer. Synchronous strategies start a bucket once its
// gradients are final (each layer's, as the backward pass ends it);
// asynchronous workers (a parameter server) apply their own gradients, a
// per-replica mean.
void train_batch(mr::ReplicaContext& ctx, const mr::DataShard& shard, std::int64_t epoch, std::int64_t b,
                 const Dataset& data, Model& m, mr::Optimizer& optimizer, bool asynchronous, int pause_ms) {
  auto& grads = ctx.gradients();
  Params p{m.w1.value(ctx), m.b1.value(ctx), m.w2.value(ctx), m.b2.value(ctx)};
  Params g{grads.of(m.w1), grads.of(m.b1), grads.of(m.w2), grads.of(m.b2)};
  auto batch = shard.batch(epoch, b);
  double scale = asynchronous ? static_cast<double>(batch.size()) : static_cast<double>(shard.global_batch_samples(b));
  braid::TraceSpan step_span("step");
  auto ready = [&](int layer) {
    if (asynchronous) return;
    if (layer == 2) grads.ready(m.b2), grads.ready(m.w2);
    else if (layer == 1) grads.ready(m.b1);
    else grads.ready(m.w1);
  };
  double loss = forward_backward(data, batch, p, g, scale, ready);
  ctx.assign_add(m.loss_sum, std::span<const double>(&loss, 1));
  double n = static_cast<double>(batch.size());
  ctx.assign_add(m.seen, std::span<const double>(&n, 1));
  {
    braid::TraceSpan apply_span("apply_gradients");
    ctx.apply_gradients(optimizer);
  }
  if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
}

// The epoch's mean loss over every replica; the metric starts again at zero.
double take_epoch_loss(mr::Strategy& strategy, Model& m) {
  const double total = strategy.read(m.loss_sum).at(0), count = strategy.read(m.seen).at(0);
  const std::vector<double> zero{0.0};
  strategy.assign(m.loss_sum.variable(), std::as_bytes(std::span(zero)));
  strategy.assign(m.seen.variable(), std::as_bytes(std::span(zero)));
  return total / count;
}

// --elastic: one elastic_step per global batch. A lost replica leaves the
// others going from the new chief's state; a process that joins (the same
// command run again) is admitted before a step and takes the chief's state.
// The global batch stays the same, re-divided over the replicas in sync, so
// the loss follows the course of an uninterrupted run. Every member prints
// its replica hash at every epoch's end.
int train_elastic(const Config& cfg, mr::Strategy& strategy, mr::Sgd& sgd, const Dataset& data, Progress& progress,
                  Model& model) {
  const mr::ShardOptions sharding{.dataset_size = cfg.samples, .global_batch_size = cfg.global_batch, .seed = 7};
  const std::int64_t steps_per_epoch = progress.steps_per_epoch;
  auto say_change = [&](const mr::MembershipChange& change, const mr::TrainingPosition& at) {
    if (!change.changed()) return;
    braid::Comm* comm = strategy.comm();
    std::printf("[elastic] rank %d of %d on %s: %s; going on at %s%s\n", comm->rank(), comm->size(),
                braid_host_name().c_str(), change.describe().c_str(),
                describe_position(at.epoch, at.batch_in_epoch, steps_per_epoch).c_str(),
                strategy.is_chief() ? " as the chief" : "");
    std::fflush(stdout);
  };
  if (strategy.is_chief() && !strategy.comm()->joined_running_job())
    std::printf("%s (elastic): %d replicas, %lld samples, global batch %lld\n", std::string(strategy.name()).c_str(),
                strategy.num_replicas_in_sync(), static_cast<long long>(cfg.samples),
                static_cast<long long>(cfg.global_batch));
  mr::TrainingPosition at{};
  double last_loss = 0;
  bool consistent = true;
  while (at.epoch < cfg.epochs) {
    progress.epoch = at.epoch;
    progress.batch = at.batch_in_epoch;
    mr::MembershipChange change = strategy.elastic_step(at, [&](mr::ReplicaContext& ctx) {
      // The position is the chief's once elastic_step admitted someone.
      train_batch(ctx, strategy.shard(sharding, ctx), at.epoch, at.batch_in_epoch, data, model, sgd, false, cfg.step_ms);
    });
    say_change(change, at);
    if (!change.step_done) continue;
    ++at.step;
    if (++at.batch_in_epoch < steps_per_epoch) continue;
    // The epoch's end: its metrics and hashes, at the next epoch's position
    // (a replica lost now leaves the others there).
    const int epoch = static_cast<int>(at.epoch);
    at = mr::TrainingPosition{.step = at.step, .epoch = at.epoch + 1, .batch_in_epoch = 0};
    try {
      last_loss = take_epoch_loss(strategy, model);
      const mr::ReplicaReport report = strategy.verify_replicas();
      consistent = consistent && report.consistent();
      braid::Comm* comm = strategy.comm();
      if (cfg.per_rank) {
        std::printf("rank %d of %d on %s: epoch %d  replica hash %016llx\n", comm->rank(), comm->size(),
                    braid_host_name().c_str(), epoch + 1, static_cast<unsigned long long>(strategy.replica_hash()));
        std::fflush(stdout);
      }
      if (strategy.is_chief()) {
        std::printf("  epoch %d  loss %.6f  %d replicas  replica hash %016llx  %s\n", epoch + 1, last_loss,
                    strategy.num_replicas_in_sync(), static_cast<unsigned long long>(strategy.replica_hash()),
                    report.describe().c_str());
        std::fflush(stdout);
      }
    } catch (const braid::Error& e) {
      if (e.code() != braid::ErrorCode::peer_lost && e.code() != braid::ErrorCode::timeout &&
          e.code() != braid::ErrorCode::aborted)
        throw;
      say_change(strategy.recover(at), at);
    }
  }
  if (strategy.is_chief())
    std::printf("Summary: %s (elastic), %d replicas at the end: replicas %s, final loss %.6f.\n",
                std::string(strategy.name()).c_str(), strategy.num_replicas_in_sync(),
                consistent ? "identical after every epoch" : "DIVERGED", last_loss);
  return consistent ? 0 : 1;
}

int train_steps(const Config& cfg, mr::Strategy& strategy_ref, const std::shared_ptr<mr::Sgd>& sgd,
                const Dataset& data, Progress& progress) {
  mr::Strategy* strategy = &strategy_ref;
  auto* ps = dynamic_cast<mr::ParameterServer*>(strategy);
  const bool chief = strategy->is_chief();

  // Every rank draws its own random initial values; the chief's win.
  Model model;
  auto& [w1, b1, w2, b2, loss_sum, seen] = model;
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
    // The Mean metric (Model).
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
  if (cfg.elastic) return train_elastic(cfg, *strategy, *sgd, data, progress, model);
  const mr::TrainingPosition start = restore_requested(cfg, *strategy, progress.steps_per_epoch);
  const int first_epoch = static_cast<int>(start.epoch);
  progress.epoch = start.epoch;
  progress.batch = start.batch_in_epoch;

  if (ps != nullptr && ps->is_server()) {
    ps->serve();
    if (!cfg.save_path.empty()) strategy->save(cfg.save_path, {.epoch = cfg.epochs});
    std::printf("parameter server: applied %lld updates, largest staleness %d (bound %d)\n",
                static_cast<long long>(ps->updates_applied()), ps->max_staleness_seen(), cfg.staleness);
    return 0;
  }

  std::vector<double> reference;
  if (chief && cfg.reference && ps == nullptr && first_epoch == 0 && start.batch_in_epoch == 0)
    reference = reference_losses(cfg, data, init);
  if (chief)
    std::printf("%s: %d replicas (%d per process), %lld samples, global batch %lld, compression %s\n",
                std::string(strategy->name()).c_str(), strategy->num_replicas_in_sync(), strategy->local_replicas(),
                static_cast<long long>(cfg.samples), static_cast<long long>(cfg.global_batch), cfg.compression.c_str());
  const mr::ShardOptions sharding{.dataset_size = cfg.samples, .global_batch_size = cfg.global_batch, .seed = 7};
  const std::int64_t steps_per_epoch = progress.steps_per_epoch;
  if (!cfg.checkpoint_dir.empty() && chief) {
    std::error_code ignored;  // a directory that cannot be made fails the first save, on every rank
    std::filesystem::create_directories(cfg.checkpoint_dir, ignored);
  }
  // Saves the position after `batch` batches of epoch index `epoch`.
  auto checkpoint = [&](std::int64_t epoch, std::int64_t batch) {
    progress.saving = true;
    strategy->save(cfg.checkpoint_path(), {.epoch = epoch, .batch_in_epoch = batch});
    progress.saving = false;
    progress.checkpoint = mr::TrainingPosition{.epoch = epoch, .batch_in_epoch = batch};
    if (chief) {
      std::printf("checkpoint: %s written to '%s'\n", describe_position(epoch, batch, steps_per_epoch).c_str(),
                  cfg.checkpoint_path().c_str());
      std::fflush(stdout);
    }
  };
  auto checkpoint_due = [&](std::int64_t epoch, std::int64_t batch) {
    return cfg.checkpoint_every > 0 && (epoch * steps_per_epoch + batch) % cfg.checkpoint_every == 0;
  };
  bool consistent = true;
  double worst = 0;
  for (int epoch = first_epoch; epoch < cfg.epochs; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    progress.epoch = epoch;
    if (epoch != first_epoch) progress.batch = 0;
    // One run() per stretch of batches between checkpoints (save() is a
    // cross-replica call).
    while (progress.batch < steps_per_epoch) {
      const std::int64_t from = progress.batch;
      std::int64_t to = steps_per_epoch;
      if (cfg.checkpoint_every > 0)
        to = std::min(to, from + cfg.checkpoint_every - (epoch * steps_per_epoch + from) % cfg.checkpoint_every);
      strategy->run([&](mr::ReplicaContext& ctx) {
        const mr::DataShard shard = strategy->shard(sharding, ctx);
        for (std::int64_t b = from; b < to; ++b) {
          if (ctx.local_replica() == 0) progress.batch = b;  // read only after run() returns or throws
          train_batch(ctx, shard, epoch, b, data, model, *sgd, ps != nullptr, cfg.step_ms);
        }
      });
      progress.batch = to;
      if (to < steps_per_epoch && checkpoint_due(epoch, to)) checkpoint(epoch, to);
    }
    const double loss = take_epoch_loss(*strategy, model);
    if (ps != nullptr) {
      if (chief) std::printf("  epoch %d  loss %.6f  (asynchronous: replicas differ until finish)\n", epoch + 1, loss);
      continue;
    }
    const double epoch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    auto report = strategy->verify_replicas();
    consistent = consistent && report.consistent();
    if (cfg.per_rank) {
      std::printf("rank %d on %s: epoch %d  replica hash %016llx  step %.2f ms  %.0f samples/s\n",
                  strategy->comm()->rank(), braid_host_name().c_str(), epoch + 1,
                  static_cast<unsigned long long>(strategy->replica_hash()),
                  1e3 * epoch_s / static_cast<double>(steps_per_epoch), static_cast<double>(cfg.samples) / epoch_s);
      std::fflush(stdout);
    }
    if (chief) {
      std::printf("  epoch %d  loss %.6f", epoch + 1, loss);
      if (static_cast<std::size_t>(epoch) < reference.size()) {
        double ref = reference[static_cast<std::size_t>(epoch)];
        double diff = std::abs(loss - ref) / std::max(1e-12, std::abs(ref));
        worst = std::max(worst, diff);
        std::printf("  (1 replica: %.6f, rel. diff %.1e)", ref, diff);
      }
      std::printf("  replica hash %016llx  %s\n", static_cast<unsigned long long>(strategy->replica_hash()),
                  report.describe().c_str());
      std::fflush(stdout);
    }
    // An epoch's last checkpoint comes after its metrics are read and reset,
    // so that a resumed run starts the next epoch with clean metrics.
    if (checkpoint_due(epoch + 1, 0)) checkpoint(epoch + 1, 0);
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

// After a lost peer: one message saying who went, where the last checkpoint
// stands (the chief reads it back: what it finds is what --resume loads), and
// how to resume.
void advise_after_lost_peer(const Config& cfg, mr::Strategy& strategy, const Progress& progress,
                            const braid::Error& error) {
  braid_train::RecoveryFacts facts;
  facts.rank = strategy.comm() ? strategy.comm()->rank() : 0;
  facts.chief = strategy.is_chief();
  facts.error = error.what();
  facts.position = describe_position(progress.epoch, progress.batch, progress.steps_per_epoch);
  facts.saving = progress.saving;
  facts.resume_command = cfg.resume_command;
  if (!cfg.checkpoint_dir.empty()) {
    facts.checkpoint_path = cfg.checkpoint_path();
    if (progress.checkpoint)
      facts.checkpoint = describe_position(progress.checkpoint->epoch, progress.checkpoint->batch_in_epoch,
                                           progress.steps_per_epoch);
    if (facts.chief) {
      if (std::error_code ignored; !std::filesystem::exists(facts.checkpoint_path, ignored)) {
        facts.checkpoint_check = "is not written yet: --resume starts from the beginning";
      } else {
        try {
          const mr::CheckpointInfo info = mr::inspect_checkpoint(facts.checkpoint_path);
          facts.checkpoint_check =
              describe_position(info.position.epoch, info.position.batch_in_epoch, progress.steps_per_epoch) +
              ", is intact (read back and its checksum verified just now)";
        } catch (const braid::Error& e) {
          facts.checkpoint_check = std::string("cannot be loaded: ") + e.what();
        }
      }
    }
  }
  std::fflush(stdout);
  std::fputs(braid_train::recovery_advice(facts).c_str(), stderr);
  std::fflush(stderr);
}

int train(const Config& cfg) {
  const Dataset data = make_dataset(cfg.samples);
  auto sgd = std::make_shared<mr::Sgd>(cfg.learning_rate, cfg.momentum);
  // Read when the communicator is made (docs/tracing.md).
  if (!cfg.trace.empty()) ::setenv("BRAID_TRACE", cfg.trace.c_str(), 1);
  auto strategy = make_strategy(cfg, sgd);
  Progress progress;
  progress.steps_per_epoch =
      mr::DataShard({.dataset_size = cfg.samples, .global_batch_size = cfg.global_batch, .seed = 7}, 0, 1)
          .batches_per_epoch();
  try {
    return train_steps(cfg, *strategy, sgd, data, progress);
  } catch (const braid::Error& e) {
    // A peer that went (or stopped answering) ends this run; the strategy,
    // and with it the communicator, is still here for the advice.
    if (e.code() != braid::ErrorCode::peer_lost && e.code() != braid::ErrorCode::timeout) throw;
    if (cfg.elastic) {
      // The others went on without this process (it came too late, or could
      // not reach the job's store): the same command joins them again.
      std::fflush(stdout);
      std::fprintf(stderr,
                   "braid-train: this process lost the elastic job at %s: %s\n"
                   "braid-train: run the same command again (once the network is back) and it joins the running "
                   "job\n",
                   describe_position(progress.epoch, progress.batch, progress.steps_per_epoch).c_str(), e.what());
      return kExitPeerLost;
    }
    advise_after_lost_peer(cfg, *strategy, progress, e);
    return kExitPeerLost;
  }
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
