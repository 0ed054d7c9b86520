#include "core/settings.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <utility>

#include "braid/types.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

extern char** environ;

namespace braid {
namespace {

constexpr std::size_t kMinTcpBuffer = 64 * 1024;

constexpr std::array kTable = {
    SettingInfo{"BRAID_RANK", "(none)", "This process's rank in [0, BRAID_WORLD_SIZE). Set by braid-run."},
    SettingInfo{"BRAID_WORLD_SIZE", "(none)", "Number of ranks. Set by braid-run."},
    SettingInfo{"BRAID_LOCAL_RANK", "(none)", "Rank among the ranks of this host. Set by braid-run."},
    SettingInfo{"BRAID_LOCAL_SIZE", "(none)", "Number of ranks on this host. Set by braid-run."},
    SettingInfo{"BRAID_STORE_ADDR", "(none)",
                "host:port of the rendezvous store; rank 0 hosts it there. Set by braid-run."},
    SettingInfo{"BRAID_JOB_ID", "(none)",
                "Names the job: ranks present it to the store, which refuses a rank of another job at once, and "
                "it scopes the store's keys. Set by braid-run (one per launch); else torchrun's "
                "TORCHELASTIC_RUN_ID or Slurm's SLURM_JOB_ID when set. At most 128 bytes."},
    SettingInfo{"RANK", "(none)", "torchrun's rank; used when BRAID_RANK is not set (see docs/launchers.md)."},
    SettingInfo{"WORLD_SIZE", "(none)", "torchrun's number of ranks."},
    SettingInfo{"LOCAL_RANK", "(none)", "torchrun's rank on this host."},
    SettingInfo{"LOCAL_WORLD_SIZE", "(none)", "torchrun's number of ranks on this host."},
    SettingInfo{"MASTER_ADDR", "(none)",
                "Host of rank 0 (torchrun; also read under Slurm, Open MPI and PMIx): the store's host."},
    SettingInfo{"MASTER_PORT", "(none)",
                "Port that goes with MASTER_ADDR: the store's port, or the one after it when "
                "TORCHELASTIC_USE_AGENT_STORE=True (torchrun's own store holds MASTER_PORT then)."},
    SettingInfo{"TORCHELASTIC_USE_AGENT_STORE", "(none)",
                "Set to True by torchrun when its agent hosts a store at MASTER_PORT: braid's store goes to "
                "MASTER_PORT + 1."},
    SettingInfo{"TF_CONFIG", "(none)",
                "TensorFlow's cluster spec (JSON: chief, worker and ps addresses, and this task). Used when "
                "neither BRAID_RANK nor RANK is set: ranks are the chief, the workers, then the ps; rank 0 (the chief, else "
                "worker 0) hosts the store at its address. See docs/launchers.md."},
    SettingInfo{"SLURM_PROCID", "(none)",
                "Slurm's rank; used when neither BRAID_RANK, RANK nor TF_CONFIG is set. With SLURM_NTASKS (the "
                "size), SLURM_LOCALID (the rank on this host) and SLURM_NTASKS_PER_NODE."},
    SettingInfo{"SLURM_NTASKS", "(none)", "Slurm's number of ranks."},
    SettingInfo{"SLURM_LOCALID", "(none)", "Slurm's rank on this host."},
    SettingInfo{"SLURM_NTASKS_PER_NODE", "(none)", "Slurm's ranks per host (when the job was given one)."},
    SettingInfo{"SLURM_JOB_NODELIST", "(none)",
                "Slurm's hosts (node[01-04,07]): rank 0's store listens on the first, at MASTER_PORT or 29500, "
                "unless BRAID_STORE_ADDR is set."},
    SettingInfo{"OMPI_COMM_WORLD_RANK", "(none)",
                "Open MPI's rank (mpirun); used after Slurm's. With OMPI_COMM_WORLD_SIZE, _LOCAL_RANK and "
                "_LOCAL_SIZE; the store address comes from BRAID_STORE_ADDR (mpirun -x BRAID_STORE_ADDR=host:port), "
                "else MASTER_ADDR and MASTER_PORT."},
    SettingInfo{"OMPI_COMM_WORLD_SIZE", "(none)", "Open MPI's number of ranks."},
    SettingInfo{"OMPI_COMM_WORLD_LOCAL_RANK", "(none)", "Open MPI's rank on this host."},
    SettingInfo{"OMPI_COMM_WORLD_LOCAL_SIZE", "(none)", "Open MPI's number of ranks on this host."},
    SettingInfo{"PMIX_RANK", "(none)",
                "PMIx's rank; used last. The size comes from BRAID_WORLD_SIZE (or WORLD_SIZE), the store address "
                "from BRAID_STORE_ADDR (or MASTER_ADDR and MASTER_PORT)."},
    SettingInfo{"BRAID_TIMEOUT", "300s",
                "Bound on every wait: rendezvous, connection, each collective (300, 30s, 500ms, 2m, 1h; at most "
                "1e9 s)."},
    SettingInfo{"BRAID_LINGER", "1s",
                "How long, at most, a finished rank keeps serving its peers: the store a rank hosts stays up "
                "until every rank of its job left (or this passes), and a process that exits waits as long for "
                "what still lingers. A communicator's finalize never waits for it (1s, 200ms, 0)."},
    SettingInfo{"BRAID_ELASTIC", "0",
                "1: an elastic job (braid-run --elastic sets it). Its store, hosted by rank 0, lets a process "
                "that joins later in (Comm::join, braid.Comm.join), to be admitted by the members' next "
                "Comm::grow; survivors of a lost rank go on with Comm::shrink_lost. Anyone holding the job id "
                "(and BRAID_AUTH_KEY, when set) may join: see docs/elastic.md."},
    SettingInfo{"BRAID_STORE_EXTERNAL", "0",
                "1: the store at BRAID_STORE_ADDR is already running in another process (braid-run --elastic "
                "hosts it, so that it outlives any rank), and rank 0 does not start one."},
    SettingInfo{"BRAID_STORE_STANDBY", "",
                "Further stores of an elastic job, host:port,... in order (braid-run --elastic with a --master "
                "list hosts one on each node): when the survivors of a loss cannot reach the store in use, they "
                "go on with the next of these that answers (a side holding fewer than half of the ranks stops), "
                "and a process started again finds its job at whichever holds it. So the job outlives node 0's "
                "machine."},
    SettingInfo{"BRAID_ELASTIC_GRACE", "500ms",
                "How long Comm::shrink_lost waits for a member that has not come forward yet, once the first "
                "survivor did, before the survivors go on without it (a member that comes later is told to "
                "join again)."},
    SettingInfo{"BRAID_DEBUG", "WARN",
                "Log level: NONE, WARN, INFO or TRACE. A line starts with the local date and time (to the "
                "microsecond), [host:pid rank r], the subsystem and the level."},
    SettingInfo{"BRAID_DEBUG_SUBSYS", "ALL",
                "Subsystems whose INFO and TRACE lines show, as NCCL_DEBUG_SUBSYS: a list of INIT, BOOTSTRAP, NET, "
                "SHM, P2P, GRAPH, TUNING, COLL, ENV (INIT,NET), or ALL; ^ in front shows all but the list (^SHM,COLL). "
                "WARN lines always show."},
    SettingInfo{"BRAID_DEBUG_FILE", "(stderr)",
                "Write the log to this file instead of stderr, as NCCL_DEBUG_FILE: %h becomes the host name and %p "
                "the process id (braid.%h.%p.log). Appended to; one that cannot be opened leaves the log on stderr, "
                "with a warning."},
    SettingInfo{"BRAID_SOCKET_IFNAME", "(auto)",
                "Interfaces whose address this rank advertises to its peers, as NCCL_SOCKET_IFNAME: name "
                "prefixes (eth,en), ^ to exclude (^docker,lo), = for exact names (=eth0). Default: the one through "
                "which it reaches the store; where that is loopback while the job spans hosts (or there is no "
                "store address), the first interface that is up and not loopback, docker*, virbr*, veth*, br-*, "
                "tun* or tap*."},
    SettingInfo{"BRAID_PORT_RANGE", "(any)",
                "Ports for every listening socket (40000-40050): each process's one TCP listener, which serves "
                "all its communicators (split ones included), and the store when its address has port 0. The "
                "process that hosts the store serves it on its listener's port when it can. Open this range (and "
                "the store's port) in the firewall."},
    SettingInfo{"BRAID_TCP_STREAMS", "1", "TCP sockets per peer; a message is striped over them (1-16)."},
    SettingInfo{"BRAID_TCP_BUFFER", "(auto)",
                "SO_SNDBUF/SO_RCVBUF per socket (4M, 512K; at least 64K); 0 keeps the kernel's autotuning. auto: "
                "1M between ranks of one kernel (loopback, network namespaces of one machine) where "
                "net.core.rmem_max and wmem_max allow it, else the kernel's autotuning (4 ranks over loopback: a "
                "1 MiB all-reduce in 491-522 us instead of 729-756)."},
    SettingInfo{"BRAID_SLICE_BYTES", "512K",
                "Pipeline slice: collectives move and reduce buffers in pieces of this size."},
    SettingInfo{"BRAID_FLOW_WINDOW", "(auto)",
                "Bytes a pipelined ring step may send to a rank of another host ahead of what it has received "
                "from its predecessor; the ring's slices there are no larger. auto: 64K between hosts that share "
                "a kernel (network namespaces of one machine in one PID namespace, where the sending CPU does the "
                "receiving kernel's work: a 1 MiB all-reduce across two such hosts of 2 ranks took 1.6x as long "
                "unbounded), else unbounded. A size bounds every link between hosts; 0: unbounded everywhere."},
    SettingInfo{"BRAID_SHM_SINGLE_COPY", "0",
                "Messages between ranks of one host of at least this size (above 64K) are read by the receiver "
                "straight from the sender's buffer (cross-memory attach, process_vm_readv: one copy instead of two "
                "through the shared ring; the send completes once it is read). 0, the default, keeps every message "
                "in the ring, which measured faster for collectives on the development machine (docs/transports.md). "
                "Where the kernel refuses it (another user, kernel.yama.ptrace_scope 2 or 3, a seccomp policy) "
                "messages go through the ring."},
    SettingInfo{"BRAID_SHM_MAPPED", "1",
                "Messages above 64K between ranks of one host whose source is memory from braid_mem_alloc are "
                "read by the receiver straight from the sender's buffer, which it maps once (one copy or reduction, "
                "no system call per message; the send completes once it is read). 0: they go through the shared "
                "ring as any other message."},
    SettingInfo{"BRAID_SHM_STORES", "auto",
                "How a rank fills the shared ring's slots for a rank of its host: plain stores (the receiver then "
                "reads the data from the sender's cache), streaming stores (from memory), or auto: per ring, "
                "chunks of 8K and more the way that has cost the two sides less time, timed as they go (which "
                "wins depends on where the two processes run: on the development VM it changed by itself, 3x "
                "either way; docs/transports.md)."},
    SettingInfo{"BRAID_DEVICE_DIRECT_BYTES", "(auto)",
                "Where every pair of ranks is on a link that moves GPU memory (cuda_ipc), collectives of at least "
                "this many bytes (count x element size) on device buffers move GPU to GPU, and smaller ones are "
                "staged through host memory; send/recv always moves directly. auto: 0 when each local rank has a "
                "GPU of its own, else 1M x (ranks per GPU) squared, since ranks sharing a GPU take turns on it "
                "(4M for 2)."},
    SettingInfo{"BRAID_SPIN_US", "(auto)",
                "Microseconds to busy-poll before sleeping in the kernel; auto spins while every local "
                "rank has a core (up to 20 us, shorter while spins keep failing with every CPU busy), else "
                "polls with sched_yield for up to 1 ms, handing the core to the ranks that share it."},
    SettingInfo{"BRAID_CPU_CLAIMS", "/dev/shm/braid-cpu-claims",
                "braid-run: the file in which each braid-run that binds its ranks claims their CPUs (a lock per "
                "CPU, dropped when it exits), so that two braid-runs on one machine (two jobs, or the nodes of one "
                "job) bind to CPUs nobody else claimed while there are any, and else share them so that ranks of "
                "the same local position do not share one. none: no claims, rank i on the i-th CPU braid-run "
                "may use."},
    SettingInfo{"BRAID_ALGO", "(auto)",
                "Force algorithms: a name (ring) for every collective that has it, or per collective "
                "(all_reduce:tree,broadcast:binomial). See docs/algorithms.md."},
    SettingInfo{"BRAID_TRANSPORT", "(auto)",
                "Transports to use, in order of preference, as a name or a list (shm,tcp: shared memory between "
                "ranks of one host, TCP otherwise); each pair of ranks uses the first that reaches it. cuda_ipc "
                "(a braid built with CUDA) links ranks of one host that both have a GPU, ahead of shm: device "
                "buffers then move GPU to GPU, host buffers over its shm link. ucx (a braid built with UCX) links two hosts when both see an RDMA device through "
                "UCX, and any pair when named (ucx, ucx,tcp); UCX_TLS and UCX_NET_DEVICES choose what UCX uses. "
                "Unknown names are refused with the list this braid has."},
    SettingInfo{"BRAID_TUNING_FILE", "(built-in)",
                "Link parameters (latency, bandwidth, reduction bandwidth per transport, from memory and from the "
                "cache) for the cost model that "
                "chooses each collective's algorithm per size, as written by braid-perf --tune. A file measured "
                "on another machine or without a profile for the job's rank and host count is ignored with a "
                "warning (the built-in parameters are used); one that cannot be read or parsed is an error."},
    SettingInfo{"BRAID_HOST_ID", "(none)",
                "Names the host this rank counts as on: ranks with different names are planned and connected as "
                "on different hosts (TCP between them, not shared memory) even on one machine, to try a multi-host "
                "layout on one. Set it on every rank or on none."},
    SettingInfo{"BRAID_TOPO_DUMP_FILE", "(none)",
                "Write the planner's inputs and the plan to this file when a communicator starts: every rank's "
                "info, each host's machine as hwloc XML, the plan as text. Rank 0 writes it; a %r in the path "
                "makes every rank write its own (plan.%r.topo). Reload it with BRAID_TOPO_FILE or braid-topo --load."},
    SettingInfo{"BRAID_TOPO_FILE", "(none)",
                "Plan from this topology file (written by BRAID_TOPO_DUMP_FILE) instead of the job's own ranks and "
                "machines: hosts, ring and algorithms follow the file, links still connect the ranks where they run. "
                "A file of another rank count is an error; one of other hosts is logged (WARN) and used."},
    SettingInfo{"BRAID_DUMP_ON_SIGNAL", "(none)",
                "On this signal (USR1, USR2, ...) every communicator of the process prints its flight "
                "recorder (recent operations, who waits on whom) to stderr."},
    SettingInfo{"BRAID_TRACE", "(none)",
                "Write a timeline of every operation (collective, size, type, algorithm, transports, start and "
                "end) and of its steps (send, receive, reduce, with peer and bytes) to this file, as Chrome "
                "trace-event JSON: %r becomes the rank, %h the host name, %p the process id (trace.%r.json). "
                "braid-trace merge joins the ranks' files on one clock. See docs/tracing.md."},
    SettingInfo{"BRAID_STATS", "(kept)",
                "Each communicator keeps statistics (per collective, size band and algorithm: count, bytes, time "
                "sum, min, max, p50, p99) for Comm::stats, braid_comm_get_stats and comm.stats(); 1 also prints "
                "them to stderr when it is finalized; 0 keeps none (saves two clock reads per operation)."},
    SettingInfo{"BRAID_AUTH_KEY", "(none)",
                "Shared secret of the job. When set, every connection (the store's and each TCP one) proves "
                "knowledge of it by an HMAC-SHA256 challenge-response, and a peer without it is refused. "
                "Every rank needs the same key; it is never sent or logged."},
    SettingInfo{"BRAID_AUTH_KEY_FILE", "(none)",
                "Path of a file holding the shared secret instead (one trailing newline is ignored), so the key "
                "stays out of the environment. Setting both is an error."},
    SettingInfo{"BRAID_TLS", "0",
                "1: every connection (the store's and each TCP one) runs TLS 1.2+ (1.3 between braids) with "
                "mutual certificate verification, before braid's own handshake; needs BRAID_TLS_CERT, "
                "BRAID_TLS_KEY and BRAID_TLS_CA. Every process of the job needs the same setting."},
    SettingInfo{"BRAID_TLS_CERT", "(none)",
                "PEM file with this process's certificate chain (leaf first). It must be signed by a CA in the "
                "peers' BRAID_TLS_CA; no host name is checked."},
    SettingInfo{"BRAID_TLS_KEY", "(none)", "PEM file with the private key of BRAID_TLS_CERT (not passphrase-protected)."},
    SettingInfo{"BRAID_TLS_CA", "(none)",
                "PEM file (or OpenSSL hashed directory) of the CA certificates that every peer's certificate "
                "must chain to."},
};

// Names other libraries give a setting that braid spells differently, which
// spelling alone would not lead to.
constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kOtherNames = {{
    {"BRAID_LOG", "BRAID_DEBUG"},
    {"BRAID_LOG_LEVEL", "BRAID_DEBUG"},
    {"BRAID_LOGLEVEL", "BRAID_DEBUG"},
    {"BRAID_VERBOSE", "BRAID_DEBUG"},
}};

bool is_setting(std::string_view name) {
  for (const auto& s : kTable)
    if (s.name == name) return true;
  return false;
}

// A BRAID_* variable that is no setting is most often a typo whose effect
// the user expects (BRAID_TRANSPORTS=tcp running over shm): say so once per
// name, at the first communicator (or tool) that reads the settings.
void warn_of_unknown_settings(LogLevel level) {
  if (level == LogLevel::none) return;
  static std::mutex mutex;
  static std::set<std::string, std::less<>> warned;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    std::string_view name = text.substr(0, text.find('='));
    if (!name.starts_with("BRAID_") || is_setting(name)) continue;
    {
      std::lock_guard lock(mutex);
      if (!warned.emplace(name).second) continue;
    }
    std::string_view close = closest_setting(name);
    log_warn(name, " is not a braid setting, so it is ignored", close.empty() ? "" : cat(": did you mean ", close, "?"),
             " (braid-run --env-help lists every setting)");
  }
}

std::optional<std::string> getenv_string(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<long long> env_integer(std::string_view name, long long lo, long long hi, std::string_view why = {}) {
  auto text = getenv_string(name);
  if (!text) return std::nullopt;
  long long value = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value < lo || value > hi)
    throw InvalidArgument(cat(name, "='", *text, "' is not an integer in [", lo, ", ", hi, "]", why));
  return value;
}

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

// A setting that is on or off: 1, on, true, yes or 0, off, false, no (any
// case); unset: nullopt; anything else is refused naming the setting.
std::optional<bool> env_switch(std::string_view name) {
  auto text = getenv_string(name);
  if (!text) return std::nullopt;
  const std::string value = upper(*text);
  if (value == "0" || value == "OFF" || value == "FALSE" || value == "NO") return false;
  if (value == "1" || value == "ON" || value == "TRUE" || value == "YES") return true;
  throw InvalidArgument(cat(name, "='", *text, "' is not 0 or 1"));
}

// BRAID_TLS and its files. Certificate settings without BRAID_TLS=1 are an
// error rather than ignored: whoever set them expects encryption.
TlsContext tls_from_env() {
  const std::optional<bool> on = env_switch("BRAID_TLS");
  TlsFiles files;
  std::string missing, present;
  for (auto [name, path] : {std::pair<std::string_view, std::string*>{"BRAID_TLS_CERT", &files.cert},
                            {"BRAID_TLS_KEY", &files.key},
                            {"BRAID_TLS_CA", &files.ca}}) {
    if (auto v = getenv_string(name)) {
      *path = *v;
      present += cat(present.empty() ? "" : ", ", name);
    } else {
      missing += cat(missing.empty() ? "" : ", ", name);
    }
  }
  if (!on.value_or(false)) {
    if (!present.empty() && !on)
      throw InvalidArgument(cat(present, " set but BRAID_TLS is not: set BRAID_TLS=1 to use TLS (or BRAID_TLS=0 to "
                                "run without it)"));
    return {};
  }
  if (!missing.empty())
    throw InvalidArgument(cat("BRAID_TLS=1 needs BRAID_TLS_CERT, BRAID_TLS_KEY and BRAID_TLS_CA; not set: ", missing));
  return TlsContext::load(files);
}

}  // namespace

