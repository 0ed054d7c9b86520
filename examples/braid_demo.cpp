// The main demo, part 1: local ranks all-reducing buffers from 4 KiB to
// 16 MiB, every result checked on every rank. Part 2 is the training example
// (braid-train, examples/train_mirrored.cpp); scripts/demo.sh runs both.
//
//   braid-run -n 4 braid-demo
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "braid/braid.hpp"

namespace {

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

}  // namespace

int main() {
  try {
    braid::Comm comm = braid::Comm::from_env();
    if (comm.rank() == 0) std::printf("braid demo: %s\n", comm.describe().c_str());
    bool ok = all_reduce_tour(comm);
    comm.barrier();
    if (comm.rank() == 0)
      std::printf("\nSummary: %d ranks, all-reduce results %s.\n", comm.size(), ok ? "correct" : "WRONG");
    return ok ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-demo: %s\n", e.what());
    return 1;
  }
}
