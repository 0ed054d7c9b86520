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
// algorithms exist. The helpers shared with the other schedule tests (one
// rank's memory with guard bytes, failure collection, tag, matching and hop
// checks) are in schedule_checks.hpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <set>

#include "collectives/algorithms.hpp"
#include "core/reduce.hpp"
#include "schedule_checks.hpp"

namespace braid::test {
namespace {

using Builder = Schedule (*)(const CollectiveShape&);
struct Algorithm {
  const char* name;
  Builder build;
};
constexpr Algorithm kRecursiveDoubling{"recursive doubling", recursive_doubling_all_reduce};
constexpr Algorithm kRabenseifner{"rabenseifner", rabenseifner_all_reduce};
constexpr Algorithm kAlgorithms[] = {kRecursiveDoubling, kRabenseifner};

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
std::vector<RankMemory> run_all_reduce(const Algorithm& algo, const Case& c,
                                       std::span<const std::vector<std::byte>> inputs, Failures& failures) {
  std::vector<RankMemory> memories;
  for (int r = 0; r < c.ranks; ++r) memories.push_back(make_memory(inputs[r], inputs[r].size(), placement(c.in_place)));
  const std::vector<Schedule> schedules = schedules_of(algo, c.ranks, c.count, c.type, c.op);
  if (!run_to_completion(describe(algo, c), c.sends, schedules, memories, failures)) return {};
  return memories;
}

void check_exact(const Algorithm& algo, const Case& c, Failures& failures) {
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.ranks; ++r) inputs.push_back(make_input(c.type, c.op, r, c.count));
  const auto memories = run_all_reduce(algo, c, inputs, failures);
  if (memories.empty()) return;
  const auto expected = expected_all_reduce(c.type, c.op, c.ranks, c.count);
  const std::string what = describe(algo, c);
  for (int r = 0; r < c.ranks; ++r) check_memory(what, r, c.type, memories[r], expected, failures);
}

Failures every_case_failures(const Algorithm& algo) {
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
  return failures;
}

TEST_CASE("recursive doubling all-reduce: every type, operator and count on 1 to 17 ranks", "[all_reduce][recursive]") {
  CHECK(every_case_failures(kRecursiveDoubling).report() == "");
}

TEST_CASE("rabenseifner all-reduce: every type, operator and count on 1 to 17 ranks", "[all_reduce][recursive]") {
  CHECK(every_case_failures(kRabenseifner).report() == "");
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

Failures same_bits_failures(const Algorithm& algo) {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (DataType type : {DataType::f16, DataType::bf16, DataType::f32})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
        for (std::size_t count :
             {std::size_t{1001}, static_cast<std::size_t>(n + 1), static_cast<std::size_t>(37 * n + 5)})
          for (bool in_place : {false, true})
            for (SendCompletion sends : kSendModes) {
              const Case c{.ranks = n, .type = type, .op = op, .count = count, .in_place = in_place, .sends = sends};
              const RandomInputs random = random_inputs(type, n, count, in_place);
              const auto memories = run_all_reduce(algo, c, random.inputs, failures);
              if (memories.empty()) continue;
              const std::string what = describe(algo, c);
              check_float_sum(what, type, op, memories, random.exact, failures);
              if (!std::ranges::equal(memories[0].output(), reference_tree(algo, type, op, random.inputs, count)))
                failures.add(cat(what, ": rank 0 did not reduce in the documented order"));
            }
  return failures;
}

TEST_CASE("recursive doubling all-reduce: every rank ends with the same bits", "[all_reduce][recursive]") {
  CHECK(same_bits_failures(kRecursiveDoubling).report() == "");
}

TEST_CASE("rabenseifner all-reduce: every rank ends with the same bits", "[all_reduce][recursive]") {
  CHECK(same_bits_failures(kRabenseifner).report() == "");
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
  CHECK(failures.report() == "");
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
    CHECK(message_depth(schedules) == 4);
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
    CHECK(message_depth(schedules) == 3);
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
      CHECK(message_depth(schedules_of(kRecursiveDoubling, n, 3, DataType::f64, ReduceOp::avg)) ==
            log2p + (extra == 0 ? 0 : 2 * extra > p ? 2 : 1));
    }
  }
}

TEST_CASE("rabenseifner takes 2 log2(p) hops, plus 2 with a fold, and sends 2(p-1)/p of the buffer",
          "[schedule][recursive]") {
  SECTION("16 ranks: 8 hops, 8 messages per rank, 2 x 15/16 of the buffer") {
    const std::size_t count = 1600;  // 100 f32 per block
    const auto schedules = schedules_of(kRabenseifner, 16, count, DataType::f32, ReduceOp::sum);
    CHECK(message_depth(schedules) == 8);
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
    CHECK(message_depth(schedules) == 6);
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
      CHECK(message_depth(schedules_of(kRabenseifner, n, 64, DataType::f64, ReduceOp::avg)) ==
            2 * log2p + (n == p ? 0 : 2));
    }
  }
}

}  // namespace
}  // namespace braid::test