std::span<const SettingInfo> setting_table() { return kTable; }

// The other name a user meant, else the BRAID_ setting whose name holds the
// unknown one or is held by it ("BRAID_IFNAME" in BRAID_SOCKET_IFNAME), else
// the one within a few edits (a third of the name, at least 2).
std::string_view closest_setting(std::string_view name) {
  for (auto [other, setting] : kOtherNames)
    if (other == name) return setting;
  constexpr std::string_view kPrefix = "BRAID_";
  if (!name.starts_with(kPrefix)) return {};
  const std::string_view wanted = name.substr(kPrefix.size());
  const std::size_t most_edits = std::max<std::size_t>(2, wanted.size() / 3);
  std::string_view best;
  std::size_t best_score = SIZE_MAX;
  for (const auto& s : kTable) {
    if (!s.name.starts_with(kPrefix) || s.name == name) continue;
    const std::string_view known = s.name.substr(kPrefix.size());
    std::size_t score = edit_distance(wanted, known);
    if (score > most_edits) score = SIZE_MAX;
    const bool holds = std::min(wanted.size(), known.size()) >= 3 &&
                       (known.find(wanted) != std::string_view::npos || wanted.find(known) != std::string_view::npos);
    if (holds) score = std::min(score, std::max(wanted.size(), known.size()) - std::min(wanted.size(), known.size()));
    if (score < best_score) {
      best = s.name;
      best_score = score;
    }
  }
  return best;
}

