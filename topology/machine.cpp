#include "topology/machine.hpp"

#include <hwloc.h>

#include <algorithm>
#include <cstdint>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>

#include "braid/types.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// Owns an hwloc topology or bitmap.
struct TopologyCloser {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
struct BitmapFreer {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyCloser>;
using BitmapPtr = std::unique_ptr<hwloc_bitmap_s, BitmapFreer>;

TopologyPtr load_topology(bool io) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw SystemError(cat("hwloc_topology_init failed: ", errno_text(errno)));
  TopologyPtr topo(raw);
  // The OpenGL and OpenCL plugins look for displays and OpenCL platforms,
  // which braid does not use; the libpciaccess plugin ("pci") leaves
  // allocations behind that LeakSanitizer reports, and hwloc's Linux backend
  // reads the same PCI devices and their locality from sysfs without it.
  for (const char* name : {"gl", "opencl", "pci"})
    hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, name);
  if (io) hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(raw) != 0) throw SystemError(cat("hwloc_topology_load failed: ", errno_text(errno)));
  return topo;
}

std::string cpu_list(hwloc_const_bitmap_t set) {
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set) < 0 || text == nullptr) return "?";
  std::string out(text);
  std::free(text);
  return out;
}

// The NUMA node of an I/O object: the first node of its first non-I/O
// ancestor's nodeset, if that ancestor is not the whole machine.
int numa_of(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (parent == nullptr || parent->nodeset == nullptr) return -1;
  if (hwloc_bitmap_weight(parent->nodeset) != 1) return -1;
  return hwloc_bitmap_first(parent->nodeset);
}

std::string pci_of(hwloc_obj_t obj) {
  for (hwloc_obj_t p = obj->parent; p != nullptr; p = p->parent)
    if (p->type == HWLOC_OBJ_PCI_DEVICE) {
      std::array<char, 32> text{};
      std::snprintf(text.data(), text.size(), "%04x:%02x:%02x.%01x", p->attr->pcidev.domain, p->attr->pcidev.bus,
                    p->attr->pcidev.dev, p->attr->pcidev.func);
      return text.data();
    }
  return "";
}

