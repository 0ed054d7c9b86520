// The algorithm builders: each returns one rank's Schedule for a collective.
#pragma once

#include "collectives/schedule.hpp"

namespace braid {

/// Ring all-reduce (ring.cpp): reduce-scatter then all-gather, pipelined.
Schedule ring_all_reduce(const CollectiveShape& shape);
/// Direct all-reduce (direct.cpp): one round of whole-buffer exchanges with
/// every peer, then a local reduction in rank order. For tiny messages.
Schedule direct_all_reduce(const CollectiveShape& shape);
/// Pipelined chain broadcast from shape.root along the ring (chain.cpp).
Schedule chain_broadcast(const CollectiveShape& shape);
/// Ring barrier (chain.cpp): n-1 rounds of empty messages around the ring.
Schedule ring_barrier(const CollectiveShape& shape);

}  // namespace braid