std::optional<std::string> Settings::raw(std::string_view name) {
  if (!is_setting(name)) throw Error(ErrorCode::internal, cat("setting ", name, " is not in the settings table"));
  return getenv_string(name);
}

std::chrono::milliseconds parse_duration(std::string_view text, std::string_view what) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1000;
  else if (unit == "ms") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60000;
  else if (unit == "h") scale = 3600000;
  if (ec != std::errc() || scale == 0 || !std::isfinite(value) || value < 0)
    throw InvalidArgument(cat(what, "='", text, "' is not a duration (examples: 30, 30s, 500ms, 2m)"));
  // The bound is on the duration, not on the number before its unit: a clock
  // in nanoseconds holds 292 years, and deadlines add to it.
  constexpr double kMaxMs = 1e12;  // about 31 years
  if (value * scale > kMaxMs)
    throw InvalidArgument(cat(what, "='", text, "' is longer than 1e9 seconds (about 31 years), the longest duration "
                              "braid takes"));
  return std::chrono::milliseconds(static_cast<long long>(value * scale));
}

std::size_t parse_bytes(std::string_view text, std::string_view what) {
  unsigned long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  unsigned long long scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "k" || unit == "KiB") scale = 1ull << 10;
  else if (unit == "M" || unit == "MiB") scale = 1ull << 20;
  else if (unit == "G" || unit == "GiB") scale = 1ull << 30;
  if (ec != std::errc() || scale == 0 || value > (1ull << 40) / scale)
    throw InvalidArgument(cat(what, "='", text, "' is not a byte size (examples: 4096, 256K, 4M, 1G)"));
  return static_cast<std::size_t>(value * scale);
}

