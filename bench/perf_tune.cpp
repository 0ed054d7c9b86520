#include "perf_tune.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "core/text.hpp"
#include "topology/link_model.hpp"

namespace braid::perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kFree = 1e30;  // bandwidth (GB/s) of a term left out of a coefficient

// Solves the k x k system a x = b (Gaussian elimination with pivoting);
// false when singular.
template <std::size_t N>
bool solve(std::array<std::array<double, N>, N> a, std::array<double, N> b, std::size_t k, std::array<double, N>& x) {
  for (std::size_t c = 0; c < k; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < k; ++r)
      if (std::abs(a[r][c]) > std::abs(a[p][c])) p = r;
    if (std::abs(a[p][c]) < 1e-300) return false;
    std::swap(a[p], a[c]);
    std::swap(b[p], b[c]);
    for (std::size_t r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (std::size_t j = c; j < k; ++j) a[r][j] -= f * a[c][j];
      b[r] -= f * b[c];
    }
  }
  for (std::size_t c = 0; c < k; ++c) x[c] = b[c] / a[c][c];
  return true;
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

CostInputs with_fitted_link(CostInputs inputs, const LinkParams& l) {
  inputs.inter = l;
  if (inputs.hosts <= 1) inputs.intra = l;
  return inputs;
}

TuneSample coefficients(CostFunction cost, CostInputs inputs) {
  auto with = [&](LinkParams l) { return cost(with_fitted_link(inputs, l)); };
  // A bandwidth of 1e-3 GB/s is 1 us per byte: the coefficient of b (us/B).
  // Less the cost with every term free, so that a term the call does not
  // pay (the cache's, when no cache is known) is exactly 0.
  const double none = with({0, kFree, kFree, kFree, kFree});
  TuneSample s{with({1, kFree, kFree, kFree, kFree}) - none, with({0, 1e-3, kFree, kFree, kFree}) - none,
               with({0, kFree, 1e-3, kFree, kFree}) - none, 0};
  s.cached_bytes = with({0, kFree, kFree, 1e-3, kFree}) - none;
  s.cached_reduced = with({0, kFree, kFree, kFree, 1e-3}) - none;
  s.fixed_us = none;
  return s;
}

bool linear(CostFunction cost, CostInputs inputs) {
  const TuneSample c = coefficients(cost, inputs);
  for (const LinkParams& l : {LinkParams{3, 2, 5, 9, 11}, LinkParams{0.5, 7, 1.5, 13, 4}}) {
    inputs = with_fitted_link(inputs, l);
    const double sum = c.fixed_us + c.messages * l.latency_us + c.bytes * l.transfer_us(1) + c.reduced * l.reduce_us(1) +
                       c.cached_bytes / (l.cache_bandwidth_gbps * 1e3) + c.cached_reduced / (l.cache_reduce_gbps * 1e3);
    if (std::abs(cost(inputs) - sum) > 1e-9 * std::max(1.0, sum)) return false;
  }
  return true;
}

