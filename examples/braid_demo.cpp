// The main demo: local ranks all-reducing, and replicas of a small model kept
// in sync the way a mirrored strategy does (initial values broadcast from the
// chief, gradients averaged every step, a hash proving the replicas agree).
//
//   braid-run -n 4 braid-demo
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "braid/braid.hpp"

namespace {

std::uint64_t fnv1a(const void* data, std::size_t bytes) {
  auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Part 1: all-reduce sizes from 4 KiB to 16 MiB, checked and timed.
bool all_reduce_tour(braid::Comm& comm) {
  const int n = comm.size();
  bool all_right = true;
  if (comm.rank() == 0) std::printf("\n1. All-reduce (f32 sum) across %d ranks\n", n);
  for (std::size_t bytes = 4096; bytes <= (16u << 20); bytes *= 16) {
    std::size_t count = bytes / sizeof(float);
    std::vector<float> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>(comm.rank() + 1) + static_cast<float>(i % 3);
    comm.barrier();
    auto start = std::chrono::steady_clock::now();
    comm.all_reduce(std::span(data), braid::ReduceOp::sum);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i)
      wrong += data[i] != static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n) * static_cast<float>(i % 3);
    std::int64_t total_wrong = static_cast<std::int64_t>(wrong);
    comm.all_reduce(std::span(&total_wrong, 1), braid::ReduceOp::sum);
    all_right = all_right && total_wrong == 0;
    if (comm.rank() == 0)
      std::printf("   %9zu bytes  %8.3f ms  busbw %6.2f GB/s  %s\n", bytes, ms,
                  static_cast<double>(bytes) / (ms * 1e6) * 2.0 * (n - 1) / n,
                  total_wrong == 0 ? "all ranks correct" : "WRONG RESULTS");
  }
  return all_right;
}

// Part 2: data-parallel training of y = w.x + b. Each rank holds a replica
// and its own shard of the data; the chief's initial weights are broadcast;
// after each step's local gradient the ranks average gradients with
// all_reduce(avg), so every replica applies the same update.
bool mirrored_training(braid::Comm& comm) {
  constexpr int kFeatures = 16, kSamplesPerRank = 512, kEpochs = 8;
  const int n = comm.size();
  std::mt19937 truth_rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> true_w(kFeatures);
  for (auto& w : true_w) w = normal(truth_rng);

  std::mt19937 shard_rng(1000 + static_cast<unsigned>(comm.rank()));  // each rank its own shard
  std::vector<float> x(kSamplesPerRank * kFeatures), y(kSamplesPerRank);
  for (int s = 0; s < kSamplesPerRank; ++s) {
    float dot = 0.5f;
    for (int f = 0; f < kFeatures; ++f) {
      x[s * kFeatures + f] = normal(shard_rng);
      dot += true_w[f] * x[s * kFeatures + f];
    }
    y[s] = dot + 0.01f * normal(shard_rng);
  }

  // Parameters: kFeatures weights then the bias. Random on every rank, then
  // the chief's values win, as in a mirrored strategy's variable creation.
  std::mt19937 init_rng(42 + static_cast<unsigned>(comm.rank()));
  std::vector<float> params(kFeatures + 1);
  for (auto& p : params) p = normal(init_rng);
  comm.broadcast(std::span(params), 0);

  if (comm.rank() == 0)
    std::printf("\n2. Mirrored training: linear model, %d replicas, %d samples each, gradients averaged\n", n,
                kSamplesPerRank);
  std::vector<float> grad(kFeatures + 2);  // gradient, then the local loss
  for (int epoch = 1; epoch <= kEpochs; ++epoch) {
    for (int step = 0; step < 20; ++step) {
      std::fill(grad.begin(), grad.end(), 0.f);
      for (int s = 0; s < kSamplesPerRank; ++s) {
        float pred = params[kFeatures];
        for (int f = 0; f < kFeatures; ++f) pred += params[f] * x[s * kFeatures + f];
        float err = pred - y[s];
        for (int f = 0; f < kFeatures; ++f) grad[f] += 2 * err * x[s * kFeatures + f] / kSamplesPerRank;
        grad[kFeatures] += 2 * err / kSamplesPerRank;
        grad[kFeatures + 1] += err * err / kSamplesPerRank;
      }
      comm.all_reduce(std::span(grad), braid::ReduceOp::avg);
      for (int p = 0; p <= kFeatures; ++p) params[p] -= 0.1f * grad[p];
    }
    std::uint64_t hash = fnv1a(params.data(), params.size() * sizeof(float));
    std::uint64_t lo = hash, hi = hash;
    comm.all_reduce(std::span(&lo, 1), braid::ReduceOp::min);
    comm.all_reduce(std::span(&hi, 1), braid::ReduceOp::max);
    if (comm.rank() == 0)
      std::printf("   epoch %d  mean loss %.6f  replica hash %016llx  %s\n", epoch, grad[kFeatures + 1],
                  static_cast<unsigned long long>(hash), lo == hi ? "(identical on all ranks)" : "(REPLICAS DIVERGED)");
    if (lo != hi) return false;
  }
  return true;
}

}  // namespace

int main() {
  try {
    braid::Comm comm = braid::Comm::from_env();
    if (comm.rank() == 0) std::printf("braid demo: %s\n", comm.describe().c_str());
    bool ok = all_reduce_tour(comm);
    ok = mirrored_training(comm) && ok;
    comm.barrier();
    if (comm.rank() == 0)
      std::printf("\nSummary: %d ranks, all-reduce results %s, replicas %s.\n", comm.size(),
                  ok ? "correct" : "WRONG", ok ? "identical after every epoch" : "NOT identical");
    return ok ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-demo: %s\n", e.what());
    return 1;
  }
}