Settings Settings::from_env() {
  Settings s;
  // The store answers a wait for at most 65536 keys, one per rank.
  constexpr long long kMaxRanks = 1 << 16;
  if (auto v = env_integer("BRAID_WORLD_SIZE", 1, kMaxRanks, " (the most ranks one braid store serves)"))
    s.world_size = static_cast<int>(*v);
  if (auto v = env_integer("BRAID_RANK", 0, kMaxRanks - 1)) s.rank = static_cast<int>(*v);
  if (auto v = env_integer("BRAID_LOCAL_RANK", 0, kMaxRanks)) s.local_rank = static_cast<int>(*v);
  if (auto v = env_integer("BRAID_LOCAL_SIZE", 1, kMaxRanks)) s.local_size = static_cast<int>(*v);
  if (auto v = getenv_string("BRAID_STORE_ADDR")) s.store_addr = *v;
  for (const char* name : {"BRAID_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    if (auto v = getenv_string(name)) {
      if (v->size() > 128) throw InvalidArgument(cat(name, " is ", v->size(), " bytes long; a job id has at most 128"));
      s.job_id = *v;
      break;
    }
  }
  if (auto v = getenv_string("BRAID_TIMEOUT")) {
    s.timeout = parse_duration(*v, "BRAID_TIMEOUT");
    if (s.timeout.count() == 0) throw InvalidArgument("BRAID_TIMEOUT must be greater than zero");
  }
  if (auto v = getenv_string("BRAID_LINGER")) s.linger = parse_duration(*v, "BRAID_LINGER");
  if (auto v = env_integer("BRAID_ELASTIC", 0, 1)) s.elastic = *v == 1;
  if (auto v = env_integer("BRAID_STORE_EXTERNAL", 0, 1)) s.store_external = *v == 1;
  if (auto v = getenv_string("BRAID_STORE_STANDBY"))
    for (std::string& store : split(*v, ','))
      if (!store.empty()) s.store_standby.push_back(std::move(store));
  if (auto v = getenv_string("BRAID_ELASTIC_GRACE")) s.elastic_grace = parse_duration(*v, "BRAID_ELASTIC_GRACE");
  if (auto v = getenv_string("BRAID_DEBUG")) {
    std::string level = upper(*v);
    if (level == "NONE" || level == "OFF") s.log_level = LogLevel::none;
    else if (level == "WARN" || level == "WARNING") s.log_level = LogLevel::warn;
    else if (level == "INFO") s.log_level = LogLevel::info;
    else if (level == "TRACE") s.log_level = LogLevel::trace;
    else throw InvalidArgument(cat("BRAID_DEBUG='", *v, "' is not one of NONE, WARN, INFO, TRACE"));
  }
  if (auto v = getenv_string("BRAID_DEBUG_SUBSYS")) s.log_subsystems = parse_log_subsystems(*v);
  if (auto v = getenv_string("BRAID_DEBUG_FILE")) s.log_file = *v;
  if (auto v = getenv_string("BRAID_SOCKET_IFNAME")) s.socket_ifname = *v;
  if (auto v = getenv_string("BRAID_PORT_RANGE")) s.port_range = PortRange::parse(*v, "BRAID_PORT_RANGE");
  if (auto v = env_integer("BRAID_TCP_STREAMS", 1, 16)) s.tcp_streams = static_cast<int>(*v);
  if (auto v = getenv_string("BRAID_TCP_BUFFER"); v && upper(*v) != "AUTO") {
    s.tcp_buffer_bytes = parse_bytes(*v, "BRAID_TCP_BUFFER");
    // A 4K buffer made a 1 MiB send take 24 s on loopback: far past any
    // useful rate, and past typical timeouts.
    if (*s.tcp_buffer_bytes > 0 && *s.tcp_buffer_bytes < kMinTcpBuffer)
      throw InvalidArgument(cat("BRAID_TCP_BUFFER='", *v, "' is below ", human_bytes(kMinTcpBuffer),
                                ", too small to move data at a useful rate; use at least 64K, or 0 for the kernel's "
                                "autotuning"));
  }
  if (auto v = getenv_string("BRAID_SLICE_BYTES")) {
    s.slice_bytes = parse_bytes(*v, "BRAID_SLICE_BYTES");
    if (s.slice_bytes < 64) throw InvalidArgument(cat("BRAID_SLICE_BYTES='", *v, "' is below the minimum of 64 bytes"));
  }
  if (auto v = getenv_string("BRAID_FLOW_WINDOW")) {
    if (upper(*v) != "AUTO") {
      s.flow_window = parse_bytes(*v, "BRAID_FLOW_WINDOW");
      if (*s.flow_window > 0 && *s.flow_window < 4096)
        throw InvalidArgument(cat("BRAID_FLOW_WINDOW='", *v, "' is below 4K: slices that small cost more in "
                                  "messages than any window saves (0 turns the window off)"));
    }
  }
  if (auto v = getenv_string("BRAID_SHM_SINGLE_COPY")) {
    s.shm_single_copy_bytes = parse_bytes(*v, "BRAID_SHM_SINGLE_COPY");
    if (s.shm_single_copy_bytes > 0 && s.shm_single_copy_bytes <= 64 * 1024)
      throw InvalidArgument(cat("BRAID_SHM_SINGLE_COPY='", *v, "' must be above 64K, the sends every transport takes "
                                "without the receiver (0 turns single copies off)"));
  }
  if (auto v = env_switch("BRAID_SHM_MAPPED")) s.shm_mapped = *v;
  if (auto v = getenv_string("BRAID_SHM_STORES")) {
    const std::string value = upper(*v);
    if (value == "AUTO") s.shm_stores = Settings::ShmStores::automatic;
    else if (value == "PLAIN") s.shm_stores = Settings::ShmStores::plain;
    else if (value == "STREAMING") s.shm_stores = Settings::ShmStores::streaming;
    else throw InvalidArgument(cat("BRAID_SHM_STORES='", *v, "' is not auto, plain or streaming"));
  }
  if (auto v = getenv_string("BRAID_DEVICE_DIRECT_BYTES"))
    s.device_direct_bytes = parse_bytes(*v, "BRAID_DEVICE_DIRECT_BYTES");
  if (auto v = env_integer("BRAID_SPIN_US", 0, 1000000)) s.spin_us = static_cast<int>(*v);
  if (auto v = getenv_string("BRAID_ALGO")) s.algo = *v;
  if (auto v = getenv_string("BRAID_TRANSPORT")) s.transport = *v;
  if (auto v = getenv_string("BRAID_TUNING_FILE")) s.tuning_file = *v;
  if (auto v = getenv_string("BRAID_DUMP_ON_SIGNAL")) s.dump_on_signal = *v;
  if (auto v = getenv_string("BRAID_TOPO_DUMP_FILE")) s.topo_dump_file = *v;
  if (auto v = getenv_string("BRAID_TOPO_FILE")) s.topo_file = *v;
  if (auto v = getenv_string("BRAID_TRACE")) s.trace_file = *v;
  if (auto v = env_integer("BRAID_STATS", 0, 1)) {
    s.keep_stats = *v == 1;
    s.print_stats = *v == 1;
  }
  // Set but empty is a mistake (an unset variable in a launcher's script),
  // not a request to run without authentication.
  for (const char* name : {"BRAID_AUTH_KEY", "BRAID_AUTH_KEY_FILE"}) {
    const char* raw = std::getenv(name);
    if (raw != nullptr && *raw == '\0')
      throw InvalidArgument(cat(name, " is set but empty; unset it to run without authentication, or give the key"));
  }
  auto key = getenv_string("BRAID_AUTH_KEY");
  auto key_file = getenv_string("BRAID_AUTH_KEY_FILE");
  if (key && key_file)
    throw InvalidArgument("BRAID_AUTH_KEY and BRAID_AUTH_KEY_FILE are both set; set one of them");
  if (key) {
    try {
      s.auth_key = AuthKey(*key);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(cat("BRAID_AUTH_KEY: ", e.what()));
    }
  }
  if (key_file) s.auth_key = AuthKey::from_file(*key_file, "BRAID_AUTH_KEY_FILE");
  s.tls = tls_from_env();
  configure_log(s.log_level, s.log_subsystems, s.log_file);
  warn_of_unknown_settings(s.log_level);
  return s;
}

}  // namespace braid
