#include "core/process.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "core/text.hpp"

namespace braid {

std::string pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return "0";
  return cat(st.st_ino);
}

namespace {

// The state letter of /proc/<pid>/stat (after the command in parentheses,
// which may itself hold ')'), or '\0' when it cannot be read.
char process_state(int pid) {
  std::ifstream stat(cat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return '\0';
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '\0';
}

}  // namespace

bool process_gone(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const char state = process_state(pid);  // '\0' without /proc: trust kill()
  return state == 'Z' || state == 'X';
}

bool process_stopped(int pid) {
  const char state = process_state(pid);
  return state == 'T' || state == 't';
}

ProcessWatch::ProcessWatch(int pid) : pid_(pid) {
#ifdef SYS_pidfd_open
  if (pid != ::getpid()) pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
}

ProcessWatch::~ProcessWatch() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool ProcessWatch::alive() const {
  if (pid_ == ::getpid()) return true;
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;  // readable once the process exited
  }
  return ::kill(pid_, 0) == 0 || errno != ESRCH;
}

}  // namespace braid
