#include "core/ticks.hpp"

#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>

namespace braid {
namespace {

bool invariant_tsc() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;  // "TscInvariant": constant rate, runs in every C-state
#else
  return false;
#endif
}

}  // namespace

namespace detail {
const bool kTicksAreTsc = invariant_tsc();
}

std::int64_t monotonic_ns() {
  timespec t;
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

TickAnchor TickAnchor::now() {
  if (!detail::kTicksAreTsc) {
    const std::int64_t ns = monotonic_ns();
    return {ns, ns};
  }
  // The clock read between two tick reads: the tick of its middle. Of three
  // tries the tightest pair is kept (one may be interrupted).
  TickAnchor best;
  std::int64_t best_gap = -1;
  for (int i = 0; i < 3; ++i) {
    const std::int64_t before = ticks();
    const std::int64_t ns = monotonic_ns();
    const std::int64_t after = ticks();
    if (best_gap < 0 || after - before < best_gap) {
      best_gap = after - before;
      best = {before + (after - before) / 2, ns};
    }
  }
  return best;
}

namespace {
// Taken when the library loads (after kTicksAreTsc, defined above in this
// file), so that a rate measured from it has a long baseline.
const TickAnchor g_origin = TickAnchor::now();
}  // namespace

const TickAnchor& TickAnchor::origin() { return g_origin; }

TickScale::TickScale(const TickAnchor& a, const TickAnchor& b) : a_(a) {
  if (!detail::kTicksAreTsc) return;  // ticks are nanoseconds
  // A short baseline gives a rough rate: below 1 ms the origin's (long) one
  // is used, measured now.
  TickAnchor from = a, to = b;
  if (to.ns - from.ns < 1000000) {
    from = TickAnchor::origin();
    to = TickAnchor::now();
  }
  if (to.tick > from.tick && to.ns > from.ns)
    ns_per_tick_ = static_cast<double>(to.ns - from.ns) / static_cast<double>(to.tick - from.tick);
  else
    ns_per_tick_ = 1;
}

}  // namespace braid