bool virtual_name(const std::string& name) {
  for (std::string_view prefix : {"docker", "virbr", "veth", "br-", "tun", "tap", "ifb", "dummy", "vnet", "wg"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

// Interface `name` (sysfs folder `dir`) is not a card of this host: a
// virtual name, or no device behind it (loopback included).
bool virtual_interface(const std::string& name, const std::filesystem::path& dir) {
  std::error_code ec;
  return virtual_name(name) || !std::filesystem::exists(dir / "device", ec);
}

// The speed sysfs gives interface `dir` (-1 where it says none).
int sysfs_speed(const std::filesystem::path& dir) {
  std::ifstream speed(dir / "speed");
  if (int mbps = -1; speed >> mbps && mbps > 0) return mbps;
  return -1;
}

// Every interface the kernel lists, in name order; hwloc adds locality for
// the ones it sees on PCI.
std::vector<NetworkInterface> interfaces(hwloc_topology_t topo) {
  std::vector<NetworkInterface> out;
  std::error_code ec;
  const std::filesystem::path net("/sys/class/net");
  for (const auto& entry : std::filesystem::directory_iterator(net, ec)) {
    NetworkInterface nic;
    nic.name = entry.path().filename().string();
    nic.loopback = nic.name == "lo";
    nic.is_virtual = !nic.loopback && virtual_interface(nic.name, entry.path());
    nic.speed_mbps = sysfs_speed(entry.path());
    out.push_back(std::move(nic));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (hwloc_obj_t dev = nullptr; (dev = hwloc_get_next_osdev(topo, dev)) != nullptr;) {
    if (dev->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK || dev->name == nullptr) continue;
    for (auto& nic : out)
      if (nic.name == dev->name) nic.numa = numa_of(topo, dev);
  }
  return out;
}

std::vector<Gpu> gpus(hwloc_topology_t topo) {
  std::vector<Gpu> out;
  for (hwloc_obj_t dev = nullptr; (dev = hwloc_get_next_osdev(topo, dev)) != nullptr;) {
    const auto type = dev->attr->osdev.type;
    if ((type != HWLOC_OBJ_OSDEV_GPU && type != HWLOC_OBJ_OSDEV_COPROC) || dev->name == nullptr) continue;
    out.push_back(Gpu{dev->name, pci_of(dev), numa_of(topo, dev)});
  }
  return out;
}

std::string plural(int n, std::string_view one, std::string_view many) { return cat(n, " ", n == 1 ? one : many); }

void fill_private_cache(hwloc_topology_t topo, hwloc_const_bitmap_t binding, Machine& m);

// The binding part of a Machine from the CPU set `set` (clipped to the
// topology's), and with it the cache that is the process's own.
void fill_binding(hwloc_topology_t topo, hwloc_bitmap_t set, Machine& m) {
  hwloc_bitmap_and(set, set, hwloc_topology_get_topology_cpuset(topo));
  m.bound_cpus = cpu_list(set);
  m.bound_pus = hwloc_bitmap_weight(set);
  m.bound_cores = 0;
  for (hwloc_obj_t core = nullptr; (core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)) != nullptr;)
    if (hwloc_bitmap_intersects(core->cpuset, set)) ++m.bound_cores;
  if (m.bound_cores == 0) m.bound_cores = m.bound_pus;  // no core objects (some VMs): count threads
  m.bound_numa.clear();
  for (hwloc_obj_t node = nullptr; (node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)) != nullptr;)
    if (hwloc_bitmap_intersects(node->cpuset, set)) m.bound_numa.push_back(static_cast<int>(node->os_index));
  fill_private_cache(topo, set, m);
}

// The binding part of a Machine, read now.
void read_binding(hwloc_topology_t topo, Machine& m) {
  BitmapPtr set(hwloc_bitmap_alloc());
  if (!set) throw SystemError("hwloc_bitmap_alloc failed");
  if (hwloc_get_cpubind(topo, set.get(), HWLOC_CPUBIND_PROCESS) != 0)
    hwloc_bitmap_copy(set.get(), hwloc_topology_get_allowed_cpuset(topo));
  fill_binding(topo, set.get(), m);
}

// The interfaces hwloc's topology itself holds (an XML topology from another
// host: this host's /sys/class/net says nothing about it). Loopback and
// virtual interfaces are not PCI devices, so hwloc never lists them.
std::vector<NetworkInterface> recorded_interfaces(hwloc_topology_t topo) {
  std::vector<NetworkInterface> out;
  for (hwloc_obj_t dev = nullptr; (dev = hwloc_get_next_osdev(topo, dev)) != nullptr;)
    if (dev->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && dev->name != nullptr)
      out.push_back(NetworkInterface{.name = dev->name, .numa = numa_of(topo, dev)});
  return out;
}

// The most cache per core that braid believes of one cache: shipping CPUs
// have at most about 12 MiB (AMD's stacked L3: 96 MiB for 8 cores), while
// hwloc in a VM can give one core its host's whole L3 (508 MiB on one VM
// here), and pricing buffers up to that size at the cache's rates picks
// algorithms for a cache that is not there.
constexpr std::uint64_t kPlausibleCachePerCore = std::uint64_t{16} << 20;

// The cache the cost model may count as this process's own: the largest
// data (or unified) cache that hwloc shows shared by no cores but the
// process's, and at most kPlausibleCachePerCore for each of them. The
// process's cores are those of its binding; an unbound process has none of
// its own (every other may run there too), so it gets its first core's. A
// cache shared with other cores (the L3 of most machines) is left out:
// those cores, and on a VM other tenants' cores, take their share of it, and
// hwloc cannot say how much.
void fill_private_cache(hwloc_topology_t topo, hwloc_const_bitmap_t binding, Machine& m) {
  m.private_cache_bytes = 0;
  m.private_cache_level = 0;
  m.private_cache_cores = 0;
  m.private_cache_left_out.clear();
  BitmapPtr own(hwloc_bitmap_alloc());
  if (!own) throw SystemError("hwloc_bitmap_alloc failed");
  const bool bound = !hwloc_bitmap_iszero(binding) &&
                     !hwloc_bitmap_isincluded(hwloc_topology_get_topology_cpuset(topo), binding);
  hwloc_obj_t first = nullptr;
  for (hwloc_obj_t core = nullptr; (core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)) != nullptr;) {
    if (bound && !hwloc_bitmap_intersects(core->cpuset, binding)) continue;
    if (first == nullptr) first = core;
    hwloc_bitmap_or(own.get(), own.get(), core->cpuset);
    if (!bound) break;
  }
  if (first == nullptr) {  // no core objects (some VMs): hardware threads
    first = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, nullptr);
    if (first == nullptr) return;
    hwloc_bitmap_copy(own.get(), bound ? binding : first->cpuset);
  }
  for (hwloc_obj_t p = first->parent; p != nullptr; p = p->parent) {
    if (!hwloc_obj_type_is_cache(p->type)) continue;
    if (!hwloc_bitmap_isincluded(p->cpuset, own.get())) break;
    if (p->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION) continue;
    const int cores = std::max(1, hwloc_get_nbobjs_inside_cpuset_by_type(topo, p->cpuset, HWLOC_OBJ_CORE));
    if (p->attr->cache.size > kPlausibleCachePerCore * static_cast<std::uint64_t>(cores)) {
      m.private_cache_left_out = cat("its L", p->attr->cache.depth, " (", human_bytes(p->attr->cache.size), " for ",
                                     plural(cores, "core", "cores"), ") is more than any CPU has per core (",
                                     human_bytes(kPlausibleCachePerCore), "), so not believed");
      break;
    }
    if (p->attr->cache.size >= m.private_cache_bytes) {
      m.private_cache_bytes = p->attr->cache.size;
      m.private_cache_level = static_cast<int>(p->attr->cache.depth);
      m.private_cache_cores = cores;
    }
  }
}

