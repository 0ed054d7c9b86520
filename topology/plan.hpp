// The Plan: which transport each peer uses, the ring order, and which
// algorithm each collective runs at each size. It is a plain value so it can
// be printed, tested from made-up rank infos, and overridden from the
// environment.
//
// The algorithm per size comes from an alpha-beta cost model: the algorithm
// registry (collectives/registry.hpp) gives each algorithm's cost function,
// the link model (link_model.hpp) the latency and bandwidths of the
// transports the plan uses, and the plan keeps, per collective and
// power-of-two size, the algorithm predicted fastest.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rank_info.hpp"
#include "core/settings.hpp"
#include "topology/cost_model.hpp"
#include "topology/link_model.hpp"

namespace braid {

struct TransportKind;

/// The flow window of links between hosts (BRAID_FLOW_WINDOW;
/// collectives/ring_pieces.hpp says what it is and why): by rank, its window
/// group (-1: none; a link between ranks of different hosts in one group
/// gets the window), and the window's size, 0 when no such link exists. auto
/// puts the ranks of one kernel in one group, except simulated hosts
/// (BRAID_HOST_ID, which talk over loopback, where the window did not pay);
/// a size puts every rank in group 0.
struct FlowWindow {
  std::vector<int> groups;
  std::size_t bytes = 0;
};

struct Plan {
  /// BRAID_TRANSPORT's order (every compiled transport by default); each pair
  /// of ranks uses the first that reaches it.
  std::vector<const TransportKind*> transports;
  std::string transport_setting;  // BRAID_TRANSPORT as given, for messages
  std::vector<int> ring;                      // ranks in ring order
  std::vector<int> hosts;                     // host number of each rank (0, 1, ... by lowest rank)
  int host_count = 1;
  /// 2 or more hosts, each with the same number, 2 or more, of ranks: the
  /// shape hierarchical all-reduce takes.
  bool uniform_hosts = false;
  /// Recursive doubling's rounds that stay inside a host (CostInputs::local_rounds).
  int local_rounds = 0;
  /// More ranks share some kernel than their CPUs: the built-in link
  /// parameters differ (link_model.cpp).
  bool oversubscribed = false;
  /// Every rank may run on one CPU only (braid-run's binding, a taskset):
  /// where they outnumber the CPUs, the cost model prices their turns on a
  /// core as bound ranks take them (algorithm_costs.cpp).
  bool ranks_bound = false;
  std::size_t slice_limit = 512 * 1024;  // BRAID_SLICE_BYTES, for the cost model's slices
  /// The finest slice the transports of the communicator's pairs take
  /// (TransportContext::min_slice_bytes), set by the communicator once its
  /// transports are known, for the cost model's slices.
  std::size_t slice_floor = 0;
  /// The cache each rank has to itself, for the cost model's rates
  /// (cost_model.hpp): the smallest RankInfo::cache_kib of the job, shared
  /// among the ranks of a kernel that outnumber its CPUs; 0 when some rank
  /// does not know its cache (then the model prices memory's rates).
  std::size_t cache_bytes = 0;
  std::map<std::string, std::string> forced;  // collective -> algorithm (BRAID_ALGO)

  /// The algorithms the plan chooses among (the registry's), each
  /// collective's default first.
  std::vector<AlgorithmCost> algorithms;
  LinkModel links;
  std::string intra_transport;  // between ranks of one host ("" when no host has two)
  std::string inter_transport;  // between hosts ("" on one host)
  /// Over tcp between hosts, the slowest network card's speed that a rank
  /// reported (RankInfo::link_mbps) in GB/s: the link between hosts is
  /// priced no faster (its copy rates capped); 0 when no rank knows its card.
  double inter_link_gbps = 0;
  /// The flow window between hosts (flow_window_of): what the schedules
  /// made of ring pieces keep (the communicator's shapes take it from here)
  /// and the cost model prices.
  FlowWindow flow_window;

  /// The algorithm for one `collective` ("all_reduce", "broadcast", ...) of
  /// `bytes`: the forced one, else the cheapest by the cost model at `bytes`
  /// rounded up to a power of two (one table lookup: this runs on every call).
  std::string_view algorithm_for(std::string_view collective, std::size_t bytes) const;
  /// The cost model's microseconds for `algorithm` at `bytes` (nullopt: the
  /// algorithm has no cost function or cannot run on this job's shape).
  std::optional<double> predict_us(std::string_view collective, std::string_view algorithm, std::size_t bytes) const;
  /// What the cost functions see for `bytes`.
  CostInputs cost_inputs(std::size_t bytes) const;
  /// What bounds `algorithm` at `bytes` by the cost model: the link whose
  /// phases cost more (the transport inside a host or the one between
  /// hosts) and whether their messages or their bytes weigh more:
  /// "tcp bytes", "shm latency". Empty when the model has no cost for it.
  std::string bound(std::string_view collective, std::string_view algorithm, std::size_t bytes) const;
  /// The algorithms `collective` has, its default first.
  std::vector<std::string_view> algorithms_of(std::string_view collective) const;

  /// Consecutive power-of-two sizes from `first` to `last` that run one algorithm.
  struct Band {
    std::string_view algorithm;
    std::size_t first = 0, last = 0;
  };
  std::vector<Band> bands(std::string_view collective, std::size_t first, std::size_t last) const;

  std::string describe() const;
  /// The transport a pair of ranks uses; InvalidArgument when none reaches.
  std::string_view transport_between(const RankInfo& a, const RankInfo& b) const;
  /// The transports of the order, comma-separated ("tcp"), for headers.
  std::string transport_names() const;

  /// Chooses the algorithm of every collective and size from `algorithms`
  /// and `links` (make_plan calls it; call it again after changing either).
  void choose();

 private:
  /// The cost function of `algorithm` for `collective` (null: none).
  CostFunction cost_of(std::string_view collective, std::string_view algorithm) const;
  static constexpr std::size_t kSizeClasses = 48;  // 1 B .. 128 TiB
  struct Choice {
    std::string_view collective;
    std::array<std::string_view, kSizeClasses> by_size_class{};  // index: bit width of bytes - 1
  };
  std::vector<Choice> chosen_;
};

/// Ring order keeps the ranks of one host next to each other (hosts in the
/// order of their lowest rank), so a ring crosses between hosts as few times
/// as possible. BRAID_ALGO ("ring", or per collective "all_reduce:tree,
/// broadcast:binomial") and BRAID_TRANSPORT are checked here against
/// `algorithms`: an unknown name throws InvalidArgument listing the known
/// ones. The link parameters come from BRAID_TUNING_FILE or the built-in
/// ones (load_link_model).
///
/// `algorithms` is the registry's cost table, which the caller (the comm
/// layer, a tool, a test) passes down: the registry lives in collectives/,
/// above this layer, and the planner reads it without including it.
Plan make_plan(std::span<const RankInfo> ranks, const Settings& settings, std::span<const AlgorithmCost> algorithms);

/// The flow window of `ranks` under `settings` (FlowWindow).
FlowWindow flow_window_of(std::span<const RankInfo> ranks, const Settings& settings);

}  // namespace braid
