#include "core/spin.hpp"

#include <unistd.h>

#include <fstream>

namespace braid {
namespace {

// The running count of /proc/loadavg ("0.28 1.41 1.91 2/79 8038": 2), or -1.
long runnable_threads() {
  std::ifstream in("/proc/loadavg");
  double load1 = 0, load5 = 0, load15 = 0;
  long running = -1;
  char slash = 0;
  if (!(in >> load1 >> load5 >> load15 >> running >> slash) || slash != '/') return -1;
  return running;
}

}  // namespace

bool cpus_contended() {
  static const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  thread_local std::chrono::steady_clock::time_point next_look{};
  thread_local bool contended = false;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_look) return contended;
  next_look = now + std::chrono::milliseconds(1);
  contended = cpus > 0 && runnable_threads() > cpus;
  return contended;
}

}  // namespace braid
