// One communicator's part of progress (comm_impl.hpp): its queue, how the
// engine's driving thread steps its operations, their failure, abort and
// finalize. The driving loop itself is the Engine's (engine.hpp).
#include <algorithm>

#include "comm_impl.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
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
  for (auto& c : run) c(error.ptr());
}

void Operation::run_callbacks() {
  // The common case, no callback, takes no lock: this runs for every operation.
  if (!has_callbacks_.load()) return;
  std::vector<std::function<void(std::exception_ptr)>> run;
  {
    std::lock_guard lock(callbacks_mutex_);
    run.swap(callbacks_);
  }
  for (auto& callback : run) callback(error.ptr());
}

void Operation::clear() {
  device_input = device_output = staged = false;
  background = recorded = false;
  record = 0;
  done.store(false, std::memory_order_relaxed);
  error = {};
  executor = nullptr;
  connect_skips = 0;
  queued_tick = 0;
}

// ---- the caller's side ----------------------------------------------------------

bool CommImpl::accept_locked(const std::shared_ptr<Operation>& op) {
  if (!broken_.empty()) {
    op->error = {ErrorCode::aborted,
                 cat("rank ", rank_, ": ", op->what(), ": the communicator is unusable after an earlier error: ", broken_)};
    op->done = true;
    return false;
  }
  op->record = ++records_;
  recorder_.queued(op->record, op->sequence, op->plan->what);
  if (trace_) [[unlikely]] op->queued_tick = ticks();
  queue_.push_back(op);
  return true;
}

void CommImpl::submit(const std::shared_ptr<Operation>& op, bool background) {
  engine_.submit(*this, op, background);
}

bool CommImpl::wait(const std::shared_ptr<Operation>& op, Deadline until) { return engine_.wait(op, until); }

bool CommImpl::test(const std::shared_ptr<Operation>& op) { return engine_.wait(op, Deadline(Clock::now())); }

void CommImpl::run(std::shared_ptr<Operation> op) {
  engine_.run(*this, op);
  // Finished here without ever entering the queue or the recorder (record
  // 0) and without callbacks: no other thread has seen it, so make_op may
  // reuse it once the caller drops its reference.
  if (op->record == 0 && !op->has_callbacks()) spare_op_ = std::move(op);
}

void CommImpl::flush() {
  std::shared_ptr<Operation> last;
  {
    std::lock_guard lock(engine_.mutex());
    if (queue_.empty()) return;
    last = queue_.back();
  }
  wait(last, Deadline::never());
}

std::exception_ptr CommImpl::async_error() const {
  std::lock_guard lock(engine_.mutex());
  return first_error_.ptr();
}

// ---- the driving thread's side ------------------------------------------------------

Operation* CommImpl::queued_head() {
  if (head_ != nullptr) return head_;
  std::lock_guard lock(engine_.mutex());
  if (queue_.empty()) return nullptr;
  held_ = queue_.front();
  head_ = held_.get();
  return head_;
}

void CommImpl::enqueue_running(const std::shared_ptr<Operation>& op) {
  {
    std::lock_guard lock(engine_.mutex());
    op->record = ++records_;
    // Operations queued meanwhile (callbacks' *_async) come after it.
    queue_.push_front(op);
    if (queue_.size() == 1) engine_.activate_locked(*this);
    head_ = nullptr;
    held_.reset();
  }
  recorder_.started_now(op->record, op->sequence, op->plan->what);
  op->recorded = true;
}

