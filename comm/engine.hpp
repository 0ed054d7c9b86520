// Engine: the process's progress engine (docs/architecture.md). Every
// communicator's operations progress through it, driven by one thread at a
// time and sleeping in one wait over every transport.
//
// Driving. Operations of one communicator run one at a time, in the order
// they were submitted (so every rank posts messages on a link in the same
// order); operations of different communicators progress side by side. Whoever
// waits drives: a thread that waits for an operation while nobody drives
// takes the driver role and advances the head operation of every
// communicator with work (so a blocking collective never hands off to
// another thread, and a peer that needs another communicator's progress
// from this process gets it), spinning briefly while bytes move and sleeping
// otherwise. Once an operation is started with *_async, the engine's
// progress thread drives whenever background work is queued and no other
// thread drives, so communication overlaps the caller's computation.
// Exactly one thread drives at a time, so executors and links are never
// touched concurrently; the others wait on a condition variable that the
// driver signals when an operation finishes or it lets the role go.
//
// A blocking call on an idle engine runs its operation at once on the
// calling thread without queueing it (run()), so a small collective pays no
// hand-off, no queue and no recorder entry; it joins its communicator's
// queue only if it must wait beyond the first spin.
//
// Sleeping. When nothing moved through a spin, the driver arms every
// transport context (transport.hpp's protocol: shm's doorbell, ucx's
// worker), and if all armed, sleeps in one epoll over every link's socket and
// every context's fd, so news on any transport wakes it at once; submit(),
// abort and a connection filed by the service thread wake it too.
//
// Work::then callbacks run on the thread that completes the operation, which
// is the driver: a callback that makes a blocking call drives from within
// (nested) instead of waiting for itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/deadline.hpp"
#include "core/poller.hpp"
#include "core/spin.hpp"

namespace braid {

class CommImpl;
class Operation;
class TransportContext;

/// How a driving thread waits once nothing moves (CommImpl decides from
/// its ranks and cores, comm_impl.cpp).
struct SpinPolicy {
  bool adaptive = false;  // spin by the engine's SpinBudget
  int yield_us = 0;       // oversubscribed: poll with sched_yield this long before sleeping
  int spin_us = 0;        // the fixed spin otherwise (BRAID_SPIN_US)
};

class Engine {
 public:
  Engine() = default;
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Poller& poller() { return poller_; }
  /// `context`'s fd joins the one epoll, and the context the sleep protocol.
  void add_context(TransportContext& context);
  /// Makes a sleeping driver look again; any thread.
  void wake() { poller_.wake(); }

  /// Queues `op` behind its communicator's others; a background operation
  /// gets the progress thread going.
  void submit(CommImpl& comm, const std::shared_ptr<Operation>& op, bool background);
  /// The blocking call (see above). Throws the operation's error.
  void run(CommImpl& comm, const std::shared_ptr<Operation>& op);
  /// Drives or waits until `op` is done or `until` passes; true when done.
  /// Throws the operation's error.
  bool wait(const std::shared_ptr<Operation>& op, Deadline until);
  /// Whether the calling thread is the driver (running a callback).
  static bool driving_here();
  /// Ends the progress thread (at exit).
  void stop();

  // For CommImpl, under mutex(): its queue changed between empty and not.
  SpinMutex& mutex() { return mutex_; }
  void activate_locked(CommImpl& comm);
  void deactivate_locked(CommImpl& comm);
  void background_done_locked() { --background_; }
  /// The driver lets the role go (a finished target's run(), in the lock it
  /// takes anyway); wakes whoever waits for it.
  void release_locked();
  void notify_locked() {
    if (waiters_ > 0) changed_.notify_all();
  }

 private:
  /// With the driver role held; true when it released the role itself
  /// (`release`, once `target` finished). `unqueued`: `target` is not in
  /// its communicator's queue yet and runs first.
  bool drive(const std::shared_ptr<Operation>& target, Deadline until, bool release, bool unqueued);
  void sleep_for_news(std::chrono::microseconds nap);
  void progress_loop(std::stop_token stop);

  SpinMutex mutex_;
  std::condition_variable_any changed_;
  bool driving_ = false;
  int waiters_ = 0;            // threads in changed_.wait*, so a finish notifies only when some wait
  std::size_t background_ = 0;  // queued *_async operations, every communicator
  std::vector<CommImpl*> active_;  // communicators with queued operations
  std::atomic<std::uint64_t> active_version_{0};  // bumped when active_ changes, read by the driver
  // The driver's copy of active_ as of driver_version_, so that a drive that
  // starts while nothing changed takes no lock for it (the driver's only).
  std::vector<CommImpl*> driver_actives_;
  std::uint64_t driver_version_ = ~std::uint64_t{0};
  std::vector<TransportContext*> contexts_;       // under mutex_; the driver copies them on change
  std::atomic<std::uint64_t> contexts_version_{0};
  Poller poller_;
  SpinBudget spin_budget_;  // the driver's only
  std::jthread progress_thread_;
  bool stopped_ = false;
};

}  // namespace braid
