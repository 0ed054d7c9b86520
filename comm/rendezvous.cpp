#include "rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "braid/braid.hpp"
#include "core/check.hpp"
#include "core/interfaces.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "runtime.hpp"

namespace braid {
namespace {

std::optional<InterfaceFilter> ifname_filter(const Settings& settings) {
  if (settings.socket_ifname.empty()) return std::nullopt;
  return InterfaceFilter::parse(settings.socket_ifname);
}

// The interface this host advertises when no route decides: BRAID_SOCKET_IFNAME's
// choice, else the first real (not loopback, not virtual) one, else loopback
// when `allow_loopback`. `why` ends the error message when there is none;
// `rank` is -1 for UniqueId::create.
SockAddr chosen_address(const Settings& settings, int rank, bool allow_loopback, std::string_view why) {
  auto interfaces = list_interfaces();
  auto filter = ifname_filter(settings);
  if (auto n = choose_interface(interfaces, filter, allow_loopback)) return n->address;
  const std::string who = rank >= 0 ? cat("rank ", rank) : std::string("UniqueId::create");
  if (filter)
    throw InvalidArgument(cat(who, ": BRAID_SOCKET_IFNAME='", settings.socket_ifname,
                              "' matches no interface that is up with an address; this host has: ",
                              describe_interfaces(interfaces)));
  throw InvalidArgument(cat(who, ": no network interface that is up and not loopback or virtual (docker, "
                            "virbr, veth, br-, tun, tap) ", why, "; this host has: ", describe_interfaces(interfaces),
                            ". Name one with BRAID_SOCKET_IFNAME"));
}

bool spans_hosts(const Settings& settings, int size) { return settings.local_size && *settings.local_size < size; }

// What this rank advertises to its peers: BRAID_SOCKET_IFNAME's interface; else
// the route to the store, unless that is loopback while the job spans hosts
// (the store's name maps to 127.0.1.1 on its own host, as Debian's
// /etc/hosts does): then the first real interface.
SockAddr advertised_address(const SockAddr& store, const Settings& settings, int rank, int size) {
  if (!settings.socket_ifname.empty()) return chosen_address(settings, rank, false, "");
  SockAddr toward = local_address_toward(store);
  if (toward.is_loopback() && spans_hosts(settings, size))
    return chosen_address(settings, rank, false, "for the ranks on other hosts to reach this one");
  return toward;
}

// Who a message is about: "rank 3", or "joining" for a process joining an
// elastic job, which has no rank yet (-1).
std::string who(int rank) { return rank >= 0 ? cat("rank ", rank) : std::string("joining"); }

void log_addresses(const Rendezvous& rv, int rank, const Settings& settings) {
  std::string ifname = interface_of(list_interfaces(), rv.advertise);
  const std::string ports = settings.port_range ? cat("; listening ports in ", settings.port_range->to_string()) : "";
  log_info(who(rank), ": advertising ", rv.advertise.host_string(), ifname.empty() ? "" : cat(" (", ifname, ")"),
           "; store at ", rv.store_name, ports, "; identity from ",
           settings.launch_source.empty() ? std::string("the caller") : settings.launch_source);
}

// Stores created by UniqueId::create, kept alive until a communicator of this
// process takes one over (or the process exits). The registry is never
// destroyed: a child forked after create() inherits a copy whose server thread
// does not exist in the child, so it must neither take nor destroy it.
struct HostedStore {
  std::shared_ptr<TcpStoreServer> server;
  pid_t creator;
};
std::mutex g_hosted_mutex;
auto* g_hosted = new std::map<std::string, HostedStore>;

std::shared_ptr<TcpStoreServer> take_hosted(const std::string& where) {
  std::lock_guard lock(g_hosted_mutex);
  auto it = g_hosted->find(where);
  if (it == g_hosted->end() || it->second.creator != ::getpid()) return nullptr;
  auto server = std::move(it->second.server);
  g_hosted->erase(it);
  return server;
}

Rendezvous connect_to(const std::string& where, const Settings& settings, std::shared_ptr<TcpStoreServer> server,
                      const std::string& job, int rank, int size, Millis connect_budget) {
  HostPort hp = parse_host_port(where, "braid store address");
  auto addrs = resolve(hp, "braid store address");
  Rendezvous rv;
  rv.server = std::move(server);
  rv.store_name = where;
  rv.scope = job_scope(job);
  rv.advertise = advertised_address(addrs.front(), settings, rank, size);
  try {
    rv.store =
        connect_tcp_store(hp, Deadline::after(connect_budget), settings.auth_key, settings.tls, job, rank, size);
  } catch (const Error& e) {
    throw_error(e.code(), cat(who(rank), ": ", e.what()));
  }
  log_addresses(rv, rank, settings);
  return rv;
}

}  // namespace

Rendezvous rendezvous_at_store(const std::string& requested, int rank, int size, const Settings& settings) {
  std::string where = requested;
  std::shared_ptr<TcpStoreServer> server;
  HostPort hp = parse_host_port(where, "braid store address");
  if (hp.port == 0 && size > 1)
    throw InvalidArgument(cat("braid store address '", where, "': port 0 (pick any) only works for a single rank, "
                              "since the others could not find the port"));
  auto addrs = resolve(hp, "braid store address");
  // Ranks on another host than rank 0 cannot reach it through loopback. Ranks
  // come in blocks of local_size per host (braid-run, torchrun, srun, mpirun
  // by slot), so rank 0's host holds ranks [0, local_size).
  if (addrs.front().is_loopback() && spans_hosts(settings, size) && rank >= *settings.local_size)
    throw InvalidArgument(cat("rank ", rank, ": the braid store address '", where, "' resolves to ",
                              addrs.front().host_string(), " (loopback) on this host, but the job spans hosts (",
                              *settings.local_size, " of ", size, " ranks per host) and rank 0 is on another one: "
                              "give rank 0's routable address (for example BRAID_STORE_ADDR=192.168.1.20:", hp.port,
                              ", braid-run --master, MASTER_ADDR), or map its host name to that address in "
                              "/etc/hosts here"));
  if (rank == 0 && !settings.store_external) {
    // A literal loopback address (127.0.0.1, ::1, localhost), or one that is
    // loopback here for a job whose ranks all run here (BRAID_LOCAL_SIZE is
    // the world size), is a job on this host: the store listens there only,
    // out of the network's reach. Any other address listens on every
    // interface, so that a host name that is loopback here (one /etc/hosts
    // maps to 127.0.1.1) still serves the ranks of other hosts, which
    // resolve the name to a routable address.
    const bool one_host = settings.local_size && *settings.local_size >= size;
    const bool local_only =
        addrs.front().is_loopback() &&
        (one_host || hp.host == "localhost" || hp.host == "::1" || hp.host.rfind("127.", 0) == 0);
    SockAddr bind = addrs.front();
    if (!local_only) bind.set_any_host();
    bind.set_port(hp.port);
    if (hp.port != 0 && settings.port_range && !settings.port_range->contains(hp.port))
      log_warn("rank 0: the store's port ", hp.port, " is outside BRAID_PORT_RANGE=", settings.port_range->to_string(),
               "; a firewall must open it too");
    try {
      // On the process's TCP listener when it can: one port for both.
      server = Runtime::get().host_store(bind, settings, settings.job_id);
    } catch (const Error& e) {
      throw Error(e.code(), cat("rank 0: cannot host the braid store at ", where, ": ", e.what()));
    }
    log_info("rank 0: hosting the braid store ", local_only ? "on loopback only" : "on every interface", ", port ",
             server->address().port(), " (", where, ")");
    if (hp.port == 0) where = cat(hp.host.find(':') != std::string::npos ? cat("[", hp.host, "]") : hp.host, ":",
                                  server->address().port());
  }
  Rendezvous rv = connect_to(where, settings, std::move(server), settings.job_id, rank, size, settings.timeout);
  rv.store_host = settings.store_external ? -1 : 0;
  share_comm_id(rv, rank, settings);
  return rv;
}

void share_comm_id(Rendezvous& rv, int rank, const Settings& settings) {
  const std::string id_key = rv.scope + "comm_id";
  if (rank == 0) {
    rv.comm_id = CommId::random();
    rv.store->set(id_key, std::span<const std::byte>(rv.comm_id.bytes));
    return;
  }
  Bytes id = rv.store->get(id_key, settings.timeout);
  if (id.size() != rv.comm_id.bytes.size())
    throw ProtocolMismatch(cat("rank ", rank, ": the communicator id in the braid store (", rv.store_name,
                               ") is malformed (key ", id_key, ")"));
  std::copy(id.begin(), id.end(), rv.comm_id.bytes.begin());
}

std::vector<std::string> job_stores(const Settings& settings) {
  std::vector<std::string> stores{settings.store_addr};
  stores.insert(stores.end(), settings.store_standby.begin(), settings.store_standby.end());
  return stores;
}

Rendezvous rendezvous_to_join(const std::string& where, const Settings& settings,
                              std::optional<Millis> connect_budget) {
  Rendezvous rv = connect_to(where, settings, nullptr, settings.job_id, -1, 0, connect_budget.value_or(settings.timeout));
  rv.store_host = 0;
  return rv;
}

std::vector<std::byte> create_unique_id_bytes(const Settings& settings) {
  // The id carries one address: the chosen interface's (loopback when this
  // host has no other).
  SockAddr bind_to = chosen_address(settings, -1, true, "");
  const CommId id = CommId::random();
  std::shared_ptr<TcpStoreServer> server = Runtime::get().host_store(bind_to, settings, id.to_hex());
  std::string where = server->address().to_string();
  auto bytes = encode_unique_id(UniqueIdContents{id, where});
  {
    std::lock_guard lock(g_hosted_mutex);
    (*g_hosted)[where] = HostedStore{std::move(server), ::getpid()};
  }
  log_info("created a unique id; its store listens at ", where);
  return bytes;
}

UniqueId UniqueId::create() {
  auto bytes = create_unique_id_bytes(Settings::from_env());
  UniqueId id;
  std::copy(bytes.begin(), bytes.end(), id.bytes.begin());
  return id;
}

Rendezvous rendezvous_by_id(std::span<const std::byte> id, int rank, int size, const Settings& settings) {
  UniqueIdContents contents = decode_unique_id(id);
  Rendezvous rv =
      connect_to(contents.store, settings, take_hosted(contents.store), contents.comm_id.to_hex(), rank, size,
                 settings.timeout);
  rv.comm_id = contents.comm_id;
  return rv;
}

Rendezvous rendezvous_with_store(std::shared_ptr<Store> store, int rank, int size, const Settings& settings) {
  (void)size;
  Rendezvous rv;
  rv.store = std::move(store);
  rv.store_name = "the caller's store";
  rv.scope = job_scope(settings.job_id);
  // No address to route toward: the chosen interface, or loopback on a host
  // that has no other.
  rv.advertise = chosen_address(settings, rank, true, "");
  log_addresses(rv, rank, settings);
  share_comm_id(rv, rank, settings);
  return rv;
}

}  // namespace braid
