#include "topology/link_model.hpp"

#include <fstream>
#include <sstream>

#include "braid/types.hpp"
#include "core/json.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

struct DefaultParams {
  std::string_view transport;
  LinkParams one_core_each;   // every local rank has a core
  LinkParams oversubscribed;  // more local ranks than cores
};

// shm: fitted on the development machine (2 cores, Debian 12, a shared VM),
// by least squares on relative error, of the cost functions
// (algorithm_costs.cpp) to the medians of every forced algorithm at every
// size from 8 B to 64 MiB (bench/auto_vs_forced.py, the idle machine), then
// rounded.
// - A core each (2 ranks, run 6): the fit gave 0.47 us, copies 7.8 GB/s in
//   cache and from memory alike (a copy through the shared segment moves its
//   lines from one core to the other), reductions 41 GB/s in a 2 MiB L2 and
//   5.8 from memory. With the rounded figures the model's choice is within
//   10% of the best forced median at 23 of 24 sizes of run 6 and of run 5
//   (the miss: the tree against the ring, which the model prices alike on 2
//   ranks, 1.12-1.14x at one size, another in each run).
// - More ranks than cores (4 ranks on 2 cores, run 3): the memory rates were
//   chosen so that the choices of large messages match the measurements (the
//   ring's lead over the tree there comes from the cost functions'
//   structure, not from these numbers; the byte terms of `braid-perf --tune`
//   moved 3x from run to run with the machine's load); the latency and the
//   cache rates are the fit: in a 1 MiB share of the L2 a copy ran 12 GB/s
//   and a reduction 2.75, against 1 and 2 from memory. A message costs a
//   hand-over of the core (sched_yield) rather than a spin, and the copies
//   of ranks that share a core take turns.
// tcp: loopback on the same machine (ENVIRONMENT.md: 6-8 us half round trip,
// about 4 GB/s per stream), not fitted, and no cache rates (the kernel's
// copies dominate). More ranks than cores: chosen across two hosts (two
// network namespaces of 2 ranks each on the development machine's 2 cores,
// joined by an unshaped veth pair; bench/auto_vs_forced.py --hosts 2x2, the
// multi-host cost functions of algorithm_costs.cpp, shm's parameters as
// they are) so that the choices match two sweeps of every forced algorithm
// (3 and 5 interleaved rounds, 8 B to 64 MiB): recdbl up to 64 KiB,
// hierarchical from 128 KiB. A buffer in the cache moves through the host's
// link at 12 GB/s and reduces at 40; memory's rates stay half of shm's
// bandwidth (a copy through the kernel on each side). The latency, 25 us, is
// what the choices need rather than what one message takes (a least-squares
// fit of the times gives 9.7 us, and then prices hierarchical's four hops
// too close to recdbl's two and the ring's six): on two shared cores a
// message across waits for its receiver's turn on a core, and its sender's
// next step for its own, which the sums of the cost functions leave out.
// A shaped or real link differs: `braid-perf --tune` across the hosts fits it
// (bench/figures/tuning_2x2_1gbit.json: the pair shaped to 1 Gbit/s, 10 us
// and 0.125 GB/s).
// A socket's message costs its rank's core a system call each way however
// many leave at once (message_us): on 2 cores over tcp, direct's n - 1
// messages each way took 33 us on 4 ranks and 25 on 3, where recdbl's 2
// rounds (the fold's included on 3) took 24 and 21 (8 B to 32 KiB,
// braid-perf -n 500, interleaved launches); 15 us a message, on the scale
// of the 25 us latency above, prices them so. Measured only with more ranks
// than cores: the one-core-each figures keep none.
// ucx runs over tcp or shared memory here and takes tcp's figures, the
// message's system calls with them (over UCX's tcp each message is a
// sendmsg and a receive; over its shared memory a FIFO element, and with
// more ranks than cores the receiver's turn on a core): 4 ranks on 2 cores,
// 3 interleaved rounds, 8 B to 32 KiB, direct took 75-128 us over UCX's tcp
// against recdbl's 53-93, and over posix,cma 11-181 against 14-36 (direct
// ahead only up to 64 B, by 3-4 us); without message_us the model ran
// direct to 256 KiB on both. cuda_ipc has no GPU to measure here.
constexpr DefaultParams kTcpDefaults{"tcp", {8.0, 2.0, 4.0}, {25.0, 0.5, 2.0, 12.0, 40.0, 15.0}};
constexpr DefaultParams kDefaults[] = {
    {"shm", {0.5, 8.0, 6.0, 0, 40.0}, {4.1, 1.0, 2.0, 12.0, 2.75}},
    kTcpDefaults,
    {"ucx", kTcpDefaults.one_core_each, kTcpDefaults.oversubscribed},  // tcp's figures, by construction
    {"cuda_ipc", {10.0, 50.0, 100.0}, {10.0, 50.0, 100.0}},
};

