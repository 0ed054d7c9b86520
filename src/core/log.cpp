#include "core/log.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <string>

namespace braid {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};
std::atomic<int> g_rank{-1};

std::string_view level_name(LogLevel level) {
  switch (level) {
    case LogLevel::warn: return "WARN";
    case LogLevel::info: return "INFO";
    case LogLevel::trace: return "TRACE";
    case LogLevel::none: break;
  }
  return "";
}

}  // namespace

std::string_view hostname() {
  static const std::string name = [] {
    std::array<char, 256> buf{};
    if (gethostname(buf.data(), buf.size() - 1) != 0) return std::string("unknown-host");
    return std::string(buf.data());
  }();
  return name;
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }
void set_log_rank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

namespace log_detail {

bool enabled(LogLevel level) {
  return level != LogLevel::none && static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void write(LogLevel level, std::string_view message) {
  int rank = g_rank.load(std::memory_order_relaxed);
  std::string line = rank >= 0 ? cat("[", hostname(), ":", getpid(), " rank ", rank, "] ", level_name(level), " ", message, "\n")
                               : cat("[", hostname(), ":", getpid(), "] ", level_name(level), " ", message, "\n");
  // One write(2) per line keeps lines of concurrent ranks from interleaving.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace log_detail

std::optional<std::string> LogRateLimit::pass() {
  std::lock_guard lock(mutex_);
  auto now = Clock::now();
  if (passed_ >= burst_ && now - last_ < interval_) {
    ++left_out_;
    return std::nullopt;
  }
  ++passed_;
  last_ = now;
  std::string note = left_out_ ? cat(" (", left_out_, " similar message", left_out_ == 1 ? "" : "s", " left out)") : "";
  if (passed_ == burst_)
    note += cat(" (more like this are left out: at most one line per ", seconds_of(interval_), " s, with a count)");
  left_out_ = 0;
  return note;
}

}  // namespace braid
