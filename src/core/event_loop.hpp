// EventLoop: braid's service thread. One thread and one level-triggered epoll
// for what must answer at any moment, whatever the application's threads are
// doing: the process's TCP listener and the handshakes of the connections it
// accepts, the rendezvous stores this process hosts, sockets closing
// gracefully, the flight recorder's signal pipe. None of it ever waits on a
// peer: every handler does what its fd allows without blocking and returns,
// so one slow or silent stranger costs the others nothing.
//
// Components register fds (watch) and tickers (a function called after every
// wake-up that says when it wants to run next: handshake and request
// deadlines). Handlers and tickers run on the loop's thread only, so a
// component's state needs no lock when only handlers touch it. Registering
// and unregistering from another thread runs on the loop's thread and waits
// for it (so after unwatch() returns, the handler never runs again); from the
// loop's own thread it happens at once. A handler may unwatch itself.
//
// The thread starts with the first registration and stops in stop() or the
// destructor. A process forked from one whose loop ran has no loop thread:
// the Runtime refuses to work in such a child (comm/runtime.hpp).
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/deadline.hpp"
#include "core/socket.hpp"

namespace braid {

class EventLoop {
 public:
  using Handler = std::function<void(std::uint32_t events)>;
  /// Runs after every wake-up; returns when it wants to run again (nullopt:
  /// only after the next event).
  using Ticker = std::function<std::optional<Clock::time_point>()>;
  using Id = std::uint64_t;

  explicit EventLoop(std::string name = "braid-service");
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  /// Calls `handler(events)` on the loop's thread while `fd` is ready for
  /// `events` (EPOLLIN, EPOLLOUT; EPOLLHUP and EPOLLERR always). The fd must
  /// stay open until unwatch(). Throws SystemError when epoll refuses it.
  Id watch(int fd, std::uint32_t events, Handler handler);
  /// Changes what `id` waits for.
  void rewatch(Id id, std::uint32_t events);
  /// Stops watching; the handler does not run after this returns.
  void unwatch(Id id);
  Id add_ticker(Ticker ticker);
  void remove_ticker(Id id);
  /// Runs `task` on the loop's thread, soon; thread-safe, never waits.
  void post(std::function<void()> task);
  /// Runs `task` on the loop's thread and waits until it ran (at once when
  /// called from that thread; in the caller once the loop has stopped, since
  /// then no handler can race with it). Rethrows what it threw.
  void run_sync(const std::function<void()>& task);
  /// Makes the loop call its tickers again now.
  void wake();
  bool on_loop_thread() const;
  /// Ends the thread (idempotent); handlers and tickers stay registered but
  /// never run again. Not from the loop's thread.
  void stop();
  /// How many fds are watched (for tests and the runtime's description).
  std::size_t watched() const;

 private:
  struct SyncTask {
    bool ran = false;
    std::exception_ptr error;
  };
  struct Watch {
    int fd;
    std::uint32_t events;
    std::shared_ptr<Handler> handler;
  };
  void start_locked();
  void run();
  void drain_wake();
  int next_timeout_ms();
  void run_posted();

  std::string name_;
  Fd epoll_;
  Fd wake_;
  mutable std::mutex mutex_;  // guards posted_ and the thread's state; the tables are the loop thread's
  std::condition_variable done_;
  std::deque<std::function<void()>> posted_;
  bool stopping_ = false;
  bool started_ = false;
  bool finished_ = false;  // the thread left its loop: posted tasks will not run
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  // Touched on the loop thread only (watch/unwatch from elsewhere run there).
  std::map<Id, Watch> watches_;
  std::map<Id, Ticker> tickers_;
  std::optional<Clock::time_point> next_tick_;
  Id next_id_ = 1;
};

}  // namespace braid
