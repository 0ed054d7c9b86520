// Throughput of the reduction kernels: acc = acc (sum) in, in place, the way
// a ring step reduces a received chunk into its own. Reports GB/s of one
// buffer (count * element size per second; the memory traffic is three times
// that: two reads and a write) for every kernel build the CPU has, with the
// builds and sizes interleaved in each round because timings on a shared
// machine drift. Prints the median and the best round.
//
//   kernel_bench [rounds]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/types.hpp"
#include "core/reduce.hpp"
#include "core/reduce_dispatch.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  braid::DataType type;
  braid::KernelIsa isa;
  std::size_t bytes;
  std::vector<double> gbps;
};

// Element values that stay normal (no subnormal slow path) while summed.
void fill(braid::DataType type, void* data, std::size_t count, float value) {
  switch (type) {
    case braid::DataType::f32: std::fill_n(static_cast<float*>(data), count, value); break;
    case braid::DataType::f16: std::fill_n(static_cast<std::uint16_t*>(data), count, braid::f32_to_f16(value)); break;
    case braid::DataType::bf16: std::fill_n(static_cast<std::uint16_t*>(data), count, braid::f32_to_bf16(value)); break;
    default: break;
  }
}

double run_round(const Config& config, std::vector<unsigned char>& acc, std::vector<unsigned char>& in) {
  const std::size_t count = config.bytes / braid::size_of(config.type);
  // Enough calls for about 20 ms, so a 1 MiB round is not one timer tick.
  const int calls = std::max<int>(1, static_cast<int>((std::size_t{64} << 20) / config.bytes));
  fill(config.type, acc.data(), count, 1.0f);
  fill(config.type, in.data(), count, 0.5f);
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i)
    braid::reduce_with(config.isa, config.type, braid::ReduceOp::sum, acc.data(), acc.data(), in.data(), count);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(config.bytes) * calls / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  std::vector<Config> configs;
  for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{64} << 20})
    for (braid::DataType type : {braid::DataType::f32, braid::DataType::bf16, braid::DataType::f16})
      for (braid::KernelIsa isa : {braid::KernelIsa::baseline, braid::KernelIsa::avx2})
        if (braid::kernel_isa_supported(isa)) configs.push_back({type, isa, bytes, {}});

  std::vector<unsigned char> acc(std::size_t{64} << 20), in(std::size_t{64} << 20);
  for (int round = 0; round < rounds; ++round)
    for (Config& config : configs) config.gbps.push_back(run_round(config, acc, in));

  std::printf("%-6s %-9s %8s %12s %10s\n", "type", "build", "MiB", "median GB/s", "best GB/s");
  for (Config& config : configs) {
    std::sort(config.gbps.begin(), config.gbps.end());
    std::printf("%-6s %-9s %8zu %12.2f %10.2f\n", std::string(braid::name_of(config.type)).c_str(),
                config.isa == braid::KernelIsa::avx2 ? "avx2" : "baseline", config.bytes >> 20,
                config.gbps[config.gbps.size() / 2], config.gbps.back());
  }
  std::printf("(the build reduce() uses here: %s)\n",
              braid::best_kernel_isa() == braid::KernelIsa::avx2 ? "avx2" : "baseline");
}
