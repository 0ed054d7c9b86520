// Logging to stderr with a "[host:pid rank r]" prefix, filtered by BRAID_DEBUG.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/deadline.hpp"

#include "core/settings.hpp"
#include "core/text.hpp"

namespace braid {

namespace log_detail {
bool enabled(LogLevel level);
void write(LogLevel level, std::string_view message);
}  // namespace log_detail

/// Sets the level (from Settings) and the rank shown in the prefix.
void set_log_level(LogLevel level);
void set_log_rank(int rank);
std::string_view hostname();

template <typename... Parts>
void log_warn(const Parts&... parts) {
  if (log_detail::enabled(LogLevel::warn)) log_detail::write(LogLevel::warn, cat(parts...));
}
template <typename... Parts>
void log_info(const Parts&... parts) {
  if (log_detail::enabled(LogLevel::info)) log_detail::write(LogLevel::info, cat(parts...));
}
template <typename... Parts>
void log_trace(const Parts&... parts) {
  if (log_detail::enabled(LogLevel::trace)) log_detail::write(LogLevel::trace, cat(parts...));
}

/// Keeps a flood of similar messages (refused strangers) out of the log: the
/// first `burst` pass in full, then at most one per `interval`, and a passing
/// message carries the count of those left out since the last one.
class LogRateLimit {
 public:
  explicit LogRateLimit(std::size_t burst = 5, Millis interval = std::chrono::seconds(10))
      : burst_(burst), interval_(interval) {}
  /// nullopt: leave this message out (it is counted). Otherwise the text to
  /// append to it: empty, or " (N similar messages left out)".
  std::optional<std::string> pass();

 private:
  std::mutex mutex_;
  std::size_t burst_;
  Millis interval_;
  std::size_t passed_ = 0;
  std::size_t left_out_ = 0;
  Clock::time_point last_{};
};

}  // namespace braid
