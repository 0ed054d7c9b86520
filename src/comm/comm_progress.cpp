// The operation queue and its progress (see comm_impl.hpp for the model).
#include <algorithm>

#include "comm_impl.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {

void CommImpl::submit(const std::shared_ptr<Operation>& op, bool background) {
  op->background = background;
  std::lock_guard lock(mutex_);
  if (!broken_.empty()) {
    op->error = std::make_exception_ptr(Aborted(cat("rank ", rank_, ": ", op->what,
                                                    ": the communicator is unusable after an earlier error: ", broken_)));
    op->done = true;
    return;
  }
  op->record = ++records_;
  bool p2p = (op->sequence & 0x80000000u) != 0;
  recorder_.queued(op->record, cat(p2p ? "p2p #" : "op #", op->sequence & 0x7fffffffu), op->what);
  queue_.push_back(op);
  if (background) {
    ++background_queued_;
    if (!progress_thread_.joinable())
      progress_thread_ = std::jthread([this](std::stop_token stop) { progress_loop(stop); });
    changed_.notify_all();
  }
}

bool CommImpl::wait(const std::shared_ptr<Operation>& op, Deadline until) {
  std::unique_lock lock(mutex_);
  while (!op->done) {
    if (!driving_) {
      driving_ = true;
      lock.unlock();
      drive(op, until);
      lock.lock();
      driving_ = false;
      changed_.notify_all();
      if (!op->done && until.expired()) break;
      continue;
    }
    // Another thread drives; it notifies whenever an operation finishes or it
    // stops driving.
    if (until.at() == Clock::time_point::max()) changed_.wait(lock);
    else if (changed_.wait_until(lock, until.at()) == std::cv_status::timeout && !op->done) break;
  }
  if (!op->done) return false;
  if (op->error) std::rethrow_exception(op->error);
  return true;
}

bool CommImpl::test(const std::shared_ptr<Operation>& op) {
  return wait(op, Deadline(Clock::now()));
}

void CommImpl::start_op(Operation& op) {
  std::vector<int> peers = op.schedule.peers();
  connect_peers(peers);
  op.executor = std::make_unique<Executor>(op.schedule, op.buffers, link_ptrs_, op.sequence, rank_, &scratch_);
  op.started = Clock::now();
  op.deadline = Deadline(op.started + settings_.timeout);
  recorder_.started(op.record);
}

void CommImpl::fail_queue(std::exception_ptr error) {
  std::string why;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    why = e.what();
  }
  log_warn(why);
  // Tell every peer, so that ranks not directly connected to the failure
  // learn of it in a hop or two rather than at their own timeout.
  const std::string notice = cat("rank ", rank_, " (", infos_.empty() ? "?" : infos_[rank_].hostname, ") gave up: ", why);
  for (auto& link : links_)
    if (link) link->abort(notice);
  announce_failure(notice);
  std::lock_guard lock(mutex_);
  // Links may still hold requests that point into callers' buffers: the
  // communicator must not move another byte.
  broken_ = why;
  if (!first_error_) first_error_ = error;
  bool first = true;
  for (auto& op : queue_) {
    recorder_.failed(op->record, first ? why : "not run: an earlier operation failed");
    op->error = first ? error
                      : std::make_exception_ptr(Aborted(cat("rank ", rank_, ": ", op->what,
                                                            " was not run: an earlier operation failed: ", why)));
    op->done = true;
    op->executor.reset();
    first = false;
  }
  queue_.clear();
  background_queued_ = 0;
  changed_.notify_all();
}

void CommImpl::announce_failure(const std::string& why) {
  // Peers with a link heard it through the link; the others read it here
  // when they next try to connect (or find this listener closed).
  if (store_ && !store_lost_) {
    auto bytes = std::as_bytes(std::span(why.data(), why.size()));
    if (!store_->try_set(failure_key(rank_), bytes, kFailureLook))
      log_info("rank ", rank_, ": could not leave the failure notice in the braid store at ", store_name_);
  }
  if (transport_) transport_->stop_listening();
}

