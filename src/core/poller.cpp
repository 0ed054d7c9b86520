#include "core/poller.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {

Poller::Poller() : epoll_(::epoll_create1(EPOLL_CLOEXEC)), event_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!epoll_ || !event_) throw SystemError(cat("cannot create the progress engine's epoll/eventfd: ", errno_text(errno)));
  add(event_.get());
}

void Poller::add(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    throw SystemError(cat("epoll_ctl(ADD, fd ", fd, ") failed: ", errno_text(errno)));
}

void Poller::add_readable(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    throw SystemError(cat("epoll_ctl(ADD, fd ", fd, ") failed: ", errno_text(errno)));
}

void Poller::remove(int fd) { ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }

int Poller::wait(std::chrono::microseconds timeout) {
  epoll_event events[32];
  int ms = static_cast<int>((timeout.count() + 999) / 1000);
  int n = ::epoll_wait(epoll_.get(), events, 32, ms);
  if (n < 0) {
    if (errno == EINTR) return 0;
    throw SystemError(cat("epoll_wait failed: ", errno_text(errno)));
  }
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == event_.get()) {
      std::uint64_t drained;
      while (::read(event_.get(), &drained, sizeof drained) > 0) {
      }
    }
  }
  return n;
}

void Poller::wake() {
  std::uint64_t one = 1;
  ssize_t ignored = ::write(event_.get(), &one, sizeof one);
  (void)ignored;
}

}  // namespace braid
