// The operation queue and its progress (see comm_impl.hpp for the model).
#include <sched.h>

#include <algorithm>

#include "comm_impl.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {

void Operation::add_callback(std::function<void(std::exception_ptr)> callback) {
  // Published before `done` is read, as run_callbacks sets `done` before it
  // reads has_callbacks_: at least one of the two sees the other, and the
  // lock lets only one of them take the list.
  std::vector<std::function<void(std::exception_ptr)>> run;
  {
    std::lock_guard lock(callbacks_mutex_);
    callbacks_.push_back(std::move(callback));
    has_callbacks_.store(true);
    if (done.load()) run.swap(callbacks_);
  }
  for (auto& c : run) c(error);
}

void Operation::run_callbacks() {
  // The common case, no callback, takes no lock: this runs for every operation.
  if (!has_callbacks_.load()) return;
  std::vector<std::function<void(std::exception_ptr)>> run;
  {
    std::lock_guard lock(callbacks_mutex_);
    run.swap(callbacks_);
  }
  for (auto& callback : run) callback(error);
}

void Operation::clear() {
  device_input = device_output = staged = false;
  background = recorded = false;
  record = 0;
  done.store(false, std::memory_order_relaxed);
  error = nullptr;
  executor = nullptr;
}

void CommImpl::submit(const std::shared_ptr<Operation>& op, bool background) {
  op->background = background;
  std::unique_lock lock(mutex_);
  if (!broken_.empty()) {
    op->error = std::make_exception_ptr(Aborted(cat("rank ", rank_, ": ", op->what(),
                                                    ": the communicator is unusable after an earlier error: ", broken_)));
    op->done = true;
    lock.unlock();
    op->run_callbacks();
    return;
  }
  op->record = ++records_;
  recorder_.queued(op->record, op->sequence, op->plan->what);
  queue_.push_back(op);
  if (background) {
    ++background_queued_;
    if (!progress_thread_.joinable())
      progress_thread_ = std::jthread([this](std::stop_token stop) { progress_loop(stop); });
    changed_.notify_all();
  }
}

void CommImpl::run(std::shared_ptr<Operation> op) {
  {
    std::unique_lock lock(mutex_);
    if (!queue_.empty() || driving_ || !broken_.empty()) {
      lock.unlock();
      submit(op, false);
      wait(op, Deadline::never());
      return;
    }
    driving_ = true;
  }
  // drive() returns having released driving_ with `op` done, or else after
  // a failure of the queue (which completed `op` too) still driving.
  if (!drive(op, Deadline::never(), true, true)) {
    std::lock_guard lock(mutex_);
    driving_ = false;
    changed_.notify_all();
  }
  if (!op->done) wait(op, Deadline::never());
  if (op->error) std::rethrow_exception(op->error);
  // Finished here without ever entering the queue or the recorder (record
  // 0) and without callbacks: no other thread has seen it, so make_op may
  // reuse it once the caller drops its reference.
  if (op->record == 0 && !op->has_callbacks()) spare_op_ = std::move(op);
}

void CommImpl::enqueue_running(const std::shared_ptr<Operation>& op) {
  {
    std::lock_guard lock(mutex_);
    op->record = ++records_;
    // Operations queued meanwhile (callbacks' *_async) come after it.
    queue_.push_front(op);
  }
  recorder_.started_now(op->record, op->sequence, op->plan->what);
  op->recorded = true;
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
    ++waiters_;
    const bool timed_out = until.at() == Clock::time_point::max()
                               ? (changed_.wait(lock), false)
                               : changed_.wait_until(lock, until.at()) == std::cv_status::timeout;
    --waiters_;
    if (timed_out && !op->done) break;
  }
  if (!op->done) return false;
  if (op->error) std::rethrow_exception(op->error);
  return true;
}

bool CommImpl::test(const std::shared_ptr<Operation>& op) {
  return wait(op, Deadline(Clock::now()));
}

