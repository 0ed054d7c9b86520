#include "transport/registry.hpp"

#include <algorithm>
#include <array>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

bool anywhere(const RankInfo&, const RankInfo&) { return true; }

// In order of preference. The shared-memory, UCX and CUDA IPC transports join
// here, each behind its build option.
constexpr std::array kCompiled = {
    TransportKind{"tcp", anywhere, "any two ranks that can reach each other's address"},
};

std::string known_names() {
  std::string out;
  for (const auto& k : kCompiled) out += cat(out.empty() ? "" : ", ", k.name);
  return out;
}

}  // namespace

std::span<const TransportKind> compiled_transports() { return kCompiled; }

std::vector<const TransportKind*> transport_order(std::string_view requested) {
  std::vector<const TransportKind*> order;
  if (requested.empty()) {
    for (const auto& k : kCompiled) order.push_back(&k);
    return order;
  }
  std::string_view rest = requested;
  while (true) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty())
      throw InvalidArgument(cat("BRAID_TRANSPORT='", requested, "' has an empty entry; give transport names separated "
                                "by commas (this braid has: ", known_names(), ")"));
    auto it = std::find_if(kCompiled.begin(), kCompiled.end(), [&](const TransportKind& k) { return k.name == item; });
    if (it == kCompiled.end())
      throw InvalidArgument(cat("BRAID_TRANSPORT='", requested, "': '", item, "' is not a transport built into this "
                                "braid (it has: ", known_names(), ")"));
    if (std::find(order.begin(), order.end(), &*it) != order.end())
      throw InvalidArgument(cat("BRAID_TRANSPORT='", requested, "' names '", item, "' twice"));
    order.push_back(&*it);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return order;
}

const TransportKind& transport_between(std::span<const TransportKind* const> order, const RankInfo& a,
                                       const RankInfo& b, std::string_view requested) {
  for (const TransportKind* k : order)
    if (k->can_reach(a, b)) return *k;
  std::string why;
  for (const TransportKind* k : order) why += cat(why.empty() ? "" : "; ", k->name, " needs ", k->reach);
  throw InvalidArgument(cat("BRAID_TRANSPORT='", requested, "': no transport in it reaches rank ", b.rank, " (",
                            b.hostname, ") from rank ", a.rank, " (", a.hostname, "): ", why,
                            " (this braid has: ", known_names(), ")"));
}

}  // namespace braid
