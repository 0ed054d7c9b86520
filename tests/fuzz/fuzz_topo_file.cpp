// The topology file reader (parse_topo_file, topology/topo_file.hpp): a file
// a user hands to BRAID_TOPO_FILE or braid-topo --load, perhaps edited by
// hand or cut short. The hwloc XML inside it is hwloc's to read, not fuzzed
// here (the reader keeps it as text).
//
// Checked: only InvalidArgument comes out, naming the file and a line of the
// text; an accepted file has ranks 0..n-1 in order, a machine only for a host
// some rank is on, and writes out to a text that reads back to the same text.
#include <algorithm>
#include <cstdint>
#include <string>

#include "finding.hpp"
#include "topology/topo_file.hpp"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  TopoFile file;
  try {
    file = parse_topo_file(text, "fuzz.topo");
  } catch (const Error& e) {
    fuzz::expect_refusal(e);
    BRAID_FUZZ_EXPECT(e.code() == ErrorCode::invalid_argument);
    const std::string_view what = e.what();
    BRAID_FUZZ_EXPECT(what.rfind("fuzz.topo:", 0) == 0);
    const std::size_t lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    BRAID_FUZZ_EXPECT(std::stoul(std::string(what.substr(10, what.find(':', 10) - 10))) <= lines);
    return 0;
  }
  BRAID_FUZZ_EXPECT(!file.ranks.empty());
  for (std::size_t r = 0; r < file.ranks.size(); ++r) {
    BRAID_FUZZ_EXPECT(file.ranks[r].rank == static_cast<int>(r));
    BRAID_FUZZ_EXPECT(!file.ranks[r].hostname.empty() && file.ranks[r].hostname.size() <= 255);
  }
  for (const HostMachine& m : file.machines)
    BRAID_FUZZ_EXPECT(std::any_of(file.ranks.begin(), file.ranks.end(),
                                  [&](const RankInfo& r) { return r.host_id == m.host_id; }));
  const std::string once = format_topo_file(file);
  try {
    BRAID_FUZZ_EXPECT(format_topo_file(parse_topo_file(once, "again.topo")) == once);
  } catch (const Error& e) {
    fuzz::finding(e.what());  // what was accepted, written out, must read again
  }
  return 0;
}