double positive(const JsonValue& object, std::string_view key, std::string_view where) {
  const JsonValue* v = object.find(key);
  if (v == nullptr || v->kind != JsonValue::Kind::number || !(v->number > 0) || v->number > 1e9)
    throw InvalidArgument(cat(where, ": \"", key, "\" must be a positive number"));
  return v->number;
}

// An optional rate: absent is 0 (as from memory), present must be positive.
double optional_positive(const JsonValue& object, std::string_view key, std::string_view where) {
  return object.find(key) == nullptr ? 0 : positive(object, key, where);
}

int whole(const JsonValue& object, std::string_view key, std::string_view where, int lo) {
  const JsonValue* v = object.find(key);
  auto n = v ? v->integer() : std::nullopt;
  if (!n || *n < lo || *n > 1 << 24) throw InvalidArgument(cat(where, ": \"", key, "\" must be a whole number of at least ", lo));
  return static_cast<int>(*n);
}

std::string number(double v) {
  std::ostringstream out;
  out.precision(4);
  out << v;
  return out.str();
}

}  // namespace

LinkParams default_link_params(std::string_view transport, bool oversubscribed) {
  for (const auto& d : kDefaults)
    if (d.transport == transport) return oversubscribed ? d.oversubscribed : d.one_core_each;
  return default_link_params("tcp", oversubscribed);
}

LinkParams LinkModel::of(std::string_view transport) const {
  if (auto it = transports.find(transport); it != transports.end()) return it->second;
  return default_link_params(transport, false);
}

const TuningProfile* TuningFile::find(int ranks, int hosts) const {
  for (const auto& p : profiles)
    if (p.ranks == ranks && p.hosts == hosts) return &p;
  return nullptr;
}

void TuningFile::merge(const TuningProfile& profile) {
  for (auto& p : profiles)
    if (p.ranks == profile.ranks && p.hosts == profile.hosts) {
      for (const auto& [name, params] : profile.transports) p.transports[name] = params;
      return;
    }
  profiles.push_back(profile);
}

TuningFile parse_tuning(std::string_view text, std::string_view what) {
  const JsonValue root = parse_json(text, what);
  if (root.kind != JsonValue::Kind::object) throw InvalidArgument(cat(what, ": the tuning file is not a JSON object"));
  const JsonValue* version = root.find("braid_tuning");
  if (version == nullptr || version->integer() != 1)
    throw InvalidArgument(cat(what, ": not a braid tuning file (\"braid_tuning\": 1 is missing)"));
  TuningFile file;
  const JsonValue* machine = root.find("machine");
  if (machine == nullptr || machine->kind != JsonValue::Kind::string || machine->text.empty())
    throw InvalidArgument(cat(what, ": \"machine\" must name the host the file was measured on"));
  file.machine = machine->text;
  const JsonValue* profiles = root.find("profiles");
  if (profiles == nullptr || profiles->kind != JsonValue::Kind::array)
    throw InvalidArgument(cat(what, ": \"profiles\" must be an array"));
  for (std::size_t i = 0; i < profiles->items.size(); ++i) {
    const JsonValue& p = profiles->items[i];
    const std::string where = cat(what, ": profile ", i);
    if (p.kind != JsonValue::Kind::object) throw InvalidArgument(cat(where, " is not an object"));
    TuningProfile profile;
    profile.ranks = whole(p, "ranks", where, 1);
    profile.hosts = whole(p, "hosts", where, 1);
    const JsonValue* transports = p.find("transports");
    if (transports == nullptr || transports->kind != JsonValue::Kind::object || transports->items.empty())
      throw InvalidArgument(cat(where, ": \"transports\" must be an object naming at least one transport"));
    for (std::size_t k = 0; k < transports->items.size(); ++k) {
      const JsonValue& t = transports->items[k];
      const std::string at = cat(where, ", transport ", transports->keys[k]);
      if (t.kind != JsonValue::Kind::object) throw InvalidArgument(cat(at, " is not an object"));
      profile.transports[transports->keys[k]] =
          LinkParams{positive(t, "latency_us", at), positive(t, "bandwidth_gbps", at), positive(t, "reduce_gbps", at),
                     optional_positive(t, "cache_bandwidth_gbps", at), optional_positive(t, "cache_reduce_gbps", at),
                     optional_positive(t, "message_us", at)};
    }
    if (file.find(profile.ranks, profile.hosts))
      throw InvalidArgument(cat(where, ": a second profile for ", profile.ranks, " ranks on ", profile.hosts, " host(s)"));
    file.profiles.push_back(std::move(profile));
  }
  return file;
}

