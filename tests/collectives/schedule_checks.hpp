// What the schedule tests (test_schedules.cpp, test_trees.cpp,
// test_recursive.cpp, test_exchange.cpp) share: the matrix they sweep, failure
// collection for large matrices, ring orders, one rank's memory laid out with
// guard bytes and checked byte for byte after a run, and the static checks of
// a set of schedules (tags, matching sends and receives, message depth) that
// need no run at all.
//
// A message step is any step with a peer: the executor queues every such step
// that is not a send as a receive from that peer, so the static checks below
// count receives the same way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives/executor.hpp"
#include "collectives/schedule.hpp"
#include "core/check.hpp"
#include "core/text.hpp"
#include "memory_link.hpp"
#include "reduction_reference.hpp"
#include "schedule_runner.hpp"

namespace braid::test {

inline constexpr int kMaxRanks = 17;        // every test runs 1 (or 2) to this many ranks
inline constexpr int kFullMatrixRanks = 4;  // the large matrices run in full up to here and are sampled above
inline constexpr int kAllRootsRanks = 5;    // every root up to here; above, the roots are 0, n/2 and n-1
inline constexpr DataType kTypes[] = {DataType::f16, DataType::bf16, DataType::f32, DataType::f64, DataType::i8,
                                      DataType::u8,  DataType::i32,  DataType::u32, DataType::i64, DataType::u64};
inline constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
static_assert(std::size(kTypes) == kDataTypeCount && std::size(kOps) == kReduceOpCount);
inline constexpr SendCompletion kSendModes[] = {SendCompletion::eager, SendCompletion::lazy,
                                                SendCompletion::rendezvous};
inline constexpr std::size_t kDefaultSlice = CollectiveShape{}.slice_bytes;
inline constexpr std::size_t kGuardBytes = 16;
inline constexpr std::byte kGuard{0x5a};      // around every buffer; must survive
inline constexpr std::byte kUnwritten{0xa5};  // output bytes before the collective

/// Collects the failures of a large matrix; report() lists the first 8, so a
/// broken case prints a handful of lines rather than thousands.
class Failures {
 public:
  void add(std::string what) {
    if (shown_.size() < 8) shown_.push_back(std::move(what));
    ++count_;
  }
  /// "" when nothing failed, so `CHECK(failures.report() == "")` prints them.
  std::string report() const {
    if (count_ == 0) return "";
    std::string out = cat(count_, " failure(s)");
    for (const auto& s : shown_) out += "\n  " + s;
    return out;
  }