void CommImpl::start_op(Operation& op) {
  OpPlan& plan = *op.plan;
  if (std::any_of(plan.peers.begin(), plan.peers.end(), [&](int p) { return link_ptrs_[p] == nullptr; }))
    connect_peers(plan.peers, &op);
  // The plan's executor serves each of its operations in turn (they run one
  // at a time); a link made since it was built does not change it, as it
  // needed every link of the plan's peers.
  op.run_buffers = op.buffers;
  // Device buffers not moved directly (make_op decided) run on a host copy.
  if (op.buffers.kind == MemKind::cuda && !plan.key.device_direct) op.run_buffers = stage_in(op);
  if (plan.executor) {
    plan.executor->restart(op.run_buffers, op.sequence);
  } else {
    plan.executor = std::make_unique<Executor>(plan.schedule, op.run_buffers, link_ptrs_, op.sequence, rank_, &scratch_);
    if (!plan.step_tags.empty()) plan.executor->set_step_tags(plan.step_tags);
  }
  op.executor = plan.executor.get();
  // The clock starts at the first pass that finds nothing to do (drive), so
  // an operation that never waits reads no clock.
  op.started = Clock::time_point{};
  // run() records its operation as started; an unqueued one has no entry yet.
  if (!op.recorded && op.record != 0) recorder_.started(op.record);
}

Buffers CommImpl::stage_in(Operation& op) {
  const Buffers& b = op.buffers;
  Buffers run = b;
  run.kind = MemKind::host;
  run.device = -1;
  const bool in = op.device_input && b.input_bytes > 0, out = op.device_output && b.output_bytes > 0;
  if (!in && !out) return run;
  // In-place layouts (one buffer inside the other) stay in place: the copy
  // spans both.
  const bool overlap = in && out && b.input < b.output + b.output_bytes && b.output < b.input + b.input_bytes;
  const std::byte* base = overlap ? std::min<const std::byte*>(b.input, b.output) : nullptr;
  const std::size_t span =
      overlap ? static_cast<std::size_t>(std::max<const std::byte*>(b.input + b.input_bytes, b.output + b.output_bytes) - base)
              : (in ? b.input_bytes : 0) + (out ? b.output_bytes : 0);
  if (staging_.size() < span) {
    staging_ = device::Memory();
    staging_ = device::Memory(span, -1);
  }
  if (overlap) {
    run.input = staging_.data() + (b.input - base);
    run.output = staging_.data() + (b.output - base);
  } else {
    if (in) run.input = staging_.data();
    if (out) run.output = staging_.data() + (in ? b.input_bytes : 0);
  }
  if (in) device::copy_on(b.device, const_cast<std::byte*>(run.input), b.input, b.input_bytes);
  op.staged = in || out;
  return run;
}

void CommImpl::stage_out(Operation& op) {
  if (op.device_output && op.buffers.output_bytes > 0)
    device::copy_on(op.buffers.device, op.buffers.output, op.run_buffers.output, op.buffers.output_bytes);
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
  std::unique_lock lock(mutex_);
  // Links may still hold requests that point into callers' buffers: the
  // communicator must not move another byte.
  broken_ = why;
  if (!first_error_) first_error_ = error;
  bool first = true;
  for (auto& op : queue_) {
    recorder_.failed(op->record, first ? why : "not run: an earlier operation failed");
    op->error = first ? error
                      : std::make_exception_ptr(Aborted(cat("rank ", rank_, ": ", op->what(),
                                                            " was not run: an earlier operation failed: ", why)));
    op->done = true;
    op->executor = nullptr;
    first = false;
  }
  std::deque<std::shared_ptr<Operation>> failed = std::move(queue_);
  queue_.clear();
  background_queued_ = 0;
  changed_.notify_all();
  lock.unlock();
  for (auto& op : failed) op->run_callbacks();
}

void CommImpl::announce_failure(const std::string& why) {
  // Peers with a link heard it through the link; the others read it here
  // when they next try to connect (or find this listener closed).
  if (store_ && !store_lost_) {
    auto bytes = std::as_bytes(std::span(why.data(), why.size()));
    if (!store_->try_set(failure_key(rank_), bytes, kFailureLook))
      log_info("rank ", rank_, ": could not leave the failure notice in the braid store at ", store_name_);
  }
  for (auto& transport : transports_) transport->stop_accepting();
}

