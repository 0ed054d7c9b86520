// The topology file: a job's inputs to the planner (every rank's RankInfo and
// each host's machine as hwloc XML) and the plan derived from them, as text.
// BRAID_TOPO_DUMP_FILE writes one at communicator creation; BRAID_TOPO_FILE
// and `braid-topo --load FILE` read one instead of discovering the job, so a
// plan can be reproduced and tested without the hardware (topo_plan.hpp).
//
// The format (version 1), line by line; '#' lines and blank lines between
// sections are comments:
//
//   braid-topology 1
//   ranks 4
//   rank 0 hostname=node-a host_id=0x6b1d... kernel_id=0x6b1d... host_id_env=0 pid=4242 gpus=0 rdma=0 cpus=0-3 link_mbps=1000
//   rank 1 ...                              (one line per rank, every field named once)
//   machine host_id=0x6b1d...              (hwloc XML of that host, verbatim, up to "end machine")
//   <?xml version="1.0" encoding="UTF-8"?>
//   ...
//   end machine
//   plan                                   (the plan as derived when written; for people,
//   ...                                     the reader derives it again)
//   end plan
//
// host_id and kernel_id are 64-bit numbers (0x hexadecimal or decimal);
// cpus is a CPU list ("0-3,8"; empty: no binding known); link_mbps, the
// speed of the rank's network card (RankInfo::link_mbps), may be left out
// (0: unknown), as files written before it do. A machine section is
// optional per host; a rank whose host has none is planned without NUMA, NIC
// or GPU placement.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/rank_info.hpp"

namespace braid {

/// One host's machine as hwloc XML, for the ranks whose host_id it names.
struct HostMachine {
  std::uint64_t host_id = 0;
  std::string xml;
};

struct TopoFile {
  std::vector<RankInfo> ranks;  // by rank: ranks[r].rank == r
  std::vector<HostMachine> machines;
  std::string plan;  // the plan as derived when written (free text), or empty
};

/// The file's text. Ranks must be 0..n-1 in order, hostnames without
/// whitespace; a plan text must not contain a line "end plan".
std::string format_topo_file(const TopoFile& file);

/// Reads the text of a topology file; `name` (its path) starts every error:
/// "NAME:LINE: what was found, and what was expected" (InvalidArgument).
TopoFile parse_topo_file(std::string_view text, std::string_view name);

/// parse_topo_file of the file at `path` (InvalidArgument when unreadable).
TopoFile read_topo_file(const std::string& path);
/// Writes the file at `path` (SystemError when it cannot).
void write_topo_file(const std::string& path, const TopoFile& file);

/// BRAID_TOPO_DUMP_FILE's path for `rank`: each "%r" becomes the rank.
std::string topo_dump_path(std::string_view pattern, int rank);

/// A RankInfo CPU mask as a CPU list ("0-3,8"), and back; the parser throws
/// InvalidArgument naming `what`.
std::string cpu_list_of(const std::vector<std::uint64_t>& mask);
std::vector<std::uint64_t> parse_cpu_list(std::string_view text, std::string_view what);

}  // namespace braid
