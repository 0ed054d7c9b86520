// Runs a piece of a test in a forked child process, so that the shared-memory
// building blocks are exercised between two real address spaces. The child
// reports through its exit status (0: passed) and stderr; it leaves with
// _exit so it never runs the parent's Catch2 teardown or destructors of
// objects it inherited (a creator's ShmSegment would unlink the name).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

namespace braid::test {

/// A child that fails a check exits with this status.
inline constexpr int kChildFailed = 99;

/// Throws from inside a child; the message lands on stderr.
inline void child_require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("child check failed: " + what);
}

class ChildProcess {
 public:
  /// Forks and runs `body` (returning the exit status) in the child.
  template <typename Body>
  explicit ChildProcess(Body&& body) {
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      int status = kChildFailed;
      try {
        status = body();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
      } catch (...) {
        std::fprintf(stderr, "child %d: unknown exception\n", static_cast<int>(::getpid()));
      }
      std::fflush(nullptr);
      ::_exit(status);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  /// A child still running when the test leaves is killed, never waited for
  /// forever.
  ~ChildProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }

  pid_t pid() const { return pid_; }

  /// Waits up to `timeout` for the child to exit and returns its exit
  /// status; -SIGNAL if a signal ended it; -1000 if it did not end in time
  /// (it is then killed).
  int join(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      pid_t got = ::waitpid(pid_, &status, WNOHANG);
      if (got == pid_) {
        reaped_ = true;
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        return -WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        reaped_ = true;
        return -1000;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void kill_now() { ::kill(pid_, SIGKILL); }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

}  // namespace braid::test
