// Logging to stderr with a "[host:pid rank r]" prefix, filtered by BRAID_DEBUG.
#pragma once

#include <string_view>

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

}  // namespace braid
