// Executor: runs one rank's Schedule over Links. advance() posts every step
// whose dependencies are done (transfers to a peer strictly in schedule
// order), lets the links move bytes, collects completions and runs local
// steps. It never blocks: the caller decides whether to spin or sleep between
// calls and enforces the deadline, which keeps the executor usable from the
// communicator's progress loop and from single-threaded simulations alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/schedule.hpp"
#include "core/ticks.hpp"
#include "transport/transport.hpp"

namespace braid {

/// Throws the ProtocolMismatch of a peer that runs another collective:
/// "<peer> called <theirs> as op #<their_op> while this rank called <mine>
/// as op #<my_op>: every rank must call ...". For the executor (a message
/// that does not match its step) and the comm layer (one already waiting
/// while a link is being made).
[[noreturn]] void throw_other_collective(std::string_view peer, const OpDescriptor& theirs, std::uint32_t their_op,
                                         const OpDescriptor& mine, std::uint32_t my_op);

struct Buffers {
  const std::byte* input = nullptr;
  std::byte* output = nullptr;
  std::size_t input_bytes = 0;
  std::size_t output_bytes = 0;
  MemKind kind = MemKind::host;  // where input and output live; local steps dispatch on it
  int device = -1;               // their CUDA device, when kind is cuda
};

/// Scratch memory for a communicator's operations: one block, grown to the
/// largest need and reused, never zero-filled (an operation writes scratch
/// before it reads it). Operations of a communicator run one at a time, so one
/// block serves them all; take() invalidates what an earlier take() returned.
class ScratchPool {
 public:
  /// Host scratch, or device scratch on CUDA device `device_id`.
  std::span<std::byte> take(std::size_t bytes, MemKind kind = MemKind::host, int device_id = -1);
  std::size_t capacity() const { return size_; }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t size_ = 0;
  device::Memory device_;
};

/// When a step ran, in ticks (core/ticks.hpp), for the trace: zero while it has not.
struct StepTime {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

/// The tag of one step of a fused group of sends and receives (a
/// braid_group_start/end block): each step matches the peer's own call, grouped
/// or not, so it carries that call's sequence and descriptor instead of the
/// operation's.
struct StepTag {
  std::uint32_t sequence = 0;
  OpDescriptor descriptor;
};

class Executor {
 public:
  /// links[p] is the link to rank p (null for self and unused peers). Scratch
  /// comes from `pool` (the communicator's), or is owned here when null.
  Executor(const Schedule& schedule, Buffers buffers, std::span<Link* const> links, std::uint32_t sequence,
           int self_rank = -1, ScratchPool* pool = nullptr);

  /// Makes this executor run its schedule again, from the first step, on
  /// `buffers` with `sequence`: what the constructor derived from the
  /// schedule (dependents, per-peer queues, staging) is kept, so an operation
  /// of a shape already seen starts without allocating. The previous run
  /// must be over (finished, or failed and abandoned with its links).
  void restart(Buffers buffers, std::uint32_t sequence);
  /// Per-step tags (one per step) in place of the operation's sequence and
  /// descriptor; empty: every step uses the operation's.
  void set_step_tags(std::vector<StepTag> tags);

  /// On: every run from the next restart() records when each of its steps
  /// starts (posted, or run locally) and ends, in step_times(). Off, the
  /// cost is one predictable branch per step.
  void time_steps(bool on);
  const std::vector<StepTime>& step_times() const { return step_times_; }

  /// One pass of posting, progress and completion. Returns true once every
  /// step is done; throws the first error of any step.
  bool advance();
  /// Before the caller sleeps: receives polled on a link's short path
  /// (Link::recv_now) are posted as requests, so the link is busy and its
  /// news wakes the sleeper. Runs no step.
  void park();
  /// True if the last advance() moved any bytes or finished any step.
  bool moved() const { return moved_; }
  bool finished() const { return done_count_ == schedule_.steps.size(); }
  /// Who this rank is waiting for: "recv from rank 2 (host, addr) step 5".
  std::string describe_pending() const;

 private:
  enum class State : std::uint8_t { waiting, posted, polling, done };
  static constexpr std::uint32_t kNone = ~std::uint32_t{0};
  struct PeerQueue {
    int peer;
    std::vector<std::uint32_t> sends;  // step indices in schedule order
    std::vector<std::uint32_t> recvs;
    std::size_t next_send = 0;
    std::size_t next_recv = 0;
    // A receive polled on the link's short path (recv_now) instead of
    // posted; the receives after it wait for it (the link matches in order).
    std::uint32_t polling = kNone;
  };

