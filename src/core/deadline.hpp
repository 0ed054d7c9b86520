// Deadlines: every wait in braid is bounded by one of these.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>

namespace braid {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class Deadline {
 public:
  /// Saturates: a duration too long for the clock (milliseconds::max()) is never.
  template <typename Rep, typename Period>
  static Deadline after(std::chrono::duration<Rep, Period> d) {
    auto now = Clock::now();
    auto room = std::chrono::duration_cast<std::chrono::duration<double>>(Clock::time_point::max() - now);
    if (std::chrono::duration<double>(d) >= room) return never();
    return Deadline(now + std::chrono::duration_cast<Clock::duration>(d));
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  explicit Deadline(Clock::time_point at) : at_(at) {}

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  Clock::duration remaining() const {
    auto now = Clock::now();
    return now >= at_ ? Clock::duration::zero() : at_ - now;
  }
  /// Remaining time in whole milliseconds for poll(2)/epoll_wait(2), rounded
  /// up so a wait never returns before the deadline, capped at `cap`.
  int poll_ms(Millis cap = Millis(1000)) const {
    auto left = std::chrono::ceil<Millis>(remaining());
    return static_cast<int>(std::min(left, cap).count());
  }

 private:
  Clock::time_point at_;
};

/// Clock::now() to within a few milliseconds (CLOCK_MONOTONIC_COARSE, the
/// clock Clock reads, at its last tick), for times that need no more: when
/// an operation started, for its deadline and the flight recorder. Costs a
/// third of Clock::now() here (12 ns against 33), which a small collective
/// notices.
inline Clock::time_point coarse_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                        std::chrono::nanoseconds(ts.tv_nsec)));
}

/// "2.5 s", "300 ms": a duration for messages.
inline double seconds_of(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace braid
