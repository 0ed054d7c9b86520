// Logging, filtered by BRAID_DEBUG (the level) and BRAID_DEBUG_SUBSYS (the
// subsystems whose INFO and TRACE lines show; WARN lines always do), to
// stderr or BRAID_DEBUG_FILE. A line reads
//
//   2026-11-27 18:20:01.123456 [host:pid rank r] NET WARN message
//
// The subsystem comes from the folder of the source file that logs
// (log_subsystem_of), so a call site names none.
#pragma once

#include <concepts>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/deadline.hpp"

#include "core/settings.hpp"
#include "core/text.hpp"

namespace braid {

/// The subsystems of BRAID_DEBUG_SUBSYS, named as NCCL_DEBUG_SUBSYS names
/// them where the meaning is the same; a bit each.
enum LogSubsystem : unsigned {
  kLogInit = 1u << 0,       // INIT: communicators, rendezvous, identity (comm/, src/core/)
  kLogBootstrap = 1u << 1,  // BOOTSTRAP: the rendezvous store (src/bootstrap/)
  kLogNet = 1u << 2,        // NET: sockets, tcp and ucx (transport/tcp/, transport/ucx/)
  kLogShm = 1u << 3,        // SHM: shared memory (transport/shm/)
  kLogP2p = 1u << 4,        // P2P: GPU to GPU (transport/cuda_ipc/)
  kLogGraph = 1u << 5,      // GRAPH: machines and topology files (topology/)
  kLogTuning = 1u << 6,     // TUNING: the cost model and the plan's choices
  kLogColl = 1u << 7,       // COLL: collectives, the progress engine, groups
  kLogEnv = 1u << 8,        // ENV: settings
  kLogAll = (1u << 9) - 1,
};

/// The subsystem a source file logs under, from its path ("../transport/
/// tcp/tcp_link.cpp": NET), and its name.
LogSubsystem log_subsystem_of(std::string_view source_file);
std::string_view name_of(LogSubsystem subsystem);
/// Parses BRAID_DEBUG_SUBSYS: "INIT,NET", "^SHM" (all but SHM), "ALL";
/// throws InvalidArgument naming the value and the known names.
unsigned parse_log_subsystems(std::string_view text);

/// Sets the level, the subsystems shown and the file (empty: stderr; %h and
/// %p in its name become the host name and the process id). Settings::
/// from_env calls it. A file that cannot be opened leaves the log on stderr,
/// with a warning there.
void configure_log(LogLevel level, unsigned subsystems, const std::string& file_pattern);
void set_log_level(LogLevel level);
/// The rank shown in the prefix.
void set_log_rank(int rank);
std::string_view hostname();

namespace log_detail {
bool enabled(LogLevel level, const char* source_file);
void write(LogLevel level, const char* source_file, std::string_view message);

// The first part of a message, and where the call is: every message starts
// with text, so the call site's file rides on its conversion.
// __builtin_FILE() as a default argument is the caller's file in GCC and in
// clang (whose 14 has no std::source_location with libstdc++ 12).
struct FirstPart {
  template <typename T>
    requires std::convertible_to<const T&, std::string_view>
  FirstPart(const T& part, const char* caller_file = __builtin_FILE()) : text(part), file(caller_file) {}
  std::string_view text;
  const char* file;
};
}  // namespace log_detail

template <typename... Parts>
void log_warn(log_detail::FirstPart first, const Parts&... parts) {
  if (log_detail::enabled(LogLevel::warn, first.file))
    log_detail::write(LogLevel::warn, first.file, cat(first.text, parts...));
}
template <typename... Parts>
void log_info(log_detail::FirstPart first, const Parts&... parts) {
  if (log_detail::enabled(LogLevel::info, first.file))
    log_detail::write(LogLevel::info, first.file, cat(first.text, parts...));
}
template <typename... Parts>
void log_trace(log_detail::FirstPart first, const Parts&... parts) {
  if (log_detail::enabled(LogLevel::trace, first.file))
    log_detail::write(LogLevel::trace, first.file, cat(first.text, parts...));
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
