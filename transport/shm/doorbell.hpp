// Doorbell: how a process sleeps until a peer in another process has work for
// it, without a file descriptor and without a lost wake-up.
//
// A DoorbellWord lives in shared memory: a 32-bit sequence number (the futex
// word) and a count of sleepers. The owner that runs out of work:
//
//   1. ticket = arm()      reads seq, then announces itself (sleepers += 1,
//                          a seq_cst read-modify-write);
//   2. looks at its rings once more; if anything arrived, disarm() and work;
//   3. wait(ticket, t)     FUTEX_WAIT(&seq, ticket, t), then sleepers -= 1.
//
// A peer that published work (a release store of a ring counter) calls
// ring(): it reads `sleepers` with a seq_cst read-modify-write (fetch_add 0)
// and only if it is non-zero bumps seq and calls FUTEX_WAKE. So the common
// case, nobody asleep, costs one locked instruction and no system call.
//
// Why no wake-up is lost: the owner's RMW on `sleepers` comes before its
// look at the ring counter; the peer's store of the ring counter comes
// before its RMW on `sleepers`. RMWs on one word are totally ordered. If the
// peer's comes first, the owner's (acquire) RMW reads from it, so the
// peer's counter store happens-before the owner's look: the owner sees the
// work and does not sleep. If the owner's comes first, the peer's RMW reads
// the count the owner raised. If the peer sees sleepers != 0 it bumps seq; the
// owner's FUTEX_WAIT compares seq with the ticket taken before arming inside
// the kernel, atomically with going to sleep, so a bump before the wait makes
// the wait return at once (EAGAIN) and a bump after it is followed by the
// FUTEX_WAKE that ends it. Spurious returns are harmless: the owner re-checks.
// Every wait has a timeout, so even a peer that died between publishing and
// ringing costs a bounded delay, never a hang.
//
// One DoorbellWord per waiting process is the intended use: every ring whose
// consumer (or producer, waiting for space) is that process rings the same
// word, so one sleeping engine thread covers all its shared-memory links.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace braid {

/// Placed in shared memory (zero-initialised is ready to use).
struct alignas(64) DoorbellWord {
  std::uint32_t seq;
  std::uint32_t sleepers;
};

class Doorbell {
 public:
  Doorbell() = default;
  explicit Doorbell(DoorbellWord* word) : word_(word) {}

  /// Step 1 of sleeping: returns the ticket for wait(). The caller must look
  /// for work after arm() and either disarm() or wait().
  std::uint32_t arm();
  /// Gives up sleeping after arm() (work was found).
  void disarm();
  /// Sleeps until ring() after the ticket was taken, a signal, or `timeout`.
  /// Returns false if the timeout passed. Disarms in every case.
  bool wait(std::uint32_t ticket, std::chrono::microseconds timeout);
  /// Called by a peer after it published work for the owner: wakes the owner
  /// if it armed; costs a fence and a load otherwise.
  void ring();

  /// How many times ring() called FUTEX_WAKE (for tests and benchmarks).
  std::uint64_t wake_calls() const { return wake_calls_; }

  DoorbellWord* word() const { return word_; }

 private:
  DoorbellWord* word_ = nullptr;
  std::uint64_t wake_calls_ = 0;
};

/// How long to spin before sleeping, learnt from what spinning was worth.
///
/// Spinning pays when the peer runs on another core and answers within the
/// spin: a futex sleep and wake costs 3-5 us of latency plus two system
/// calls, and tens of us when the idle vCPU has to be woken. It is pure loss
/// when the peer shares this core (ranks outnumber cores): the peer cannot
/// run until this process sleeps or its time slice ends, so every spin adds
/// its whole length to the latency. So the budget keeps a score of recent
/// full spins (`max`): +1 when work came during one, -1 when it ran out.
/// While the score is at least half of kScoreLimit every wait spins `max`;
/// below that waits spin only `min` (which still catches work that is about
/// to land), and one wait in kProbeEvery spins `max` as a probe, so the
/// budget notices when cores free up. Short spins do not move the score.
/// One budget per engine, not per ring.
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
  explicit SpinBudget(std::chrono::nanoseconds min = kDefaultMin, std::chrono::nanoseconds max = kDefaultMax)
      : min_(min), max_(max) {}
  /// The spin for the next wait (call once per wait).
  std::chrono::nanoseconds next_spin() {
    full_ = score_ * 2 >= kScoreLimit || ++waits_ % kProbeEvery == 0;
    return full_ ? max_ : min_;
  }
  void found_while_spinning() {
    if (full_) score_ = std::min(kScoreLimit, score_ + 1);
  }
  void had_to_sleep() {
    if (full_) score_ = std::max(0, score_ - 1);
  }
  bool spinning() const { return score_ * 2 >= kScoreLimit; }

 private:
  std::chrono::nanoseconds min_, max_;
  int score_ = kScoreLimit / 2;  // start by spinning
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

}  // namespace braid