CommImpl::StepResult CommImpl::step(Operation& op, const std::shared_ptr<Operation>* unqueued, bool release) {
  try {
    if (aborted_.load(std::memory_order_acquire)) [[unlikely]] {
      if (refusal_) refusal_.raise();
      if (op.plan == abort_plan())
        throw Aborted(cat("rank ", rank_, ": the communicator was aborted by the application (Comm::abort)"));
      throw Aborted(cat("rank ", rank_, ": ", op.what(), " (op #", op.sequence & 0x7fffffffu,
                        ") was aborted by the application (Comm::abort)"));
    }
    if (op.executor == nullptr && !start_op(op)) return StepResult::idle;
    if (op.executor->advance()) {
      finish(op, unqueued != nullptr, release);
      return StepResult::finished;
    }
    return op.executor->moved() ? StepResult::moved : StepResult::idle;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::internal) log_warn(e.what());
    // An unqueued operation is the engine's target, which it holds: it joins
    // the queue first, so that fail_queue fails it with the others.
    if (unqueued != nullptr) enqueue_running(*unqueued);
    fail_queue(with_peer_notice(Failure::of(e), op));
    return StepResult::failed;
  }
}

bool CommImpl::start_op(Operation& op) {
  OpPlan& plan = *op.plan;
  if (std::any_of(plan.peers.begin(), plan.peers.end(), [&](int p) { return link_ptrs_[p] == nullptr; })) {
    // Its peers are asked for their links every kConnectEvery passes while
    // the engine spins, and at once after it slept (before_sleep resets the
    // count): the links come from the peers, not from this loop.
    if (op.connect_skips++ % kConnectEvery != 0) return false;
    if (!connect_peers(plan.peers, &op)) return false;
  }
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
    if (trace_) [[unlikely]] plan.executor->time_steps(true);
  }
  if (timed_) op.begin_tick = ticks();
  op.executor = plan.executor.get();
  // The clock starts at the first pass that finds nothing to do (the
  // engine's note_idle), so an operation that never waits reads no clock.
  op.started = Clock::time_point{};
  op.deadline = Deadline::never();
  // run() records its operation as started; an unqueued one has no entry yet.
  if (!op.recorded && op.record != 0) recorder_.started(op.record);
  return true;
}

void CommImpl::finish(Operation& op, bool unqueued, bool release) {
  if (op.staged) stage_out(op);
  const std::int64_t end_tick = timed_ ? ticks() : 0;
  // While this thread drives, nobody restarts the plan's executor: its step
  // times are this operation's.
  if (trace_) [[unlikely]]
    trace_->record_op(trace_track_, op.plan, *trace_args(*op.plan), op.sequence, op.queued_tick, op.begin_tick, end_tick,
                      op.plan->executor->step_times());
  std::shared_ptr<Operation> keep;  // the queue's reference, until the callbacks ran
  {
    std::lock_guard lock(engine_.mutex());
    if (timed_) account(op, end_tick);
    // An unqueued operation is the caller's alone (Engine::run: no other
    // thread has seen it, no callback can be added), so its `done` needs no
    // full barrier for add_callback's handshake: a release store, where the
    // seq_cst store's locked exchange was 8% of a 1-rank 8-byte all-reduce.
    if (unqueued) op.done.store(true, std::memory_order_release);
    else op.done = true;
    op.executor = nullptr;
    if (unqueued) {
      recorder_.finished_quickly(op.sequence, op.plan->what);
    } else {
      recorder_.finished(op.record);
      if (op.background) engine_.background_done_locked();
      keep = std::move(queue_.front());
      queue_.pop_front();
      if (queue_.empty()) engine_.deactivate_locked(*this);
      head_ = nullptr;
      held_.reset();
    }
    if (release) engine_.release_locked();
    else engine_.notify_locked();
  }
  // Outside the lock: a callback may start operations here.
  if (!unqueued) op.run_callbacks();
}

std::string CommImpl::stopped_ranks() const {
  // The rank a timed-out operation waits on may itself wait on another; a
  // rank of this host that is stopped is the likelier cause, so say so.
  std::string out;
  if (infos_.size() != static_cast<std::size_t>(size_)) return out;
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && infos_[r].kernel_id == infos_[rank_].kernel_id && process_stopped(infos_[r].pid))
      out += cat("; rank ", r, " (", infos_[r].hostname, ", pid ", infos_[r].pid,
                 ") is stopped (SIGSTOP, Ctrl-Z or a debugger), which holds up every rank that waits on it");
  return out;
}

