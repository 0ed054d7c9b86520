// Recursive doubling and Rabenseifner all-reduce, run for 1 to 17 ranks over
// the in-memory fabric (memory_link.hpp, schedule_runner.hpp) and checked
// against the exact reference (reduction_reference.hpp): every type x
// operator x count around the rank count, in and out of place, with eager,
// lazy and rendezvous sends (the last catches a schedule that overwrites a
// region whose send is still posted). With random non-integer inputs every
// rank must end with the same bits, and those bits must be the ones of the
// reduction order each algorithm documents (a balanced tree over the ranks in
// rank order). Static checks need no run: tags, matching sends and receives,
// and the number of message hops on the critical path, the reason these
// algorithms exist.
//
// The helpers at the top repeat a few of test_schedules.cpp's (one rank's
// memory with guard bytes, failure collection, tag checks); they are small
// and that file keeps them private.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "collectives/algorithms.hpp"
#include "core/reduce.hpp"
#include "memory_link.hpp"
#include "reduction_reference.hpp"
#include "schedule_runner.hpp"

namespace braid::test {
namespace {

constexpr int kMaxRanks = 17;
constexpr DataType kTypes[] = {DataType::f16, DataType::bf16, DataType::f32, DataType::f64, DataType::i8,
                               DataType::u8,  DataType::i32,  DataType::u32, DataType::i64, DataType::u64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
static_assert(std::size(kTypes) == kDataTypeCount && std::size(kOps) == kReduceOpCount);
constexpr SendCompletion kSendModes[] = {SendCompletion::eager, SendCompletion::lazy, SendCompletion::rendezvous};
constexpr std::size_t kGuardBytes = 16;
constexpr std::byte kGuard{0x5a};      // after every output buffer; must survive
constexpr std::byte kUnwritten{0xa5};  // output bytes before the collective

using Builder = Schedule (*)(const CollectiveShape&);
struct Algorithm {
  const char* name;
  Builder build;
};
constexpr Algorithm kRecursiveDoubling{"recursive doubling", recursive_doubling_all_reduce};
constexpr Algorithm kRabenseifner{"rabenseifner", rabenseifner_all_reduce};
constexpr Algorithm kAlgorithms[] = {kRecursiveDoubling, kRabenseifner};

class Failures {
 public:
  void add(std::string what) {
    if (shown_.size() < 8) shown_.push_back(std::move(what));
    ++count_;
  }
  std::size_t count() const { return count_; }
  std::string text() const {
    std::string out = cat(count_, " failure(s)");
    for (const auto& s : shown_) out += "\n  " + s;
    return out;
  }

 private:
  std::vector<std::string> shown_;
  std::size_t count_ = 0;
};

/// One rank's memory: the output is followed by guard bytes; in place, the
/// input is the output (filled with the input first).
struct RankMemory {
  std::vector<std::byte> input;
  std::vector<std::byte> output;
  Buffers view;
};

RankMemory make_memory(std::span<const std::byte> input, bool in_place) {
  const std::size_t bytes = input.size();
  RankMemory m;
  m.output.assign(bytes + kGuardBytes, kUnwritten);
  std::fill(m.output.begin() + static_cast<std::ptrdiff_t>(bytes), m.output.end(), kGuard);
  if (in_place) {
    std::copy(input.begin(), input.end(), m.output.begin());
    m.view = Buffers{m.output.data(), m.output.data(), bytes, bytes};
  } else {
    m.input.assign(input.begin(), input.end());
    m.view = Buffers{m.input.data(), m.output.data(), bytes, bytes};
  }
  return m;
}

std::vector<int> identity_ring(int n) {
  std::vector<int> ring(static_cast<std::size_t>(n));
  std::iota(ring.begin(), ring.end(), 0);
  return ring;
}

std::vector<Schedule> schedules_of(const Algorithm& algo, int n, std::size_t count, DataType type, ReduceOp op) {
  const std::vector<int> ring = identity_ring(n);
  std::vector<Schedule> out;
  for (int r = 0; r < n; ++r)
    out.push_back(
        algo.build(CollectiveShape{.rank = r, .ranks = n, .ring = ring, .count = count, .type = type, .op = op}));
  return out;
}

/// Counts around the rank count and one odd count above 1000.
std::vector<std::size_t> counts_for(int n) {
  const auto un = static_cast<std::size_t>(n);
  return {0, 1, 2, 7, un - 1, un, un + 1, 1001};
}

struct Case {
  int ranks = 1;
  DataType type = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  std::size_t count = 0;
  bool in_place = false;
  SendCompletion sends = SendCompletion::eager;
};

std::string describe(const Algorithm& algo, const Case& c) {
  return cat(algo.name, " all_reduce of ", c.count, " ", name_of(c.type), " (", name_of(c.op), ") over ", c.ranks,
             " ranks, ", c.in_place ? "in place" : "out of place", ", ", name_of(c.sends), " sends");
}

/// Runs one all-reduce; returns every rank's memory (empty if the run failed).
/// Checks that the run finishes, leaves no message behind, leaves the guard
/// bytes and (out of place) the inputs alone.
std::vector<RankMemory> run_all_reduce(const Algorithm& algo, const Case& c,
                                       std::span<const std::vector<std::byte>> inputs, Failures& failures) {
  std::vector<RankMemory> memories;
  for (int r = 0; r < c.ranks; ++r) memories.push_back(make_memory(inputs[r], c.in_place));
  const std::vector<Schedule> schedules = schedules_of(algo, c.ranks, c.count, c.type, c.op);
  std::vector<Buffers> views;
  for (const auto& m : memories) views.push_back(m.view);
  MemoryFabric fabric(c.ranks, {.sends = c.sends});
  const RunOutcome run = run_schedules(fabric, schedules, views, {.reverse = c.sends == SendCompletion::lazy});
  if (run.error || !run.all_finished()) {
    failures.add(cat(describe(algo, c), ": ", run.describe()));
    return {};
  }
  if (fabric.undelivered() != 0)
    failures.add(cat(describe(algo, c), ": messages left over: ", fabric.describe_undelivered()));
  const std::size_t bytes = c.count * size_of(c.type);
  for (int r = 0; r < c.ranks; ++r) {
    if (!c.in_place && memories[r].input != inputs[r])
      failures.add(cat(describe(algo, c), ": rank ", r, " changed its input"));
    if (std::any_of(memories[r].output.begin() + static_cast<std::ptrdiff_t>(bytes), memories[r].output.end(),
                    [](std::byte b) { return b != kGuard; }))
      failures.add(cat(describe(algo, c), ": rank ", r, " wrote past the end of its output"));
  }
  return memories;
}

void check_exact(const Algorithm& algo, const Case& c, Failures& failures) {
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.ranks; ++r) inputs.push_back(make_input(c.type, c.op, r, c.count));
  const auto memories = run_all_reduce(algo, c, inputs, failures);
  if (memories.empty()) return;
  const auto expected = expected_all_reduce(c.type, c.op, c.ranks, c.count);
  const std::size_t element = size_of(c.type);
  for (int r = 0; r < c.ranks; ++r) {
    if (expected.empty() || std::memcmp(memories[r].output.data(), expected.data(), expected.size()) == 0) continue;
    std::size_t i = 0;
    while (std::memcmp(memories[r].output.data() + i * element, expected.data() + i * element, element) == 0) ++i;
    failures.add(cat(describe(algo, c), ": rank ", r, " element ", i, " is ",
                     element_text(c.type, memories[r].output.data() + i * element), ", expected ",
                     element_text(c.type, expected.data() + i * element)));
  }
}

void check_every_case(const Algorithm& algo) {
  // Every rank count sees every type, operator, count, placement and kind of
  // send: the whole matrix is small enough to run in full.
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (DataType type : kTypes)
      for (ReduceOp op : kOps)
        for (std::size_t count : counts_for(n))
          for (bool in_place : {false, true})
            for (SendCompletion sends : kSendModes)
              check_exact(
                  algo, Case{.ranks = n, .type = type, .op = op, .count = count, .in_place = in_place, .sends = sends},
                  failures);
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("recursive doubling all-reduce: every type, operator and count on 1 to 17 ranks", "[all_reduce][recursive]") {
  check_every_case(kRecursiveDoubling);
}

TEST_CASE("rabenseifner all-reduce: every type, operator and count on 1 to 17 ranks", "[all_reduce][recursive]") {
  check_every_case(kRabenseifner);
}

// The reduction orders the algorithms document, computed with the same
// kernels. Both fold ranks 2i and 2i+1 (for i < n - p) into one partial,
// partial(2i) (op) partial(2i+1), and number the p partials in rank order;
// then recursive doubling combines partials q and q ^ m for m = 1, 2, ...,
// p/2 and Rabenseifner for m = p/2, ..., 2, 1, the lower one always first.
std::vector<std::byte> reference_tree(const Algorithm& algo, DataType type, ReduceOp op,
                                      std::span<const std::vector<std::byte>> inputs, std::size_t count) {
  const int n = static_cast<int>(inputs.size());
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  std::vector<std::vector<std::byte>> partial;
  for (int r = 0; r < n; ++r) {
    partial.push_back(inputs[r]);
    if (r < 2 * (n - p) && r % 2 == 1) {
      reduce(type, op, partial.back().data(), inputs[r - 1].data(), inputs[r].data(), count);
    } else if (r < 2 * (n - p)) {
      partial.pop_back();  // sits out
    }
  }
  std::vector<int> masks;
  for (int m = 1; m < p; m *= 2) masks.push_back(m);
  if (algo.build == kRabenseifner.build) std::reverse(masks.begin(), masks.end());
  for (int m : masks)
    for (int q = 0; q < p; ++q)
      if ((q & m) == 0) {
        reduce(type, op, partial[q].data(), partial[q].data(), partial[q | m].data(), count);
        partial[q | m] = partial[q];
      }
  if (op == ReduceOp::avg) finish_average(type, partial[0].data(), count, n);
  return partial[0];
}

void check_same_bits(const Algorithm& algo) {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (DataType type : {DataType::f16, DataType::bf16, DataType::f32})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
        for (std::size_t count :
             {std::size_t{1001}, static_cast<std::size_t>(n + 1), static_cast<std::size_t>(37 * n + 5)})
          for (bool in_place : {false, true})
            for (SendCompletion sends : kSendModes) {
              const Case c{.ranks = n, .type = type, .op = op, .count = count, .in_place = in_place, .sends = sends};
              const std::size_t element = size_of(type);
              std::mt19937 rng(static_cast<unsigned>(n * 1000 + static_cast<int>(type) * 10 + in_place));
              std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
              std::vector<std::vector<std::byte>> inputs(static_cast<std::size_t>(n),
                                                         std::vector<std::byte>(count * element));
              std::vector<double> exact(count, 0.0);
              for (auto& input : inputs)
                for (std::size_t i = 0; i < count; ++i) {
                  encode_float(type, uniform(rng), input.data() + i * element);
                  exact[i] += decode(type, input.data() + i * element);
                }
              const auto memories = run_all_reduce(algo, c, inputs, failures);
              if (memories.empty()) continue;
              for (int r = 1; r < n; ++r)
                if (std::memcmp(memories[r].output.data(), memories[0].output.data(), count * element) != 0)
                  failures.add(cat(describe(algo, c), ": rank ", r, " differs from rank 0"));
              const auto tree = reference_tree(algo, type, op, inputs, count);
              if (std::memcmp(memories[0].output.data(), tree.data(), count * element) != 0)
                failures.add(cat(describe(algo, c), ": rank 0 did not reduce in the documented order"));
              const double eps = type == DataType::f16 ? 0x1p-10 : type == DataType::bf16 ? 0x1p-7 : 0x1p-23;
              for (std::size_t i = 0; i < count; ++i) {
                const double want = op == ReduceOp::avg ? exact[i] / n : exact[i];
                const double got = decode(type, memories[0].output.data() + i * element);
                if (!(std::abs(got - want) <= n * n * eps)) {
                  failures.add(cat(describe(algo, c), ": element ", i, " is ", got, ", expected about ", want));
                  break;
                }
              }
            }
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("recursive doubling all-reduce: every rank ends with the same bits", "[all_reduce][recursive]") {
  check_same_bits(kRecursiveDoubling);
}

TEST_CASE("rabenseifner all-reduce: every rank ends with the same bits", "[all_reduce][recursive]") {
  check_same_bits(kRabenseifner);
}

/// What is wrong with the tags of one schedule, or "".
std::string repeated_tags(const Schedule& s) {
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

/// Whether the k-th send of every rank a to every rank b meets the k-th
/// receive of b from a with the same tag and size; "" if so.
std::string unmatched_messages(const std::vector<Schedule>& schedules) {
  using Message = std::pair<std::uint32_t, std::size_t>;
  const int n = static_cast<int>(schedules.size());
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      std::vector<Message> sent, received;
      for (const Step& s : schedules[a].steps)
        if (s.kind == StepKind::send && s.peer == b) sent.emplace_back(s.tag_index, s.src.bytes);
      for (const Step& s : schedules[b].steps)
        if ((s.kind == StepKind::recv || s.kind == StepKind::recv_reduce) && s.peer == a)
          received.emplace_back(s.tag_index, s.dst.bytes);
      if (sent.size() != received.size())
        return cat("rank ", a, " sends ", sent.size(), " messages to rank ", b, ", which receives ", received.size());
      for (std::size_t k = 0; k < sent.size(); ++k)
        if (sent[k] != received[k])
          return cat("message ", k, " from rank ", a, " to rank ", b, ": sent tag ", sent[k].first, " (", sent[k].second,
                     " B), received as tag ", received[k].first, " (", received[k].second, " B)");
    }
  return "";
}

TEST_CASE("recursive schedules use each tag once per peer and direction, and every send meets its receive",
          "[schedule][recursive]") {
  Failures failures;
  for (const Algorithm& algo : kAlgorithms)
    for (int n = 1; n <= kMaxRanks; ++n)
      for (DataType type : {DataType::u8, DataType::f32})
        for (std::size_t count : counts_for(n)) {
          const auto schedules = schedules_of(algo, n, count, type, ReduceOp::sum);
          const std::string what = cat(algo.name, ", ", n, " ranks, ", count, " ", name_of(type));
          for (int r = 0; r < n; ++r) {
            if (auto e = repeated_tags(schedules[r]); !e.empty()) failures.add(cat(what, ": rank ", r, ": ", e));
            for (const Step& s : schedules[r].steps)
              if (s.peer >= 0 && (s.kind == StepKind::send ? s.src.bytes : s.dst.bytes) == 0)
                failures.add(cat(what, ": rank ", r, " has an empty ", name_of(s.kind)));
          }
          if (auto e = unmatched_messages(schedules); !e.empty()) failures.add(cat(what, ": ", e));
        }
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

/// The number of message hops on the longest chain of dependencies through
/// all ranks' schedules: a receive comes one hop after its matching send
/// (the k-th send of a to b meets the k-th receive of b from a), and any step
/// comes after the steps it depends on.
int message_hops(const std::vector<Schedule>& schedules) {
  const int n = static_cast<int>(schedules.size());
  std::vector<std::vector<int>> depth(static_cast<std::size_t>(n));
  // matching[r][i]: (rank, step) of the send that receive i of rank r meets.
  std::vector<std::vector<std::pair<int, std::size_t>>> matching(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    depth[r].assign(schedules[r].steps.size(), 0);
    matching[r].assign(schedules[r].steps.size(), {-1, 0});
  }
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      std::vector<std::size_t> sends, recvs;
      for (std::size_t i = 0; i < schedules[a].steps.size(); ++i)
        if (schedules[a].steps[i].kind == StepKind::send && schedules[a].steps[i].peer == b) sends.push_back(i);
      for (std::size_t i = 0; i < schedules[b].steps.size(); ++i)
        if (schedules[b].steps[i].kind != StepKind::send && schedules[b].steps[i].peer == a) recvs.push_back(i);
      REQUIRE(sends.size() == recvs.size());
      for (std::size_t k = 0; k < sends.size(); ++k) matching[b][recvs[k]] = {a, sends[k]};
    }
  // Dependencies point backwards within a rank; iterate until the depths
  // across ranks settle.
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < schedules[r].steps.size(); ++i) {
        int d = 0;
        for (auto dep : schedules[r].steps[i].deps) d = std::max(d, depth[r][dep]);
        if (const auto [from, step] = matching[r][i]; from >= 0) d = std::max(d, depth[from][step] + 1);
        if (d != depth[r][i]) {
          depth[r][i] = d;
          changed = true;
        }
      }
  }
  int hops = 0;
  for (const auto& d : depth)
    for (int x : d) hops = std::max(hops, x);
  return hops;
}

struct Traffic {
  int sends = 0;
  int receives = 0;
  std::size_t bytes_sent = 0;
  std::set<int> peers;
};

Traffic traffic_of(const Schedule& s) {
  Traffic t;
  for (const Step& step : s.steps) {
    if (step.peer < 0) continue;
    t.peers.insert(step.peer);
    if (step.kind == StepKind::send) {
      ++t.sends;
      t.bytes_sent += step.src.bytes;
    } else {
      ++t.receives;
    }
  }
  return t;
}

TEST_CASE("recursive doubling takes log2(p) hops, one or two more with a fold", "[schedule][recursive]") {
  SECTION("16 ranks: 4 rounds, each rank sends its buffer to r ^ 1, r ^ 2, r ^ 4, r ^ 8") {
    const auto schedules = schedules_of(kRecursiveDoubling, 16, 5, DataType::f32, ReduceOp::sum);
    CHECK(message_hops(schedules) == 4);
    for (int r = 0; r < 16; ++r) {
      const Traffic t = traffic_of(schedules[r]);
      CHECK(t.sends == 4);
      CHECK(t.receives == 4);
      CHECK(t.bytes_sent == 4 * 20);
      CHECK(t.peers == std::set<int>{r ^ 1, r ^ 2, r ^ 4, r ^ 8});
    }
  }
  SECTION("5 ranks: rank 0 folds into rank 1, ranks 1-4 run 2 rounds, rank 1 sends the result back") {
    // The fold overlaps round 0 (rank 2's round-0 message reaches rank 1 with
    // rank 0's), so the longest chain is 3 hops: 0 -> 1 -> 2 -> 4 (rank 2
    // passes rank 1's late partial to rank 4 in round 1), and 0 -> 1 -> 0 in
    // parallel with 3 -> 1 -> 0.
    const auto schedules = schedules_of(kRecursiveDoubling, 5, 5, DataType::f32, ReduceOp::sum);
    CHECK(message_hops(schedules) == 3);
    const Traffic t0 = traffic_of(schedules[0]);
    CHECK((t0.sends == 1 && t0.receives == 1 && t0.peers == std::set<int>{1}));
    const Traffic t1 = traffic_of(schedules[1]);
    CHECK((t1.sends == 3 && t1.receives == 3 && t1.peers == std::set<int>{0, 2, 3}));
    for (int r = 2; r < 5; ++r) {
      const Traffic t = traffic_of(schedules[r]);
      CHECK(t.sends == 2);
      CHECK(t.receives == 2);
    }
    CHECK(traffic_of(schedules[4]).peers == std::set<int>{2, 3});  // participant 3 pairs with 2 (rank 3), then 1 (rank 2)
  }
  SECTION("every n: log2(p) hops, + 1 with a fold, + 2 when more than half the participants folded") {
    for (int n = 1; n <= kMaxRanks; ++n) {
      const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
      const int log2p = std::countr_zero(static_cast<unsigned>(p));
      const int extra = n - p;
      INFO(n << " ranks");
      CHECK(message_hops(schedules_of(kRecursiveDoubling, n, 3, DataType::f64, ReduceOp::avg)) ==
            log2p + (extra == 0 ? 0 : 2 * extra > p ? 2 : 1));
    }
  }
}

TEST_CASE("rabenseifner takes 2 log2(p) hops, plus 2 with a fold, and sends 2(p-1)/p of the buffer",
          "[schedule][recursive]") {
  SECTION("16 ranks: 8 hops, 8 messages per rank, 2 x 15/16 of the buffer") {
    const std::size_t count = 1600;  // 100 f32 per block
    const auto schedules = schedules_of(kRabenseifner, 16, count, DataType::f32, ReduceOp::sum);
    CHECK(message_hops(schedules) == 8);
    for (int r = 0; r < 16; ++r) {
      const Traffic t = traffic_of(schedules[r]);
      CHECK(t.sends == 8);
      CHECK(t.receives == 8);
      CHECK(t.bytes_sent == 2 * 15 * 100 * 4);
      CHECK(t.peers == std::set<int>{r ^ 1, r ^ 2, r ^ 4, r ^ 8});
    }
  }
  SECTION("5 ranks: fold, 2 + 2 rounds over ranks 1-4, result back: 6 hops") {
    const auto schedules = schedules_of(kRabenseifner, 5, 40, DataType::f32, ReduceOp::sum);
    CHECK(message_hops(schedules) == 6);
    const Traffic t0 = traffic_of(schedules[0]);
    CHECK((t0.sends == 1 && t0.receives == 1 && t0.bytes_sent == 160));
    const Traffic t1 = traffic_of(schedules[1]);
    CHECK((t1.sends == 5 && t1.receives == 5 && t1.peers == std::set<int>{0, 2, 3}));
    CHECK(t1.bytes_sent == 160 + 2 * 3 * 40);  // the result back, and 2 x 3/4 of the buffer
    for (int r = 2; r < 5; ++r) {
      const Traffic t = traffic_of(schedules[r]);
      CHECK(t.sends == 4);
      CHECK(t.bytes_sent == 2 * 3 * 40);
    }
  }
  SECTION("every n: 2 log2(p) hops, plus 2 unless n is a power of two") {
    for (int n = 1; n <= kMaxRanks; ++n) {
      const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
      const int log2p = std::countr_zero(static_cast<unsigned>(p));
      INFO(n << " ranks");
      CHECK(message_hops(schedules_of(kRabenseifner, n, 64, DataType::f64, ReduceOp::avg)) ==
            2 * log2p + (n == p ? 0 : 2));
    }
  }
}

}  // namespace
}  // namespace braid::test
