#include "comm/runtime.hpp"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "braid/types.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

std::mutex g_mutex;
// Never deleted: at exit shutdown() stops it, and objects destroyed later
// (a Comm with static storage) may still ask whether it runs.
Runtime* g_runtime = nullptr;

}  // namespace

std::atomic<Runtime::State> Runtime::state_{Runtime::State::none};
std::atomic<int> Runtime::creator_pid_{0};

Runtime::Runtime() : service_("braid-service") {}

Runtime::~Runtime() = default;

Runtime& Runtime::get() {
  if (state_.load(std::memory_order_acquire) == State::running) [[likely]]
    return *g_runtime;
  std::lock_guard lock(g_mutex);
  switch (state_.load()) {
    case State::running:
      return *g_runtime;
    case State::forked:
    case State::shut_down:
      throw_unusable();
    case State::none:
      break;
  }
  g_runtime = new Runtime();
  creator_pid_.store(::getpid());
  state_.store(State::running, std::memory_order_release);
  static bool hooks = [] {
    // The runtime's threads are gone in a forked child: mark it there so
    // that every later call says so instead of waiting on them.
    ::pthread_atfork(nullptr, nullptr, &Runtime::on_fork_child);
    std::atexit(&Runtime::shutdown);
    return true;
  }();
  (void)hooks;
  return *g_runtime;
}

Runtime* Runtime::existing() { return state_.load(std::memory_order_acquire) == State::running ? g_runtime : nullptr; }

void Runtime::on_fork_child() {
  if (state_.load() == State::running) state_.store(State::forked);
}

void Runtime::throw_unusable() {
  switch (state_.load()) {
    case State::forked:
      throw Error(ErrorCode::invalid_argument,
                  cat("this process (pid ", ::getpid(), ") was forked from pid ", creator_pid_.load(),
                      " after braid started there; braid's threads do not survive fork, so braid cannot be used in "
                      "the child: create communicators after forking, or start the child fresh (Python "
                      "multiprocessing's 'spawn' or 'forkserver' start method)"));
    case State::shut_down:
      throw Error(ErrorCode::invalid_argument,
                  "braid's runtime was shut down (the process is exiting, or braid.shutdown() was called): "
                  "no communicator can be used or made any more");
    default:
      throw Error(ErrorCode::internal, "braid's runtime is not running");
  }
}

void Runtime::linger(std::string what, Clock::time_point until, std::function<bool()> done,
                     std::function<void()> finish) {
  std::lock_guard lock(mutex_);
  lingering_.push_back(Lingering{std::move(what), until, std::move(done), std::move(finish)});
}

void Runtime::shutdown() {
  Runtime* runtime = nullptr;
  {
    std::lock_guard lock(g_mutex);
    if (state_.load() != State::running) return;
    runtime = g_runtime;
    state_.store(State::shut_down);
  }
  runtime->stop();
}

void Runtime::stop() {
  std::vector<Lingering> lingering;
  {
    std::lock_guard lock(mutex_);
    lingering.swap(lingering_);
  }
  for (Lingering& l : lingering) {
    try {
      while (Clock::now() < l.until && !l.done()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      l.finish();
    } catch (const std::exception& e) {
      log_info("at exit, ", l.what, ": ", e.what());
    }
  }
  service_.stop();
}

}  // namespace braid
