#include "core/event_loop.hpp"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "braid/types.hpp"
#include "core/auth.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {
constexpr EventLoop::Id kWakeId = 0;
}

EventLoop::EventLoop(std::string name)
    : name_(std::move(name)), epoll_(::epoll_create1(EPOLL_CLOEXEC)), wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!epoll_ || !wake_) throw SystemError(cat(name_, ": cannot create an epoll or eventfd: ", errno_text(errno)));
  // Before this loop's destructor is registered (a static loop's is, once
  // constructed): OpenSSL's cleanup then runs after the thread stopped.
  init_openssl();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0)
    throw SystemError(cat(name_, ": epoll_ctl failed: ", errno_text(errno)));
}

EventLoop::~EventLoop() { stop(); }

bool EventLoop::on_loop_thread() const { return std::this_thread::get_id() == thread_id_.load(std::memory_order_relaxed); }

void EventLoop::start_locked() {
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread([this] { run(); });
  thread_id_.store(thread_.get_id(), std::memory_order_relaxed);
}

void EventLoop::stop() {
  std::thread thread;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  wake();
  if (thread.joinable()) thread.join();
  std::lock_guard lock(mutex_);
  posted_.clear();
  done_.notify_all();
}

void EventLoop::wake() {
  std::uint64_t one = 1;
  ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
  (void)ignored;
}

void EventLoop::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    posted_.push_back(std::move(task));
    start_locked();
  }
  wake();
}

void EventLoop::run_sync(const std::function<void()>& task) {
  if (on_loop_thread()) {
    task();
    return;
  }
  auto state = std::make_shared<SyncTask>();
  {
    std::unique_lock lock(mutex_);
    // A stopping loop leaves at its next wake-up; once it has, nothing runs
    // handlers, and the task runs here.
    if (stopping_) done_.wait(lock, [&] { return finished_ || !started_; });
    if (!stopping_) {
      posted_.push_back([this, state, &task] {
        try {
          task();
        } catch (...) {
          state->error = std::current_exception();
        }
        std::lock_guard inner(mutex_);
        state->ran = true;
        done_.notify_all();
      });
      start_locked();
    }
  }
  wake();
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return state->ran || finished_ || (stopping_ && !started_); });
    if (state->ran) {
      if (state->error) std::rethrow_exception(state->error);
      return;
    }
  }
  task();  // the loop ended without running it: no handler runs any more
}

EventLoop::Id EventLoop::watch(int fd, std::uint32_t events, Handler handler) {
  Id id = 0;
  run_sync([&] {
    id = next_id_++;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      throw SystemError(cat(name_, ": cannot watch fd ", fd, ": ", errno_text(errno)));
    watches_.emplace(id, Watch{fd, events, std::make_shared<Handler>(std::move(handler))});
  });
  return id;
}

void EventLoop::rewatch(Id id, std::uint32_t events) {
  run_sync([&] {
    auto it = watches_.find(id);
    if (it == watches_.end() || it->second.events == events) return;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, it->second.fd, &ev) != 0)
      throw SystemError(cat(name_, ": cannot change the events of fd ", it->second.fd, ": ", errno_text(errno)));
    it->second.events = events;
  });
}

void EventLoop::unwatch(Id id) {
  run_sync([&] {
    auto it = watches_.find(id);
    if (it == watches_.end()) return;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.fd, nullptr);
    watches_.erase(it);
  });
}

EventLoop::Id EventLoop::add_ticker(Ticker ticker) {
  Id id = 0;
  run_sync([&] {
    id = next_id_++;
    tickers_.emplace(id, std::move(ticker));
    next_tick_ = Clock::now();  // run it once at the next pass
  });
  return id;
}

void EventLoop::remove_ticker(Id id) {
  run_sync([&] { tickers_.erase(id); });
}

std::size_t EventLoop::watched() const {
  std::size_t n = 0;
  const_cast<EventLoop*>(this)->run_sync([&] { n = watches_.size(); });
  return n;
}

void EventLoop::drain_wake() {
  std::uint64_t drained;
  while (::read(wake_.get(), &drained, sizeof drained) > 0) {
  }
}

int EventLoop::next_timeout_ms() {
  if (!next_tick_) return -1;
  return Deadline(*next_tick_).poll_ms(Millis(3600 * 1000));
}

void EventLoop::run_posted() {
  while (true) {
    std::function<void()> task;
    {
      std::lock_guard lock(mutex_);
      if (posted_.empty()) return;
      task = std::move(posted_.front());
      posted_.pop_front();
    }
    task();
  }
}

void EventLoop::run() {
  ::pthread_setname_np(::pthread_self(), name_.substr(0, 15).c_str());
  std::vector<epoll_event> events(64);
  while (true) {
    // stop() sets stopping_, then wakes the loop. A pass that drained the
    // wake-up counter (drain_wake) may have taken that very wake-up after
    // its check below, so look again before sleeping: else epoll_wait
    // without a timeout never returns and stop() never joins.
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
    }
    int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), next_timeout_ms());
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
    }
    if (n < 0 && errno != EINTR) {
      log_warn(name_, ": epoll_wait failed: ", errno_text(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    for (int i = 0; i < n; ++i) {
      const Id id = events[static_cast<std::size_t>(i)].data.u64;
      if (id == kWakeId) {
        drain_wake();
        continue;
      }
      auto it = watches_.find(id);
      if (it == watches_.end()) continue;  // unwatched by an earlier handler of this pass
      std::shared_ptr<Handler> handler = it->second.handler;
      try {
        (*handler)(events[static_cast<std::size_t>(i)].events);
      } catch (const std::exception& e) {
        log_warn(name_, ": a handler failed: ", e.what());
      }
    }
    run_posted();
    std::optional<Clock::time_point> next;
    std::vector<Id> ids;
    for (const auto& [id, ticker] : tickers_) ids.push_back(id);
    for (Id id : ids) {
      auto it = tickers_.find(id);
      if (it == tickers_.end()) continue;
      std::optional<Clock::time_point> wanted;
      try {
        Ticker ticker = it->second;  // a ticker may remove itself
        wanted = ticker();
      } catch (const std::exception& e) {
        log_warn(name_, ": a ticker failed: ", e.what());
      }
      if (wanted && (!next || *wanted < *next)) next = wanted;
    }
    next_tick_ = next;
  }
  std::lock_guard lock(mutex_);
  finished_ = true;
  done_.notify_all();
}

}  // namespace braid
