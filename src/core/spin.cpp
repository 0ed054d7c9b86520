#include "core/spin.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace braid {
namespace {

// The running count of /proc/loadavg ("0.28 1.41 1.91 2/79 8038": 2), or -1.
long runnable_threads() {
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[128];
  const ssize_t got = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (got <= 0) return -1;
  text[got] = '\0';
  const char* field = text;
  for (int i = 0; i < 3 && field; ++i) {
    field = std::strchr(field, ' ');
    if (field) ++field;
  }
  if (!field) return -1;
  char* end = nullptr;
  const long running = std::strtol(field, &end, 10);
  return end != field && *end == '/' ? running : -1;
}

}  // namespace

bool cpus_contended() {
  static const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  thread_local std::chrono::steady_clock::time_point next_look{};
  thread_local bool contended = false;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_look) return contended;
  next_look = now + std::chrono::milliseconds(1);
  const long running = runnable_threads();
  contended = cpus > 0 && running > cpus;
  return contended;
}

}  // namespace braid
