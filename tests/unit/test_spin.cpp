// SpinBudget (core/spin.hpp): how long a waiting engine spins, from what
// spinning was worth.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/spin.hpp"

using braid::SpinBudget;

namespace {
bool always_contended() { return true; }
bool never_contended() { return false; }
bool cpus_busy = true;  // what busy_when_told() answers
bool busy_when_told() { return cpus_busy; }
SpinBudget contended_budget() { return SpinBudget(SpinBudget::kDefaultMin, SpinBudget::kDefaultMax, always_contended); }
}  // namespace

TEST_CASE("a budget spins through a slow start and stops once spins keep failing", "[spin]") {
  SpinBudget budget = contended_budget();
  REQUIRE(budget.spinning());
  REQUIRE(budget.next_spin() == SpinBudget::kDefaultMax);
  // A peer still setting up lets the first spins run out: the budget keeps
  // spinning through half of its score, not just one.
  for (int i = 0; i < SpinBudget::kScoreLimit / 2; ++i) {
    REQUIRE(budget.next_spin() == SpinBudget::kDefaultMax);
    budget.had_to_sleep();
    REQUIRE(budget.spinning());
  }
  REQUIRE(budget.next_spin() == SpinBudget::kDefaultMax);
  budget.had_to_sleep();
  REQUIRE_FALSE(budget.spinning());
  // Then waits spin the minimum, with a full probe one wait in kProbeEvery.
  int full = 0;
  for (unsigned i = 0; i < SpinBudget::kProbeEvery; ++i)
    if (budget.next_spin() == SpinBudget::kDefaultMax) ++full;
  REQUIRE(full == 1);
}

TEST_CASE("a budget that stopped spinning starts again once probes pay", "[spin]") {
  SpinBudget budget = contended_budget();
  while (budget.spinning()) {
    budget.next_spin();
    budget.had_to_sleep();
  }
  for (int probes = 0; !budget.spinning(); ++probes) {
    REQUIRE(probes < SpinBudget::kScoreLimit);
    // Find the probe, and let work come during it.
    while (budget.next_spin() != SpinBudget::kDefaultMax) {
    }
    budget.found_while_spinning();
  }
  REQUIRE(budget.next_spin() == SpinBudget::kDefaultMax);
}

TEST_CASE("a budget spins again as soon as a wait sleeps while some CPU is idle", "[spin]") {
  cpus_busy = true;
  SpinBudget budget(SpinBudget::kDefaultMin, SpinBudget::kDefaultMax, busy_when_told);
  while (budget.spinning()) {
    budget.next_spin();
    budget.had_to_sleep();
  }
  // Short spins that run out on a contended machine leave it short...
  for (int i = 0; i < 3; ++i) {
    while (budget.next_spin() == SpinBudget::kDefaultMax) budget.had_to_sleep();
    budget.had_to_sleep();
    REQUIRE_FALSE(budget.spinning());
  }
  // ...and one that runs out while a CPU is idle (the peer asleep, nobody
  // else wanting the core) brings back the full spin: no probe has to catch
  // a sleeping peer first.
  cpus_busy = false;
  REQUIRE(budget.next_spin() == SpinBudget::kDefaultMin);
  budget.had_to_sleep();
  REQUIRE(budget.spinning());
  REQUIRE(budget.next_spin() == SpinBudget::kDefaultMax);
  // Full spins that run out on an idle machine never stop it spinning.
  SpinBudget idle(SpinBudget::kDefaultMin, SpinBudget::kDefaultMax, never_contended);
  for (int i = 0; i < 4 * SpinBudget::kScoreLimit; ++i) {
    REQUIRE(idle.next_spin() == SpinBudget::kDefaultMax);
    idle.had_to_sleep();
  }
}

TEST_CASE("cpus_contended sees more busy threads than CPUs", "[spin]") {
  // Busy threads, two more than the CPUs: /proc/loadavg's running count
  // must exceed the CPUs within a few looks (bounded: 2 s at most).
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (unsigned i = 0; i < cpus + 2; ++i)
    hogs.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  bool seen = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!seen && std::chrono::steady_clock::now() < until) {
    seen = braid::cpus_contended();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  for (auto& t : hogs) t.join();
  REQUIRE(seen);
}

TEST_CASE("a SpinMutex lets one thread in at a time, also past a long hold", "[spin]") {
  braid::SpinMutex mutex;
  // Four threads on (usually) two cores: waiters spin, yield and nap while
  // the owner is preempted; no increment may be lost.
  constexpr int kThreads = 4, kRounds = 20000;
  long counter = 0;  // guarded by mutex (TSan checks the happens-before)
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard lock(mutex);
        ++counter;
      }
    });
  for (auto& t : threads) t.join();
  REQUIRE(counter == long{kThreads} * kRounds);

  // An owner that holds it for 20 ms: the waiter gets in after, not before.
  std::atomic<bool> released{false};
  mutex.lock();
  std::thread waiter([&] {
    std::lock_guard lock(mutex);
    REQUIRE(released.load());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  released = true;
  mutex.unlock();
  waiter.join();
  REQUIRE(mutex.try_lock());
  REQUIRE_FALSE(mutex.try_lock());
  mutex.unlock();
}
