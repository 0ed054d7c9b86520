#include "topology/cost_model.hpp"

#include <algorithm>

namespace braid {
namespace {

// Time per byte (us) at `gbps`; a rate of 0 falls back to `otherwise`.
double us_per_byte(double gbps, double otherwise) { return 1.0 / ((gbps > 0 ? gbps : otherwise) * 1e3); }

}  // namespace

LinkParams LinkParams::at(double working_set, double cache) const {
  // The share of the working set's bytes found in the cache.
  const double hit = cache > 0 && working_set > 0 ? std::min(1.0, cache / working_set) : 0.0;
  auto blend = [&](double memory_gbps, double cache_gbps) {
    if (hit == 0 || !(cache_gbps > 0)) return memory_gbps;
    const double t = hit * us_per_byte(cache_gbps, memory_gbps) + (1 - hit) * us_per_byte(memory_gbps, cache_gbps);
    return 1.0 / (t * 1e3);
  };
  return LinkParams{latency_us, blend(bandwidth_gbps, cache_bandwidth_gbps), blend(reduce_gbps, cache_reduce_gbps), 0, 0,
                    message_us};
}

std::size_t pipeline_slice(std::size_t bytes, int ranks, bool oversubscribed, std::size_t floor, std::size_t limit) {
  constexpr std::size_t kSlicesPerShare = 16;
  constexpr std::size_t kOversubscribedSlicesPerShare = 2;
  const std::size_t share = bytes / static_cast<std::size_t>(std::max(1, ranks));
  return std::clamp<std::size_t>(share / (oversubscribed ? kOversubscribedSlicesPerShare : kSlicesPerShare),
                                 std::min(std::max(kMinPipelineSlice, floor), limit), limit);
}

}  // namespace braid
