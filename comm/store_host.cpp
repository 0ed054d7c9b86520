#include "comm/store_host.hpp"

#include <vector>

#include "comm/runtime.hpp"
#include "core/text.hpp"

namespace braid {

namespace {
// How long a rank's store connections may all be closed before the store
// stops lingering for it: a live client that drops a connection (a reply
// that came too late) reconnects well within this.
constexpr Millis kReconnectGrace{100};
}  // namespace

StoreHost::StoreHost(Runtime& runtime, std::shared_ptr<TcpStoreServer> server, std::string scope,
                     const CommId& comm_id, int rank, int size, Millis linger)
    : runtime_(runtime), server_(std::move(server)), scope_(std::move(scope)), comm_id_(comm_id), rank_(rank),
      size_(size), linger_(linger) {}

std::string StoreHost::left_key(const std::string& scope, const CommId& comm_id, int rank) {
  return cat(scope, "comm:", comm_id.to_hex(), "/left/", rank);
}

std::string StoreHost::failure_key(const std::string& scope, const CommId& comm_id, int rank) {
  return cat(scope, "comm:", comm_id.to_hex(), "/failed/", rank);
}

StoreHost::~StoreHost() {
  if (size_ <= 1 || Runtime::existing() == nullptr) return;
  struct Other {
    int rank;
    std::string left, failed;
  };
  std::vector<Other> others;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) others.push_back(Other{r, left_key(scope_, comm_id_, r), failure_key(scope_, comm_id_, r)});
  auto server = server_;
  runtime_.linger(
      cat("the braid store at ", server->address().to_string()), Clock::now() + linger_,
      [server, others] {
        // A rank is done with the store once it said it left or failed, or
        // once its connections to it are closed for longer than a reconnect
        // takes (its process died: nothing will come from it any more).
        const auto now = Clock::now();
        for (const Other& o : others) {
          if (server->holds({o.left}) || server->holds({o.failed})) continue;
          auto absent = server->absent_since(o.rank);
          if (absent && now - *absent >= kReconnectGrace) continue;
          return false;
        }
        return true;
      },
      [server]() mutable { server.reset(); });
}

}  // namespace braid