LinkParams fit_link_params(std::span<const TuneSample> samples) {
  // Every subset of the five parameters, fitted by the normal equations of
  // the relative error; the best fit whose parameters are all >= 0 wins.
  constexpr std::size_t kParams = 5;
  auto row_of = [](const TuneSample& s) {
    return std::array<double, kParams>{s.messages, s.bytes, s.reduced, s.cached_bytes, s.cached_reduced};
  };
  double best_error = std::numeric_limits<double>::infinity();
  std::array<double, kParams> best{};
  for (unsigned mask = 1; mask < (1u << kParams); ++mask) {
    std::array<std::size_t, kParams> index{};
    std::size_t k = 0;
    for (std::size_t j = 0; j < kParams; ++j)
      if (mask & (1u << j)) index[k++] = j;
    std::array<std::array<double, kParams>, kParams> a{};
    std::array<double, kParams> b{}, x{};
    for (const auto& s : samples) {
      if (!(s.measured_us > 0)) continue;
      std::array<double, kParams> row = row_of(s);
      for (double& v : row) v /= s.measured_us;
      // What the fitted terms must explain, relative: the measurement less
      // the fixed part.
      const double target = 1 - s.fixed_us / s.measured_us;
      for (std::size_t i = 0; i < k; ++i) {
        b[i] += row[index[i]] * target;
        for (std::size_t j = 0; j < k; ++j) a[i][j] += row[index[i]] * row[index[j]];
      }
    }
    if (!solve(a, b, k, x)) continue;
    std::array<double, kParams> full{};
    bool feasible = true;
    for (std::size_t i = 0; i < k; ++i) {
      full[index[i]] = x[i];
      feasible = feasible && x[i] >= 0;
    }
    if (!feasible) continue;
    double error = 0;
    for (const auto& s : samples) {
      if (!(s.measured_us > 0)) continue;
      const std::array<double, kParams> row = row_of(s);
      double predicted = s.fixed_us;
      for (std::size_t j = 0; j < kParams; ++j) predicted += full[j] * row[j];
      error += std::pow(predicted / s.measured_us - 1, 2);
    }
    if (error < best_error) {
      best_error = error;
      best = full;
    }
  }
  auto bandwidth = [](double us_per_byte) { return us_per_byte > 1e-12 ? 1.0 / (us_per_byte * 1e3) : 1000.0; };
  // Cache rates that no sample's bytes touched: none (as from memory).
  auto seen = [&](double TuneSample::*field) {
    return std::any_of(samples.begin(), samples.end(), [&](const TuneSample& s) { return s.*field > 0; });
  };
  return LinkParams{best[0], bandwidth(best[1]), bandwidth(best[2]),
                    seen(&TuneSample::cached_bytes) ? bandwidth(best[3]) : 0,
                    seen(&TuneSample::cached_reduced) ? bandwidth(best[4]) : 0};
}

