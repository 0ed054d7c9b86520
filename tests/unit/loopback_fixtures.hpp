// Helpers shared by the unit tests that run real sockets on loopback
// (test_auth, test_tls, test_store, test_handshake).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "braid/types.hpp"
#include "core/deadline.hpp"
#include "core/event_loop.hpp"
#include "core/socket.hpp"
#include "core/comm_id.hpp"
#include "transport/transport.hpp"

namespace braid::test {

// Seconds from t until now.
inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The service thread of the stores the tests start (the process's runtime
// owns one in a real job).
inline EventLoop& service_loop() {
  static EventLoop loop("test-service");
  return loop;
}

// An address on 127.0.0.1 (port 0: any free port).
inline SockAddr loopback(std::uint16_t port = 0) {
  return resolve(HostPort{"127.0.0.1", port}, "loopback").front();
}

// Drives both links until every request is done or `limit` passes; then
// requires each one done and rethrows its failure.
inline void drive_links(Link& a, Link& b, const std::vector<Request>& requests, Millis limit) {
  auto deadline = Deadline::after(limit);
  auto all_done = [&] {
    for (const auto& r : requests)
      if (!r->done()) return false;
    return true;
  };
  while (!all_done() && !deadline.expired()) {
    a.progress();
    b.progress();
  }
  for (const auto& r : requests) {
    REQUIRE(r->done());
    r->rethrow_if_failed();
  }
}

// Everything braid logs (one write(2) to fd 2 per line) while this lives; the
// text is echoed to the real stderr at the end so a failing test still shows it.
class LogCapture {
 public:
  LogCapture() {
    std::fflush(stderr);
    file_ = std::tmpfile();
    saved_ = ::dup(STDERR_FILENO);
    ::dup2(::fileno(file_), STDERR_FILENO);
  }
  ~LogCapture() {
    std::string all = text();
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    std::fclose(file_);
    ssize_t ignored = ::write(STDERR_FILENO, all.data(), all.size());
    (void)ignored;
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() const {
    std::string out;
    char buf[4096];
    off_t at = 0;
    while (true) {
      ssize_t n = ::pread(::fileno(file_), buf, sizeof buf, at);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
      at += n;
    }
    return out;
  }

 private:
  std::FILE* file_ = nullptr;
  int saved_ = -1;
};

// The message of the E that f throws; a note naming what happened otherwise.
template <typename E, typename F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(threw another exception: ") + e.what() + ")";
  }
  return "(threw nothing)";
}

// Sets (or unsets, for nullptr) an environment variable for one scope.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  EnvVar(const char* name, const std::string& value) : EnvVar(name, value.c_str()) {}
  ~EnvVar() { ::unsetenv(name_); }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
};

}  // namespace braid::test
