// FlightRecorder: the last operations of one communicator and what each is
// doing (queued, running and waiting on whom, done, failed). It is printed on
// a timeout, on demand (Comm::dump_state, braid_comm_dump_state) and when the
// process receives the signal named by BRAID_DUMP_ON_SIGNAL, so a stuck job
// says who waits on whom. Thread-safe; the driving thread updates it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/deadline.hpp"

namespace braid {

class FlightRecorder {
 public:
  static constexpr std::size_t kKept = 32;

  /// `owner` names the communicator in dumps ("rank 2 of 4").
  explicit FlightRecorder(std::string owner);
  /// Renames whose recorder this is (a split child learns its rank late).
  void set_owner(std::string owner);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  /// `sequence` is the operation's tag sequence (the top bit marks
  /// point-to-point); `what` is shared with the operation's plan, so a
  /// queued operation formats no text.
  void queued(std::uint64_t id, std::uint32_t sequence, std::shared_ptr<const std::string> what);
  void started(std::uint64_t id);
  /// queued() and started() at once, for an operation that waited for nothing.
  void started_now(std::uint64_t id, std::uint32_t sequence, std::shared_ptr<const std::string> what);
  void waiting(std::uint64_t id, std::string on_whom);
  void finished(std::uint64_t id);
  /// An operation that finished at once, never queued (the communicator's
  /// short path), called by the driving thread: kept apart in a small ring
  /// of the last kQuickKept, without a lock while the shape repeats (the
  /// lock is taken only to change an entry's `what`). Dumps list them after
  /// the others.
  void finished_quickly(std::uint32_t sequence, const std::shared_ptr<const std::string>& what) {
    const std::uint64_t n = quick_count_.load(std::memory_order_relaxed);
    Quick& q = quick_[n % kQuickKept];
    if (q.what != what) {  // only this thread writes `what`: reading it here needs no lock
      std::lock_guard lock(mutex_);
      q.what = what;
    }
    q.sequence.store(sequence, std::memory_order_relaxed);
    quick_count_.store(n + 1, std::memory_order_release);
  }
  void failed(std::uint64_t id, std::string why);

  /// One line per kept operation, oldest first, after a header line.
  std::string dump() const;

  /// Installs, once per process, a handler for `signal_number` that prints
  /// every live recorder to stderr (from a helper thread, not the handler).
  static void dump_on_signal(int signal_number);

 private:
  enum class State { queued, running, done, failed };
  struct Entry {
    std::uint64_t id = 0;
    std::uint32_t sequence = 0;  // printed "op #17", or "p2p #3" with the top bit set
    std::shared_ptr<const std::string> what;
    State state = State::queued;
    Clock::time_point queued_at, started_at, ended_at;
    std::string detail;  // whom it waits on, or why it failed
  };
  Entry* find(std::uint64_t id);
  /// A slot for a new entry: the oldest done one once kKept are kept, so
  /// entries (and their strings) are reused and recording allocates
  /// nothing; the ring grows while all it holds are queued or running.
  Entry& push();
  void add(std::uint64_t id, std::uint32_t sequence, std::shared_ptr<const std::string> what, State state);
  Entry& at(std::size_t i) { return ring_[(first_ + i) % ring_.size()]; }  // i-th oldest
  const Entry& at(std::size_t i) const { return ring_[(first_ + i) % ring_.size()]; }

  std::string owner_;
  mutable std::mutex mutex_;
  std::vector<Entry> ring_;
  std::size_t first_ = 0;  // the oldest entry's slot
  std::size_t count_ = 0;
  static constexpr std::size_t kQuickKept = 8;
  struct Quick {
    std::atomic<std::uint32_t> sequence{0};
    std::shared_ptr<const std::string> what;  // written under mutex_ (by the driving thread only)
  };
  Quick quick_[kQuickKept];
  std::atomic<std::uint64_t> quick_count_{0};
};

/// Parses BRAID_DUMP_ON_SIGNAL's value ("USR1", "SIGUSR2", "10"); throws
/// InvalidArgument naming the text.
int parse_signal(std::string_view text);

}  // namespace braid
