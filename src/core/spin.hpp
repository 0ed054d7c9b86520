// Spinning before sleeping: how long a waiting engine busy-polls before it
// sleeps (SpinBudget), and the busy-wait itself. Shared by the progress
// engine and the shared-memory transport's own waits.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace braid {

/// Whether this machine's CPUs are all taken: more threads runnable than
/// CPUs online (the running count of /proc/loadavg, which includes the
/// caller). Looked up at most once per millisecond per thread (a read is a
/// few us); false where it cannot be read.
bool cpus_contended();

/// How long to spin before sleeping, learnt from what spinning was worth.
///
/// Spinning pays when the peer runs on another core and answers within the
/// spin: a futex sleep and wake costs 3-5 us of latency plus two system
/// calls, and tens of us when the idle vCPU has to be woken. It is pure loss
/// when the peer shares this core (ranks outnumber cores, or other programs
/// keep every CPU busy): the peer cannot run until this process sleeps or
/// its time slice ends, so every spin adds its whole length to the latency.
/// So the budget keeps a score of recent full spins (`max`): +1 when work
/// came during one, -1 when it ran out while the CPUs were contended
/// (`contended`, cpus_contended()). While the score is at least half of
/// kScoreLimit every wait spins `max`; below that waits spin only `min`
/// (which still catches work that is about to land), and one wait in
/// kProbeEvery spins `max` as a probe, so the budget notices when cores free
/// up. Short spins do not move the score.
///
/// A wait that has to sleep while some CPU is idle puts the score back at
/// kScoreLimit: a spin then held no core that anybody wanted. Counting such
/// waits against spinning, as the budget first did, had a trap: once both
/// ranks of a pair spun short and slept, each probe waited on a sleeping
/// peer, whose wake-up on an idle vCPU took over 20 us, so nearly every
/// probe ran out and the pair seldom spun again. Measured (braid-perf all_reduce
/// --algo direct -n 3000, 2 ranks over shm on the 2 idle vCPUs, 5
/// launches): 32 KiB took 8.5-13.9 us with the budget and 5.2-7.4 with
/// BRAID_SPIN_US=20; 16 KiB 3.8-6.3 against 3.1-4.7.
///
/// The score starts at kScoreLimit: it takes kScoreLimit / 2 + 1 failed
/// spins in a row to stop spinning. Starting at the threshold, one failed
/// spin at start-up (a peer still setting up) dropped a rank to short spins
/// and futex sleeps, whose wake-ups on this VM's idle vCPUs took over 20 us,
/// until a probe 16 waits later caught up: measured on 2 idle vCPUs, 2
/// ranks, an 8-byte all-reduce over shm (braid-perf -n 0) took 1.4-1.6 us in
/// 8 of 10 launches and 0.30 in the rest; 0.25-0.28 us in 10 of 10 starting
/// at the limit, as with BRAID_SPIN_US=20. One budget per engine, not per
/// ring.
///
/// Measured (bench/shm_pingpong latency, 8-byte half round trip in us,
/// median of 5 runs per launch, variants interleaved; this 2-vCPU machine
/// while two other engineers' builds kept its load at 7-8):
///
///   launch  futex only  spin 1 us  spin 5 us  spin 20 us  spin 100 us  SpinBudget
///     1         6.0        8.9       14.5        36.3        158.9         9.6
///     2         6.3        6.2        9.5        25.3        106.8         8.6
///     3        24.0        0.9        0.4         0.4          0.3         0.8
///
/// Every fixed choice is 4-60x off the best in one of the regimes; the
/// budget stays within 1.5-3x of the best in each.
class SpinBudget {
 public:
  static constexpr std::chrono::nanoseconds kDefaultMin{500};
  static constexpr std::chrono::nanoseconds kDefaultMax{20000};
  static constexpr int kScoreLimit = 8;
  static constexpr unsigned kProbeEvery = 16;
  using Contended = bool (*)();
  explicit SpinBudget(std::chrono::nanoseconds min = kDefaultMin, std::chrono::nanoseconds max = kDefaultMax,
                      Contended contended = cpus_contended)
      : min_(min), max_(max), contended_(contended) {}
  /// The spin for the next wait (call once per wait).
  std::chrono::nanoseconds next_spin() {
    full_ = score_ * 2 >= kScoreLimit || ++waits_ % kProbeEvery == 0;
    return full_ ? max_ : min_;
  }
  void found_while_spinning() {
    if (full_) score_ = std::min(kScoreLimit, score_ + 1);
  }
  void had_to_sleep() {
    if (!contended_()) score_ = kScoreLimit;
    else if (full_) score_ = std::max(0, score_ - 1);
  }
  bool spinning() const { return score_ * 2 >= kScoreLimit; }

 private:
  std::chrono::nanoseconds min_, max_;
  Contended contended_;
  int score_ = kScoreLimit;  // start by spinning, with room for a slow start
  unsigned waits_ = 0;
  bool full_ = false;
};

/// Busy-waits (with the CPU's pause hint) until `ready()` or `spin` passes;
/// returns ready(). The clock is read once per 64 iterations.
template <typename Ready>
bool spin_until(Ready&& ready, std::chrono::nanoseconds spin);

/// One CPU pause/yield hint.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

template <typename Ready>
bool spin_until(Ready&& ready, std::chrono::nanoseconds spin) {
  if (ready()) return true;
  if (spin.count() <= 0) return false;
  auto until = std::chrono::steady_clock::now() + spin;
  for (unsigned i = 1;; ++i) {
    cpu_relax();
    if (ready()) return true;
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) return ready();
  }
}

/// A lock for short critical sections taken on every poll of a hot loop
/// (the UCX worker's: each receive that polls takes it). Unlocking is one
/// release store, where std::mutex's is an atomic exchange: lock and unlock
/// of a std::mutex were 17% of an 8-byte all-reduce's profile over UCX,
/// most of it spent polling. A waiter spins briefly, then yields its core,
/// then naps 50 us at a time, so an owner that holds it long (UCX's 500 ms
/// drain of an abort notice) costs the others little CPU. No fairness and
/// no sleeping owner's wake-up: not for locks held across waits.
class SpinMutex {
 public:
  void lock() {
    if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]]
      return;
    lock_slow();
  }
  bool try_lock() {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  void lock_slow() {
    for (unsigned i = 0;; ++i) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (i < 128) cpu_relax();
        else if (i < 256) ::sched_yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(50));
        ++i;
      }
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
    }
  }
  std::atomic<bool> locked_{false};
};

}  // namespace braid
