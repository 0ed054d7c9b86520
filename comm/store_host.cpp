#include "comm/store_host.hpp"

#include <vector>

#include "comm/runtime.hpp"
#include "core/text.hpp"

namespace braid {

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
  std::vector<std::pair<std::string, std::string>> others;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) others.emplace_back(left_key(scope_, comm_id_, r), failure_key(scope_, comm_id_, r));
  auto server = server_;
  runtime_.linger(
      cat("the braid store at ", server->address().to_string()), Clock::now() + linger_,
      [server, others] {
        for (const auto& [left, failed] : others)
          if (!server->holds({left}) && !server->holds({failed})) return false;
        return true;
      },
      [server]() mutable { server.reset(); });
}

}  // namespace braid