// Runs queued operations in order until `target` (or, when null, the whole
// queue) is done, or `until` passes. The caller holds driving_; with
// `release`, drive() gives it up itself when it finishes `target` (in the
// lock it takes anyway), and the caller must not. With `unqueued`, `target`
// is not in the queue (run()'s short path): it runs first, and goes to the
// head of the queue and into the recorder only if it outlasts the first
// spin or fails, so an operation that finishes at once costs two lock round
// trips (run's and the finish) and no recorder entry.
bool CommImpl::drive(const std::shared_ptr<Operation>& target, Deadline until, bool release, bool unqueued) {
  // Once nothing moves, spin until spin_until, then sleep; adaptive spins
  // take their length from the budget and tell it whether it paid.
  auto next_spin = [&]() -> std::chrono::nanoseconds {
    if (yield_us_ > 0) return std::chrono::microseconds(yield_us_);
    return adaptive_spin_ ? spin_budget_.next_spin() : std::chrono::microseconds(spin_us_);
  };
  bool spinning = false;  // nothing moved since spin_until was set
  // While spinning the clock is read every kClockEvery idle passes: a read
  // (tens of ns here) every pass lengthened the pass, and so the time to
  // notice an arrival, by a fifth for a small collective.
  constexpr unsigned kClockEvery = 8;
  unsigned idle_passes = 0;
  Clock::time_point spin_until{};
  auto last_note = coarse_now();
  Clock::time_point last_failure_look{};
  // The head is looked up under the lock only when it changes: only the
  // driving thread removes operations, so it stays the head until then.
  // `held` keeps a queued head alive once the queue lets it go; an unqueued
  // target is the caller's, who holds it (no reference counting per call).
  std::shared_ptr<Operation> held;
  Operation* head = unqueued ? target.get() : nullptr;
  while (true) {
    if (!head) {
      std::lock_guard lock(mutex_);
      if ((target && target->done) || queue_.empty()) return false;
      held = queue_.front();
      head = held.get();
    }
    try {
      if (aborted_.load(std::memory_order_relaxed))
        throw Aborted(cat("rank ", rank_, ": ", head->what(), " (op #", head->sequence & 0x7fffffffu,
                          ") was aborted by the application (Comm::abort)"));
      if (!head->executor) start_op(*head);
      if (head->executor->advance()) {
        if (head->staged) stage_out(*head);
        const bool was_target = head == target.get();
        {
          std::lock_guard lock(mutex_);
          head->done = true;
          head->executor = nullptr;
          if (unqueued) {
            unqueued = false;
            recorder_.finished_quickly(head->sequence, head->plan->what);
          } else {
            recorder_.finished(head->record);
            if (head->background) --background_queued_;
            queue_.pop_front();
          }
          if (was_target && release) driving_ = false;
          // Nobody waits on changed_ in the common case (one thread): no call.
          if (waiters_ > 0) changed_.notify_all();
        }
        // Outside the lock: a callback may start operations here.
        head->run_callbacks();
        if (was_target) return release;
        head = nullptr;
        held.reset();
        continue;
      }
      if (head->executor->moved()) {
        if (spinning && adaptive_spin_) spin_budget_.found_while_spinning();
        spinning = false;
        continue;
      }
      if (spinning && ++idle_passes % kClockEvery != 0) {
        if (yield_us_ > 0) sched_yield();
        else cpu_relax();
        continue;
      }
      auto now = Clock::now();
      if (head->started == Clock::time_point{}) {
        head->started = now;
        head->deadline = Deadline(now + settings_.timeout);
      }
      if (!spinning) {
        spinning = true;
        spin_until = now + next_spin();
      }
      if (now < spin_until) {
        if (yield_us_ > 0) sched_yield();
        else cpu_relax();
        continue;
      }
      // From here on it waits on its peers: receives polled on a link's
      // short path become requests (so news wakes a sleep), and an unqueued
      // operation becomes an ordinary one (queued, recorded, seen by dumps).
      head->executor->park();
      if (unqueued) {
        unqueued = false;
        enqueue_running(target);  // unqueued: head is the target
      }
      if (now >= head->deadline.at()) {
        recorder_.waiting(head->record, head->executor->describe_pending());
        log_warn("rank ", rank_, ": timed out; the flight recorder:\n", recorder_.dump());
        throw Timeout(cat("rank ", rank_, ": ", head->what(), " (op #", head->sequence & 0x7fffffffu, ") timed out after ",
                          seconds_of(settings_.timeout), " s; ", head->executor->describe_pending()));
      }
      // A peer this operation waits on through a link it has not made its
      // side of (Link::one_sided) cannot say on the link that it gave up:
      // its notice in the store says so.
      if (now - head->started >= kFailureLook && now - last_failure_look >= kFailureLook) {
        last_failure_look = now;
        for (int p = 0; p < size_; ++p)
          if (links_[p] && links_[p]->busy() && links_[p]->one_sided()) check_peer_failure(p);
      }
      // What the operation waits on, for dumps; refreshed at most every
      // 100 ms so the fast path never builds this text.
      if (now - last_note >= std::chrono::milliseconds(100)) {
        if (now - head->started >= std::chrono::milliseconds(100))
          recorder_.waiting(head->record, head->executor->describe_pending());
        last_note = now;
      }
      if (until.expired()) return false;
      bool news = false;
      for (auto& transport : transports_) news |= transport->progress();
      if (news) continue;
      if (adaptive_spin_) spin_budget_.had_to_sleep();
      spinning = false;
      auto nap = std::min<Clock::duration>({head->deadline.remaining(), until.remaining(), std::chrono::milliseconds(50)});
      sleep_for_news(std::chrono::duration_cast<std::chrono::microseconds>(nap));
    } catch (const Error& e) {
      if (e.code() == ErrorCode::internal) log_warn(e.what());
      if (unqueued) enqueue_running(target);  // so fail_queue fails it, first
      fail_queue(std::current_exception());
      return false;
    }
  }
}

