#include "comm/engine.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "comm/comm_impl.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "transport/transport.hpp"

namespace braid {
namespace {

// How deep the calling thread drives (0: it does not; 2: a callback of a
// driver's operation made a blocking call).
thread_local int t_drive_depth = 0;

struct DriveDepth {
  DriveDepth() { ++t_drive_depth; }
  ~DriveDepth() { --t_drive_depth; }
};

// While spinning the clock is read every kClockEvery idle passes: a read
// (tens of ns here) every pass lengthened the pass, and so the time to
// notice an arrival, by a fifth for a small collective.
constexpr unsigned kClockEvery = 8;
// A spinning wait's first idle passes poll again at once: no clock read, no
// pause. The bookkeeping of a spin (the clock for its end and the
// operations' timeouts, then a pause per pass) begins after them. Most
// small collectives find their message within a pass or two, and did that
// bookkeeping on their critical path: a clock read and a pause (tens of ns
// on this AMD EPYC VM) in most operations of a 2-rank 8-byte all-reduce
// over UCX. Not when ranks share cores (the yielding policy): polling
// there holds the core from the peer being waited on.
constexpr unsigned kTightPasses = 16;
// The longest sleep between two looks at timeouts and dead peers.
constexpr Millis kLongestNap{50};
// The progress thread drives in turns this long, so a stop is seen promptly.
constexpr Millis kProgressTurn{100};

}  // namespace

Engine::~Engine() { stop(); }

bool Engine::driving_here() { return t_drive_depth > 0; }

void Engine::stop() {
  std::jthread thread;
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    thread = std::move(progress_thread_);
    changed_.notify_all();
  }
  thread = {};  // request stop and join
}

void Engine::add_context(TransportContext& context) {
  if (context.wait_fd() >= 0) poller_.add_readable(context.wait_fd());
  std::lock_guard lock(mutex_);
  contexts_.push_back(&context);
  contexts_version_.fetch_add(1, std::memory_order_release);
}

void Engine::activate_locked(CommImpl& comm) {
  active_.push_back(&comm);
  active_version_.fetch_add(1, std::memory_order_seq_cst);
}

void Engine::deactivate_locked(CommImpl& comm) {
  std::erase(active_, &comm);
  active_version_.fetch_add(1, std::memory_order_seq_cst);
}

void Engine::release_locked() {
  driving_ = false;
  if (waiters_ > 0) changed_.notify_all();
}

void Engine::submit(CommImpl& comm, const std::shared_ptr<Operation>& op, bool background) {
  op->background = background;
  bool woke_comm = false;
  {
    std::unique_lock lock(mutex_);
    if (!comm.accept_locked(op)) {
      lock.unlock();
      op->run_callbacks();
      return;
    }
    woke_comm = comm.queue_.size() == 1;
    if (woke_comm) activate_locked(comm);
    if (background) {
      ++background_;
      if (!progress_thread_.joinable() && !stopped_)
        progress_thread_ = std::jthread([this](std::stop_token stop) { progress_loop(stop); });
    }
    if (waiters_ > 0) changed_.notify_all();
  }
  // A driver asleep in the epoll does not look at the list of busy
  // communicators until woken.
  if (woke_comm) wake();
}

void Engine::run(CommImpl& comm, const std::shared_ptr<Operation>& op) {
  if (driving_here()) {
    // A callback of the driving thread: queue it and drive from here.
    submit(comm, op, false);
    wait(op, Deadline::never());
    return;
  }
  {
    std::unique_lock lock(mutex_);
    if (driving_ || !comm.queue_.empty() || !comm.usable_locked()) {
      lock.unlock();
      submit(comm, op, false);
      wait(op, Deadline::never());
      return;
    }
    driving_ = true;
  }
  // drive() returns having released the role with `op` done, or else still
  // holding it (a failure completed `op`, or it joined the queue to wait).
  if (!drive(op, Deadline::never(), true, true)) {
    std::lock_guard lock(mutex_);
    release_locked();
  }
  if (!op->done.load(std::memory_order_acquire)) wait(op, Deadline::never());
  if (op->error) op->error.raise();
}

bool Engine::wait(const std::shared_ptr<Operation>& op, Deadline until) {
  if (driving_here()) {
    while (!op->done.load(std::memory_order_acquire)) {
      drive(op, until, false, false);
      if (until.expired()) break;
    }
  } else {
    std::unique_lock lock(mutex_);
    while (!op->done.load(std::memory_order_acquire)) {
      if (!driving_) {
        driving_ = true;
        lock.unlock();
        drive(op, until, false, false);
        lock.lock();
        release_locked();
        if (!op->done && until.expired()) break;
        continue;
      }
      // Another thread drives; it notifies whenever an operation finishes or
      // it lets the role go.
      ++waiters_;
      const bool timed_out = until.at() == Clock::time_point::max()
                                 ? (changed_.wait(lock), false)
                                 : changed_.wait_until(lock, until.at()) == std::cv_status::timeout;
      --waiters_;
      if (timed_out && !op->done) break;
    }
  }
  if (!op->done.load(std::memory_order_acquire)) return false;
  if (op->error) op->error.raise();
  return true;
}

