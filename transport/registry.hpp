// The transports compiled into this braid, in the order a pair of ranks tries
// them (DESIGN.md): the first whose can_reach holds for the pair wins, as
// NCCL's canConnect. BRAID_TRANSPORT narrows or reorders the list. Adding a
// transport adds one entry to the list in registry.cpp (compiled in or out by
// the build) and nothing in the comm layer or collectives.
#pragma once

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

/// Who a communicator's transport speaks for, and the settings all share.
struct TransportSetup {
  int rank = 0;
  int world_size = 1;
  CommId comm_id;
  const Settings* settings = nullptr;
  SockAddr advertise;  // the IP this rank's listeners advertise
};

struct TransportKind {
  std::string_view name;
  /// A transport of this kind for one communicator (its per-process context
  /// is made on first use and shared).
  std::unique_ptr<Transport> (*make)(const TransportSetup& setup);
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
