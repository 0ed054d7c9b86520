// Machine: what hwloc sees of this host, for the planner and for people
// (braid-topo): packages, NUMA nodes, cores and hardware threads, the CPUs
// this process is bound to and the NUMA nodes they belong to, network
// interfaces (loopback and virtual bridges marked, link speed where the
// kernel knows it, NUMA locality where hwloc sees the device on PCI) and GPUs
// (PCI address and locality) where hwloc sees them, and RDMA ports through
// libibverbs (rdma.cpp).
//
// discover() loads hwloc's topology of this host once per call (tens of
// milliseconds with I/O devices); local() keeps the first discovery for the
// process, since the machine does not change under it (the binding of the
// process could, and the engine's spin decision reads it when a
// communicator starts: local() refreshes the binding each call).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

struct NetworkInterface {
  std::string name;
  bool loopback = false;
  /// A bridge, veth, tun/tap or docker/virbr interface: not a cable to
  /// another host (sysfs has no device behind it, or the name says so).
  bool is_virtual = false;
  int speed_mbps = -1;  // -1: the kernel does not say
  int numa = -1;        // the NUMA node the device hangs off, -1 if unknown
};

struct Gpu {
  std::string name;  // hwloc's OS device name ("cuda0", "card0", "renderD128")
  std::string pci;   // "0000:3b:00.0", or "" when hwloc saw no PCI device
  int numa = -1;
};

/// One port of an RDMA device (InfiniBand, or RoCE over Ethernet).
struct RdmaPort {
  std::string device;      // "mlx5_0"
  int port = 0;            // from 1; 0 when the device could not be opened
  std::string state;       // "PORT_ACTIVE", "PORT_DOWN", ...
  std::string link_layer;  // "InfiniBand" or "Ethernet (RoCE)"
  double rate_gbps = 0;    // lanes x per-lane signalling rate
  int numa = -1;
};

/// The RDMA ports libibverbs sees (rdma.cpp); empty with `note` saying why.
std::vector<RdmaPort> discover_rdma(std::string& note);

struct Machine {
  int packages = 0;
  int numa_nodes = 0;
  int cores = 0;
  int pus = 0;                    // hardware threads
  /// The cost model's cache (RankInfo::cache_kib): the largest data cache
  /// that hwloc shows shared by no cores but this process's (those of its
  /// binding; the first core when unbound), and believable in size (at most
  /// 16 MiB per core); 0 when hwloc sees none. Its level (2: L2) and the
  /// cores that share it, and why a larger one was left out.
  std::uint64_t private_cache_bytes = 0;
  int private_cache_level = 0;
  int private_cache_cores = 0;
  std::string private_cache_left_out;
  std::string bound_cpus;         // this process's binding as a CPU list ("0-3,8")
  int bound_cores = 0;            // cores with at least one CPU of the binding
  int bound_pus = 0;
  std::vector<int> bound_numa;    // NUMA nodes of the binding
  std::vector<NetworkInterface> nics;
  std::vector<Gpu> gpus;
  std::vector<RdmaPort> rdma;
  std::string rdma_note;  // why rdma is empty ("libibverbs found no RDMA device")

  /// This host now. Throws SystemError naming hwloc's failing call.
  static Machine discover();
  /// The process's machine (discovered once) with the binding read now.
  static Machine local();
  /// This host's private_cache_bytes as cache_kib() gives it, read once per
  /// process (hwloc without I/O devices: a few milliseconds), for the
  /// RankInfo a rank publishes; logged at INFO with private_cache_text().
  static std::uint32_t private_cache_kib();
  /// "1 MiB of L2 cache for one core of this process", and what was left out.
  std::string private_cache_text() const;
  /// `bytes` of cache as RankInfo::cache_kib carries it: KiB, clamped to
  /// its 32 bits.
  static std::uint32_t cache_kib(std::uint64_t bytes);
  /// The speed of network interface `ifname` in Mbit/s as the kernel gives
  /// it (/sys/class/net/IF/speed), for RankInfo::link_mbps: 0 for an empty
  /// name, loopback, a virtual interface (no device behind it, or a name
  /// such as veth*, br-*, tun*: their nominal 10 Gbit/s is no measure), a
  /// link that is down or a driver that does not say (many Wi-Fi cards).
  static std::uint32_t link_speed_mbps(std::string_view ifname);
  /// This host as hwloc XML (hwloc_topology_export_xmlbuffer, I/O devices
  /// included): the machine part of a topology file (topo_file.hpp).
  static std::string export_xml();
  /// The machine an hwloc XML topology describes, as seen by a process bound
  /// to `cpus` (RankInfo's mask; empty: every CPU of the machine). Its NICs
  /// and GPUs are the ones the XML holds; nothing is read from this host.
  /// Throws InvalidArgument naming `what` when hwloc cannot read the XML.
  static Machine from_xml(std::string_view xml, std::span<const std::uint64_t> cpus, std::string_view what);

  /// Several lines: "1 package, 1 NUMA node, 2 cores, 2 hardware threads; this process may run on CPUs 0-1
  /// (2 cores, NUMA 0); 2 MiB of L2 cache for one core of this process",
  /// then one line per interface, GPU and RDMA port.
  std::string describe() const;
};

}  // namespace braid
