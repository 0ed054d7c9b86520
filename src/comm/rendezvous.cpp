#include "rendezvous.hpp"

#include <unistd.h>

#include <map>
#include <mutex>

#include "core/check.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "core/wire.hpp"

namespace braid {
namespace {

constexpr std::uint64_t kIdMagic = 0x3144494449415242ull;  // "BRAIDID1"
constexpr std::size_t kIdBytes = 128;          // UniqueId::kBytes
constexpr std::size_t kMaxStoreAddress = 100;  // fits kIdBytes with the magic, id and length

SockAddr advertised_address(const SockAddr& store, const Settings& settings) {
  if (!settings.socket_ifname.empty()) {
    auto addr = interface_address(settings.socket_ifname);
    if (!addr) throw InvalidArgument(cat("BRAID_SOCKET_IFNAME='", settings.socket_ifname, "' has no IP address"));
    return *addr;
  }
  return local_address_toward(store);
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
                      const std::string& job, int rank) {
  HostPort hp = parse_host_port(where, "braid store address");
  auto addrs = resolve(hp, "braid store address");
  Rendezvous rv;
  rv.server = std::move(server);
  rv.store_name = where;
  rv.scope = job_scope(job);
  rv.advertise = advertised_address(addrs.front(), settings);
  try {
    rv.store = connect_tcp_store(hp, Deadline::after(settings.timeout), settings.auth_key, settings.tls, job, rank);
  } catch (const Error& e) {
    throw_error(e.code(), cat("rank ", rank, ": ", e.what()));
  }
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
  if (rank == 0) {
    auto addrs = resolve(hp, "braid store address");
    try {
      server = TcpStoreServer::start(addrs.front(), settings.auth_key, settings.tls, settings.job_id);
    } catch (const Error& e) {
      throw Error(e.code(), cat("rank 0: cannot host the braid store at ", where, ": ", e.what()));
    }
    log_info("hosting the braid store at ", server->address().to_string());
    if (hp.port == 0) where = server->address().to_string();
  }
  Rendezvous rv = connect_to(where, settings, std::move(server), settings.job_id, rank);
  rv.store_host = 0;
  const std::string id_key = rv.scope + "comm_id";
  if (rank == 0) {
    rv.comm_id = CommId::random();
    rv.store->set(id_key, std::span<const std::byte>(rv.comm_id.bytes));
  } else {
    Bytes id = rv.store->get(id_key, settings.timeout);
    if (id.size() != rv.comm_id.bytes.size())
      throw ProtocolMismatch(cat("rank ", rank, ": the store at ", where, " holds a malformed communicator id"));
    std::copy(id.begin(), id.end(), rv.comm_id.bytes.begin());
  }
  return rv;
}

std::vector<std::byte> create_unique_id_bytes(const Settings& settings) {
  SockAddr bind_to;
  if (!settings.socket_ifname.empty()) {
    auto a = interface_address(settings.socket_ifname);
    if (!a) throw InvalidArgument(cat("BRAID_SOCKET_IFNAME='", settings.socket_ifname, "' has no IP address"));
    bind_to = *a;
  } else if (auto ext = first_external_address()) {
    bind_to = *ext;
  } else {
    bind_to = resolve(HostPort{"127.0.0.1", 0}, "loopback").front();
  }
  const CommId id = CommId::random();
  std::shared_ptr<TcpStoreServer> server = TcpStoreServer::start(bind_to, settings.auth_key, settings.tls, id.to_hex());
  std::string where = server->address().to_string();
  auto bytes = encode_unique_id(UniqueIdContents{id, where});
  {
    std::lock_guard lock(g_hosted_mutex);
    (*g_hosted)[where] = HostedStore{std::move(server), ::getpid()};
  }
  log_info("created a unique id; its store listens at ", where);
  return bytes;
}

std::vector<std::byte> encode_unique_id(const UniqueIdContents& contents) {
  WireWriter w;
  w.u64(kIdMagic);
  w.bytes(contents.comm_id.bytes);
  w.str(contents.store);
  auto bytes = w.take();
  if (bytes.size() > kIdBytes) throw Error(ErrorCode::internal, cat("unique id does not fit in ", kIdBytes, " bytes"));
  bytes.resize(kIdBytes);
  return bytes;
}

UniqueIdContents decode_unique_id(std::span<const std::byte> id) {
  WireReader r(id, "braid unique id");
  if (r.u64() != kIdMagic)
    throw InvalidArgument("the unique id was not made by braid_get_unique_id / UniqueId::create (bad magic)");
  UniqueIdContents contents;
  auto idb = r.bytes(contents.comm_id.bytes.size());
  std::copy(idb.begin(), idb.end(), contents.comm_id.bytes.begin());
  contents.store = r.str(kMaxStoreAddress);
  return contents;
}

Rendezvous rendezvous_by_id(std::span<const std::byte> id, int rank, int size, const Settings& settings) {
  (void)size;
  UniqueIdContents contents = decode_unique_id(id);
  Rendezvous rv = connect_to(contents.store, settings, take_hosted(contents.store), contents.comm_id.to_hex(), rank);
  rv.comm_id = contents.comm_id;
  return rv;
}

}  // namespace braid
