#include "core/log.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <string>

#include "braid/types.hpp"

namespace braid {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};
std::atomic<unsigned> g_subsystems{kLogAll};
std::atomic<int> g_rank{-1};
std::atomic<int> g_fd{STDERR_FILENO};

std::string_view level_name(LogLevel level) {
  switch (level) {
    case LogLevel::warn: return "WARN";
    case LogLevel::info: return "INFO";
    case LogLevel::trace: return "TRACE";
    case LogLevel::none: break;
  }
  return "";
}

constexpr std::array<LogSubsystem, 9> kSubsystems = {kLogInit, kLogBootstrap, kLogNet,    kLogShm, kLogP2p,
                                                     kLogGraph, kLogTuning,   kLogColl, kLogEnv};

// Folders (and a few files) and their subsystem. A path names the one whose
// match ends nearest its end, so transport/tcp/ wins over a /comm/ that the
// clone's own path may hold, and comm/group.cpp over comm/.
struct SourceArea {
  std::string_view path;
  LogSubsystem subsystem;
};
constexpr SourceArea kSourceAreas[] = {
    {"/src/core/", kLogInit},
    {"/src/core/settings.cpp", kLogEnv},
    {"/src/core/socket.cpp", kLogNet},
    {"/src/core/interfaces.cpp", kLogNet},
    {"/src/bootstrap/", kLogBootstrap},
    {"/transport/", kLogNet},
    {"/transport/shm/", kLogShm},
    {"/transport/cuda_ipc/", kLogP2p},
    {"/topology/", kLogGraph},
    {"/topology/link_model.cpp", kLogTuning},
    {"/topology/plan.cpp", kLogTuning},
    {"/collectives/", kLogColl},
    {"/collectives/algorithm_costs.cpp", kLogTuning},
    {"/comm/", kLogInit},
    {"/comm/comm_progress.cpp", kLogColl},
    {"/comm/group.cpp", kLogColl},
    {"/comm/flight_recorder.cpp", kLogColl},
    {"/comm/comm_uneven.cpp", kLogColl},
    {"/comm/topo_inputs.cpp", kLogGraph},
};

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// "2026-11-27 18:20:01.123456", local time, as NCCL's default timestamp
// (with the microseconds that order the lines of one host's ranks).
std::string timestamp() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm local{};
  localtime_r(&now.tv_sec, &local);
  std::array<char, 40> text{};
  std::size_t n = std::strftime(text.data(), text.size(), "%F %T", &local);
  std::snprintf(text.data() + n, text.size() - n, ".%06ld", static_cast<long>(now.tv_nsec / 1000));
  return text.data();
}

// BRAID_DEBUG_FILE's name with %h and %p replaced, as NCCL_DEBUG_FILE's.
std::string expand_log_file(const std::string& pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'h') out += hostname(), ++i;
    else if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') out += std::to_string(getpid()), ++i;
    else out += pattern[i];
  }
  return out;
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

LogSubsystem log_subsystem_of(std::string_view source_file) {
  const std::string path = std::string("/").append(source_file);  // "../comm/x.cpp" and "comm/x.cpp" alike
  LogSubsystem best = kLogInit;
  std::size_t best_end = 0;
  for (const auto& area : kSourceAreas) {
    std::size_t at = path.rfind(area.path);
    if (at == std::string::npos) continue;
    if (at + area.path.size() > best_end) {
      best = area.subsystem;
      best_end = at + area.path.size();
    }
  }
  return best;
}

std::string_view name_of(LogSubsystem subsystem) {
  switch (subsystem) {
    case kLogInit: return "INIT";
    case kLogBootstrap: return "BOOTSTRAP";
    case kLogNet: return "NET";
    case kLogShm: return "SHM";
    case kLogP2p: return "P2P";
    case kLogGraph: return "GRAPH";
    case kLogTuning: return "TUNING";
    case kLogColl: return "COLL";
    case kLogEnv: return "ENV";
    case kLogAll: return "ALL";
  }
  return "?";
}

unsigned parse_log_subsystems(std::string_view text) {
  const bool exclude = text.starts_with('^');
  if (exclude) text.remove_prefix(1);
  unsigned mask = 0;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string name = upper(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (name.empty()) continue;
    unsigned bit = name == "ALL" ? unsigned{kLogAll} : 0u;
    for (LogSubsystem s : kSubsystems)
      if (name == name_of(s)) bit = s;
    if (bit == 0) {
      std::string known;
      for (LogSubsystem s : kSubsystems) known += cat(name_of(s), ", ");
      throw InvalidArgument(cat("BRAID_DEBUG_SUBSYS: '", name, "' is not a subsystem (", known,
                                "ALL; ^ in front excludes the list)"));
    }
    mask |= bit;
  }
  return exclude ? kLogAll & ~mask : mask;
}

void configure_log(LogLevel level, unsigned subsystems, const std::string& file_pattern) {
  set_log_level(level);
  g_subsystems.store(subsystems, std::memory_order_relaxed);
  // Every communicator of the process reads the same settings: the file is
  // opened once, by the first.
  static std::mutex mutex;
  static std::string opened;
  std::lock_guard lock(mutex);
  const std::string path = file_pattern.empty() ? std::string() : expand_log_file(file_pattern);
  if (path == opened) return;
  const int fd = path.empty() ? STDERR_FILENO : ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    log_detail::write(LogLevel::warn, __FILE__,
                      cat("BRAID_DEBUG_FILE: cannot open '", path, "' (", errno_text(err), "); logging to stderr"));
    return;
  }
  const int old = g_fd.exchange(fd);
  if (old != STDERR_FILENO) ::close(old);
  opened = path;
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }
void set_log_rank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

namespace log_detail {

bool enabled(LogLevel level, const char* source_file) {
  if (level == LogLevel::none || static_cast<int>(level) > g_level.load(std::memory_order_relaxed)) return false;
  return level == LogLevel::warn || (log_subsystem_of(source_file) & g_subsystems.load(std::memory_order_relaxed));
}

void write(LogLevel level, const char* source_file, std::string_view message) {
  int rank = g_rank.load(std::memory_order_relaxed);
  std::string where = rank >= 0 ? cat("[", hostname(), ":", getpid(), " rank ", rank, "]")
                                : cat("[", hostname(), ":", getpid(), "]");
  std::string line = cat(timestamp(), " ", where, " ", name_of(log_subsystem_of(source_file)), " ",
                         level_name(level), " ", message, "\n");
  // One write(2) per line keeps lines of concurrent ranks from interleaving
  // (and O_APPEND keeps them whole in a file that several ranks share).
  ssize_t ignored = ::write(g_fd.load(std::memory_order_relaxed), line.data(), line.size());
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
