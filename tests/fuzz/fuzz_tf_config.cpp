// TensorFlow's TF_CONFIG (ClusterSpec::parse, src/bootstrap/cluster_spec.cpp)
// and the JSON reader under it (src/core/json.cpp): text a launcher or a user
// wrote into the environment, read by every rank before it joins.
//
// Checked: only braid errors come out (InvalidArgument, never internal); an
// accepted spec is consistent: its jobs come in rank order, none empty, no
// address twice, every address host:port; rank() is in [0, size()); rank_of
// and task_of are inverses over every rank; the store address is rank 0's.
#include <cstdint>
#include <set>
#include <string>

#include "braid/cluster.hpp"
#include "core/json.hpp"
#include "core/socket.hpp"
#include "finding.hpp"

using namespace braid;

namespace {

void check_spec(const ClusterSpec& spec) {
  const char* order[] = {"chief", "worker", "ps"};
  std::size_t next = 0;
  std::set<std::string> addresses;
  int tasks = 0;
  for (const auto& job : spec.jobs) {
    while (next < 3 && job.name != order[next]) ++next;
    BRAID_FUZZ_EXPECT(next < 3);  // a known job, in rank order, once
    ++next;
    BRAID_FUZZ_EXPECT(!job.addresses.empty());
    BRAID_FUZZ_EXPECT(job.name != "chief" || job.addresses.size() == 1);
    for (const auto& a : job.addresses) {
      BRAID_FUZZ_EXPECT(addresses.insert(a).second);
      parse_host_port(a, "address");  // throws if not: a finding (caught below)
    }
    tasks += static_cast<int>(job.addresses.size());
  }
  BRAID_FUZZ_EXPECT(spec.size() == tasks && tasks > 0);
  const int rank = spec.rank();
  BRAID_FUZZ_EXPECT(rank >= 0 && rank < spec.size());
  BRAID_FUZZ_EXPECT(spec.task_of(rank) == std::make_pair(spec.task_type, spec.task_index));
  for (int r = 0; r < spec.size(); ++r) {
    auto [type, index] = spec.task_of(r);
    BRAID_FUZZ_EXPECT(spec.rank_of(type, index) == r);
  }
  BRAID_FUZZ_EXPECT(spec.store_address() == spec.jobs.front().addresses.front());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ClusterSpec spec;
  try {
    spec = ClusterSpec::parse(text);
  } catch (const Error& e) {
    fuzz::expect_refusal(e);
    BRAID_FUZZ_EXPECT(e.code() == ErrorCode::invalid_argument);
    return 0;
  }
  try {
    check_spec(spec);
  } catch (const Error& e) {
    fuzz::finding(e.what());  // an accepted spec must answer every question about itself
  }
  // Any text the reader accepts, it accepts again; what it refuses, it
  // refuses with an offset inside the text.
  try {
    parse_json(text, "fuzz");
  } catch (const InvalidArgument& e) {
    std::string_view what = e.what();
    auto at = what.find("at offset ");
    BRAID_FUZZ_EXPECT(at != std::string_view::npos);
    std::size_t offset = std::stoul(std::string(what.substr(at + 10)));
    BRAID_FUZZ_EXPECT(offset <= size);
  }
  return 0;
}