std::string format_tuning(const TuningFile& file) {
  std::string out = cat("{\"braid_tuning\": 1, \"machine\": \"", file.machine, "\",\n \"profiles\": [");
  for (std::size_t i = 0; i < file.profiles.size(); ++i) {
    const TuningProfile& p = file.profiles[i];
    out += cat(i ? ",\n  " : "\n  ", "{\"ranks\": ", p.ranks, ", \"hosts\": ", p.hosts, ", \"transports\": {");
    bool first = true;
    for (const auto& [name, l] : p.transports) {
      out += cat(first ? "" : ", ", "\"", name, "\": {\"latency_us\": ", number(l.latency_us), ", \"bandwidth_gbps\": ",
                 number(l.bandwidth_gbps), ", \"reduce_gbps\": ", number(l.reduce_gbps),
                 l.cache_bandwidth_gbps > 0 ? cat(", \"cache_bandwidth_gbps\": ", number(l.cache_bandwidth_gbps)) : std::string(),
                 l.cache_reduce_gbps > 0 ? cat(", \"cache_reduce_gbps\": ", number(l.cache_reduce_gbps)) : std::string(),
                 l.message_us > 0 ? cat(", \"message_us\": ", number(l.message_us)) : std::string(), "}");
      first = false;
    }
    out += "}}";
  }
  return out + "]}\n";
}

LinkModel load_link_model(const std::string& path, std::string_view machine, int ranks, int hosts, bool oversubscribed) {
  LinkModel model;
  for (const auto& d : kDefaults) model.transports[std::string(d.transport)] = default_link_params(d.transport, oversubscribed);
  model.source = oversubscribed ? "built-in (more ranks than cores)" : "built-in";
  if (path.empty()) return model;
  std::ifstream in(path);
  if (!in) throw InvalidArgument(cat("BRAID_TUNING_FILE='", path, "' cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  const TuningFile file = parse_tuning(text.str(), cat("BRAID_TUNING_FILE='", path, "'"));
  if (file.machine != machine) {
    log_warn("BRAID_TUNING_FILE='", path, "' was measured on ", file.machine, ", this job runs on ", machine,
             ": using the ", model.source, " link parameters instead");
    return model;
  }
  const TuningProfile* profile = file.find(ranks, hosts);
  if (profile == nullptr) {
    std::string shapes;
    for (const auto& p : file.profiles) shapes += cat(shapes.empty() ? "" : ", ", p.ranks, " ranks on ", p.hosts, " host(s)");
    log_warn("BRAID_TUNING_FILE='", path, "' has no profile for ", ranks, " ranks on ", hosts, " host(s) (it has ",
             shapes.empty() ? std::string("none") : shapes, "): using the ", model.source, " link parameters instead");
    return model;
  }
  for (const auto& [name, params] : profile->transports) model.transports[name] = params;
  model.source = cat("tuning file ", path, " (", ranks, " ranks on ", hosts, " host(s))");
  return model;
}

}  // namespace braid