 private:
  std::vector<std::string> shown_;
  std::size_t count_ = 0;
};

/// The ring in rank order.
inline std::vector<int> identity_ring(int n) {
  std::vector<int> ring(static_cast<std::size_t>(n));
  std::iota(ring.begin(), ring.end(), 0);
  return ring;
}

/// A ring order other than rank order: k -> (k * m + 3) mod n, m the
/// smallest multiplier above 1 coprime to n (the reversed ring for n <= 3).
inline std::vector<int> scrambled_ring(int n) {
  std::vector<int> ring(static_cast<std::size_t>(n));
  int m = n <= 3 ? n - 1 : 2;
  while (n > 3 && std::gcd(m, n) != 1) ++m;
  for (int k = 0; k < n; ++k) ring[k] = (k * std::max(m, 1) + 3) % n;
  return ring;
}

/// A ring order for failure messages: "3 0 2 1".
inline std::string ring_text(const std::vector<int>& ring) {
  std::string out;
  for (int r : ring) out += cat(out.empty() ? "" : " ", r);
  return out;
}

/// The roots a rooted collective is tried from: all of them up to
/// kAllRootsRanks, else the first, the middle and the last.
inline std::vector<int> roots_for(int n) {
  if (n <= kAllRootsRanks) return identity_ring(n);
  return {0, n / 2, n - 1};
}

/// A count of elements and the slice size a case runs it with.
struct CountCase {
  std::size_t count;
  std::size_t slice_bytes;
};

/// One run of a schedule test: the algorithm (an enum of the test file's) and
/// everything a run varies. A field the algorithm has no use for (an
/// all-reduce's root, a broadcast's operator) is ignored.
template <typename Algorithm>
struct ScheduleCase {
  Algorithm algorithm{};
  int ranks = 1;
  int root = 0;
  DataType type = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  std::size_t count = 0;
  std::size_t slice_bytes = kDefaultSlice;
  bool in_place = false;
  SendCompletion sends = SendCompletion::eager;
  std::vector<int> ring;  // empty: rank order
};

/// Bytes that differ by rank and position, for collectives that move bytes
/// without looking at them.
inline std::vector<std::byte> broadcast_input(int rank, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    out[i] = static_cast<std::byte>(mix(i * 131 + static_cast<std::size_t>(rank)) >> 56);
  return out;
}

/// How a rank's input and output share memory: apart; the input inside the
/// output (in place: all-reduce and broadcast at offset 0 with equal sizes,
/// all_to_all at 0, all_gather and gather's root at their block); or the
/// output inside the input (reduce_scatter, scatter's root).
enum class Alias : std::uint8_t { none, input_in_output, output_in_input };

/// One rank's memory, laid out as the communicator passes it. `outer` holds
/// the output (or, output_in_input, the input that contains it) between
/// guards; `apart` the input between guards when it is not inside `outer`. A
/// buffer of 0 bytes is absent: null with size 0, as a broadcast's non-roots
/// pass their input and a reduce's non-roots their output.
struct RankMemory {
  std::vector<std::byte> outer, apart;
  std::vector<std::byte> outer_before, apart_before;
  std::size_t output_at = 0;  // in outer
  std::size_t output_bytes = 0;
  Buffers view;