void CommImpl::note_idle(Operation& op, Clock::time_point now) {
  if (op.started != Clock::time_point{}) return;
  op.started = now;
  op.deadline = Deadline(now + settings_.timeout);
}

Clock::time_point CommImpl::before_sleep(Clock::time_point now) {
  Operation* head = queued_head();
  if (head == nullptr) return Clock::time_point::max();
  try {
    note_idle(*head, now);
    head->connect_skips = 0;
    // Receives polled on a link's short path become requests, so news wakes
    // the sleep.
    if (head->executor != nullptr) head->executor->park();
    else if (connect_peers(head->plan->peers, head)) return now;  // its links came: start it at once
    const auto pending = [&] {
      if (head->executor != nullptr) return head->executor->describe_pending();
      std::vector<int> missing;
      for (int p : head->plan->peers)
        if (link_ptrs_[p] == nullptr) missing.push_back(p);
      return cat("waiting for ", describe_ranks(missing), " to connect");
    };
    if (now >= head->deadline.at()) {
      recorder_.waiting(head->record, pending());
      log_warn("rank ", rank_, ": timed out; the flight recorder:\n", recorder_.dump());
      throw Timeout(cat("rank ", rank_, ": ", head->what(), " (op #", head->sequence & 0x7fffffffu, ") timed out after ",
                        seconds_of(settings_.timeout), " s; ", pending(), stopped_ranks()));
    }
    // A peer this operation waits on through a link it has not made its
    // side of (Link::one_sided) cannot say on the link that it gave up: its
    // notice in the store says so.
    if (now - head->started >= kFailureLook && now - last_failure_look_ >= kFailureLook) {
      last_failure_look_ = now;
      for (int p = 0; p < size_; ++p)
        if (links_[p] && links_[p]->busy() && links_[p]->one_sided()) check_peer_failure(p);
    }
    // What the operation waits on, for dumps; refreshed at most every
    // 100 ms so the fast path never builds this text.
    if (now - last_note_ >= std::chrono::milliseconds(100)) {
      if (now - head->started >= std::chrono::milliseconds(100)) recorder_.waiting(head->record, pending());
      last_note_ = now;
    }
    return head->deadline.at();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::internal) log_warn(e.what());
    fail_queue(Failure::of(e));
    return now;
  }
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

// ---- failure, abort, finalize ----------------------------------------------------------

void CommImpl::fail_queue(Failure error) {
  const std::string why = error.what;
  log_warn(why);
  // Tell every peer, so that ranks not directly connected to the failure
  // learn of it in a hop or two rather than at their own timeout.
  const std::string notice = cat("rank ", rank_, " (", infos_.empty() ? "?" : infos_[rank_].hostname, ") gave up: ", why);
  for (auto& link : links_)
    if (link) link->abort(notice);
  announce_failure(notice);
  std::deque<std::shared_ptr<Operation>> failed;
  {
    std::lock_guard lock(engine_.mutex());
    // Links may still hold requests that point into callers' buffers: the
    // communicator must not move another byte.
    broken_ = why;
    if (!first_error_) first_error_ = error;
    bool first = true;
    for (auto& op : queue_) {
      recorder_.failed(op->record, first ? why : "not run: an earlier operation failed");
      op->error = first ? error
                        : Failure{ErrorCode::aborted, cat("rank ", rank_, ": ", op->what(),
                                                          " was not run: an earlier operation failed: ", why)};
      op->done = true;
      op->executor = nullptr;
      if (op->background) engine_.background_done_locked();
      first = false;
    }
    failed = std::move(queue_);
    queue_.clear();
    if (!failed.empty()) engine_.deactivate_locked(*this);
    head_ = nullptr;
    held_.reset();
    engine_.notify_locked();
  }
  for (auto& op : failed) op->run_callbacks();
}

