// The local replicas' rendezvous (see local_group.hpp).
#include "local_group.hpp"

#include <string>

namespace braid::mirrored {

Strategy::LocalGroup::LocalGroup(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), pointers_(static_cast<std::size_t>(size), nullptr) {}

void Strategy::LocalGroup::collective(int replica, void* mine,
                                      const std::function<void(std::span<void* const>)>& leader,
                                      std::string_view what) {
  if (size_ == 1) {
    void* only[1] = {mine};
    leader(only);
    return;
  }
  std::unique_lock lock(mutex_);
  if (failed_) std::rethrow_exception(failed_);
  pointers_[static_cast<std::size_t>(replica)] = mine;
  if (++arrived_ < size_) {
    const std::uint64_t generation = generation_;
    if (!changed_.wait_for(lock, timeout_, [&] { return generation_ != generation || failed_; })) {
      auto error = std::make_exception_ptr(Timeout("local replica " + std::to_string(replica) + " waited " + std::to_string(timeout_.count()) +
                    " ms in " + std::string(what) + " for the other " + std::to_string(size_ - arrived_) +
                    " local replica(s) of this process (they must call the same replica-context operations in "
                    "the same order)"));
      failed_ = error;  // the group is broken: release the others too
      changed_.notify_all();
      std::rethrow_exception(error);
    }
    if (generation_ == generation) std::rethrow_exception(failed_);
    if (leader_error_) std::rethrow_exception(leader_error_);
    return;
  }
  // The last to arrive works for everyone. The others stay parked until the
  // generation changes, so the pointers cannot move under it.
  std::vector<void*> pointers = pointers_;
  lock.unlock();
  std::exception_ptr error;
  try {
    leader(pointers);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  leader_error_ = error;
  arrived_ = 0;
  ++generation_;
  changed_.notify_all();
  if (error) std::rethrow_exception(error);
}

void Strategy::LocalGroup::fail(std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  if (!failed_) failed_ = error;
  changed_.notify_all();
}

void Strategy::LocalGroup::reset() {
  std::lock_guard lock(mutex_);
  failed_ = nullptr;
  leader_error_ = nullptr;
  arrived_ = 0;
  ++generation_;
}

}  // namespace braid::mirrored