int tune(Comm& comm, const Plan& plan, const std::string& machine, const Options& o) {
  const int rank = comm.rank(), n = comm.size();
  if (n < 2) {
    std::fprintf(stderr, "braid-perf: --tune needs at least 2 ranks (braid-run -n 2 braid-perf --tune %s)\n", o.tune.c_str());
    return 2;
  }
  const std::string transport = plan.host_count > 1 ? plan.inter_transport : plan.intra_transport;
  struct Candidate {
    std::string_view name;
    CostFunction cost;
  };
  std::vector<Candidate> algorithms;
  for (const auto& a : plan.algorithms)
    if (a.collective == "all_reduce" && a.cost != nullptr && plan.predict_us("all_reduce", a.name, 1 << 20))
      algorithms.push_back({a.name, a.cost});
  std::vector<std::size_t> sizes;
  // Sizes whose working set fits in the cache and sizes far beyond it, for
  // the two sets of rates.
  for (std::size_t s : {8, 512, 4 << 10, 16 << 10, 64 << 10, 512 << 10, 4 << 20, 32 << 20})
    if (s <= std::max<std::size_t>(o.max_bytes, 8)) sizes.push_back(s);
  std::vector<float> in(sizes.back() / sizeof(float) + 1, 1.0f), out(in.size());
  if (rank == 0)
    std::printf("# braid-perf --tune: %d ranks on %d host(s), transport %s; %zu algorithms x %zu sizes\n", n,
                plan.host_count, transport.c_str(), algorithms.size(), sizes.size());

  struct Measured {
    std::string_view algorithm;
    CostFunction cost;
    CostInputs inputs;
    TuneSample sample;
  };
  std::vector<Measured> measured;
  for (const auto& a : algorithms) {
    // A communicator of its own per algorithm: BRAID_ALGO is read when one forms.
    UniqueId id;
    if (rank == 0) id = UniqueId::create();
    comm.broadcast(id.bytes.data(), id.bytes.data(), id.bytes.size(), DataType::u8, 0);
    CommOptions options;
    options.algorithm = cat("all_reduce:", a.name);
    Comm forced = Comm::init(id, rank, n, options);
    for (std::size_t bytes : sizes) {
      const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
      const int iters = bytes <= (64 << 10) ? 200 : bytes <= (1 << 20) ? 40 : 8;
      double best = std::numeric_limits<double>::infinity();
      for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < std::max(2, iters / 10); ++i)
          forced.all_reduce(in.data(), out.data(), count, DataType::f32, ReduceOp::sum);
        forced.barrier();
        const auto start = Clock::now();
        for (int i = 0; i < iters; ++i) forced.all_reduce(in.data(), out.data(), count, DataType::f32, ReduceOp::sum);
        double mine = micros(Clock::now() - start) / iters, slowest = 0;
        forced.all_reduce(&mine, &slowest, 1, DataType::f64, ReduceOp::max);
        best = std::min(best, slowest);
      }
      const CostInputs inputs = plan.cost_inputs(count * sizeof(float));
      TuneSample s = coefficients(a.cost, inputs);
      s.measured_us = best;
      measured.push_back({a.name, a.cost, inputs, s});
    }
  }
  if (rank != 0) return 0;

  // The fit takes the algorithms whose cost is linear in the parameters:
  // all of them while every rank has a core; with more ranks than cores the
  // pipelined ones take the slower of transfer and reduction
  // (algorithm_costs.cpp), so their coefficients are not a sum and only the
  // unpipelined ones are fitted. Every algorithm is printed against the
  // fitted model all the same.
  std::vector<TuneSample> samples;
  for (const auto& m : measured)
    if (linear(m.cost, m.inputs)) samples.push_back(m.sample);
  const LinkParams before = plan.links.of(transport);
  LinkParams fitted = fit_link_params(samples);
  fitted.message_us = before.message_us;  // not fitted: kept as it was (link_model.cpp)
  std::printf("# %-13s %10s %12s %12s %12s\n", "algorithm", "bytes", "measured us", "fitted us", "before us");
  double worst = 1;
  for (const auto& m : measured) {
    auto predict = [&](const LinkParams& l) { return m.cost(with_fitted_link(m.inputs, l)); };
    const double p = predict(fitted);
    worst = std::max({worst, p / m.sample.measured_us, m.sample.measured_us / p});
    std::printf("  %-13s %10zu %12.2f %12.2f %12.2f%s\n", std::string(m.algorithm).c_str(), m.inputs.bytes,
                m.sample.measured_us, p, predict(before), linear(m.cost, m.inputs) ? "" : "  (pipelined: not fitted)");
  }
  std::printf("# %s: latency %.3g us, bandwidth %.3g GB/s, reduce %.3g GB/s, in cache %.3g and %.3g GB/s (before: "
              "%.3g us, %.3g GB/s, %.3g GB/s, in cache %.3g and %.3g GB/s, %s; cache %s per rank); the fit is within a "
              "factor %.2f of every measurement\n",
              transport.c_str(), fitted.latency_us, fitted.bandwidth_gbps, fitted.reduce_gbps, fitted.cache_bandwidth_gbps,
              fitted.cache_reduce_gbps, before.latency_us, before.bandwidth_gbps, before.reduce_gbps,
              before.cache_bandwidth_gbps, before.cache_reduce_gbps, plan.links.source.c_str(),
              plan.cache_bytes ? human_bytes(plan.cache_bytes).c_str() : "unknown", worst);

  // Add the profile to FILE: a file of another machine, or none, starts afresh.
  TuningFile file;
  file.machine = machine;
  if (std::ifstream existing{o.tune}) {
    std::stringstream text;
    text << existing.rdbuf();
    try {
      TuningFile old = parse_tuning(text.str(), o.tune);
      if (old.machine == file.machine) file = std::move(old);
      else std::printf("# %s was measured on %s: replaced by this machine's profile\n", o.tune.c_str(), old.machine.c_str());
    } catch (const Error& e) {
      std::fprintf(stderr, "braid-perf: %s\n", e.what());
      return 1;
    }
  }
  TuningProfile profile;
  profile.ranks = n;
  profile.hosts = plan.host_count;
  profile.transports[transport] = fitted;
  file.merge(profile);
  std::ofstream write(o.tune);
  write << format_tuning(file);
  if (!write) {
    std::fprintf(stderr, "braid-perf: cannot write %s\n", o.tune.c_str());
    return 1;
  }
  std::printf("# wrote %s (%d ranks on %d host(s)); use it with BRAID_TUNING_FILE=%s\n", o.tune.c_str(), n,
              plan.host_count, o.tune.c_str());
  return 0;
}

}  // namespace braid::perf