void CommImpl::announce_failure(const std::string& why) {
  // Peers with a link heard it through the link; the others read it here
  // when they next try to connect, and a dialer is told at once that this
  // rank gave up.
  if (store_ && !store_lost_) {
    auto bytes = std::as_bytes(std::span(why.data(), why.size()));
    if (!store_->try_set(failure_key(rank_), bytes, kFailureLook))
      log_info("rank ", rank_, ": could not leave the failure notice in the braid store at ", store_name_);
  }
  for (TransportContext* context : contexts_) context->withdraw(owner_, true, why);
}

const std::shared_ptr<OpPlan>& CommImpl::abort_plan() {
  static const auto plan = [] {
    auto p = std::make_shared<OpPlan>();
    p->what = std::make_shared<const std::string>("abort");
    return p;
  }();
  return plan;
}

std::shared_ptr<Operation> CommImpl::abort_marker() {
  auto op = std::make_shared<Operation>();
  op->plan = abort_plan();
  op->comm = this;
  return op;
}

void CommImpl::refuse(Failure error) {
  if (finalized_.load(std::memory_order_acquire) || aborted_.load(std::memory_order_acquire)) return;
  refusal_ = std::move(error);
  abort();
}

void CommImpl::abort() {
  if (finalized_.load(std::memory_order_acquire)) return;
  aborted_.store(true, std::memory_order_release);
  // The engine's driver fails this communicator's queue the next time it
  // steps its head, within one turn of its loop (or of a connection's
  // InterruptScope check): the marker makes sure there is a head to step,
  // and this thread drives it when nobody else does.
  auto marker = abort_marker();
  engine_.submit(*this, marker, false);
  engine_.wake();
  try {
    engine_.wait(marker, Deadline::after(kAbortWait));
  } catch (const Error&) {
  }
}

void CommImpl::throw_finalized() const {
  throw InvalidArgument(cat("rank ", rank_, " of ", size_, ": the communicator was finalized (Comm::finalize, "
                            "braid_comm_finalize, or its destruction): make a new one"));
}

void CommImpl::finalize() {
  if (finalized_.exchange(true, std::memory_order_acq_rel)) return;
  Failure error;
  std::shared_ptr<Operation> last;
  {
    std::lock_guard lock(engine_.mutex());
    if (!queue_.empty()) last = queue_.back();
  }
  if (last) {
    try {
      wait(last, Deadline::never());
    } catch (const Error& e) {
      error = Failure::of(e);
    }
  }
  bool failed = false;
  {
    std::lock_guard lock(engine_.mutex());
    failed = !broken_.empty();
    if (!error) error = first_error_;
  }
  if (trace_) trace_->flush();
  if (settings_.print_stats) {
    const std::string table = OpStatsTable::format(stats(), cat("rank ", rank_, " of ", size_));
    std::fwrite(table.data(), 1, table.size(), stderr);
  }
  // Nothing of this communicator is queued, so the engine does not touch its
  // links: they go to their contexts, after a goodbye unless it failed (its
  // peers heard why already).
  for (std::size_t p = 0; p < links_.size(); ++p) {
    if (!links_[p]) continue;
    if (!failed) links_[p]->goodbye();
    links_[p]->detach(engine_.poller());
    link_ptrs_[p] = nullptr;
    contexts_[static_cast<std::size_t>(link_kind_[p])]->retire(std::move(links_[p]), settings_.linger);
  }
  // A failed one withdrew when it failed (announce_failure), with its notice.
  for (TransportContext* context : contexts_) context->withdraw(owner_, failed, {});
  // The rank hosting the store keeps it until every rank left (store_host.hpp).
  if (root_ && !failed && store_ && !store_lost_ && size_ > 1) {
    const std::string left = StoreHost::left_key(scope_, comm_id_, rank_);
    if (!store_->try_set(left, std::as_bytes(std::span("1", 1)), kFailureLook))
      log_info("rank ", rank_, ": could not say in the braid store at ", store_name_, " that it left");
  }
  if (error) error.raise();
}

}  // namespace braid
