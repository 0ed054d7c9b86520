#include "core/rank_info.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <bit>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>

#include "braid/types.hpp"
#include "core/device.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "core/wire.hpp"

namespace braid {
namespace {
constexpr std::uint32_t kMaxCpuWords = CPU_SETSIZE / 64;
}  // namespace

std::vector<std::byte> RankInfo::encode() const {
  WireWriter w;
  w.u32(static_cast<std::uint32_t>(rank));
  w.u64(host_id);
  w.u64(kernel_id);
  w.u8(host_id_from_env ? 1 : 0);
  w.u32(static_cast<std::uint32_t>(pid));
  w.u8(gpus);
  w.u8(rdma ? 1 : 0);
  w.u32(cache_kib);
  w.u32(link_mbps);
  w.u32(static_cast<std::uint32_t>(cpus.size()));
  for (auto word : cpus) w.u64(word);
  w.str(hostname);
  return w.take();
}

RankInfo RankInfo::decode(std::span<const std::byte> bytes) {
  WireReader r(bytes, "rank info");
  RankInfo info;
  info.rank = static_cast<int>(r.u32());
  info.host_id = r.u64();
  info.kernel_id = r.u64();
  const std::uint8_t named = r.u8();
  if (named > 1) throw ProtocolMismatch(cat("rank info: the BRAID_HOST_ID flag is ", int{named}, ", not 0 or 1"));
  info.host_id_from_env = named == 1;
  info.pid = static_cast<int>(r.u32());
  info.gpus = r.u8();
  const std::uint8_t rdma = r.u8();
  if (rdma > 1) throw ProtocolMismatch(cat("rank info: the RDMA flag is ", int{rdma}, ", not 0 or 1"));
  info.rdma = rdma == 1;
  info.cache_kib = r.u32();
  info.link_mbps = r.u32();
  const std::uint32_t words = r.u32();
  if (words > kMaxCpuWords) throw ProtocolMismatch(cat("rank info: a CPU mask of ", words, " words (at most ", kMaxCpuWords, ")"));
  for (std::uint32_t i = 0; i < words; ++i) info.cpus.push_back(r.u64());
  info.hostname = r.str(255);
  r.expect_end();
  return info;
}

int RankInfo::shared_cpus(std::span<const RankInfo> infos, std::uint64_t kernel) {
  std::vector<std::uint64_t> all;
  for (const RankInfo& i : infos) {
    if (i.kernel_id != kernel) continue;
    all.resize(std::max(all.size(), i.cpus.size()), 0);
    for (std::size_t w = 0; w < i.cpus.size(); ++w) all[w] |= i.cpus[w];
  }
  int count = 0;
  for (auto word : all) count += std::popcount(word);
  return count;
}

namespace {

std::string read_boot_id() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return boot_id;
}

std::uint64_t kernel_id_of(const std::string& boot_id) {
  return std::hash<std::string>{}(boot_id + "/pid:" + pid_namespace());
}

}  // namespace

std::uint64_t RankInfo::local_kernel_id() { return kernel_id_of(read_boot_id()); }

RankInfo RankInfo::local(int rank) {
  RankInfo info;
  info.rank = rank;
  info.hostname = std::string(braid::hostname());
  info.pid = static_cast<int>(::getpid());
  info.gpus = static_cast<std::uint8_t>(std::min(device::count(), 255));
  // The boot id tells one kernel from another even inside containers that
  // reuse a hostname. Ranks share a host for the transports when they share
  // the kernel and the host name; they share the cores and the process table
  // when they share the kernel and the PID namespace, whatever their host
  // names (network namespaces with host names of their own on one machine,
  // as bench/netns_hosts.py and the two-laptop test make them, run on the
  // same cores).
  const std::string boot_id = read_boot_id();
  info.kernel_id = kernel_id_of(boot_id);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) {
        info.cpus.resize(std::max(info.cpus.size(), static_cast<std::size_t>(c / 64 + 1)), 0);
        info.cpus[static_cast<std::size_t>(c / 64)] |= std::uint64_t{1} << (c % 64);
      }
  }
  info.host_id = std::hash<std::string>{}(boot_id + "/" + info.hostname);
  if (const char* named = std::getenv("BRAID_HOST_ID"); named != nullptr && *named != '\0') {
    info.host_id = std::hash<std::string>{}(std::string("BRAID_HOST_ID/") + named);
    info.host_id_from_env = true;
  }
  return info;
}

}  // namespace braid
