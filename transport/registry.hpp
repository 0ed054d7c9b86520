// The transports compiled into this braid, in the order a pair of ranks tries
// them (docs/architecture.md): the first whose can_reach holds for the pair wins, as
// NCCL's canConnect. BRAID_TRANSPORT narrows or reorders the list. Adding a
// transport adds one entry to the list in registry.cpp (compiled in or out by
// the build) and nothing in the comm layer or collectives.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/comm_id.hpp"
#include "core/rank_info.hpp"
#include "core/settings.hpp"
#include "core/socket.hpp"
#include "transport/transport.hpp"

namespace braid {

class EventLoop;

/// What a transport context is made with: the process's services, and the
/// settings of the communicator that first needs it (what must agree for a
/// later communicator to share it is TransportKind::sharing_key).
struct ContextSetup {
  EventLoop* service = nullptr;        // the service thread: tcp's listener and handshakes
  std::function<void()> wake_engine;   // tells the progress engine a link may be ready
  const Settings* settings = nullptr;
  /// Where tcp's listener binds: the IP the communicator advertises, port 0
  /// (or one of BRAID_PORT_RANGE); on the rank that hosts the store, the
  /// store's own address, so that one port serves both.
  SockAddr bind;
};

struct TransportKind {
  std::string_view name;
  /// This kind's context for the process (comm/runtime.hpp makes one, and
  /// another only for a communicator the first does not serve()).
  std::unique_ptr<TransportContext> (*make)(const ContextSetup& setup);
  /// Whether this kind connects the two ranks when BRAID_TRANSPORT does not
  /// name it (ucx: between hosts with RDMA).
  bool (*can_reach)(const RankInfo& a, const RankInfo& b);
  /// What can_reach requires, for messages ("any two ranks", "the same host").
  std::string_view reach;
  /// Whether its links move CUDA device memory themselves (Link::accepts).
  bool device_memory = false;
  /// Whether an empty BRAID_TRANSPORT includes it; one that is not in the
  /// default order is used only when BRAID_TRANSPORT names it.
  bool by_default = true;
  /// Whether it connects them when BRAID_TRANSPORT names it; null: can_reach.
  bool (*can_reach_named)(const RankInfo& a, const RankInfo& b) = nullptr;
};

/// Whether a transport of this braid sees an RDMA device in this process
/// (UCX's view; false without UCX): published as RankInfo::rdma.
bool transports_see_rdma();

/// Every transport compiled in, in the default order of preference.
std::span<const TransportKind> compiled_transports();

/// The ordered list a BRAID_TRANSPORT value names ("tcp", "shm,tcp"); an empty
/// value is every compiled transport of the default order (by_default). An unknown name,
/// an empty item or a repeat is InvalidArgument naming the value and the
/// transports this braid has.
std::vector<const TransportKind*> transport_order(std::string_view requested);

/// The first kind of `order` that reaches from a to b (can_reach_named when
/// `requested` names the kind); InvalidArgument naming
/// both ranks, their hosts and why each kind cannot, when none does.
const TransportKind& transport_between(std::span<const TransportKind* const> order, const RankInfo& a,
                                       const RankInfo& b, std::string_view requested);

}  // namespace braid