// Runs queued operations in order until `target` (or, when null, the whole
// queue) is done, or `until` passes. The caller holds driving_.
void CommImpl::drive(const std::shared_ptr<Operation>& target, Deadline until) {
  const auto spin = std::chrono::microseconds(spin_us_);
  auto spin_until = Clock::now() + spin;
  auto last_note = Clock::now();
  while (true) {
    std::shared_ptr<Operation> head;
    {
      std::lock_guard lock(mutex_);
      if ((target && target->done) || queue_.empty()) return;
      head = queue_.front();
    }
    try {
      if (aborted_.load(std::memory_order_relaxed))
        throw Aborted(cat("rank ", rank_, ": ", head->what, " (op #", head->sequence & 0x7fffffffu,
                          ") was aborted by the application (Comm::abort)"));
      if (!head->executor) start_op(*head);
      if (head->executor->advance()) {
        std::lock_guard lock(mutex_);
        head->done = true;
        head->executor.reset();
        recorder_.finished(head->record);
        if (head->background) --background_queued_;
        queue_.pop_front();
        changed_.notify_all();
        continue;
      }
      if (head->executor->moved()) {
        spin_until = Clock::now() + spin;
        continue;
      }
      auto now = Clock::now();
      if (now < spin_until) continue;
      if (now >= head->deadline.at()) {
        recorder_.waiting(head->record, head->executor->describe_pending());
        log_warn("rank ", rank_, ": timed out; the flight recorder:\n", recorder_.dump());
        throw Timeout(cat("rank ", rank_, ": ", head->what, " (op #", head->sequence & 0x7fffffffu, ") timed out after ",
                          seconds_of(settings_.timeout), " s; ", head->executor->describe_pending()));
      }
      // What the operation waits on, for dumps; refreshed at most every
      // 100 ms so the fast path never builds this text.
      if (now - last_note >= std::chrono::milliseconds(100)) {
        if (now - head->started >= std::chrono::milliseconds(100))
          recorder_.waiting(head->record, head->executor->describe_pending());
        last_note = now;
      }
      if (until.expired()) return;
      auto nap = std::min<Clock::duration>({head->deadline.remaining(), until.remaining(), std::chrono::milliseconds(50)});
      poller_.wait(std::chrono::duration_cast<std::chrono::microseconds>(nap));
    } catch (const Error& e) {
      if (e.code() == ErrorCode::internal) log_warn(e.what());
      fail_queue(std::current_exception());
      return;
    }
  }
}

void CommImpl::progress_loop(std::stop_token stop) {
  // Registered before taking the lock: if the stop was requested already, the
  // callback runs right here, and it takes the lock itself.
  std::stop_callback wake(stop, [this] {
    std::lock_guard inner(mutex_);
    changed_.notify_all();
  });
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    if (background_queued_ == 0 || driving_) {
      changed_.wait(lock);
      continue;
    }
    driving_ = true;
    lock.unlock();
    // Drive in short turns so a stop request is seen promptly.
    drive(nullptr, Deadline::after(std::chrono::milliseconds(100)));
    lock.lock();
    driving_ = false;
    changed_.notify_all();
  }
}

void CommImpl::abort() {
  aborted_.store(true);
  poller_.wake();
  std::unique_lock lock(mutex_);
  // A driving thread sees the flag within one turn of its loop, or within
  // InterruptScope::kInterruptPoll while it connects, and fails the queue
  // (with Aborted, whatever it was doing). Wait for that, briefly; if nobody
  // drives, fail the queue here.
  changed_.wait_for(lock, kAbortWait, [&] { return !driving_ || !broken_.empty(); });
  if (driving_ || !broken_.empty()) return;
  driving_ = true;
  lock.unlock();
  fail_queue(std::make_exception_ptr(Aborted(cat("rank ", rank_, ": the communicator was aborted by the application (Comm::abort)"))));
  lock.lock();
  driving_ = false;
  changed_.notify_all();
}

std::exception_ptr CommImpl::async_error() const {
  std::lock_guard lock(mutex_);
  return first_error_;
}

void CommImpl::drain() {
  std::shared_ptr<Operation> last;
  {
    std::lock_guard lock(mutex_);
    if (queue_.empty()) return;
    last = queue_.back();
  }
  try {
    wait(last, Deadline::never());
  } catch (const Error& e) {
    log_warn("rank ", rank_, ": while finishing queued operations at destruction: ", e.what());
  }
}

}  // namespace braid
