// Facts about processes of this host that more than one transport needs: the
// PID namespace this process runs in (two ranks share shared memory and each
// other's process table only inside one), and whether a process still runs.
#pragma once

#include <string>

namespace braid {

/// The inode of this process's PID namespace, as text ("4026531836"), or "0"
/// where /proc does not tell.
std::string pid_namespace();

/// A process of this host (this PID namespace) that no longer runs, or is a
/// zombie nobody reaped. False when it runs or when nothing can tell.
bool process_gone(int pid);
/// Whether process `pid` of this PID namespace is stopped (SIGSTOP, Ctrl-Z,
/// a debugger): alive, but it will not run until continued.
bool process_stopped(int pid);

/// Watches one process of this host: through a pidfd where the kernel has
/// them (no mistake after the pid is reused), else kill(pid, 0).
class ProcessWatch {
 public:
  explicit ProcessWatch(int pid);
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  int pid() const { return pid_; }
  /// False once the process exited (or was killed).
  bool alive() const;

 private:
  int pid_;
  int pidfd_ = -1;
};

}  // namespace braid
