// The rendezvous of the replicas that one process runs on its threads
// (Mirrored). Every replica-context collective enters here: each replica
// deposits a pointer, the last to arrive does the work for all of them (the
// cross-process part included) while the others wait, and every replica
// leaves with the same outcome. Waits are bounded, and a replica that fails
// releases the others with its error instead of leaving them waiting.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "braid/mirrored.hpp"

namespace braid::mirrored {

class Strategy::LocalGroup {
 public:
  LocalGroup(int size, std::chrono::milliseconds timeout);

  /// Called by each of the `size` replicas with its own pointer; the last to
  /// arrive runs `leader` on every replica's pointer (indexed by replica).
  /// Rethrows the leader's exception on every replica.
  void collective(int replica, void* mine, const std::function<void(std::span<void* const>)>& leader,
                  std::string_view what);
  /// A replica failed: every waiting and later collective throws `error` until reset().
  void fail(std::exception_ptr error);
  void reset();
  int size() const { return size_; }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int size_;
  std::chrono::milliseconds timeout_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<void*> pointers_;
  std::exception_ptr leader_error_;
  std::exception_ptr failed_;
};

}  // namespace braid::mirrored
