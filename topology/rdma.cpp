// RDMA devices through libibverbs, when braid was built with it (Debian's
// libibverbs-dev): each device's ports with their state, link layer and
// rate, and the NUMA node the device hangs off (sysfs). Without libibverbs,
// or without a device, the list is empty and `rdma_note` says which.
#include "topology/machine.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "core/text.hpp"

#ifdef BRAID_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif

namespace braid {

#ifdef BRAID_HAVE_IBVERBS
namespace {

// Lanes of an active_width code (IB spec: 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x).
int lanes(std::uint8_t width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

// Gbit/s per lane of an active_speed code (SDR .. NDR, and XDR).
double lane_gbps(std::uint32_t speed) {
  switch (speed) {
    case 1: return 2.5;
    case 2: return 5.0;
    case 4:
    case 8: return 10.0;
    case 16: return 14.0;
    case 32: return 25.0;
    case 64: return 50.0;
    case 128: return 100.0;
    case 256: return 200.0;
    default: return 0.0;
  }
}

int numa_of(const std::string& device) {
  int node = -1;
  std::ifstream(cat("/sys/class/infiniband/", device, "/device/numa_node")) >> node;
  return node;
}

}  // namespace

std::vector<RdmaPort> discover_rdma(std::string& note) {
  std::vector<RdmaPort> out;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    // No RDMA support in the kernel at all (ENOSYS) is the common case.
    note = cat("libibverbs found no RDMA device (listing failed: ", std::strerror(errno), ")");
    return out;
  }
  for (int d = 0; d < count; ++d) {
    const std::string name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    if (ctx == nullptr) {
      out.push_back(RdmaPort{name, 0, "cannot be opened", "", 0.0, numa_of(name)});
      continue;
    }
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      for (int p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr port{};
        if (ibv_query_port(ctx, static_cast<std::uint8_t>(p), &port) != 0) continue;
        const char* layer = port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
        out.push_back(RdmaPort{name, p, ibv_port_state_str(port.state), layer,
                               lanes(port.active_width) * lane_gbps(port.active_speed), numa_of(name)});
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (out.empty()) note = "libibverbs found no RDMA device";
  return out;
}

#else

std::vector<RdmaPort> discover_rdma(std::string& note) {
  note = "braid was built without libibverbs (Debian: libibverbs-dev)";
  return {};
}

#endif

}  // namespace braid