  std::span<const std::byte> output() const {
    if (outer.empty()) return {};
    return {outer.data() + output_at, output_bytes};
  }
};

/// `bytes` between guard bytes.
inline std::vector<std::byte> guarded(std::span<const std::byte> bytes) {
  std::vector<std::byte> out(bytes.size() + 2 * kGuardBytes, kGuard);
  std::copy(bytes.begin(), bytes.end(), out.begin() + static_cast<std::ptrdiff_t>(kGuardBytes));
  return out;
}

/// One rank's memory holding `input`, with an unwritten output of
/// `output_bytes`; `offset` places the smaller buffer inside the larger.
inline RankMemory make_memory(std::span<const std::byte> input, std::size_t output_bytes, Alias alias,
                              std::size_t offset = 0) {
  RankMemory m;
  m.output_bytes = output_bytes;
  m.output_at = kGuardBytes;
  const std::vector<std::byte> unwritten(output_bytes, kUnwritten);
  switch (alias) {
    case Alias::none:
      if (output_bytes > 0) {
        m.outer = guarded(unwritten);
        m.view.output = m.outer.data() + kGuardBytes;
        m.view.output_bytes = output_bytes;
      }
      if (!input.empty()) {
        m.apart = guarded(input);
        m.view.input = m.apart.data() + kGuardBytes;
        m.view.input_bytes = input.size();
      }
      break;
    case Alias::input_in_output:
      BRAID_CHECK(offset + input.size() <= output_bytes, "the input must lie inside the output");
      m.outer = guarded(unwritten);
      std::copy(input.begin(), input.end(), m.outer.begin() + static_cast<std::ptrdiff_t>(kGuardBytes + offset));
      m.view = Buffers{m.outer.data() + kGuardBytes + offset, m.outer.data() + kGuardBytes, input.size(), output_bytes};
      break;
    case Alias::output_in_input:
      BRAID_CHECK(offset + output_bytes <= input.size(), "the output must lie inside the input");
      m.outer = guarded(input);
      m.output_at = kGuardBytes + offset;
      m.view = Buffers{m.outer.data() + kGuardBytes, m.outer.data() + m.output_at, input.size(), output_bytes};
      break;
  }
  m.outer_before = m.outer;
  m.apart_before = m.apart;
  return m;
}

/// The in-place layout of an all-reduce or broadcast (the input is the
/// output) or two buffers apart.
inline Alias placement(bool in_place) { return in_place ? Alias::input_in_output : Alias::none; }

/// The buffers every rank passes to its executor.
inline std::vector<Buffers> views_of(const std::vector<RankMemory>& memories) {
  std::vector<Buffers> out;
  for (const auto& m : memories) out.push_back(m.view);
  return out;
}

/// Checks all of a rank's memory against what it should hold: the output
/// region equal to `expected`, every other byte (guards, and the input outside
/// the output) as before. `block`, if the output is made of blocks, names the
/// block of a wrong byte.
inline void check_memory(const std::string& what, int rank, DataType type, const RankMemory& m,
                         std::span<const std::byte> expected, Failures& failures, std::size_t block = 0) {
  BRAID_CHECK(expected.size() == m.output_bytes, "expected ", expected.size(), " output bytes, not ", m.output_bytes);
  std::vector<std::byte> want = m.outer_before;
  if (!want.empty()) std::copy(expected.begin(), expected.end(), want.begin() + static_cast<std::ptrdiff_t>(m.output_at));
  if (m.outer != want) {
    const auto at =
        static_cast<std::size_t>(std::mismatch(m.outer.begin(), m.outer.end(), want.begin()).first - m.outer.begin());
    const std::size_t element = size_of(type);
    if (at >= m.output_at && at < m.output_at + m.output_bytes) {
      const std::size_t byte = at - m.output_at;
      const std::size_t first = byte - byte % element;
      const std::string where = block ? cat("output byte ", byte, " (block ", byte / block, ", element ",
                                            byte % block / element, ")")
                                      : cat("element ", byte / element);
      failures.add(cat(what, ": rank ", rank, " ", where, " is ", element_text(type, m.outer.data() + m.output_at + first),
                       ", expected ", element_text(type, want.data() + m.output_at + first)));
    } else if (at < kGuardBytes || at >= m.outer.size() - kGuardBytes) {
      failures.add(cat(what, ": rank ", rank, " wrote into the guard bytes ", at < kGuardBytes ? "before" : "after",
                       " its buffer"));
    } else {
      failures.add(cat(what, ": rank ", rank, " changed byte ", at - kGuardBytes, " of its input outside the output"));
    }
  }
  if (m.apart != m.apart_before) failures.add(cat(what, ": rank ", rank, " changed its input (or the guards around it)"));
}

/// Checks every byte of a rank's memory but its output, for runs whose output
/// has no exact expectation.
inline void check_outside_output(const std::string& what, int rank, const RankMemory& m, Failures& failures) {
  const std::vector<std::byte> output(m.output().begin(), m.output().end());
  check_memory(what, rank, DataType::u8, m, output, failures);
}

/// BRAID_SCHEDULE_SAMPLE=N runs about one run in N (a fixed pseudo-random
/// choice, so no loop's period lines up with it and every type, operator and
/// kind of send keeps being run). The sanitizer runs (scripts/sanitize.sh) use
/// it: they look for memory errors, which a sample of the matrix finds, while
/// the plain build runs it whole. Unset or 1: every run.
inline bool in_sample() {
  static const unsigned every = [] {
    const char* text = std::getenv("BRAID_SCHEDULE_SAMPLE");
    const long n = text == nullptr ? 1 : std::strtol(text, nullptr, 10);
    return n > 1 ? static_cast<unsigned>(n) : 1u;
  }();
  static std::uint32_t calls = 0;
  if (every == 1) return true;
  const std::uint32_t mixed = (calls++ * 2654435761u) >> 7;
  return mixed % every == 0;
}

/// Runs the schedules of all ranks against each other (lazy sends advance the
/// ranks from the last); records a run that fails, does not finish or leaves
/// messages undelivered. False if it did not finish, or if the run is outside
/// the sample (in_sample): the caller then checks nothing. Lazy fabrics also do not
/// reduce as they receive, so every algorithm runs through the executor's own
/// receive-to-scratch-and-reduce path too (a transport that only moves bytes).
inline bool run_to_completion(const std::string& what, SendCompletion sends, std::span<const Schedule> schedules,
                              const std::vector<RankMemory>& memories, Failures& failures) {
  if (!in_sample()) return false;
  // Eager fabrics also take small messages on the short path (polled receives).
  MemoryFabric fabric(static_cast<int>(schedules.size()),
                      {.sends = sends, .reduces = sends != SendCompletion::lazy,
                       .short_bytes = sends == SendCompletion::eager ? std::size_t{64} : 0});
  const RunOutcome run =
      run_schedules(fabric, schedules, views_of(memories), {.reverse = sends == SendCompletion::lazy});
  if (run.error || !run.all_finished()) {
    failures.add(cat(what, ": ", run.describe()));
    return false;
  }
  if (fabric.undelivered() != 0) failures.add(cat(what, ": messages left over: ", fabric.describe_undelivered()));
  return true;
}

/// Random non-integer inputs in [-1, 1) for every rank, and the exact sum of
/// each element; seeded from the rank count, the type and `salt`.
struct RandomInputs {
  std::vector<std::vector<std::byte>> inputs;
  std::vector<double> exact;
};

inline RandomInputs random_inputs(DataType type, int n, std::size_t count, int salt) {
  const std::size_t element = size_of(type);
  std::mt19937 rng(static_cast<unsigned>(n * 1000 + static_cast<int>(type) * 10 + salt));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  RandomInputs out{.inputs = std::vector<std::vector<std::byte>>(static_cast<std::size_t>(n),
                                                                 std::vector<std::byte>(count * element)),
                   .exact = std::vector<double>(count, 0.0)};
  for (auto& input : out.inputs)
    for (std::size_t i = 0; i < count; ++i) {
      encode_float(type, uniform(rng), input.data() + i * element);
      out.exact[i] += decode(type, input.data() + i * element);
    }
  return out;
}

/// Checks the result of a floating-point sum (or average) of random inputs:
/// every rank's memory outside its output as before, every rank's output with
/// rank 0's bits, and rank 0's within ranks^2 epsilons of the exact result
/// (the first element that is not is reported).
inline void check_float_sum(const std::string& what, DataType type, ReduceOp op,
                            const std::vector<RankMemory>& memories, const std::vector<double>& exact,
                            Failures& failures) {
  const int ranks = static_cast<int>(memories.size());
  for (int r = 0; r < ranks; ++r) check_outside_output(what, r, memories[r], failures);
  for (int r = 1; r < ranks; ++r)
    if (!std::ranges::equal(memories[r].output(), memories[0].output()))
      failures.add(cat(what, ": rank ", r, " differs from rank 0"));
  const std::size_t element = size_of(type);
  const double eps = type == DataType::f16 ? 0x1p-10 : type == DataType::bf16 ? 0x1p-7 : 0x1p-23;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double want = op == ReduceOp::avg ? exact[i] / ranks : exact[i];
    const double got = decode(type, memories[0].output().data() + i * element);
    if (!(std::abs(got - want) <= ranks * ranks * eps)) {
      failures.add(cat(what, ": element ", i, " is ", got, ", expected about ", want));
      return;
    }
  }
}

