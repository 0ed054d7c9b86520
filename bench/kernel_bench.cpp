// What one core can do with memory here: memcpy and the reduction kernels
// (acc = acc (sum) in, in place, the way a ring step reduces a received chunk
// into its own), in GB/s of one buffer (bytes / second; a reduction's memory
// traffic is three times that: two reads and a write), for every kernel build
// the CPU has, at sizes from cache-resident to far beyond the caches. Builds
// and sizes are interleaved in each round because timings on a shared machine
// drift; it prints the median and the best round. bench/limits runs it.
//
//   kernel_bench [rounds] [--csv] [--sizes 4K,1M,64M]
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
#include "core/settings.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  bool memcpy;  // else the reduction of `type` built for `isa`
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
  // Enough calls for about 64 MiB per round, so a small round is not one timer tick.
  const int calls = std::max<int>(1, static_cast<int>((std::size_t{64} << 20) / config.bytes));
  if (!config.memcpy) {
    fill(config.type, acc.data(), count, 1.0f);
    fill(config.type, in.data(), count, 0.5f);
  }
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) {
    if (config.memcpy) std::memcpy(acc.data(), in.data(), config.bytes);
    else braid::reduce_with(config.isa, config.type, braid::ReduceOp::sum, acc.data(), acc.data(), in.data(), count);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(config.bytes) * calls / seconds / 1e9;
}

const char* isa_name(braid::KernelIsa isa) { return isa == braid::KernelIsa::avx2 ? "avx2" : "baseline"; }

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  bool csv = false;
  std::vector<std::size_t> sizes = {std::size_t{1} << 20, std::size_t{64} << 20};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--csv") csv = true;
    else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::string list = argv[++i];
      for (std::size_t start = 0; start <= list.size();) {
        std::size_t comma = std::min(list.find(',', start), list.size());
        sizes.push_back(braid::parse_bytes(list.substr(start, comma - start), "--sizes"));
        start = comma + 1;
      }
    } else rounds = std::max(1, std::atoi(a.c_str()));
  }
  std::vector<Config> configs;
  std::size_t largest = 0;
  for (std::size_t bytes : sizes) {
    largest = std::max(largest, bytes);
    configs.push_back({true, braid::DataType::u8, braid::KernelIsa::baseline, bytes, {}});
    for (braid::DataType type : {braid::DataType::f32, braid::DataType::bf16, braid::DataType::f16})
      for (braid::KernelIsa isa : {braid::KernelIsa::baseline, braid::KernelIsa::avx2})
        if (braid::kernel_isa_supported(isa)) configs.push_back({false, type, isa, bytes, {}});
  }

  std::vector<unsigned char> acc(largest), in(largest, 1);
  for (int round = 0; round < rounds; ++round)
    for (Config& config : configs) config.gbps.push_back(run_round(config, acc, in));

  if (csv) std::printf("kernel,type,build,bytes,median_gbps,best_gbps\n");
  else std::printf("%-7s %-6s %-9s %12s %12s %10s\n", "kernel", "type", "build", "bytes", "median GB/s", "best GB/s");
  for (Config& config : configs) {
    std::sort(config.gbps.begin(), config.gbps.end());
    const char* kernel = config.memcpy ? "memcpy" : "reduce";
    const std::string type = config.memcpy ? "-" : std::string(braid::name_of(config.type));
    const char* build = config.memcpy ? "libc" : isa_name(config.isa);
    std::printf(csv ? "%s,%s,%s,%zu,%.3f,%.3f\n" : "%-7s %-6s %-9s %12zu %12.2f %10.2f\n", kernel, type.c_str(), build,
                config.bytes, config.gbps[config.gbps.size() / 2], config.gbps.back());
  }
  if (!csv)
    std::printf("(the build reduce() uses here: %s)\n", isa_name(braid::best_kernel_isa()));
}
