// PLACEHOLDER: being written; every builder here throws until then.
#include "collectives/algorithms.hpp"
#include "core/text.hpp"

namespace braid {

Schedule ring_reduce_scatter(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "ring_reduce_scatter is not written yet");
}

Schedule ring_all_gather(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "ring_all_gather is not written yet");
}

}  // namespace braid
