// PLACEHOLDER: being written; every builder here throws until then.
#include "collectives/algorithms.hpp"
#include "core/text.hpp"

namespace braid {

Schedule pairwise_all_to_all(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "pairwise_all_to_all is not written yet");
}

Schedule direct_gather(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "direct_gather is not written yet");
}

Schedule direct_scatter(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "direct_scatter is not written yet");
}

}  // namespace braid
