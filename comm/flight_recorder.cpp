#include "flight_recorder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <set>
#include <thread>

#include "braid/types.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// Live recorders, for the signal dump. Never destroyed (a dump may race exit).
std::mutex g_live_mutex;
auto* g_live = new std::set<FlightRecorder*>;
int g_signal_pipe[2] = {-1, -1};

void on_signal(int) {
  char byte = 1;
  ssize_t ignored = ::write(g_signal_pipe[1], &byte, 1);
  (void)ignored;
}

std::string milliseconds_between(Clock::time_point a, Clock::time_point b) {
  return cat(std::chrono::duration<double, std::milli>(b - a).count(), " ms");
}

}  // namespace

FlightRecorder::FlightRecorder(std::string owner) : owner_(std::move(owner)) {
  std::lock_guard lock(g_live_mutex);
  g_live->insert(this);
}

void FlightRecorder::set_owner(std::string owner) {
  std::lock_guard lock(mutex_);
  owner_ = std::move(owner);
}

FlightRecorder::~FlightRecorder() {
  std::lock_guard lock(g_live_mutex);
  g_live->erase(this);
}

FlightRecorder::Entry* FlightRecorder::find(std::uint64_t id) {
  for (std::size_t i = count_; i-- > 0;)
    if (at(i).id == id) return &at(i);
  return nullptr;
}

FlightRecorder::Entry& FlightRecorder::push() {
  auto live = [](const Entry& e) { return e.state == State::queued || e.state == State::running; };
  while (count_ >= kKept && !live(at(0))) {
    first_ = (first_ + 1) % ring_.size();
    --count_;
  }
  if (count_ == ring_.size()) {
    std::vector<Entry> bigger(std::max(kKept, 2 * ring_.size()));
    for (std::size_t i = 0; i < count_; ++i) bigger[i] = std::move(at(i));
    ring_ = std::move(bigger);
    first_ = 0;
  }
  ++count_;
  return at(count_ - 1);
}

void FlightRecorder::add(std::uint64_t id, std::uint32_t sequence, std::shared_ptr<const std::string> what, State state) {
  const auto now = coarse_now();
  std::lock_guard lock(mutex_);
  Entry& e = push();
  e.id = id;
  e.sequence = sequence;
  e.what = std::move(what);
  e.state = state;
  e.queued_at = e.started_at = now;
  e.detail.clear();
}

void FlightRecorder::queued(std::uint64_t id, std::uint32_t sequence, std::shared_ptr<const std::string> what) {
  add(id, sequence, std::move(what), State::queued);
}

void FlightRecorder::started_now(std::uint64_t id, std::uint32_t sequence, std::shared_ptr<const std::string> what) {
  add(id, sequence, std::move(what), State::running);
}

void FlightRecorder::started(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  if (Entry* e = find(id)) {
    e->state = State::running;
    e->started_at = coarse_now();
  }
}

void FlightRecorder::waiting(std::uint64_t id, std::string on_whom) {
  std::lock_guard lock(mutex_);
  if (Entry* e = find(id)) e->detail = std::move(on_whom);
}

void FlightRecorder::finished(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  if (Entry* e = find(id)) {
    e->state = State::done;
    e->ended_at = coarse_now();
    e->detail.clear();
  }
}

void FlightRecorder::failed(std::uint64_t id, std::string why) {
  std::lock_guard lock(mutex_);
  if (Entry* e = find(id)) {
    e->state = State::failed;
    e->ended_at = coarse_now();
    e->detail = std::move(why);
  }
}

std::string FlightRecorder::dump() const {
  std::lock_guard lock(mutex_);
  auto now = Clock::now();
  std::string out = cat("braid flight recorder for ", owner_, " (last ", count_, " operations, oldest first)\n");
  for (std::size_t i = 0; i < count_; ++i) {
    const Entry& e = at(i);
    out += cat("  ", (e.sequence & 0x80000000u) ? "p2p #" : "op #", e.sequence & 0x7fffffffu, " ",
               e.what ? *e.what : std::string("?"), ": ");
    switch (e.state) {
      case State::queued: out += cat("queued for ", milliseconds_between(e.queued_at, now)); break;
      case State::running:
        out += cat("running for ", milliseconds_between(e.started_at, now));
        if (!e.detail.empty()) out += cat("; ", e.detail);
        break;
      case State::done: out += cat("done in ", milliseconds_between(e.started_at, e.ended_at)); break;
      case State::failed: out += cat("FAILED: ", e.detail); break;
    }
    out += "\n";
  }
  // Operations that finished without waiting, oldest first (a sequence
  // being written as this reads may show the entry's previous one).
  const std::uint64_t quick = quick_count_.load(std::memory_order_acquire);
  if (quick > 0) {
    const std::uint64_t shown = std::min<std::uint64_t>(quick, kQuickKept);
    out += cat("  and ", quick, " operation(s) that finished without waiting; the last ", shown, ":\n");
    for (std::uint64_t k = quick - shown; k < quick; ++k) {
      const Quick& q = quick_[k % kQuickKept];
      const std::uint32_t sequence = q.sequence.load(std::memory_order_relaxed);
      out += cat("    ", (sequence & 0x80000000u) ? "p2p #" : "op #", sequence & 0x7fffffffu, " ",
                 q.what ? *q.what : std::string("?"), ": done\n");
    }
  }
  return out;
}

void FlightRecorder::dump_on_signal(int signal_number) {
  static std::once_flag once;
  std::call_once(once, [signal_number] {
    if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
      log_warn("BRAID_DUMP_ON_SIGNAL: cannot create the signal pipe: ", errno_text(errno));
      return;
    }
    std::thread([] {
      char byte;
      while (::read(g_signal_pipe[0], &byte, 1) > 0) {
        std::lock_guard lock(g_live_mutex);
        for (const FlightRecorder* r : *g_live) {
          std::string text = r->dump();
          ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
          (void)ignored;
        }
      }
    }).detach();
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(signal_number, &action, nullptr);
  });
}

int parse_signal(std::string_view text) {
  std::string name(text);
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  static constexpr struct {
    const char* name;
    int number;
  } kSignals[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"QUIT", SIGQUIT}, {"WINCH", SIGWINCH}};
  for (const auto& s : kSignals)
    if (name == s.name) return s.number;
  if (!name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    int number = std::stoi(name);
    if (number > 0 && number < NSIG && number != SIGKILL && number != SIGSTOP) return number;
  }
  throw InvalidArgument(cat("BRAID_DUMP_ON_SIGNAL='", text, "' is not a signal braid can use (USR1, USR2, HUP, QUIT, WINCH or a number)"));
}

}  // namespace braid
