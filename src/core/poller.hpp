// Poller: the progress engine's way to sleep until a socket is ready, a
// timeout passes, or another thread calls wake() (abort, shutdown). Sockets
// are registered edge-triggered: the engine always tries I/O first and only
// sleeps after a socket said EAGAIN, so no edge is lost.
#pragma once

#include <chrono>

#include "core/socket.hpp"

namespace braid {

class Poller {
 public:
  Poller();
  /// A socket, for input and output (edge-triggered: drain it before sleeping).
  void add(int fd);
  /// An fd whose readability alone is news (a doorbell's pipe, a UCX
  /// worker's event fd), edge-triggered: its owner drains it after a wake-up.
  void add_readable(int fd);
  void remove(int fd);
  /// Sleeps until an event, wake() or the timeout; returns the number of events.
  int wait(std::chrono::microseconds timeout);
  /// Safe from any thread and from a signal handler.
  void wake();

 private:
  Fd epoll_;
  Fd event_;
};

}  // namespace braid
