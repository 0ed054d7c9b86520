// RankInfo: what a rank tells the others about itself at rendezvous. It lives
// in core because transports (can_reach) and the planner both read it; the
// planner issue grows it with NUMA, NIC and GPU locality from hwloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace braid {

struct RankInfo {
  int rank = -1;
  std::string hostname;
  /// Equal for ranks of one host, as transports (shm reaches ranks of one
  /// host) and the planner see it: boot id + host name, unless BRAID_HOST_ID
  /// names the host (tests and users simulating several hosts on one machine).
  std::uint64_t host_id = 0;
  /// Equal for ranks that share a kernel and a PID namespace (boot id + PID
  /// namespace), whatever BRAID_HOST_ID or their host names say: who shares
  /// the cores, whose pid is in whose process table.
  std::uint64_t kernel_id = 0;
  bool host_id_from_env = false;  // host_id came from BRAID_HOST_ID
  int pid = 0;
  /// CUDA devices this process can use (0 without CUDA, a driver or a GPU;
  /// at most 255): whether cuda_ipc can connect it.
  std::uint8_t gpus = 0;
  /// UCX in this process sees an RDMA device (set by the comm layer from
  /// the transports, transport/registry.hpp): whether ucx links two hosts.
  bool rdma = false;
  /// The data cache this rank has to itself (its L2 where the L3 is shared;
  /// topology's Machine::private_cache_bytes, which the comm layer sets), in
  /// KiB; 0: unknown. The cost model prices copies of
  /// buffers that fit in it at the cache's rates (topology/cost_model.hpp).
  std::uint32_t cache_kib = 0;
  /// The speed in Mbit/s of the network card behind the address this rank
  /// advertises (sysfs; topology's Machine::link_speed_mbps, which the comm
  /// layer sets); 0: unknown, loopback, or a virtual interface (veth, a
  /// bridge, a tunnel), whose nominal speed says nothing. The cost model
  /// prices the link between hosts no faster than the slowest card.
  std::uint32_t link_mbps = 0;
  /// The CPUs this process may run on (its affinity: taskset, a cgroup
  /// cpuset, braid-run's binding), bit c of word c / 64 for CPU c. The
  /// union over the ranks of one kernel is what they share.
  std::vector<std::uint64_t> cpus;

  /// Compact wire form for the bootstrap store; decode throws
  /// ProtocolMismatch on malformed bytes.
  std::vector<std::byte> encode() const;
  static RankInfo decode(std::span<const std::byte> bytes);
  /// This process, as rank `rank`.
  static RankInfo local(int rank);
  /// This process's kernel_id (boot id + PID namespace), as local() sets it.
  static std::uint64_t local_kernel_id();
  /// How many CPUs the ranks of `infos` whose kernel_id is `kernel` may run
  /// on together (the union of their affinities).
  static int shared_cpus(std::span<const RankInfo> infos, std::uint64_t kernel);
};

}  // namespace braid
