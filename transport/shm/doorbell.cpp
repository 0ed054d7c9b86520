#include "transport/shm/doorbell.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// Shared (not FUTEX_PRIVATE_FLAG) futexes: the word is in memory mapped by
// several processes, and the kernel keys it by the backing page.
long futex(std::uint32_t* word, int op, std::uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

std::atomic_ref<std::uint32_t> seq_of(DoorbellWord* w) { return std::atomic_ref<std::uint32_t>(w->seq); }
std::atomic_ref<std::uint32_t> sleepers_of(DoorbellWord* w) { return std::atomic_ref<std::uint32_t>(w->sleepers); }

}  // namespace

std::uint32_t Doorbell::arm() {
  std::uint32_t ticket = seq_of(word_).load(std::memory_order_acquire);
  // A read-modify-write, not a store: ring() also does one on this word, so
  // the two are ordered and whichever comes second sees the other side's
  // earlier writes (the argument in doorbell.hpp). Unlike a fence, this is
  // what ThreadSanitizer understands.
  sleepers_of(word_).fetch_add(1, std::memory_order_seq_cst);
  return ticket;
}

bool Doorbell::rung_since(std::uint32_t ticket) const {
  return seq_of(word_).load(std::memory_order_acquire) != ticket;
}

void Doorbell::disarm() { sleepers_of(word_).fetch_sub(1, std::memory_order_release); }

bool Doorbell::wait(std::uint32_t ticket, std::chrono::microseconds timeout) {
  bool woken = true;
  if (timeout.count() > 0) {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
    ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
    long rc = futex(&word_->seq, FUTEX_WAIT, ticket, &ts);
    if (rc != 0) {
      int err = errno;
      if (err == ETIMEDOUT) {
        woken = seq_of(word_).load(std::memory_order_acquire) != ticket;
      } else if (err != EAGAIN && err != EINTR) {
        disarm();
        throw SystemError(cat("shared memory doorbell: FUTEX_WAIT failed: ", errno_text(err)));
      }
    }
  } else {
    woken = seq_of(word_).load(std::memory_order_acquire) != ticket;
  }
  disarm();
  return woken;
}

namespace {

// Writes one byte into a peer's doorbell pipe. A peer whose process died
// leaves the pipe without a reader: the write fails with EPIPE, and the
// kernel's SIGPIPE would kill this process, which goes on without that peer
// in an elastic job (Comm::shrink_lost). The signal is blocked around the
// write and, when the write raised it, taken back.
void write_without_sigpipe(int fd) {
  sigset_t pipe_signal, old;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
  sigset_t pending;
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  const char byte = 1;
  if (::write(fd, &byte, 1) < 0 && errno == EPIPE && !was_pending) {
    const timespec now{};
    while (sigtimedwait(&pipe_signal, nullptr, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

void Doorbell::ring() {
  // Pairs with the read-modify-write in arm() (doorbell.hpp): the work was
  // published with a seq_cst store, and the owner looks for it with seq_cst
  // loads after its increment, so either it sees the work or we see it armed.
  if (sleepers_of(word_).load(std::memory_order_seq_cst) == 0) return;
  seq_of(word_).fetch_add(1, std::memory_order_release);
  if (wake_fd_ >= 0) {
    // A full pipe is readable already: nothing is lost when this fails.
    write_without_sigpipe(wake_fd_);
  } else {
    futex(&word_->seq, FUTEX_WAKE, INT_MAX, nullptr);
  }
  ++wake_calls_;
}

}  // namespace braid
