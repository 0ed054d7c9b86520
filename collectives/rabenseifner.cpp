// PLACEHOLDER: being written; every builder here throws until then.
#include "collectives/algorithms.hpp"
#include "core/text.hpp"

namespace braid {

Schedule rabenseifner_all_reduce(const CollectiveShape&) {
  throw Error(ErrorCode::unsupported, "rabenseifner_all_reduce is not written yet");
}

}  // namespace braid
