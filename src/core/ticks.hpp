// Ticks: the cheapest timestamp this CPU offers, for what reads the clock on
// every operation (the statistics, the trace). On x86-64 with an invariant
// TSC that is the TSC (about 9 ns a read here, against 20 ns for
// clock_gettime); elsewhere CLOCK_MONOTONIC's nanoseconds. TickAnchor pairs
// a tick with CLOCK_MONOTONIC, and two anchors turn ticks into nanoseconds
// by interpolation, so a trace taken in ticks still lines up with other
// processes' CLOCK_MONOTONIC (and with the clock offsets measured in it).
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace braid {

/// CLOCK_MONOTONIC in nanoseconds.
std::int64_t monotonic_ns();

namespace detail {
extern const bool kTicksAreTsc;  // decided once, when the library loads
}

inline std::int64_t ticks() {
#if defined(__x86_64__)
  if (detail::kTicksAreTsc) [[likely]] return static_cast<std::int64_t>(__rdtsc());
#endif
  return monotonic_ns();
}

struct TickAnchor {
  std::int64_t tick = 0;
  std::int64_t ns = 0;
  /// Now, in both clocks.
  static TickAnchor now();
  /// The process's first anchor (taken when the library loads).
  static const TickAnchor& origin();
};

/// Turns ticks into CLOCK_MONOTONIC nanoseconds by the line through `a` and
/// `b` (b later than a; the same anchor twice: the origin's rate).
class TickScale {
 public:
  TickScale(const TickAnchor& a, const TickAnchor& b);
  double ns_per_tick() const { return ns_per_tick_; }
  std::int64_t to_ns(std::int64_t tick) const {
    return a_.ns + static_cast<std::int64_t>(static_cast<double>(tick - a_.tick) * ns_per_tick_);
  }
  double duration_ns(std::int64_t ticks) const { return static_cast<double>(ticks) * ns_per_tick_; }

 private:
  TickAnchor a_;
  double ns_per_tick_ = 1;
};

}  // namespace braid
