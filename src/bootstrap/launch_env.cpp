#include "bootstrap/launch_env.hpp"

#include <charconv>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

constexpr int kMaxRanks = 1 << 16;  // as BRAID_WORLD_SIZE
constexpr int kDefaultStorePort = 29500;

int integer(const EnvLookup& env, std::string_view name, int lo, int hi) {
  auto text = env(name);
  if (!text) throw InvalidArgument(cat(name, " is not set"));
  int value = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value < lo || value > hi)
    throw InvalidArgument(cat(name, "='", *text, "' is not an integer in [", lo, ", ", hi, "]"));
  return value;
}

std::optional<int> optional_integer(const EnvLookup& env, std::string_view name, int lo, int hi) {
  if (!env(name)) return std::nullopt;
  return integer(env, name, lo, hi);
}

// "host:port" with a bare IPv6 host bracketed.
std::string join_host_port(const std::string& host, int port) {
  bool bare_v6 = host.find(':') != std::string::npos && !host.starts_with("[");
  return bare_v6 ? cat("[", host, "]:", port) : cat(host, ":", port);
}

// MASTER_ADDR:MASTER_PORT (+ offset), or "" when MASTER_ADDR is not set.
std::string master_address(const EnvLookup& env, int port_offset) {
  auto host = env("MASTER_ADDR");
  if (!host) return {};
  if (!env("MASTER_PORT")) throw InvalidArgument("MASTER_ADDR is set but MASTER_PORT is not: set both");
  return join_host_port(*host, integer(env, "MASTER_PORT", 1, 65535 - port_offset) + port_offset);
}

void check_rank(LaunchIdentity& id, std::string_view rank_name, std::string_view size_name) {
  if (id.rank >= id.size)
    throw InvalidArgument(cat(rank_name, "=", id.rank, " is outside [0, ", size_name, "=", id.size, ")"));
  if (id.local_size && id.local_rank && *id.local_rank >= *id.local_size)
    throw InvalidArgument(cat(id.source, ": the local rank ", *id.local_rank, " is outside [0, ", *id.local_size,
                              ")"));
}

// The store address a source without one of its own uses.
std::string store_from_env(const EnvLookup& env, std::string_view source) {
  if (auto a = env("BRAID_STORE_ADDR")) return *a;
  std::string master = master_address(env, 0);
  if (!master.empty()) return master;
  throw InvalidArgument(cat(source, " gives no store address: set BRAID_STORE_ADDR=host:port (rank 0's host; with "
                            "mpirun: -x BRAID_STORE_ADDR=host:port), or MASTER_ADDR and MASTER_PORT"));
}

// Splits at commas outside brackets.
std::vector<std::string_view> top_level_entries(std::string_view list) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      out.push_back(list.substr(start, i - start));
      start = i + 1;
    } else if (list[i] == '[') {
      ++depth;
    } else if (list[i] == ']') {
      --depth;
    }
  }
  return out;
}

struct NodelistExpander {
  std::string_view list;  // the whole, for messages
  std::size_t limit;

  [[noreturn]] void bad(std::string_view why) const {
    throw InvalidArgument(cat("SLURM_JOB_NODELIST='", list.substr(0, 200), list.size() > 200 ? "..." : "",
                              "' is not a Slurm host list: ", why));
  }

  unsigned number(std::string_view digits) const {
    if (digits.empty() || digits.size() > 9) bad(cat("'", digits, "' is not a number of 1 to 9 digits"));
    unsigned v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || end != digits.data() + digits.size()) bad(cat("'", digits, "' is not a number"));
    return v;
  }

  // Appends prefix + every expansion of `entry` to out, up to the limit.
  void expand(const std::string& prefix, std::string_view entry, std::vector<std::string>& out) const {
    if (out.size() >= limit) return;
    auto open = entry.find('[');
    if (open == std::string_view::npos) {
      if (entry.find(']') != std::string_view::npos) bad("a ']' without '['");
      out.push_back(prefix + std::string(entry));
      return;
    }
    auto close = entry.find(']', open);
    if (close == std::string_view::npos) bad("a '[' without ']'");
    std::string_view head = entry.substr(0, open), body = entry.substr(open + 1, close - open - 1);
    std::string_view rest = entry.substr(close + 1);
    if (head.find(']') != std::string_view::npos) bad("a ']' without '['");
    if (body.empty()) bad("an empty '[]'");
    while (true) {
      auto comma = body.find(',');
      std::string_view item = body.substr(0, comma);
      auto dash = item.find('-');
      std::string_view lo_text = item.substr(0, dash);
      unsigned lo = number(lo_text), hi = lo;
      if (dash != std::string_view::npos) hi = number(item.substr(dash + 1));
      if (hi < lo) bad(cat("the range ", item, " runs backwards"));
      for (unsigned v = lo; v <= hi && out.size() < limit; ++v) {
        std::string digits = std::to_string(v);
        if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
        expand(cat(prefix, head, digits), rest, out);
      }
      if (comma == std::string_view::npos || out.size() >= limit) break;
      body.remove_prefix(comma + 1);
    }
  }
};

}  // namespace

std::vector<std::string> expand_nodelist(std::string_view list, std::size_t limit) {
  NodelistExpander x{list, limit};
  if (list.empty()) x.bad("it is empty");
  std::vector<std::string> out;
  for (std::string_view entry : top_level_entries(list)) {
    if (entry.empty()) x.bad("an empty host name");
    x.expand({}, entry, out);
    if (out.size() >= limit) break;
  }
  return out;
}

