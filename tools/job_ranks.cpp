#include "job_ranks.hpp"

#include <cstdlib>
#include <cstring>

#include "core/text.hpp"
#include "core/wire.hpp"
#include "topology/machine.hpp"

namespace braid {
namespace {
// A RankInfo is at most about 420 bytes (a 255-byte host name, a 1024-CPU
// mask); the display name at most 64.
constexpr std::size_t kRecord = 1024;
}  // namespace

JobRanks gather_job_ranks(Comm& comm) {
  // As the communicator publishes it (comm_impl.cpp), so that a plan made
  // from these infos is the communicator's.
  RankInfo self = RankInfo::local(comm.rank());
  self.cache_kib = Machine::private_cache_kib();
  const char* simulated = std::getenv("BRAID_HOST_ID");
  WireWriter w;
  w.str(simulated && *simulated ? std::string(simulated) : self.hostname);
  const std::vector<std::byte> info = self.encode();
  w.u32(static_cast<std::uint32_t>(info.size()));
  w.bytes(info);
  std::vector<std::byte> mine = w.take();
  if (mine.size() > kRecord) throw Error(ErrorCode::internal, cat("rank record of ", mine.size(), " bytes"));
  mine.resize(kRecord);
  std::vector<std::byte> all(kRecord * static_cast<std::size_t>(comm.size()));
  comm.all_gather(mine.data(), all.data(), kRecord, DataType::u8);
  JobRanks job;
  for (int r = 0; r < comm.size(); ++r) {
    WireReader rd(std::span<const std::byte>(all).subspan(kRecord * static_cast<std::size_t>(r), kRecord), "rank record");
    job.hosts.push_back(rd.str(255));
    const std::uint32_t length = rd.u32();
    job.infos.push_back(RankInfo::decode(rd.bytes(length)));
  }
  return job;
}

}  // namespace braid
