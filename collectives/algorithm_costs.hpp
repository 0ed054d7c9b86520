// The alpha-beta cost of each algorithm (topology/cost_model.hpp): the
// messages on its critical path times the link latency, plus the bytes on
// its critical path over the link bandwidth, plus the bytes it reduces
// locally over the reduction bandwidth. The counts follow each algorithm's
// file (ring.cpp, recursive_doubling.cpp, ...); algorithm_costs.cpp says
// where a count is an approximation. +infinity: cannot run on this shape.
#pragma once

#include "topology/cost_model.hpp"

namespace braid::cost {

double ring_all_reduce(const CostInputs& in);
double direct_all_reduce(const CostInputs& in);
double recursive_doubling_all_reduce(const CostInputs& in);
double rabenseifner_all_reduce(const CostInputs& in);
double tree_all_reduce(const CostInputs& in);
double hierarchical_all_reduce(const CostInputs& in);

double chain_broadcast(const CostInputs& in);
double binomial_broadcast(const CostInputs& in);
double tree_broadcast(const CostInputs& in);

}  // namespace braid::cost