bool Engine::drive(const std::shared_ptr<Operation>& target, Deadline until, bool release, bool unqueued) {
  DriveDepth depth;
  if (t_drive_depth > 1) release = false;  // the outer drive holds the role
  CommImpl* const target_comm = target ? target->comm : nullptr;
  std::vector<CommImpl*> actives;
  std::uint64_t seen_actives = ~std::uint64_t{0};
  std::vector<TransportContext*> contexts;
  std::uint64_t seen_contexts = ~std::uint64_t{0};
  SpinPolicy policy = target_comm ? target_comm->spin_policy() : SpinPolicy{};
  auto refresh = [&] {
    const std::uint64_t version = active_version_.load(std::memory_order_acquire);
    if (version != driver_version_) {
      std::lock_guard lock(mutex_);
      driver_version_ = active_version_.load(std::memory_order_acquire);
      driver_actives_ = active_;
    }
    seen_actives = driver_version_;
    actives = driver_actives_;
    if (!target_comm && !actives.empty()) policy = actives.front()->spin_policy();
  };
  auto next_spin = [&]() -> std::chrono::nanoseconds {
    if (policy.yield_us > 0) return std::chrono::microseconds(policy.yield_us);
    return policy.adaptive ? spin_budget_.next_spin() : std::chrono::microseconds(policy.spin_us);
  };
  auto relax = [&] {
    if (policy.yield_us > 0) sched_yield();
    else cpu_relax();
  };
  bool spinning = false;  // nothing moved since spin_until was set
  unsigned idle_passes = 0;
  unsigned tight_passes = 0;  // idle passes in a row before spinning began
  Clock::time_point spin_until{};
  while (true) {
    if (active_version_.load(std::memory_order_acquire) != seen_actives) refresh();
    bool moved = false;
    if (unqueued) {
      switch (target_comm->step(*target, &target, release)) {
        case CommImpl::StepResult::finished: return release;
        case CommImpl::StepResult::failed: return false;  // it joined its queue and failed with it
        case CommImpl::StepResult::moved: moved = true; break;
        case CommImpl::StepResult::idle: break;
      }
    }
    for (CommImpl* comm : actives) {
      Operation* head = comm->queued_head();
      if (head == nullptr) continue;
      const bool is_target = head == target.get();
      switch (comm->step(*head, nullptr, release && is_target)) {
        case CommImpl::StepResult::finished:
          if (is_target) return release;
          moved = true;
          break;
        case CommImpl::StepResult::failed:
        case CommImpl::StepResult::moved: moved = true; break;
        case CommImpl::StepResult::idle: break;
      }
      if (active_version_.load(std::memory_order_acquire) != seen_actives) break;  // the list changed under us
    }
    if (target && target->done.load(std::memory_order_acquire)) return false;
    if (moved) {
      if (spinning && policy.adaptive) spin_budget_.found_while_spinning();
      spinning = false;
      tight_passes = 0;
      continue;
    }
    if (!target && actives.empty()) return false;  // the progress thread, with nothing left
    if (!spinning && policy.yield_us == 0 && ++tight_passes < kTightPasses) continue;
    if (spinning && ++idle_passes % kClockEvery != 0) {
      relax();
      continue;
    }
    const auto now = Clock::now();
    if (unqueued) target_comm->note_idle(*target, now);
    for (CommImpl* comm : actives) comm->note_idle(now);
    if (!spinning) {
      spinning = true;
      spin_until = now + next_spin();
    }
    if (now < spin_until) {
      relax();
      continue;
    }
    // From here on it waits on its peers: an unqueued operation becomes an
    // ordinary one (queued, recorded, seen by dumps), and every head gets
    // its timeouts looked at and its polled receives posted (so news wakes
    // the sleep).
    if (unqueued) {
      unqueued = false;
      target_comm->enqueue_running(target);
      refresh();
    }
    Clock::time_point wake_at = std::min(until.at(), now + kLongestNap);
    for (CommImpl* comm : actives) wake_at = std::min(wake_at, comm->before_sleep(now));
    if (target && target->done.load(std::memory_order_acquire)) return false;
    if (until.expired()) return false;
    if (contexts_version_.load(std::memory_order_acquire) != seen_contexts) {
      std::lock_guard lock(mutex_);
      seen_contexts = contexts_version_.load(std::memory_order_acquire);
      contexts = contexts_;
    }
    bool news = false;
    for (TransportContext* c : contexts) news |= c->progress();
    if (news) continue;
    if (policy.adaptive) spin_budget_.had_to_sleep();
    spinning = false;
    if (active_version_.load(std::memory_order_acquire) != seen_actives) continue;
    sleep_for_news(std::chrono::duration_cast<std::chrono::microseconds>(
        std::max<Clock::duration>(Clock::duration::zero(), wake_at - Clock::now())));
  }
}

void Engine::sleep_for_news(std::chrono::microseconds nap) {
  std::vector<TransportContext*> contexts;
  {
    std::lock_guard lock(mutex_);
    contexts = contexts_;
  }
  std::vector<TransportContext*> armed;
  for (TransportContext* c : contexts) {
    if (!c->arm()) {
      for (TransportContext* a : armed) a->disarm();
      return;  // news arrived while arming: no sleep
    }
    armed.push_back(c);
  }
  poller_.wait(nap);
  for (TransportContext* a : armed) a->disarm();
}

void Engine::progress_loop(std::stop_token stop) {
  ::pthread_setname_np(::pthread_self(), "braid-progress");
  // Registered before taking the lock: if the stop was requested already,
  // the callback runs right here, and it takes the lock itself.
  std::stop_callback on_stop(stop, [this] {
    std::lock_guard inner(mutex_);
    changed_.notify_all();
    wake();
  });
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    if (background_ == 0 || driving_) {
      ++waiters_;
      changed_.wait(lock);
      --waiters_;
      continue;
    }
    driving_ = true;
    lock.unlock();
    drive(nullptr, Deadline::after(kProgressTurn), false, false);
    lock.lock();
    release_locked();
  }
}

}  // namespace braid
