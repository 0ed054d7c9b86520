// SpinBudget (core/spin.hpp): how long a waiting engine spins, from what
// spinning was worth.
#include <catch2/catch.hpp>

#include "core/spin.hpp"

using braid::SpinBudget;

TEST_CASE("a budget spins through a slow start and stops once spins keep failing", "[spin]") {
  SpinBudget budget;
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
  SpinBudget budget;
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