void CommImpl::sleep_for_news(std::chrono::microseconds nap) {
  // Only transports with a busy link can bring news for the operation.
  std::vector<bool> active(transports_.size(), false);
  for (int p = 0; p < size_; ++p)
    if (links_[p] && links_[p]->busy()) active[static_cast<std::size_t>(link_kind_[p])] = true;
  std::vector<Transport*> armed;
  Transport* fdless = nullptr;
  bool fds = false;
  for (std::size_t k = 0; k < transports_.size(); ++k) {
    if (!active[k]) continue;
    Transport* t = transports_[k].get();
    if (!t->arm()) {
      for (Transport* a : armed) a->disarm();
      return;  // news arrived while arming: no sleep
    }
    armed.push_back(t);
    if (t->wakes_poller()) fds = true;
    else if (fdless == nullptr) fdless = t;
    else nap = std::min(nap, Transport::kMixedNap);  // two fd-less transports: short naps on the first
  }
  if (fdless == nullptr) {
    poller_.wait(nap);
  } else if (!fds) {
    fdless->wait(nap);
  } else {
    // An fd-less transport and sockets: neither sleep sees the other's news,
    // so nap briefly on the fd-less one, then look at the sockets.
    fdless->wait(std::min(nap, Transport::kMixedNap));
    poller_.wait(std::chrono::microseconds(0));
  }
  for (Transport* a : armed)
    if (a != fdless) a->disarm();
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
      ++waiters_;
      changed_.wait(lock);
      --waiters_;
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
  for (auto& transport : transports_) transport->wake();
  std::unique_lock lock(mutex_);
  // A driving thread sees the flag within one turn of its loop, or within
  // InterruptScope::kInterruptPoll while it connects, and fails the queue
  // (with Aborted, whatever it was doing). Wait for that, briefly; if nobody
  // drives, fail the queue here.
  ++waiters_;
  changed_.wait_for(lock, kAbortWait, [&] { return !driving_ || !broken_.empty(); });
  --waiters_;
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

void CommImpl::flush() {
  std::shared_ptr<Operation> last;
  {
    std::lock_guard lock(mutex_);
    if (queue_.empty()) return;
    last = queue_.back();
  }
  wait(last, Deadline::never());
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
