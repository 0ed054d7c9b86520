#include "transport/shm/doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>

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

void Doorbell::ring() {
  // Pairs with the read-modify-write in arm() (doorbell.hpp): the work was
  // published with a seq_cst store, and the owner looks for it with seq_cst
  // loads after its increment, so either it sees the work or we see it armed.
  if (sleepers_of(word_).load(std::memory_order_seq_cst) == 0) return;
  seq_of(word_).fetch_add(1, std::memory_order_release);
  if (wake_fd_ >= 0) {
    // A full pipe is readable already: nothing is lost when this fails.
    const char byte = 1;
    ssize_t ignored = ::write(wake_fd_, &byte, 1);
    (void)ignored;
  } else {
    futex(&word_->seq, FUTEX_WAKE, INT_MAX, nullptr);
  }
  ++wake_calls_;
}

}  // namespace braid