std::optional<LaunchIdentity> launch_identity(const EnvLookup& env) {
  LaunchIdentity id;
  if (env("BRAID_RANK")) {
    id.source = "braid (BRAID_RANK, BRAID_WORLD_SIZE, BRAID_STORE_ADDR)";
    const char* hint = " (BRAID_RANK is; braid-run sets BRAID_RANK, BRAID_WORLD_SIZE and BRAID_STORE_ADDR together)";
    if (!env("BRAID_WORLD_SIZE")) throw InvalidArgument(cat("BRAID_WORLD_SIZE is not set", hint));
    id.size = integer(env, "BRAID_WORLD_SIZE", 1, kMaxRanks);
    id.rank = integer(env, "BRAID_RANK", 0, kMaxRanks - 1);
    id.local_rank = optional_integer(env, "BRAID_LOCAL_RANK", 0, kMaxRanks);
    id.local_size = optional_integer(env, "BRAID_LOCAL_SIZE", 1, kMaxRanks);
    auto store = env("BRAID_STORE_ADDR");
    if (!store) throw InvalidArgument(cat("BRAID_STORE_ADDR is not set", hint));
    id.store_addr = *store;
    check_rank(id, "BRAID_RANK", "BRAID_WORLD_SIZE");
    return id;
  }
  if (env("RANK")) {
    const bool agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
    id.source = cat("torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT", agent_store ? " + 1" : "", ")");
    if (!env("WORLD_SIZE")) throw InvalidArgument("RANK is set but WORLD_SIZE is not (torchrun sets both)");
    id.size = integer(env, "WORLD_SIZE", 1, kMaxRanks);
    id.rank = integer(env, "RANK", 0, kMaxRanks - 1);
    id.local_rank = optional_integer(env, "LOCAL_RANK", 0, kMaxRanks);
    id.local_size = optional_integer(env, "LOCAL_WORLD_SIZE", 1, kMaxRanks);
    // torchrun's agent hosts its own store at MASTER_PORT; braid's goes next to it.
    if (auto a = env("BRAID_STORE_ADDR")) id.store_addr = *a;
    else id.store_addr = master_address(env, agent_store ? 1 : 0);
    if (id.store_addr.empty())
      throw InvalidArgument("RANK and WORLD_SIZE are set but MASTER_ADDR is not (torchrun sets MASTER_ADDR and "
                            "MASTER_PORT; or set BRAID_STORE_ADDR=host:port)");
    check_rank(id, "RANK", "WORLD_SIZE");
    return id;
  }
  if (env("TF_CONFIG")) {
    id.source = "TF_CONFIG";
    id.tf_config = true;
    return id;
  }
  if (env("SLURM_PROCID")) {
    id.source = "Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST)";
    id.size = integer(env, "SLURM_NTASKS", 1, kMaxRanks);
    id.rank = integer(env, "SLURM_PROCID", 0, kMaxRanks - 1);
    id.local_rank = optional_integer(env, "SLURM_LOCALID", 0, kMaxRanks);
    id.local_size = optional_integer(env, "SLURM_NTASKS_PER_NODE", 1, kMaxRanks);
    if (auto a = env("BRAID_STORE_ADDR")) {
      id.store_addr = *a;
    } else {
      auto nodes = env("SLURM_JOB_NODELIST");
      if (!nodes && !env("MASTER_ADDR"))
        throw InvalidArgument("SLURM_PROCID is set but neither SLURM_JOB_NODELIST nor BRAID_STORE_ADDR is: braid "
                              "cannot tell which host runs rank 0's store");
      const int port = env("MASTER_PORT") ? integer(env, "MASTER_PORT", 1, 65535) : kDefaultStorePort;
      id.store_addr = env("MASTER_ADDR") ? master_address(env, 0)
                                          : join_host_port(expand_nodelist(*nodes, 1).front(), port);
    }
    check_rank(id, "SLURM_PROCID", "SLURM_NTASKS");
    return id;
  }
  if (env("OMPI_COMM_WORLD_RANK")) {
    id.source = "Open MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)";
    id.size = integer(env, "OMPI_COMM_WORLD_SIZE", 1, kMaxRanks);
    id.rank = integer(env, "OMPI_COMM_WORLD_RANK", 0, kMaxRanks - 1);
    id.local_rank = optional_integer(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks);
    id.local_size = optional_integer(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxRanks);
    id.store_addr = store_from_env(env, "Open MPI's environment");
    check_rank(id, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
    return id;
  }
  if (env("PMIX_RANK")) {
    id.source = "PMIx (PMIX_RANK)";
    std::string_view size_name = env("BRAID_WORLD_SIZE") ? "BRAID_WORLD_SIZE" : "WORLD_SIZE";
    if (!env(size_name))
      throw InvalidArgument("PMIX_RANK is set but the world size is not: set BRAID_WORLD_SIZE (PMIx keeps it "
                            "out of the environment)");
    id.size = integer(env, size_name, 1, kMaxRanks);
    id.rank = integer(env, "PMIX_RANK", 0, kMaxRanks - 1);
    id.store_addr = store_from_env(env, "PMIx's environment");
    check_rank(id, "PMIX_RANK", size_name);
    return id;
  }
  return std::nullopt;
}

}  // namespace braid