/// Whether a step is a message from its peer (see the top of this file).
inline bool receives(const Step& s) { return s.peer >= 0 && s.kind != StepKind::send; }

/// Checks that a schedule uses each tag once per peer and direction: what is
/// wrong, or "".
inline std::string repeated_tags(const Schedule& s) {
  std::set<std::tuple<int, bool, std::uint32_t>> seen;
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    if (step.peer < 0) continue;
    const bool sends = step.kind == StepKind::send;
    if (!seen.emplace(step.peer, sends, step.tag_index).second)
      return cat(s.algorithm, " step ", i, " repeats tag ", step.tag_index, sends ? " to" : " from", " rank ", step.peer);
  }
  return "";
}

/// Checks that the k-th send of every rank a to every rank b meets the k-th
/// receive of b from a with the same tag and size: what is wrong, or "".
inline std::string unmatched_messages(const std::vector<Schedule>& schedules) {
  using Message = std::pair<std::uint32_t, std::size_t>;
  const int n = static_cast<int>(schedules.size());
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      std::vector<Message> sent, received;
      for (const Step& s : schedules[a].steps)
        if (s.kind == StepKind::send && s.peer == b) sent.emplace_back(s.tag_index, s.src.bytes);
      for (const Step& s : schedules[b].steps)
        if (receives(s) && s.peer == a) received.emplace_back(s.tag_index, s.dst.bytes);
      if (sent.size() != received.size())
        return cat("rank ", a, " sends ", sent.size(), " messages to rank ", b, ", which receives ", received.size());
      for (std::size_t k = 0; k < sent.size(); ++k)
        if (sent[k] != received[k])
          return cat("message ", k, " from rank ", a, " to rank ", b, ": sent tag ", sent[k].first, " (", sent[k].second,
                     " B), received as tag ", received[k].first, " (", received[k].second, " B)");
    }
  return "";
}