void fill_counts(hwloc_topology_t topo, Machine& m) {
  m.packages = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE));
  m.numa_nodes = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  m.pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  m.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  if (m.cores <= 0) m.cores = m.pus;
}

Machine from(hwloc_topology_t topo) {
  Machine m;
  fill_counts(topo, m);
  read_binding(topo, m);
  m.nics = interfaces(topo);
  m.gpus = gpus(topo);
  m.rdma = discover_rdma(m.rdma_note);
  return m;
}

}  // namespace

Machine Machine::discover() {
  TopologyPtr topo = load_topology(true);
  return from(topo.get());
}

std::string Machine::export_xml() {
  TopologyPtr topo = load_topology(true);
  char* buffer = nullptr;
  int length = 0;
  if (hwloc_topology_export_xmlbuffer(topo.get(), &buffer, &length, 0) != 0 || buffer == nullptr)
    throw SystemError(cat("hwloc_topology_export_xmlbuffer failed: ", errno_text(errno)));
  std::string xml(buffer, static_cast<std::size_t>(std::max(0, length - 1)));  // length counts the final NUL
  hwloc_free_xmlbuffer(topo.get(), buffer);
  return xml;
}

Machine Machine::from_xml(std::string_view xml, std::span<const std::uint64_t> cpus, std::string_view what) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw SystemError(cat("hwloc_topology_init failed: ", errno_text(errno)));
  TopologyPtr topo(raw);
  // hwloc reads XML at load time; set_xmlbuffer's length counts a final NUL.
  std::string text(xml);
  if (hwloc_topology_set_xmlbuffer(raw, text.c_str(), static_cast<int>(text.size() + 1)) != 0)
    throw InvalidArgument(cat(what, ": hwloc could not load it as an XML topology (", errno_text(errno), ")"));
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (hwloc_topology_load(raw) != 0)
    throw InvalidArgument(cat(what, ": hwloc could not load it as an XML topology (", errno_text(errno),
                              "; HWLOC_XML_VERBOSE=1 shows where its XML reader stopped)"));
  Machine m;
  fill_counts(raw, m);
  BitmapPtr set(hwloc_bitmap_alloc());
  if (!set) throw SystemError("hwloc_bitmap_alloc failed");
  for (std::size_t w = 0; w < cpus.size(); ++w)
    for (unsigned b = 0; b < 64; ++b)
      if ((cpus[w] >> b) & 1u) hwloc_bitmap_set(set.get(), static_cast<unsigned>(w * 64 + b));
  if (hwloc_bitmap_iszero(set.get())) hwloc_bitmap_copy(set.get(), hwloc_topology_get_topology_cpuset(raw));
  fill_binding(raw, set.get(), m);
  m.nics = recorded_interfaces(raw);
  m.gpus = braid::gpus(raw);
  m.rdma_note = "not recorded in the topology file";
  return m;
}

