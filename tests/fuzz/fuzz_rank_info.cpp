// RankInfo::decode (src/core/rank_info.hpp): every rank reads every other
// rank's RankInfo from the bootstrap store, where anyone who reached the
// store could have written it. What it accepts must encode back to the same
// bytes.
#include <cstdint>

#include "core/rank_info.hpp"
#include "finding.hpp"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto in = fuzz::input_bytes(data, size);
  RankInfo info;
  try {
    info = RankInfo::decode(in);
  } catch (const Error& e) {
    fuzz::expect_refusal(e);
    return 0;
  }
  BRAID_FUZZ_EXPECT(info.hostname.size() <= 255);
  BRAID_FUZZ_EXPECT(fuzz::same_bytes(info.encode(), in));
  return 0;
}
