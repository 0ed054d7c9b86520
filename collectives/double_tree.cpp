// PLACEHOLDER: being written; every builder here throws until then.
#include "collectives/algorithms.hpp"
#include "core/text.hpp"

namespace braid {

Schedule tree_all_reduce(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "tree_all_reduce is not written yet");
}

Schedule tree_broadcast(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "tree_broadcast is not written yet");
}

}  // namespace braid
