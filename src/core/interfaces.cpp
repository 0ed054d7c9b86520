#include "core/interfaces.hpp"

#include <ifaddrs.h>
#include <net/if.h>

#include <cerrno>
#include <cstring>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {

InterfaceFilter InterfaceFilter::parse(std::string_view spec, std::string_view what) {
  InterfaceFilter f;
  std::string_view rest = spec;
  if (rest.starts_with('^')) {
    f.exclude = true;
    rest.remove_prefix(1);
  }
  if (rest.starts_with('=')) {
    f.exact = true;
    rest.remove_prefix(1);
  }
  while (true) {
    auto comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    if (name.empty())
      throw InvalidArgument(cat(what, "='", spec, "' has an empty interface name (examples: eth0, eth,en, ^docker,lo, "
                                "=eth0)"));
    if (name.size() > 64) throw InvalidArgument(cat(what, ": interface name '", name.substr(0, 64), "...' is too long"));
    f.names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return f;
}

bool InterfaceFilter::matches(std::string_view ifname) const {
  bool listed = false;
  for (const std::string& n : names) listed = listed || (exact ? ifname == n : ifname.starts_with(n));
  return listed != exclude;
}

bool virtual_interface_name(std::string_view name) {
  for (std::string_view prefix : {"docker", "virbr", "veth", "br-", "tun", "tap"})
    if (name.starts_with(prefix)) return true;
  return false;
}

std::vector<InterfaceAddress> list_interfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw SystemError(cat("getifaddrs failed: ", errno_text(errno)));
  std::vector<InterfaceAddress> out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress n;
    n.name = i->ifa_name;
    n.address.length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&n.address.storage, i->ifa_addr, n.address.length);
    n.address.set_port(0);
    n.up = (i->ifa_flags & IFF_UP) != 0;
    n.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    // An IPv6 link-local address needs a scope to be reached: not one to advertise.
    if (family == AF_INET6) {
      const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&n.address.storage);
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
    }
    out.push_back(std::move(n));
  }
  freeifaddrs(list);
  return out;
}

std::optional<InterfaceAddress> choose_interface(std::span<const InterfaceAddress> interfaces,
                                                 const std::optional<InterfaceFilter>& filter, bool allow_loopback) {
  auto eligible = [&](const InterfaceAddress& n) {
    if (!n.up) return false;
    if (filter) return filter->matches(n.name);
    return !n.loopback && !virtual_interface_name(n.name);
  };
  for (int family : {AF_INET, AF_INET6})
    for (const InterfaceAddress& n : interfaces)
      if (n.address.family() == family && eligible(n)) return n;
  if (!filter && allow_loopback)
    for (int family : {AF_INET, AF_INET6})
      for (const InterfaceAddress& n : interfaces)
        if (n.address.family() == family && n.up && n.loopback) return n;
  return std::nullopt;
}

std::string interface_of(std::span<const InterfaceAddress> interfaces, const SockAddr& address) {
  for (const InterfaceAddress& n : interfaces)
    if (n.address.host_string() == address.host_string()) return n.name;
  return {};
}

std::string describe_interfaces(std::span<const InterfaceAddress> interfaces) {
  std::string out;
  for (const InterfaceAddress& n : interfaces)
    out += cat(out.empty() ? "" : ", ", n.name, " ", n.address.host_string(), n.up ? "" : " (down)");
  return out.empty() ? std::string("none") : out;
}

}  // namespace braid