  void post_ready();
  /// advance() for a chain (chain_): the steps one after another, each on
  /// the link's short path, without the dependency bookkeeping.
  bool advance_chain();
  /// Hands a chain run over to the general loop: the steps before cursor_
  /// done, a receive at cursor_ polled (as post() leaves one).
  void leave_chain();
  /// The state of a run at its first step (restart, and leave_chain).
  void reset_steps();
  /// A local step's work, without finish().
  void do_local(std::uint32_t index);
  /// Link::recv_now for receive step `index`, without finish().
  bool try_receive(std::uint32_t index);
  // Rethrows a failed request's error; a TagMismatch is explained with both
  // sides' operation descriptors.
  [[noreturn]] void explain_failure(std::uint32_t index) const;
  [[noreturn]] void explain(std::uint32_t index, std::exception_ptr error) const;
  void post(std::uint32_t index);
  Tag tag_of(std::uint32_t index) const;
  /// Link::recv_now for receive step `index`: true when it is done.
  bool receive_now(std::uint32_t index);
  /// Posts step `index` to its link as a request.
  void post_request(std::uint32_t index, const Tag& tag);
  void finish(std::uint32_t index);
  // Step times cost a clock read per pass, not per step: steps that begin
  // or end in one pass share a reading (stamp_), taken afresh after
  // whatever can take long (the links' progress, a step of kLongStep bytes
  // or more, local or not, a new advance()).
  static constexpr std::size_t kLongStep = 4096;
  std::int64_t stamp() {
    if (stamp_ == 0) stamp_ = ticks();
    return stamp_;
  }
  void step_begins(std::uint32_t index) {
    if (timed_) [[unlikely]]
      if (step_times_[index].begin == 0) step_times_[index].begin = stamp();
  }
  void step_ends(std::uint32_t index) {
    if (timed_) [[unlikely]] {
      const Step& s = schedule_.steps[index];
      if (std::max(s.src.bytes, s.dst.bytes) >= kLongStep) stamp_ = 0;
      step_times_[index].end = stamp();
    }
  }
  void run_local(std::uint32_t index);
  /// dst = a (op) b over bytes, on the host or the device as buffers_ are.
  void combine(std::byte* dst, const std::byte* a, const std::byte* b, std::size_t bytes);
  /// Throws unless this braid and every link of the schedule handle `kind`.
  void check_kind(MemKind kind) const;
  const std::byte* read_ptr(const Region& r) const;
  std::byte* write_ptr(const Region& r);

  const Schedule& schedule_;
  Buffers buffers_;
  ScratchPool own_pool_;             // when the caller gave none
  ScratchPool* pool_;                // own_pool_ or the caller's
  std::size_t scratch_bytes_ = 0;    // the schedule's scratch and the staging
  std::span<std::byte> scratch_;     // the schedule's scratch, then staging for receives reduced here
  std::vector<std::size_t> staging_;  // per step: offset of its staging in scratch_ (recv_reduce over a link that cannot)
  std::span<Link* const> links_;
  std::uint32_t sequence_;
  std::array<std::byte, 16> context_;
  std::vector<StepTag> step_tags_;                 // by step, or empty
  std::vector<std::array<std::byte, 16>> step_contexts_;  // their descriptors, encoded
  int self_rank_;
  std::vector<State> state_;
  std::vector<std::uint8_t> short_;  // per step: small enough for its link's short path (send_now, recv_now)
  std::vector<std::uint32_t> deps_left_;
  std::vector<std::uint32_t> first_deps_;  // deps_left_ at the start
  std::vector<std::uint32_t> dependents_begin_;  // CSR adjacency of dependents
  std::vector<std::uint32_t> dependents_;
  std::vector<Request> requests_;
  std::vector<PeerQueue> peers_;
  std::vector<std::uint32_t> local_ready_;
  std::vector<std::uint32_t> first_ready_;  // local steps without dependencies: local_ready_ at the start
  std::vector<std::uint32_t> in_flight_;
  std::size_t done_count_ = 0;
  bool moved_ = false;
  bool posted_done_ = false;  // a step finished when it was posted (short path)
  // Every step depends on the one before it alone, and every transfer fits
  // its link's short path (an 8-byte all-reduce on 2 ranks: send, then
  // receive-and-reduce): run in order, as long as the short path takes each
  // step, by advance_chain.
  bool chain_ = false;
  bool in_chain_ = false;        // this run is in advance_chain's hands
  std::uint32_t cursor_ = 0;     // advance_chain: the next step
  bool timed_ = false;              // time_steps(true)
  std::vector<StepTime> step_times_;  // by step, while timed_
  std::int64_t stamp_ = 0;            // this pass's tick, 0: none yet
};

}  // namespace braid
