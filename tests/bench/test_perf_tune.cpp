// braid-perf --tune's fit (bench/perf_tune.hpp) from made-up measurements:
// times the cost model itself predicts from known link parameters give those
// parameters back, whatever the noise-free mix of unpipelined algorithms and
// sizes.
#include <catch2/catch.hpp>

#include <vector>

#include "collectives/algorithm_costs.hpp"
#include "perf_options.hpp"
#include "perf_tune.hpp"

namespace braid::perf {
namespace {

TEST_CASE("--tune: the fit recovers the parameters that made the times") {
  const LinkParams truth{2.5, 4.0, 9.0};
  std::vector<TuneSample> samples;
  for (int ranks : {2, 4})
    for (CostFunction cost : {cost::direct_all_reduce, cost::recursive_doubling_all_reduce, cost::rabenseifner_all_reduce})
      for (std::size_t bytes : {8, 4096, 65536, 1 << 20, 16 << 20}) {
        CostInputs in;
        in.bytes = bytes;
        in.ranks = ranks;
        TuneSample s = coefficients(cost, in);
        in.intra = in.inter = truth;
        s.measured_us = cost(in);
        samples.push_back(s);
      }
  const LinkParams fitted = fit_link_params(samples);
  CHECK(fitted.latency_us == Approx(truth.latency_us).epsilon(1e-6));
  CHECK(fitted.bandwidth_gbps == Approx(truth.bandwidth_gbps).epsilon(1e-6));
  CHECK(fitted.reduce_gbps == Approx(truth.reduce_gbps).epsilon(1e-6));
  CHECK(fitted.cache_bandwidth_gbps == 0);  // no cache known: no sample says anything of its rates
  CHECK(fitted.cache_reduce_gbps == 0);
}

TEST_CASE("--tune across hosts: the link between hosts is fitted, the phases inside a host stay fixed") {
  // 2 hosts of 2 ranks: recdbl's and rabenseifner's rounds inside a host run
  // on the intra link, which the fit must not take for the one it fits.
  const LinkParams intra{0.7, 6.0, 10.0}, truth{12.0, 1.2, 3.0};
  std::vector<TuneSample> samples;
  for (CostFunction cost : {cost::direct_all_reduce, cost::recursive_doubling_all_reduce, cost::rabenseifner_all_reduce})
    for (std::size_t bytes : {8, 4096, 65536, 1 << 20, 16 << 20}) {
      CostInputs in;
      in.bytes = bytes;
      in.ranks = 4;
      in.hosts = 2;
      in.uniform_ranks_per_host = 2;
      in.local_rounds = 1;
      in.intra = intra;
      TuneSample s = coefficients(cost, in);
      CHECK(s.fixed_us > 0);  // the round inside a host
      s.measured_us = cost(with_fitted_link(in, truth));
      CHECK(with_fitted_link(in, truth).intra == intra);
      samples.push_back(s);
    }
  const LinkParams fitted = fit_link_params(samples);
  CHECK(fitted.latency_us == Approx(truth.latency_us).epsilon(1e-6));
  CHECK(fitted.bandwidth_gbps == Approx(truth.bandwidth_gbps).epsilon(1e-6));
  CHECK(fitted.reduce_gbps == Approx(truth.reduce_gbps).epsilon(1e-6));
}

TEST_CASE("--tune: the fit recovers the cache's rates apart from memory's") {
  const LinkParams truth{1.5, 5.0, 3.0, 20.0, 12.0};
  std::vector<TuneSample> samples;
  for (int ranks : {2, 4})
    for (CostFunction cost : {cost::direct_all_reduce, cost::recursive_doubling_all_reduce, cost::rabenseifner_all_reduce})
      for (std::size_t bytes : {8, 512, 4096, 16384, 65536, 512 << 10, 4 << 20, 32 << 20}) {
        CostInputs in;
        in.bytes = bytes;
        in.ranks = ranks;
        in.cache_bytes = 1 << 20;
        TuneSample s = coefficients(cost, in);
        in.intra = in.inter = truth;
        s.measured_us = cost(in);
        samples.push_back(s);
        CHECK(linear(cost, in));
      }
  const LinkParams fitted = fit_link_params(samples);
  CHECK(fitted.latency_us == Approx(truth.latency_us).epsilon(1e-6));
  CHECK(fitted.bandwidth_gbps == Approx(truth.bandwidth_gbps).epsilon(1e-6));
  CHECK(fitted.reduce_gbps == Approx(truth.reduce_gbps).epsilon(1e-6));
  CHECK(fitted.cache_bandwidth_gbps == Approx(truth.cache_bandwidth_gbps).epsilon(1e-6));
  CHECK(fitted.cache_reduce_gbps == Approx(truth.cache_reduce_gbps).epsilon(1e-6));
}

TEST_CASE("--tune: the pipelined algorithms' costs are not sums when ranks share cores, and are left out of the fit") {
  CostInputs in;
  in.bytes = 1 << 20;
  in.ranks = 4;
  // A core per rank: every algorithm's cost is a sum, and every one is fitted.
  CHECK(linear(cost::direct_all_reduce, in));
  CHECK(linear(cost::rabenseifner_all_reduce, in));
  CHECK(linear(cost::ring_all_reduce, in));
  CHECK(linear(cost::tree_all_reduce, in));
  // More ranks than cores: the pipelined ones take the slower of transfer and reduction.
  in.oversubscribed = true;
  CHECK(linear(cost::direct_all_reduce, in));
  CHECK(linear(cost::rabenseifner_all_reduce, in));
  CHECK_FALSE(linear(cost::ring_all_reduce, in));
  CHECK_FALSE(linear(cost::tree_all_reduce, in));
}

TEST_CASE("--tune: a parameter the times cannot pay for stays free, never negative") {
  // Times that only grow with the message count: no byte costs anything.
  std::vector<TuneSample> samples{{1, 8, 8, 3.0}, {2, 16, 8, 6.0}, {4, 1e6, 1e6, 12.0}};
  const LinkParams fitted = fit_link_params(samples);
  CHECK(fitted.latency_us > 0);
  CHECK(fitted.bandwidth_gbps > 0);
  CHECK(fitted.reduce_gbps > 0);
}

TEST_CASE("--tune: the command line") {
  auto parse = [](std::vector<std::string_view> args) { return parse_options(args).options; };
  CHECK(parse({"--tune", "t.json"}).tune == "t.json");
  CHECK(std::string(parse({"--tune=t.json"}).collective->name) == "all_reduce");
  CHECK_THROWS_WITH(parse({"broadcast", "--tune", "t.json"}), Catch::Contains("all_reduce"));
  CHECK_THROWS_WITH(parse({"--tune", "t.json", "--algo", "ring"}), Catch::Contains("--algo"));
}

}  // namespace
}  // namespace braid::perf
