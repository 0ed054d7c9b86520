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
// A peer that published work (a seq_cst store of a ring counter or flag)
// calls ring(): it reads `sleepers` with a seq_cst load and only if it is
// non-zero bumps seq and calls FUTEX_WAKE. So the common case, nobody
// asleep, costs a plain load of a line both processes only read, and no
// system call. (It was a read-modify-write, fetch_add 0: that took the line
// away from the owner at every message, and was a tenth of an 8-byte
// all-reduce's time.)
//
// Why no wake-up is lost: every access in the argument is seq_cst, so all
// of them fall in one total order S. The owner's RMW on `sleepers` comes
// before its (seq_cst) look at the ring counter; the peer's store of the
// counter comes before its load of `sleepers`. If the peer's load does not
// see the owner's increment, it comes before that increment in S, so the
// counter store is before the owner's look in S and the owner sees the work
// and does not sleep. Otherwise the peer read the count the owner raised.
// If the peer sees sleepers != 0 it bumps seq; the
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
//
// A process's engine sleeps in one epoll over every transport
// (docs/architecture.md), which cannot wait on a futex: its doorbell comes
// with a pipe whose read end is in that epoll, and peers ring it by writing
// a byte into the pipe (wake_through) instead of FUTEX_WAKE. The argument
// above holds unchanged: a write before the sleep leaves the pipe readable,
// so epoll returns at once, as FUTEX_WAIT does after a bump of seq.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/spin.hpp"

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
  /// ring() writes a byte into `fd` (the write end of the owner's pipe)
  /// instead of FUTEX_WAKE; -1: back to the futex.
  void wake_through(int fd) { wake_fd_ = fd; }

  /// Step 1 of sleeping: returns the ticket for wait(). The caller must look
  /// for work after arm() and either disarm() or wait().
  std::uint32_t arm();
  /// Gives up sleeping after arm() (work was found).
  void disarm();
  /// Whether ring() woke the owner since arm() returned `ticket`.
  bool rung_since(std::uint32_t ticket) const;
  /// Sleeps until ring() after the ticket was taken, a signal, or `timeout`.
  /// Returns false if the timeout passed. Disarms in every case.
  bool wait(std::uint32_t ticket, std::chrono::microseconds timeout);
  /// Called by a peer after it published work for the owner: wakes the owner
  /// if it armed; costs a fence and a load otherwise.
  void ring();

  /// How many times ring() woke the owner (for tests and benchmarks).
  std::uint64_t wake_calls() const { return wake_calls_; }

  DoorbellWord* word() const { return word_; }

 private:
  DoorbellWord* word_ = nullptr;
  int wake_fd_ = -1;
  std::uint64_t wake_calls_ = 0;
};

}  // namespace braid
