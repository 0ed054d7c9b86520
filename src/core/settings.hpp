// Settings: the one table of environment variables (name, default, meaning):
// the BRAID_* settings and TensorFlow's TF_CONFIG. Nothing else in braid
// calls getenv; docs/settings.md prints this table and a test checks that the
// two agree.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/auth.hpp"
#include "core/socket.hpp"
#include "core/tls.hpp"

namespace braid {

enum class LogLevel { none, warn, info, trace };

struct SettingInfo {
  std::string_view name;
  std::string_view default_value;
  std::string_view meaning;
};

/// Every setting braid reads, in the order docs/settings.md lists them.
std::span<const SettingInfo> setting_table();

/// The setting that an unknown BRAID_* name most likely meant
/// ("BRAID_TRANSPORTS": "BRAID_TRANSPORT", "BRAID_LOG": "BRAID_DEBUG"), or
/// empty when none is close.
std::string_view closest_setting(std::string_view name);

struct Settings {
  // Identity and rendezvous (set by braid-run or the user's launcher).
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> local_rank;
  std::optional<int> local_size;
  std::string store_addr;
  std::string job_id;  // BRAID_JOB_ID, else TORCHELASTIC_RUN_ID or SLURM_JOB_ID; scopes the store's keys
  // Behaviour.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// BRAID_LINGER: how long a finished rank keeps serving its peers at most.
  std::chrono::milliseconds linger{std::chrono::seconds(1)};
  /// BRAID_ELASTIC=1: the job's members may shrink and grow (Comm::shrink_lost,
  /// Comm::grow, Comm::join); the store admits joiners after it formed.
  bool elastic = false;
  /// BRAID_STORE_EXTERNAL=1: the store at the store address runs already
  /// (braid-run --elastic hosts it), so rank 0 does not start one.
  bool store_external = false;
  /// BRAID_STORE_STANDBY: further stores of an elastic job (host:port, in
  /// order; braid-run --elastic hosts one on each node of a --master list).
  /// When the store in use cannot be reached, the survivors go on with the
  /// next of these that answers, so that the job outlives node 0's machine.
  std::vector<std::string> store_standby;
  /// BRAID_ELASTIC_GRACE: how long shrink_lost waits for a survivor that has
  /// not come forward yet, once the first one did.
  std::chrono::milliseconds elastic_grace{500};
  LogLevel log_level = LogLevel::warn;
  unsigned log_subsystems = ~0u;  // BRAID_DEBUG_SUBSYS (core/log.hpp's LogSubsystem bits)
  std::string log_file;           // BRAID_DEBUG_FILE, %h and %p not yet replaced
  std::string socket_ifname;               // BRAID_SOCKET_IFNAME (core/interfaces.hpp's syntax)
  std::optional<PortRange> port_range;     // BRAID_PORT_RANGE: every listening socket's port
  std::string launch_source;               // where rank and size came from (launch_env.hpp), for describe()
  int tcp_streams = 1;
  // BRAID_TCP_BUFFER: 0 leaves the kernel's autotuning alone; unset: auto
  // (1M between ranks of one kernel, transport/tcp/tcp_context.cpp).
  std::optional<std::size_t> tcp_buffer_bytes;
  std::size_t slice_bytes = 512 * 1024;
  // BRAID_FLOW_WINDOW: what a ring step may send ahead of its receives on a
  // link between hosts (collectives/ring_pieces.hpp); unset: auto (the
  // communicator bounds links between hosts of one kernel); 0: never.
  std::optional<std::size_t> flow_window;
  // BRAID_SHM_SINGLE_COPY: messages between ranks of one host of at least
  // this size go by one copy (transport/shm/shm_ring.hpp); 0: never.
  std::size_t shm_single_copy_bytes = 0;
  // BRAID_SHM_MAPPED: whether shm links take messages from the peer's
  // braid_mem_alloc memory in place (transport/shm/shared_memory.hpp).
  bool shm_mapped = true;
  // BRAID_SHM_STORES: how a shm ring's producer fills its slots
  // (transport/shm/shm_ring.hpp, "Adaptive stores").
  enum class ShmStores : std::uint8_t { automatic, plain, streaming };
  ShmStores shm_stores = ShmStores::automatic;
  // BRAID_DEVICE_DIRECT_BYTES: the smallest collective whose device buffers
  // move over device links (cuda_ipc) directly; unset: chosen by the comm.
  std::optional<std::size_t> device_direct_bytes;
  std::optional<int> spin_us;  // unset: spin only when ranks fit on the cores
  std::string algo;
  std::string transport;
  std::string tuning_file;  // BRAID_TUNING_FILE: link parameters for the cost model (topology/link_model.hpp)
  std::string dump_on_signal;
  std::string topo_dump_file;  // BRAID_TOPO_DUMP_FILE: write the planner's inputs and plan here (%r: the rank)
  std::string topo_file;       // BRAID_TOPO_FILE: plan from this topology file
  std::string trace_file;      // BRAID_TRACE: the timeline's path (%r, %h, %p not yet replaced)
  bool keep_stats = true;      // BRAID_STATS (unset or 1): time every operation for the statistics
  bool print_stats = false;    // BRAID_STATS=1: print the statistics at finalize
  // Trust: the shared secret every connection proves (none: authentication off).
  AuthKey auth_key;
  // TLS for every connection (off unless BRAID_TLS=1); loaded and checked here.
  TlsContext tls;

  /// Reads the environment once and sets up the log from it (core/log.hpp);
  /// a malformed value throws InvalidArgument naming the variable and the
  /// value (never the value of a secret). A
  /// BRAID_* variable that is not a setting gets a warning (once per
  /// process) naming the closest one, unless BRAID_DEBUG=NONE.
  static Settings from_env();
  /// Reads one variable through the same table (for tools); nullopt if unset.
  static std::optional<std::string> raw(std::string_view name);
};

/// Parses "300", "300s", "250ms", "2m" into a duration; throws InvalidArgument
/// naming `what` otherwise. A bare number is seconds.
std::chrono::milliseconds parse_duration(std::string_view text, std::string_view what);
/// Parses "4194304", "4M", "256K", "1G"; throws InvalidArgument naming `what`.
std::size_t parse_bytes(std::string_view text, std::string_view what);

}  // namespace braid