/// Measures the longest chain of messages (hops) through the schedules of all
/// ranks, or -1 if the messages cannot all be delivered: a send or a receive
/// without its match, or a cycle. A step waits for its dependencies, and a
/// receive also for the matching send (the k-th send of a to b meets the k-th
/// receive of b from a), one hop later. For a tree that is its height (twice
/// it for all-reduce); a chain gives n - 1.
inline int message_depth(const std::vector<Schedule>& schedules) {
  const auto n = schedules.size();
  std::vector<std::size_t> first(n + 1, 0);  // node of rank r's step i: first[r] + i
  for (std::size_t r = 0; r < n; ++r) first[r + 1] = first[r] + schedules[r].steps.size();
  std::vector<std::vector<std::pair<std::size_t, int>>> after(first[n]);  // (node, added depth)
  std::vector<int> waits(first[n], 0);
  std::map<std::tuple<std::size_t, std::size_t, std::size_t>, std::size_t> sends;  // (from, to, k) -> node
  std::vector<std::size_t> sent(n * n, 0), received(n * n, 0);  // messages from a to b: [a * n + b]
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < schedules[r].steps.size(); ++i) {
      const Step& s = schedules[r].steps[i];
      for (auto d : s.deps) after[first[r] + d].emplace_back(first[r] + i, 0), ++waits[first[r] + i];
      if (s.kind == StepKind::send) sends[{r, static_cast<std::size_t>(s.peer), sent[r * n + s.peer]++}] = first[r] + i;
    }
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < schedules[r].steps.size(); ++i) {
      const Step& s = schedules[r].steps[i];
      if (!receives(s)) continue;
      auto it = sends.find({static_cast<std::size_t>(s.peer), r, received[s.peer * n + r]++});
      if (it == sends.end()) return -1;
      after[it->second].emplace_back(first[r] + i, 1);
      ++waits[first[r] + i];
    }
  if (received != sent) return -1;  // a send that no receive meets
  std::vector<int> depth(first[n], 0);
  std::vector<std::size_t> ready;
  for (std::size_t v = 0; v < first[n]; ++v)
    if (waits[v] == 0) ready.push_back(v);
  std::size_t settled = 0;
  int deepest = 0;
  while (!ready.empty()) {
    const std::size_t v = ready.back();
    ready.pop_back();
    ++settled;
    deepest = std::max(deepest, depth[v]);
    for (auto [w, hop] : after[v]) {
      depth[w] = std::max(depth[w], depth[v] + hop);
      if (--waits[w] == 0) ready.push_back(w);
    }
  }
  return settled == first[n] ? deepest : -1;
}

}  // namespace braid::test
