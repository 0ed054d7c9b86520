// Network interfaces: which address a rank advertises to its peers, and
// BRAID_SOCKET_IFNAME, which narrows the choice with NCCL_SOCKET_IFNAME's
// syntax.
//
// The default is the address through which this host reaches the store (the
// kernel's route), which is right whenever the store is elsewhere. When there
// is no route to follow (a UniqueId's store, a user's store) or the route is
// loopback while the job spans hosts (a host name that /etc/hosts maps to
// 127.0.1.1), braid lists the interfaces itself and takes the first that is
// up, has an address and is not one of the virtual ones a laptop or server
// often carries: loopback, docker*, virbr*, veth*, br-*, tun*, tap* (a
// container bridge, a VM network, a VPN tunnel), which peers on another
// machine usually cannot reach. IPv4 is preferred over IPv6. Naming such an
// interface in BRAID_SOCKET_IFNAME selects it anyway.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/socket.hpp"

namespace braid {

/// BRAID_SOCKET_IFNAME's syntax, as NCCL_SOCKET_IFNAME's: a comma-separated
/// list of name prefixes ("eth,en" matches eth0 and enp3s0), "^" in front
/// to exclude them instead ("^docker,lo"), "=" in front to match whole names
/// only ("=eth0" matches eth0, not eth01; "^=" combines both).
struct InterfaceFilter {
  std::vector<std::string> names;
  bool exclude = false;
  bool exact = false;

  /// Throws InvalidArgument naming `what` for an empty list or an empty name.
  static InterfaceFilter parse(std::string_view spec, std::string_view what = "BRAID_SOCKET_IFNAME");
  bool matches(std::string_view ifname) const;
};

// One address of one interface of this host. (Not topology/'s
// NetworkInterface, a NIC: one name for two layouts in one namespace broke
// the One Definition Rule, and clang's ASan build then ran topology's
// vector<NetworkInterface> code on this one's and crashed in list_interfaces.)
struct InterfaceAddress {
  std::string name;
  SockAddr address;  // port 0
  bool up = false;
  bool loopback = false;
};

/// Every (interface, address) pair of this host, IPv4 and IPv6, in the
/// kernel's order.
std::vector<InterfaceAddress> list_interfaces();

/// True for names of interfaces that peers on other machines usually cannot
/// reach: docker*, virbr*, veth*, br-*, tun*, tap*.
bool virtual_interface_name(std::string_view name);

/// The interface a rank advertises, among `interfaces`: with a filter, the
/// first up one it matches (loopback and virtual ones included, since they
/// were asked for); without, the first up one that is neither loopback nor
/// virtual, else (when `allow_loopback`) loopback. IPv4 before IPv6 either
/// way. nullopt when none qualifies.
std::optional<InterfaceAddress> choose_interface(std::span<const InterfaceAddress> interfaces,
                                                 const std::optional<InterfaceFilter>& filter, bool allow_loopback);

/// The interface that holds `address` ("" when none of this host's does).
std::string interface_of(std::span<const InterfaceAddress> interfaces, const SockAddr& address);

/// "eth0 10.0.0.2, lo 127.0.0.1, ...", for messages saying what there was.
std::string describe_interfaces(std::span<const InterfaceAddress> interfaces);

}  // namespace braid
