// PLACEHOLDER: being written; every builder here throws until then.
#include "collectives/algorithms.hpp"
#include "core/text.hpp"

namespace braid {

Schedule binomial_broadcast(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "binomial_broadcast is not written yet");
}

Schedule binomial_reduce(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "binomial_reduce is not written yet");
}

}  // namespace braid
