#include "topology/plan.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>

#include "braid/types.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "transport/registry.hpp"

namespace braid {
namespace {

std::string normalise(std::string_view name) {
  std::string out(name);
  if (out == "allreduce") out = "all_reduce";
  else if (out == "allgather") out = "all_gather";
  else if (out == "reducescatter") out = "reduce_scatter";
  else if (out == "alltoall") out = "all_to_all";
  else if (out == "bcast") out = "broadcast";
  return out;
}

std::string joined(const std::vector<std::string_view>& list) {
  std::string out;
  for (auto a : list) out += cat(out.empty() ? "" : ", ", a);
  return out;
}

std::size_t size_class(std::size_t bytes) {
  return bytes <= 1 ? 0 : static_cast<std::size_t>(std::bit_width(bytes - 1));
}

}  // namespace

std::vector<std::string_view> Plan::algorithms_of(std::string_view collective) const {
  std::vector<std::string_view> out;
  for (const auto& a : algorithms)
    if (a.collective == collective) out.push_back(a.name);
  return out;
}

CostInputs Plan::cost_inputs(std::size_t bytes) const {
  CostInputs in;
  in.bytes = bytes;
  in.ranks = static_cast<int>(ring.size());
  in.hosts = host_count;
  in.uniform_ranks_per_host = uniform_hosts ? in.ranks / host_count : 0;
  in.local_rounds = local_rounds;
  in.intra = links.of(intra_transport.empty() ? inter_transport : intra_transport);
  in.inter = inter_transport.empty() ? in.intra : links.of(inter_transport);
  if (inter_link_gbps > 0 && !inter_transport.empty()) {
    in.inter.bandwidth_gbps = std::min(in.inter.bandwidth_gbps, inter_link_gbps);
    if (in.inter.cache_bandwidth_gbps > 0)
      in.inter.cache_bandwidth_gbps = std::min(in.inter.cache_bandwidth_gbps, inter_link_gbps);
  }
  in.cache_bytes = cache_bytes;
  in.oversubscribed = oversubscribed;
  in.bound = ranks_bound;
  in.slice_limit = slice_limit;
  in.slice_floor = slice_floor;
  in.inter_window = flow_window.bytes > 0 && host_count > 1;
  return in;
}

CostFunction Plan::cost_of(std::string_view collective, std::string_view algorithm) const {
  for (const auto& a : algorithms)
    if (a.collective == collective && a.name == algorithm && a.cost != nullptr) return a.cost;
  return nullptr;
}

std::optional<double> Plan::predict_us(std::string_view collective, std::string_view algorithm, std::size_t bytes) const {
  const CostFunction cost = cost_of(collective, algorithm);
  if (cost == nullptr) return std::nullopt;
  const double t = cost(cost_inputs(bytes));
  if (!std::isfinite(t)) return std::nullopt;
  return t;
}

std::string Plan::bound(std::string_view collective, std::string_view algorithm, std::size_t bytes) const {
  const CostFunction cost = cost_of(collective, algorithm);
  const CostInputs in = cost_inputs(bytes);
  const double total = cost ? cost(in) : 0;
  if (!(total > 0) || !std::isfinite(total)) return {};
  // A link that costs nothing: no latency, every rate as good as infinite.
  constexpr double kFree = 1e30;
  const LinkParams free{0, kFree, kFree, kFree, kFree};
  auto without = [&](bool intra, bool inter) {
    CostInputs c = in;
    if (intra) c.intra = free;
    if (inter) c.inter = free;
    return cost(c);
  };
  // On one host both links are the one link.
  const bool across = host_count > 1 && without(true, false) > without(false, true);
  const std::string& name = across ? inter_transport : intra_transport.empty() ? inter_transport : intra_transport;
  // The messages' share: the time left with every rate free.
  CostInputs latency_only = in;
  for (LinkParams* l : {&latency_only.intra, &latency_only.inter}) *l = LinkParams{l->latency_us, kFree, kFree, kFree, kFree, l->message_us};
  return cat(name, cost(latency_only) > total / 2 ? " latency" : " bytes");
}

void Plan::choose() {
  chosen_.clear();
  for (const auto& a : algorithms) {
    if (std::any_of(chosen_.begin(), chosen_.end(), [&](const Choice& c) { return c.collective == a.collective; }))
      continue;
    Choice c;
    c.collective = a.collective;
    for (std::size_t k = 0; k < kSizeClasses; ++k) {
      const CostInputs in = cost_inputs(std::size_t{1} << k);
      std::string_view best = a.name;  // the default, when nothing has a finite cost
      double best_us = std::numeric_limits<double>::infinity();
      // Ties keep the registry's order: the default first.
      for (const auto& candidate : algorithms) {
        if (candidate.collective != a.collective || candidate.cost == nullptr) continue;
        const double t = candidate.cost(in);
        if (t < best_us) {
          best_us = t;
          best = candidate.name;
        }
      }
      c.by_size_class[k] = best;
    }
    chosen_.push_back(c);
  }
}

std::string_view Plan::algorithm_for(std::string_view collective, std::size_t bytes) const {
  if (!forced.empty())
    if (auto it = forced.find(std::string(collective)); it != forced.end()) return it->second;
  for (const Choice& c : chosen_)
    if (c.collective == collective) return c.by_size_class[std::min(size_class(bytes), kSizeClasses - 1)];
  throw Error(ErrorCode::internal, cat("the plan has no algorithm for ", collective));
}

std::vector<Plan::Band> Plan::bands(std::string_view collective, std::size_t first, std::size_t last) const {
  std::vector<Band> out;
  for (std::size_t bytes = std::max<std::size_t>(first, 1); bytes <= last; bytes *= 2) {
    const std::string_view algo = algorithm_for(collective, bytes);
    if (!out.empty() && out.back().algorithm == algo) out.back().last = bytes;
    else out.push_back({algo, bytes, bytes});
    if (bytes > last / 2) break;
  }
  return out;
}

std::string Plan::describe() const {
  std::string order;
  for (std::size_t i = 0; i < ring.size() && i < 16; ++i) order += cat(i ? " " : "", ring[i]);
  if (ring.size() > 16) order += " ...";
  std::string algos;
  for (std::string_view collective : {"all_reduce", "broadcast"}) {
    if (algorithms_of(collective).empty()) continue;
    std::string chosen;
    if (auto it = forced.find(std::string(collective)); it != forced.end()) {
      chosen = it->second + " (forced)";
    } else {
      // "recdbl to 16 KiB, rabenseifner to 512 KiB, ring from 1 MiB"
      const auto b = bands(collective, 1, std::size_t{1} << 30);
      // "recdbl to 16 KiB, rabenseifner to 512 KiB, ring from 1 MiB", each
      // band with what bounds it at its first and last size by the model
      // ("[tcp latency]", "[shm latency .. tcp bytes]").
      for (std::size_t i = 0; i < b.size(); ++i) {
        const std::string first = bound(collective, b[i].algorithm, b[i].first);
        const std::string last = bound(collective, b[i].algorithm, b[i].last);
        chosen += cat(i ? ", " : "", b[i].algorithm,
                      b.size() == 1 ? std::string()
                      : i + 1 < b.size() ? cat(" to ", human_bytes(b[i].last))
                                         : cat(" from ", human_bytes(b[i].first)),
                      first.empty() ? std::string() : cat(" [", first, first == last ? "" : cat(" .. ", last), "]"));
      }
    }
    algos += cat(", ", collective, " ", chosen);
  }
  return cat("transports ", transport_names(), algos, " (cost model, ", links.source, " link parameters",
             inter_link_gbps > 0 ? cat(" with hosts linked at ", inter_link_gbps * 8, " Gbit/s, the slowest card")
                                 : std::string(),
             ", ",
             cache_bytes > 0 ? cat(human_bytes(cache_bytes), " of cache per rank, the least a rank has to itself")
                             : std::string("cache unknown"),
             oversubscribed && ranks_bound ? ", ranks bound to a CPU each" : "", "), ring ", order);
}

std::string Plan::transport_names() const {
  std::string kinds;
  for (const TransportKind* k : transports) kinds += cat(kinds.empty() ? "" : ",", k->name);
  return kinds;
}

std::string_view Plan::transport_between(const RankInfo& a, const RankInfo& b) const {
  return braid::transport_between(transports, a, b, transport_setting).name;
}

FlowWindow flow_window_of(std::span<const RankInfo> ranks, const Settings& settings) {
  // auto: hosts that share a kernel (the ranks' kernel_id; simulated hosts,
  // BRAID_HOST_ID, talk over loopback, where the window did not pay); a size:
  // every pair of hosts. The same on every rank, from the same infos.
  FlowWindow w;
  w.groups.assign(ranks.size(), -1);
  w.bytes = settings.flow_window.value_or(kAutoFlowWindow);
  if (w.bytes == 0) return w;
  std::map<std::uint64_t, int> group_of_kernel;  // numbered by the kernel's first rank
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (settings.flow_window) w.groups[r] = 0;
    else if (!ranks[r].host_id_from_env)
      w.groups[r] = group_of_kernel.try_emplace(ranks[r].kernel_id, static_cast<int>(r)).first->second;
  }
  // None unless some group holds ranks of two hosts.
  std::map<int, std::uint64_t> host_of_group;
  bool any = false;
  for (std::size_t r = 0; r < ranks.size() && !any; ++r) {
    if (w.groups[r] < 0) continue;
    const auto [seen, first] = host_of_group.try_emplace(w.groups[r], ranks[r].host_id);
    any = !first && seen->second != ranks[r].host_id;
  }
  if (!any) w.bytes = 0;
  return w;
}

