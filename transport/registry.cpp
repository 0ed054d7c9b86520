#include "transport/registry.hpp"

#include <algorithm>
#include <array>

#include "braid/types.hpp"
#include "core/text.hpp"
#ifdef BRAID_HAVE_CUDA
#include "transport/cuda_ipc/cuda_ipc_transport.hpp"
#endif
#include "transport/shm/shm_context.hpp"
#include "transport/tcp/tcp_context.hpp"
#ifdef BRAID_HAVE_UCX
#include "transport/ucx/ucx_transport.hpp"
#endif

namespace braid {
namespace {

bool anywhere(const RankInfo&, const RankInfo&) { return true; }
bool same_host(const RankInfo& a, const RankInfo& b) { return a.host_id == b.host_id; }

std::unique_ptr<TransportContext> make_tcp(const ContextSetup& s) {
  return std::make_unique<TcpContext>(*s.service, s.wake_engine,
                                      TcpContext::Options{.bind = s.bind,
                                                          .port_range = s.settings->port_range,
                                                          .auth_key = s.settings->auth_key,
                                                          .tls = s.settings->tls});
}

std::unique_ptr<TransportContext> make_shm(const ContextSetup& s) {
  return std::make_unique<ShmContext>(RingGeometry{}, s.settings->shm_single_copy_bytes, s.settings->shm_mapped,
                                      s.settings->shm_stores == Settings::ShmStores::plain       ? RingCopy::cached
                                      : s.settings->shm_stores == Settings::ShmStores::streaming ? RingCopy::streaming
                                                                                                  : RingCopy::adaptive);
}

#ifdef BRAID_HAVE_CUDA
bool same_host_with_gpus(const RankInfo& a, const RankInfo& b) { return same_host(a, b) && a.gpus > 0 && b.gpus > 0; }
std::unique_ptr<TransportContext> make_cuda_ipc(const ContextSetup&) { return std::make_unique<CudaIpcTransport>(); }
#endif

#ifdef BRAID_HAVE_UCX
// By default only between hosts whose UCX sees RDMA (elsewhere tcp and shm
// serve as well without UCX's start-up); anywhere when named.
bool hosts_with_rdma(const RankInfo& a, const RankInfo& b) { return a.host_id != b.host_id && a.rdma && b.rdma; }
std::unique_ptr<TransportContext> make_ucx(const ContextSetup& s) {
  // Unnamed and without RDMA here, it can link no pair: it makes no UCX
  // context and publishes an empty address.
  const bool named = !s.settings->transport.empty();
  return std::make_unique<UcxTransport>(named || ucx_sees_rdma());
}
#endif

// In order of preference: the first that reaches a pair connects it.
constexpr std::array kCompiled = {
#ifdef BRAID_HAVE_CUDA
    // Ahead of shm where both ranks have a GPU: device buffers GPU to GPU
    // (measured 60-90x staging's busbw at 64-256 MiB on an H200), host
    // buffers over the shm link it wraps.
    TransportKind{"cuda_ipc", make_cuda_ipc, same_host_with_gpus, "both ranks on one host, each with a CUDA device",
                  true},
#endif
    TransportKind{"shm", make_shm, same_host, "both ranks on one host"},
#ifdef BRAID_HAVE_UCX
    TransportKind{"ucx", make_ucx, hosts_with_rdma, "two hosts whose UCX sees an RDMA device (anywhere when named)",
                  false, true, anywhere},
#endif
    TransportKind{"tcp", make_tcp, anywhere, "any two ranks that can reach each other's address"},
};

std::string known_names() {
  std::string out;
  for (const auto& k : kCompiled) out += cat(out.empty() ? "" : ", ", k.name);
  return out;
}

}  // namespace

std::span<const TransportKind> compiled_transports() { return kCompiled; }

bool transports_see_rdma() {
#ifdef BRAID_HAVE_UCX
  return ucx_sees_rdma();
#else
  return false;
#endif
}

std::vector<const TransportKind*> transport_order(std::string_view requested) {
  std::vector<const TransportKind*> order;
  if (requested.empty()) {
    for (const auto& k : kCompiled)
      if (k.by_default) order.push_back(&k);
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
                                "braid (it has: ", known_names(), ")",
                                item == "ucx" ? "; UCX was not found when braid was built: install libucx-dev "
                                                "(scripts/install-deps.sh) and configure again" : ""));
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
  for (const TransportKind* k : order) {
    // A non-empty BRAID_TRANSPORT named every kind of the order.
    const bool named = k->can_reach_named != nullptr && !requested.empty();
    if ((named ? k->can_reach_named : k->can_reach)(a, b)) return *k;
  }
  std::string why;
  for (const TransportKind* k : order) why += cat(why.empty() ? "" : "; ", k->name, " needs ", k->reach);
  throw InvalidArgument(cat("BRAID_TRANSPORT='", requested, "': no transport in it reaches rank ", b.rank, " (",
                            b.hostname, ") from rank ", a.rank, " (", a.hostname, "): ", why,
                            " (this braid has: ", known_names(), ")"));
}

}  // namespace braid
