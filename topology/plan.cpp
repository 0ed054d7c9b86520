#include "topology/plan.hpp"

#include <algorithm>
#include <array>

#include "braid/types.hpp"
#include "core/text.hpp"
#include "transport/registry.hpp"

namespace braid {
namespace {

struct CollectiveAlgorithms {
  std::string_view collective;
  std::span<const std::string_view> algorithms;
};

constexpr std::string_view kAllReduce[] = {"ring", "direct", "recdbl", "rabenseifner", "tree", "hierarchical"};
constexpr std::string_view kBroadcast[] = {"chain", "binomial", "tree"};
constexpr std::string_view kReduce[] = {"binomial"};
constexpr std::string_view kAllGather[] = {"ring"};
constexpr std::string_view kReduceScatter[] = {"ring"};
constexpr std::string_view kAllToAll[] = {"pairwise"};
constexpr std::string_view kGather[] = {"direct"};
constexpr std::string_view kScatter[] = {"direct"};
constexpr std::string_view kBarrier[] = {"ring"};
constexpr std::array kCollectives = {
    CollectiveAlgorithms{"all_reduce", kAllReduce},   CollectiveAlgorithms{"broadcast", kBroadcast},
    CollectiveAlgorithms{"reduce", kReduce},          CollectiveAlgorithms{"all_gather", kAllGather},
    CollectiveAlgorithms{"reduce_scatter", kReduceScatter}, CollectiveAlgorithms{"all_to_all", kAllToAll},
    CollectiveAlgorithms{"gather", kGather},          CollectiveAlgorithms{"scatter", kScatter},
    CollectiveAlgorithms{"barrier", kBarrier},
};

std::string normalise(std::string_view name) {
  std::string out(name);
  if (out == "allreduce") out = "all_reduce";
  else if (out == "allgather") out = "all_gather";
  else if (out == "reducescatter") out = "reduce_scatter";
  else if (out == "alltoall") out = "all_to_all";
  else if (out == "bcast") out = "broadcast";
  return out;
}

bool has(std::span<const std::string_view> list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

std::string joined(std::span<const std::string_view> list) {
  std::string out;
  for (auto a : list) out += cat(out.empty() ? "" : ", ", a);
  return out;
}

}  // namespace

std::span<const std::string_view> algorithms_of(std::string_view collective) {
  for (const auto& c : kCollectives)
    if (c.collective == collective) return c.algorithms;
  throw Error(ErrorCode::internal, cat("no collective named ", collective));
}

std::string_view Plan::algorithm_for(std::string_view collective, std::size_t bytes, int ranks) const {
  if (!forced.empty())
    if (auto it = forced.find(std::string(collective)); it != forced.end()) return it->second;
  if (collective == "all_reduce") {
    // Latency first: one exchange (direct) for 2 ranks, log2(n) exchanges
    // (recursive doubling) for more; then Rabenseifner, whose 2 log2(n) hops
    // move the same 2(n-1)/n of the buffer as the ring; the pipelined ring
    // for large buffers. Measured on 4 ranks over loopback TCP (2 cores):
    // 64 B took 17 us with recdbl and 52 us with the ring; 256 KiB 107 us
    // with Rabenseifner and 122 us with the ring; from 2 MiB the ring and
    // Rabenseifner are within noise and the ring keeps slices in cache.
    // At 1 MiB on 4 ranks the pipelined ring wins over both transports
    // (shm: 600-770 us against 840-1220; tcp: 2.0-2.4 ms against 2.3-2.5),
    // while Rabenseifner still wins at 512 KiB over shm (410-480 us against
    // 770), so Rabenseifner stops below 1 MiB.
    if (bytes <= kSmallBytes) return ranks == 2 ? "direct" : "recdbl";
    // Several hosts with as many ranks each: the ring's host crossings carry
    // 2(n-1)/n of the buffer each, the hierarchical one's (hosts-1)/hosts of
    // a host's share (hierarchical.cpp).
    if (bytes >= kHierarchicalBytes && uniform_hosts) return "hierarchical";
    // On 2 ranks Rabenseifner is the ring without pipelining: ring it is.
    if (bytes < kMediumBytes && ranks > 2) return "rabenseifner";
    return "ring";
  }
  if (collective == "broadcast") {
    // The binomial tree's log2(n) hops beat the chain's n-1 until the root's
    // log2(n) whole copies cost more than the chain's pipeline fill.
    return bytes <= kMediumBytes ? "binomial" : "chain";
  }
  return algorithms_of(collective).front();
}

std::string Plan::describe() const {
  std::string order;
  for (std::size_t i = 0; i < ring.size() && i < 16; ++i) order += cat(i ? " " : "", ring[i]);
  if (ring.size() > 16) order += " ...";
  std::string algos;
  for (const auto& c : kCollectives) {
    if (c.collective != "all_reduce" && c.collective != "broadcast") continue;
    std::string chosen;
    if (auto it = forced.find(std::string(c.collective)); it != forced.end()) chosen = it->second + " (forced)";
    else if (c.collective == "all_reduce")
      chosen = ring.size() == 2 ? cat("direct up to ", human_bytes(kSmallBytes), ", ring above")
                                : cat("recdbl up to ", human_bytes(kSmallBytes), ", rabenseifner below ",
                                      human_bytes(kMediumBytes),
                                      uniform_hosts ? ", hierarchical from there" : ", ring from there");
    else chosen = cat("binomial up to ", human_bytes(kMediumBytes), ", chain above");
    algos += cat(", ", c.collective, " ", chosen);
  }
  return cat("transports ", transport_names(), algos, ", ring ", order);
}

std::string Plan::transport_names() const {
  std::string kinds;
  for (const TransportKind* k : transports) kinds += cat(kinds.empty() ? "" : ",", k->name);
  return kinds;
}

std::string_view Plan::transport_between(const RankInfo& a, const RankInfo& b) const {
  return braid::transport_between(transports, a, b, transport_setting).name;
}

Plan make_plan(std::span<const RankInfo> ranks, const Settings& settings) {
  Plan plan;
  plan.transports = transport_order(settings.transport);
  plan.transport_setting = settings.transport;
  // BRAID_ALGO: "name" applies to every collective that has an algorithm of
  // that name; "collective:name" to one; both may be listed with commas.
  std::string_view spec = settings.algo;
  while (!spec.empty()) {
    auto comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    auto colon = item.find(':');
    if (colon == std::string_view::npos) {
      bool used = false;
      for (const auto& c : kCollectives)
        if (has(c.algorithms, item)) {
          plan.forced[std::string(c.collective)] = std::string(item);
          used = true;
        }
      if (!used)
        throw InvalidArgument(cat("BRAID_ALGO='", settings.algo, "': no collective has an algorithm named '", item,
                                  "' (all_reduce: ", joined(kAllReduce), "; broadcast: ", joined(kBroadcast), ")"));
      continue;
    }
    std::string collective = normalise(item.substr(0, colon));
    std::string_view algo = item.substr(colon + 1);
    auto it = std::find_if(kCollectives.begin(), kCollectives.end(), [&](auto& c) { return c.collective == collective; });
    if (it == kCollectives.end())
      throw InvalidArgument(cat("BRAID_ALGO='", settings.algo, "': '", item.substr(0, colon), "' is not a collective"));
    if (!has(it->algorithms, algo))
      throw InvalidArgument(cat("BRAID_ALGO='", settings.algo, "': ", collective, " has no algorithm '", algo,
                                "' (known: ", joined(it->algorithms), ")"));
    plan.forced[collective] = std::string(algo);
  }
  std::map<std::uint64_t, int> first_rank_of_host;
  for (const auto& r : ranks) {
    auto [it, fresh] = first_rank_of_host.emplace(r.host_id, r.rank);
    if (!fresh) it->second = std::min(it->second, r.rank);
  }
  plan.ring.reserve(ranks.size());
  for (const auto& r : ranks) plan.ring.push_back(r.rank);
  std::stable_sort(plan.ring.begin(), plan.ring.end(), [&](int a, int b) {
    return first_rank_of_host[ranks[a].host_id] < first_rank_of_host[ranks[b].host_id];
  });
  // Hosts numbered by their lowest rank; ranks counted per host.
  std::map<int, int> number_of_first;
  for (const auto& [id, first] : first_rank_of_host) number_of_first.emplace(first, 0);
  int next = 0;
  for (auto& [first, number] : number_of_first) number = next++;
  std::vector<int> per_host(number_of_first.size(), 0);
  plan.hosts.reserve(ranks.size());
  for (const auto& r : ranks) {
    plan.hosts.push_back(number_of_first[first_rank_of_host[r.host_id]]);
    ++per_host[static_cast<std::size_t>(plan.hosts.back())];
  }
  plan.uniform_hosts = per_host.size() >= 2 && per_host.front() >= 2 &&
                       std::all_of(per_host.begin(), per_host.end(), [&](int k) { return k == per_host.front(); });
  return plan;
}

}  // namespace braid
