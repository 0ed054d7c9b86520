// TraceFile: the process's BRAID_TRACE timeline, in the Chrome trace-event
// JSON format (Perfetto and chrome://tracing open it). One file per process,
// opened by its first communicator with BRAID_TRACE set (%r: that
// communicator's rank, which names the process in the trace); every
// communicator of the process is a track of its own, and TraceSpan a track
// per application thread.
//
// An operation is recorded as numbers when it finishes (its plan, the times
// it was queued, started and ended, and each step's start and end), and
// turned into JSON only when the records fill up or a communicator is
// finalized, so formatting never runs inside a timed collective. After each
// flush the file is complete JSON (the closing part is written again after
// the new events), so a process that dies leaves a readable trace of what
// it flushed.
//
// Clocks: timestamps are CLOCK_MONOTONIC in microseconds. At start-up each
// rank measures its offset to rank 0's clock through the store
// (CommImpl::measure_clock_offset), and writes it into the file's otherData;
// braid-trace merge applies it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <atomic>
#include <mutex>
#include <thread>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/executor.hpp"

namespace braid {

struct OpPlan;

class TraceFile {
 public:
  /// The process's trace file, opened (truncated) from `pattern` by the first
  /// call; later calls return the same one. Throws Error naming the path
  /// when it cannot be written.
  static std::shared_ptr<TraceFile> open(const std::string& pattern, int rank, int size);
  /// The open file, or null: for TraceSpan.
  static TraceFile* current();
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  /// A track for a communicator ("comm 0: 4 ranks"): its number.
  int add_communicator(std::string name);
  /// The offset to add to this process's timestamps to get rank 0's clock;
  /// the one the exchange through the store measured and its round trip
  /// (the bound on its error). The first call wins.
  void set_clock(double offset_us, double measured_offset_us, double round_trip_us);

  /// One finished operation of communicator `track`. `args` is the
  /// operation's JSON arguments (formatted once per plan); steps[i] is step
  /// i's time (zero: the step did not run). Times are ticks (core/ticks.hpp).
  void record_op(int track, const std::shared_ptr<OpPlan>& plan, const std::string& args,
                 std::uint32_t sequence, std::int64_t queued, std::int64_t begin, std::int64_t end,
                 const std::vector<StepTime>& steps);
  /// A TraceSpan of the calling thread.
  void record_span(const char* name, std::int64_t begin, std::int64_t end);
  /// Writes what is recorded; the file is complete JSON afterwards.
  void flush();

  const std::string& path() const { return path_; }

 private:
  TraceFile(std::string path, std::FILE* file, int rank, int size);
  struct OpRecord {
    int track;
    std::uint32_t sequence;
    std::int64_t queued, begin, end;  // ticks
    const OpPlan* plan;       // kept alive by plans_
    const std::string* args;  // the plan's
    std::size_t first_step, steps;  // in steps_
  };
  struct SpanRecord {
    const char* name;
    int thread;
    std::int64_t begin, end;  // ticks
  };
  static constexpr std::size_t kFlushSteps = 1 << 18;
  static constexpr std::size_t kFlushOps = 1 << 16;
  static constexpr std::size_t kWriteChunk = 1 << 20;
  void flush_locked();
  void write_op(std::string& out, const OpRecord& op, const TickScale& scale);
  void event(std::string& out, const std::string& body);
  void separate(std::string& out);  // the comma before every event but the first
  /// The start of a complete ("X") event of category `cat` (and `name`, when
  /// not empty) on thread `tid`, up to its duration; the caller adds the rest.
  void complete_event(std::string& out, std::string_view cat, std::string_view name, int tid, std::int64_t ts_ns,
                      std::int64_t dur_ns);

  std::string path_;
  std::FILE* file_;
  int rank_, size_;
  // The records' lock. Recording holds it for a copy, while a flush holds it
  // for milliseconds: a spin lock whose waiters yield, as its release is a
  // plain store (a mutex's unlock is another atomic operation, about 10 ns
  // of an 8-byte all-reduce's 140).
  class Lock {
   public:
    void lock() {
      while (held_.exchange(true, std::memory_order_acquire))
        while (held_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
    void unlock() { held_.store(false, std::memory_order_release); }

   private:
    std::atomic<bool> held_{false};
  };
  Lock mutex_;
  std::vector<OpRecord> ops_;     // kFlushOps of them, the first op_count_ in use
  std::size_t op_count_ = 0;
  // The plans of the operations recorded since the last flush, once each
  // (OpPlan::traced says which), so a record holds no reference of its own.
  std::vector<std::shared_ptr<OpPlan>> plans_;
  std::vector<StepTime> steps_;   // kFlushSteps of them, the first step_count_ in use
  std::size_t step_count_ = 0;
  std::string text_;              // flush_locked's JSON, kept for its capacity
  std::vector<SpanRecord> spans_;
  std::vector<std::string> track_names_;
  std::vector<int> lanes_named_;  // per track: step lanes named so far
  std::vector<std::int64_t> lane_end_;  // write_op's: when each lane's last step ends
  std::vector<std::string> thread_names_;
  bool named_threads_ = false;
  double offset_us_ = 0, measured_offset_us_ = 0, round_trip_us_ = -1;
  long footer_at_ = -1;  // where the closing part starts
  TickAnchor anchor_;    // at the last flush: records since are turned into nanoseconds from it
  bool any_event_ = false;
  std::uint64_t ops_written_ = 0;  // an operation's "id": its steps' "op"
};

}  // namespace braid
