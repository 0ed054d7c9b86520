// StoreHost: the rendezvous store this process hosts, held by the
// communicator that joined through it and by its split children. Once the
// last of them goes, the store does not go at once: the other ranks may
// still be finishing (a peer reads failure notices there, or is still on its
// way out of start-up), so it lingers on the service thread (Runtime::linger)
// until every other rank of that communicator has left it (finalized: its
// "left" key) or failed (its failure notice), at most BRAID_LINGER.
#pragma once

#include <memory>
#include <string>

#include "bootstrap/store.hpp"
#include "core/comm_id.hpp"
#include "core/deadline.hpp"

namespace braid {

class Runtime;

class StoreHost {
 public:
  /// `server` serves the communicator `comm_id` of `size` ranks, whose keys
  /// are under `scope`; this process is rank `rank` of it.
  StoreHost(Runtime& runtime, std::shared_ptr<TcpStoreServer> server, std::string scope, const CommId& comm_id,
            int rank, int size, Millis linger);
  ~StoreHost();
  StoreHost(const StoreHost&) = delete;
  StoreHost& operator=(const StoreHost&) = delete;

  TcpStoreServer& server() { return *server_; }
  /// <scope>comm:<id>/left/<rank> and .../failed/<rank>: where a rank says it
  /// finalized that communicator, or why it gave up.
  static std::string left_key(const std::string& scope, const CommId& comm_id, int rank);
  static std::string failure_key(const std::string& scope, const CommId& comm_id, int rank);

 private:
  Runtime& runtime_;
  std::shared_ptr<TcpStoreServer> server_;
  std::string scope_;
  CommId comm_id_;
  int rank_;
  int size_;
  Millis linger_;
};

}  // namespace braid
