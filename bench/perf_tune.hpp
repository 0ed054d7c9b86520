// braid-perf --tune FILE: the cost model's link parameters, measured.
//
// Every all_reduce algorithm that can run on the job's shape runs, in a
// communicator of its own with BRAID_ALGO forcing it, at a few sizes from
// 8 B to 32 MiB (up to -e), each timed three times (the fastest kept: the
// least disturbed by other work on the machine). The cost model is linear in
// the link's latency a, time per byte b and reduction time per byte g from
// memory, and b and g from the cache (each cost function prices messages,
// bytes and reduced bytes, the pipelined ones only while every rank has a
// core, and LinkParams::at
// splits the bytes between cache and memory by the working set against the
// plan's cache), so the five come from a least-squares fit of those
// algorithms' measurements at once, on the relative error so that 8 B counts
// as much as 32 MiB, with none below zero. The sizes below the cache fit
// its rates, those far above it memory's. Rank 0
// adds them to FILE as the profile of this rank and host count, for the
// transport that the job's flat algorithms cross (shm on one host, the
// transport between hosts otherwise; across hosts the phases inside a host
// keep the intra link's parameters, and the fit explains the rest), and
// prints measured against predicted times.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "braid/braid.hpp"
#include "perf_options.hpp"
#include "topology/cost_model.hpp"
#include "topology/plan.hpp"

namespace braid::perf {

/// One measurement for the fit: the cost function's coefficients of the
/// latency, the time per byte and the reduction time per byte from memory
/// and from the cache, and the time.
struct TuneSample {
  double messages = 0, bytes = 0, reduced = 0;
  double measured_us = 0;
  double cached_bytes = 0, cached_reduced = 0;
  /// The part of the cost that the fitted link does not pay: across hosts,
  /// the phases inside a host (priced on the intra link as it is).
  double fixed_us = 0;
};

/// The non-negative least-squares fit on relative error; exact for samples
/// the model describes. Parameters the samples cannot tell (a coefficient
/// zero everywhere, or a fit at 0) come out as a latency of 0 and
/// bandwidths of 1000 GB/s: free; cache rates no sample saw come out 0 (as
/// from memory).
LinkParams fit_link_params(std::span<const TuneSample> samples);

/// The coefficients of `cost` for `inputs`, from unit link parameters: of
/// the one link on one host, of the link between hosts across hosts (the
/// phases inside a host then go to fixed_us).
TuneSample coefficients(CostFunction cost, CostInputs inputs);
/// `inputs` with the link that --tune fits set to `l` (see coefficients).
CostInputs with_fitted_link(CostInputs inputs, const LinkParams& l);
/// Whether `cost` at `inputs` is the sum its coefficients say (with more
/// ranks than cores the pipelined algorithms take a maximum instead, and are
/// left out of the fit).
bool linear(CostFunction cost, CostInputs inputs);

/// Runs the measurement on every rank of `comm`; rank 0 writes o.tune for
/// `machine` (the host name of rank 0, as load_link_model compares it).
/// Returns the exit status.
int tune(Comm& comm, const Plan& plan, const std::string& machine, const Options& o);

}  // namespace braid::perf