std::uint32_t Machine::cache_kib(std::uint64_t bytes) {
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(bytes / 1024, UINT32_MAX));
}

std::uint32_t Machine::link_speed_mbps(std::string_view ifname) {
  if (ifname.empty() || ifname == "lo" || ifname.find('/') != std::string_view::npos || ifname == "." || ifname == "..")
    return 0;
  const std::string name(ifname);
  const std::filesystem::path dir = std::filesystem::path("/sys/class/net") / name;
  if (virtual_interface(name, dir)) return 0;
  return static_cast<std::uint32_t>(std::max(sysfs_speed(dir), 0));
}

std::uint32_t Machine::private_cache_kib() {
  static const std::uint32_t kib = [] {
    try {
      Machine m;
      read_binding(load_topology(false).get(), m);
      log_info("the cost model's cache: ", m.private_cache_text());
      return cache_kib(m.private_cache_bytes);
    } catch (const Error&) {
      return std::uint32_t{0};  // unknown: the cost model prices memory's rates
    }
  }();
  return kib;
}

std::string Machine::private_cache_text() const {
  std::string text = private_cache_bytes == 0
                         ? std::string("no cache known")
                         : cat(human_bytes(private_cache_bytes), " of L", private_cache_level, " cache for ",
                               private_cache_cores == 1 ? std::string("one core")
                                                        : cat(private_cache_cores, " cores"),
                               " of this process");
  if (!private_cache_left_out.empty()) text += cat(" (", private_cache_left_out, ")");
  return text;
}

Machine Machine::local() {
  // The topology without I/O devices is enough to re-read the binding.
  static std::once_flag once;
  static Machine machine;
  static TopologyPtr cpus;
  static std::mutex mutex;
  std::call_once(once, [] {
    machine = discover();
    cpus = load_topology(false);
  });
  std::lock_guard lock(mutex);
  Machine now = machine;
  read_binding(cpus.get(), now);
  return now;
}

std::string Machine::describe() const {
  std::string numa;
  for (int n : bound_numa) numa += cat(numa.empty() ? "" : ",", n);
  std::string out = cat(plural(packages, "package", "packages"), ", ", plural(numa_nodes, "NUMA node", "NUMA nodes"),
                        ", ", plural(cores, "core", "cores"), ", ", plural(pus, "hardware thread", "hardware threads"),
                        "; this process may run on CPUs ", bound_cpus, " (", plural(bound_cores, "core", "cores"),
                        numa.empty() ? std::string() : cat(", NUMA ", numa), ")",
                        "; ", private_cache_text(), "\n");
  for (const auto& nic : nics)
    out += cat("  net ", nic.name, nic.loopback ? " (loopback)" : nic.is_virtual ? " (virtual)" : "",
               nic.speed_mbps > 0 ? cat(", ", nic.speed_mbps, " Mbit/s") : std::string(),
               nic.numa >= 0 ? cat(", NUMA ", nic.numa) : std::string(), "\n");
  for (const auto& gpu : gpus)
    out += cat("  gpu ", gpu.name, gpu.pci.empty() ? std::string() : cat(" at ", gpu.pci),
               gpu.numa >= 0 ? cat(", NUMA ", gpu.numa) : std::string(), "\n");
  if (gpus.empty()) out += "  no GPU seen\n";
  for (const auto& p : rdma)
    out += cat("  rdma ", p.device, p.port > 0 ? cat(" port ", p.port, ": ", p.state, ", ", p.link_layer) : cat(": ", p.state),
               p.rate_gbps > 0 ? cat(", ", p.rate_gbps, " Gbit/s") : std::string(),
               p.numa >= 0 ? cat(", NUMA ", p.numa) : std::string(), "\n");
  if (rdma.empty()) out += cat("  no RDMA device: ", rdma_note, "\n");
  return out;
}

}  // namespace braid