Plan make_plan(std::span<const RankInfo> ranks, const Settings& settings, std::span<const AlgorithmCost> algorithms) {
  Plan plan;
  plan.transports = transport_order(settings.transport);
  plan.transport_setting = settings.transport;
  plan.slice_limit = settings.slice_bytes;
  plan.algorithms.assign(algorithms.begin(), algorithms.end());
  auto collective_known = [&](std::string_view c) { return !plan.algorithms_of(c).empty(); };
  auto has = [&](std::string_view c, std::string_view a) {
    auto list = plan.algorithms_of(c);
    return std::find(list.begin(), list.end(), a) != list.end();
  };
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
      for (const auto& a : plan.algorithms)
        if (a.name == item) {
          plan.forced[std::string(a.collective)] = std::string(item);
          used = true;
        }
      if (!used)
        throw InvalidArgument(cat("BRAID_ALGO='", settings.algo, "': no collective has an algorithm named '", item,
                                  "' (all_reduce: ", joined(plan.algorithms_of("all_reduce")),
                                  "; broadcast: ", joined(plan.algorithms_of("broadcast")), ")"));
      continue;
    }
    std::string collective = normalise(item.substr(0, colon));
    std::string_view algo = item.substr(colon + 1);
    if (!collective_known(collective))
      throw InvalidArgument(cat("BRAID_ALGO='", settings.algo, "': '", item.substr(0, colon), "' is not a collective"));
    if (!has(collective, algo))
      throw InvalidArgument(cat("BRAID_ALGO='", settings.algo, "': ", collective, " has no algorithm '", algo,
                                "' (known: ", joined(plan.algorithms_of(collective)), ")"));
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
  plan.host_count = std::max<int>(1, static_cast<int>(per_host.size()));
  plan.uniform_hosts = per_host.size() >= 2 && per_host.front() >= 2 &&
                       std::all_of(per_host.begin(), per_host.end(), [&](int k) { return k == per_host.front(); });
  // Recursive doubling pairs rank q with q ^ 1, q ^ 2, ...: the rounds whose
  // every pair shares a host (only where n is a power of two and no rank
  // folds; recursive_doubling.cpp).
  const std::size_t n = plan.hosts.size();
  if (n >= 2 && std::has_single_bit(n))
    for (std::size_t bit = 1; bit < n; bit <<= 1) {
      bool inside = true;
      for (std::size_t q = 0; q < n && inside; ++q) inside = plan.hosts[q] == plan.hosts[q ^ bit];
      if (!inside) break;
      ++plan.local_rounds;
    }

  // The links the cost model prices: the transport between the first two
  // ranks of one host, and between the first two ranks of different hosts
  // (by rank, so every rank finds the same ones).
  for (std::size_t a = 0; a < ranks.size(); ++a)
    for (std::size_t b = a + 1; b < ranks.size(); ++b) {
      std::string& slot = plan.hosts[a] == plan.hosts[b] ? plan.intra_transport : plan.inter_transport;
      if (!slot.empty()) continue;
      try {
        slot = plan.transport_between(ranks[a], ranks[b]);
      } catch (const InvalidArgument&) {
        // The comm layer says which pair nothing reaches; the model prices tcp.
        slot = "tcp";
      }
    }
  // Ranks that share a kernel share its CPUs (RankInfo::shared_cpus; 0 when
  // the infos do not say).
  std::map<std::uint64_t, int> per_kernel;
  for (const auto& r : ranks) ++per_kernel[r.kernel_id];
  std::uint64_t cache_kib = ranks.empty() ? 0 : ranks.front().cache_kib;
  for (const auto& r : ranks) cache_kib = std::min<std::uint64_t>(cache_kib, r.cache_kib);
  plan.cache_bytes = static_cast<std::size_t>(cache_kib * 1024);
  plan.ranks_bound = !ranks.empty() && std::all_of(ranks.begin(), ranks.end(), [](const RankInfo& r) {
    return RankInfo::shared_cpus({&r, 1}, r.kernel_id) == 1;
  });
  for (const auto& [kernel, count] : per_kernel) {
    const int cpus = RankInfo::shared_cpus(ranks, kernel);
    if (cpus > 0 && count > cpus) {
      plan.oversubscribed = true;
      // Ranks that take turns on a core take turns on its cache.
      plan.cache_bytes = std::min(plan.cache_bytes, static_cast<std::size_t>(cache_kib * 1024 * cpus / count));
    }
  }
  // Bytes between hosts cross a network card: over tcp, no faster than the
  // slowest that a rank knows of (a virtual interface's says nothing and
  // counts as unknown; a tuning file's measured rate may be lower still). Not
  // over ucx, whose RDMA card is not the one the address is on.
  if (plan.host_count > 1 && plan.inter_transport == "tcp") {
    std::uint32_t slowest = 0;
    for (const auto& r : ranks)
      if (r.link_mbps > 0 && (slowest == 0 || r.link_mbps < slowest)) slowest = r.link_mbps;
    plan.inter_link_gbps = slowest / 8000.0;
  }
  plan.flow_window = flow_window_of(ranks, settings);
  plan.links = load_link_model(settings.tuning_file, ranks.empty() ? std::string_view() : ranks.front().hostname,
                               static_cast<int>(ranks.size()), plan.host_count, plan.oversubscribed);
  plan.choose();
  // A forced algorithm that cannot run on this shape: its builder falls back
  // (hierarchical.cpp: the ring), and the log says so once per communicator.
  for (const auto& [collective, algo] : plan.forced)
    for (const auto& a : plan.algorithms)
      if (a.collective == collective && a.name == algo && a.cost != nullptr && !plan.predict_us(collective, algo, 1 << 20))
        log_warn("BRAID_ALGO forces ", collective, ":", algo, ", which cannot run on ", ranks.size(), " ranks on ",
                 plan.host_count, " host(s)", plan.uniform_hosts ? "" : " of different sizes",
                 ": its schedule falls back to another algorithm (the operation descriptor names it)");
  return plan;
}

}  // namespace braid
