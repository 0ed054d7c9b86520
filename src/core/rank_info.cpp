#include "core/rank_info.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>

#include "braid/types.hpp"
#include "core/log.hpp"
#include "core/wire.hpp"

namespace braid {

std::vector<std::byte> RankInfo::encode() const {
  WireWriter w;
  w.u32(static_cast<std::uint32_t>(rank));
  w.u64(host_id);
  w.u64(kernel_id);
  w.u8(host_id_from_env ? 1 : 0);
  w.u32(static_cast<std::uint32_t>(pid));
  w.str(hostname);
  return w.take();
}

RankInfo RankInfo::decode(std::span<const std::byte> bytes) {
  WireReader r(bytes, "rank info");
  RankInfo info;
  info.rank = static_cast<int>(r.u32());
  info.host_id = r.u64();
  info.kernel_id = r.u64();
  info.host_id_from_env = r.u8() != 0;
  info.pid = static_cast<int>(r.u32());
  info.hostname = r.str(255);
  r.expect_end();
  return info;
}

RankInfo RankInfo::local(int rank) {
  RankInfo info;
  info.rank = rank;
  info.hostname = std::string(braid::hostname());
  info.pid = static_cast<int>(::getpid());
  // Ranks share a host when they share a kernel: the boot id tells that even
  // inside containers that reuse a hostname.
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  info.kernel_id = std::hash<std::string>{}(boot_id + "/" + info.hostname);
  info.host_id = info.kernel_id;
  if (const char* named = std::getenv("BRAID_HOST_ID"); named != nullptr && *named != '\0') {
    info.host_id = std::hash<std::string>{}(std::string("BRAID_HOST_ID/") + named);
    info.host_id_from_env = true;
  }
  return info;
}

}  // namespace braid
