// Rendezvous: how ranks find each other. Every way into a communicator (the
// BRAID_* environment, a store address, a UniqueId) ends here with a
// connected Store, the communicator id and the address this rank advertises.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/store.hpp"
#include "core/comm_id.hpp"
#include "core/settings.hpp"
#include "core/socket.hpp"

namespace braid {

struct Rendezvous {
  std::shared_ptr<TcpStoreServer> server;  // set on the rank that hosts the store
  std::shared_ptr<Store> store;            // kept by the communicator (and its split children)
  std::string scope;                       // job_scope(): the prefix of every key of this job
  std::string job_scope;                   // when not scope: the job's (a grown communicator's scope is below it)
  int store_host = -1;                     // the rank whose process hosts the store (-1: none of them)
  std::string store_name;                  // "127.0.0.1:29500", for messages
  CommId comm_id;
  SockAddr advertise;                      // IP (port 0) this rank's transport listens on
};

/// Joins through a store at `where`; rank 0 hosts it there. Rank 0 draws the
/// communicator id and publishes it. The job id (settings.job_id) scopes the
/// keys, and the store refuses a client of another job.
Rendezvous rendezvous_at_store(const std::string& where, int rank, int size, const Settings& settings);

/// Joins through a store the caller provides (Comm::init(store, ...)): rank 0
/// draws the communicator id and publishes it there; nobody hosts a store.
Rendezvous rendezvous_with_store(std::shared_ptr<Store> store, int rank, int size, const Settings& settings);

/// Joins through a UniqueId's store (hosted by whoever created the id); the
/// id's communicator id is the job id.
Rendezvous rendezvous_by_id(std::span<const std::byte> id, int rank, int size, const Settings& settings);

/// How long a store of an elastic job has to answer a fresh connection
/// (connect and handshake) before the caller passes on to the next one of
/// the job's stores: far more than a LAN's round trips, and well inside the
/// grace that shrink_lost's survivors wait for each other.
inline constexpr std::chrono::milliseconds kStoreProbe{500};

/// The job's stores in order: settings.store_addr, then BRAID_STORE_STANDBY's.
std::vector<std::string> job_stores(const Settings& settings);

/// Connects to the store at `where` as a process joining an elastic job
/// later (Comm::join): as no rank, so that the sealed store lets it in.
/// `connect_budget` bounds the connection (default: the timeout).
Rendezvous rendezvous_to_join(const std::string& where, const Settings& settings,
                              std::optional<std::chrono::milliseconds> connect_budget = std::nullopt);

/// Rank 0 draws the communicator's id and leaves it in the store under the
/// rendezvous's scope; the others read it there.
void share_comm_id(Rendezvous& rv, int rank, const Settings& settings);

/// Starts a store for UniqueId::create and returns the id bytes.
std::vector<std::byte> create_unique_id_bytes(const Settings& settings);

/// What a UniqueId's bytes carry: the communicator id and where its store
/// listens. The bytes come from whoever handed the id to this rank, so they
/// are decoded as untrusted input (tests/fuzz/fuzz_unique_id.cpp).
struct UniqueIdContents {
  CommId comm_id;
  std::string store;  // "10.0.0.1:40123"
};
/// 128 bytes, zero-padded; Error(internal) when the store address does not fit.
std::vector<std::byte> encode_unique_id(const UniqueIdContents& contents);
/// Throws InvalidArgument when the bytes were not made by encode_unique_id
/// (bad magic), ProtocolMismatch when they are truncated or the address is
/// longer than 100 bytes. Bytes after the address (the padding) are ignored.
UniqueIdContents decode_unique_id(std::span<const std::byte> id);

}  // namespace braid
