// Tree schedule tests: double binary tree all-reduce and broadcast
// (double_tree.cpp), binomial broadcast and reduce (binomial.cpp). The
// schedules of N ranks run against each other over the in-memory fabric
// (memory_link.hpp, schedule_runner.hpp) with the three kinds of send, and
// every rank's output is compared with reduction_reference.hpp. Buffers are
// laid out as the communicator passes them: a broadcast's non-roots have no
// input and a reduce's non-roots no output (null, zero bytes), so validate()
// rejects a schedule that touches them. Static checks need no run: tags,
// matching sends and receives, and the shape of the trees (the two trees are
// complementary; every tree has logarithmic depth, measured as the longest
// chain of messages through the schedules of all ranks). The helpers they
// share with the other schedule tests are in schedule_checks.hpp.
#include <catch2/catch.hpp>

#include <bit>
#include <set>

#include "collectives/algorithms.hpp"
#include "core/reduce.hpp"
#include "schedule_checks.hpp"

namespace braid::test {
namespace {

enum class Algorithm : std::uint8_t { tree_all_reduce, tree_broadcast, binomial_broadcast, binomial_reduce };
constexpr Algorithm kAlgorithms[] = {Algorithm::tree_all_reduce, Algorithm::tree_broadcast, Algorithm::binomial_broadcast,
                                     Algorithm::binomial_reduce};

std::string_view name_of(Algorithm a) {
  switch (a) {
    case Algorithm::tree_all_reduce: return "tree all_reduce";
    case Algorithm::tree_broadcast: return "tree broadcast";
    case Algorithm::binomial_broadcast: return "binomial broadcast";
    case Algorithm::binomial_reduce: return "binomial reduce";
  }
  return "?";
}
bool reduces(Algorithm a) { return a == Algorithm::tree_all_reduce || a == Algorithm::binomial_reduce; }
bool rooted(Algorithm a) { return a != Algorithm::tree_all_reduce; }

Schedule build(Algorithm a, const CollectiveShape& shape) {
  switch (a) {
    case Algorithm::tree_all_reduce: return tree_all_reduce(shape);
    case Algorithm::tree_broadcast: return tree_broadcast(shape);
    case Algorithm::binomial_broadcast: return binomial_broadcast(shape);
    case Algorithm::binomial_reduce: return binomial_reduce(shape);
  }
  return {};
}

/// Around the rank count, an odd count above 1000 in one slice and in many,
/// slices of 3 elements with a slice size that is not a whole number of
/// elements, and one element per slice (the smaller half of a double tree
/// then has an empty last slice).
std::vector<CountCase> count_cases(int n, std::size_t element) {
  const auto un = static_cast<std::size_t>(n);
  return {{0, kDefaultSlice},      {1, kDefaultSlice},    {2, kDefaultSlice},  {7, kDefaultSlice},
          {un - 1, kDefaultSlice}, {un + 1, kDefaultSlice}, {1001, kDefaultSlice}, {1001, 64},
          {37 * un + 5, 3 * element + 1}, {2 * un + 3, element}};
}

using Case = ScheduleCase<Algorithm>;

std::string describe(const Case& c) {
  return cat(name_of(c.algorithm), " of ", c.count, " ", name_of(c.type),
             reduces(c.algorithm) ? cat(" (", name_of(c.op), ")") : std::string(),
             rooted(c.algorithm) ? cat(" rooted at ", c.root) : std::string(), " over ", c.ranks, " ranks, slice ",
             c.slice_bytes, " B, ", c.in_place ? "in place" : "out of place", ", ", name_of(c.sends), " sends",
             c.ring.empty() ? "" : ", ring " + ring_text(c.ring));
}

std::vector<Schedule> schedules_of(const Case& c) {
  const std::vector<int> ring = c.ring.empty() ? identity_ring(c.ranks) : c.ring;
  std::vector<Schedule> out;
  for (int r = 0; r < c.ranks; ++r)
    out.push_back(build(c.algorithm, CollectiveShape{.rank = r, .ranks = c.ranks, .ring = ring, .count = c.count,
                                                     .type = c.type, .op = c.op, .root = c.root,
                                                     .slice_bytes = c.slice_bytes}));
  return out;
}

/// Runs one case; returns every rank's memory (empty if the run failed).
/// Buffers are laid out as the communicator passes them: a broadcast's
/// non-roots have no input and a reduce's non-roots no output.
std::vector<RankMemory> run_case(const Case& c, std::span<const std::vector<std::byte>> inputs, Failures& failures) {
  const std::size_t bytes = c.count * size_of(c.type);
  std::vector<RankMemory> memories;
  for (int r = 0; r < c.ranks; ++r) {
    const bool root = r == c.root;
    const bool has_input = c.algorithm == Algorithm::tree_all_reduce || c.algorithm == Algorithm::binomial_reduce || root;
    const bool has_output = c.algorithm != Algorithm::binomial_reduce || root;
    memories.push_back(make_memory(has_input ? inputs[r] : std::span<const std::byte>(), has_output ? bytes : 0,
                                   placement(c.in_place && has_input && has_output)));
  }
  if (!run_to_completion(describe(c), c.sends, schedules_of(c), memories, failures)) return {};
  return memories;
}

void check_case(const Case& c, Failures& failures) {
  const std::size_t bytes = c.count * size_of(c.type);
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.ranks; ++r)
    inputs.push_back(reduces(c.algorithm) ? make_input(c.type, c.op, r, c.count) : broadcast_input(r, bytes));
  const auto memories = run_case(c, inputs, failures);
  if (memories.empty()) return;
  const std::vector<std::byte> expected =
      reduces(c.algorithm) ? expected_all_reduce(c.type, c.op, c.ranks, c.count) : inputs[c.root];
  const std::string what = describe(c);
  for (int r = 0; r < c.ranks; ++r)
    check_memory(what, r, c.type, memories[r],
                 memories[r].output_bytes > 0 ? std::span<const std::byte>(expected) : std::span<const std::byte>(),
                 failures);
}

/// Up to kFullMatrixRanks, every type, operator, count case, placement and
/// kind of send with the first root. Above, and for the other roots, each
/// (type, operator) takes every third count case in turn (every sixth for the
/// other roots) with one kind of send per placement, the kinds taking turns:
/// every rank count and every root still sees every type and operator, and
/// every rank count every count case, placement and kind of send.
Failures reduction_matrix_failures(Algorithm algorithm) {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n) {
    const std::vector<int> roots = rooted(algorithm) ? roots_for(n) : std::vector<int>{0};
    for (int ri = 0; ri < static_cast<int>(roots.size()); ++ri)
      for (int t = 0; t < kDataTypeCount; ++t)
        for (int o = 0; o < kReduceOpCount; ++o) {
          const auto counts = count_cases(n, size_of(kTypes[t]));
          for (int k = 0; k < static_cast<int>(counts.size()); ++k) {
            const bool sampled = n > kFullMatrixRanks || ri > 0;
            if (sampled && (t + 2 * o + k + ri) % (ri > 0 ? 6 : 3) != 0) continue;
            for (bool in_place : {false, true})
              for (int s = 0; s < 3; ++s) {
                if (sampled && s != (t + o + k + ri + in_place) % 3) continue;
                check_case(Case{.algorithm = algorithm, .ranks = n, .root = roots[ri], .type = kTypes[t], .op = kOps[o],
                                .count = counts[k].count, .slice_bytes = counts[k].slice_bytes, .in_place = in_place,
                                .sends = kSendModes[s]},
                           failures);
              }
          }
        }
  }
  return failures;
}

/// Broadcast moves bytes without looking at them, so the types matter only by
/// their element sizes; sampled as the reductions are above
/// kFullMatrixRanks, every root up to kAllRootsRanks.
Failures broadcast_matrix_failures(Algorithm algorithm) {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (int root : roots_for(n))
      for (int t = 0; t < kDataTypeCount; ++t) {
        const auto counts = count_cases(n, size_of(kTypes[t]));
        for (int k = 0; k < static_cast<int>(counts.size()); ++k) {
          const bool sampled = n > kFullMatrixRanks;
          if (sampled && (t + k + root) % 3 != 0) continue;
          for (bool in_place : {false, true})
            for (int s = 0; s < 3; ++s) {
              if (sampled && s != (t + k + root + in_place) % 3) continue;
              check_case(Case{.algorithm = algorithm, .ranks = n, .root = root, .type = kTypes[t],
                              .count = counts[k].count, .slice_bytes = counts[k].slice_bytes, .in_place = in_place,
                              .sends = kSendModes[s]},
                         failures);
            }
        }
      }
  return failures;
}

TEST_CASE("tree all-reduce: every type, operator and count on 1 to 17 ranks", "[all_reduce][tree]") {
  CHECK(reduction_matrix_failures(Algorithm::tree_all_reduce).report() == "");
}

TEST_CASE("binomial reduce: every type, operator, count and root on 1 to 17 ranks", "[reduce][binomial]") {
  CHECK(reduction_matrix_failures(Algorithm::binomial_reduce).report() == "");
}

TEST_CASE("tree broadcast: every root, count and element size on 1 to 17 ranks", "[broadcast][tree]") {
  CHECK(broadcast_matrix_failures(Algorithm::tree_broadcast).report() == "");
}

TEST_CASE("binomial broadcast: every root, count and element size on 1 to 17 ranks", "[broadcast][binomial]") {
  CHECK(broadcast_matrix_failures(Algorithm::binomial_broadcast).report() == "");
}

TEST_CASE("tree all-reduce: every rank ends with the same bits for floating-point sums", "[all_reduce][tree]") {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (DataType type : {DataType::f16, DataType::bf16, DataType::f32, DataType::f64})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
        for (const CountCase& cc : {CountCase{1001, kDefaultSlice}, CountCase{37 * static_cast<std::size_t>(n) + 5, 13}})
          for (bool in_place : {false, true}) {
            const Case c{.algorithm = Algorithm::tree_all_reduce, .ranks = n, .type = type, .op = op, .count = cc.count,
                         .slice_bytes = cc.slice_bytes, .in_place = in_place,
                         .sends = kSendModes[(n + static_cast<int>(type) + in_place) % 3]};
            const RandomInputs random = random_inputs(type, n, cc.count, in_place);
            const auto memories = run_case(c, random.inputs, failures);
            if (!memories.empty()) check_float_sum(describe(c), type, op, memories, random.exact, failures);
          }
  CHECK(failures.report() == "");
}

TEST_CASE("tree and binomial schedules follow a ring that is not in rank order", "[tree][binomial]") {
  Failures failures;
  for (int n = 2; n <= kMaxRanks; ++n) {
    const std::vector<int> ring = scrambled_ring(n);
    const auto un = static_cast<std::size_t>(n);
    for (SendCompletion sends : kSendModes)
      for (bool in_place : {false, true})
        for (Algorithm algorithm : kAlgorithms)
          for (int root : rooted(algorithm) ? std::vector<int>{0, n / 2, n - 1} : std::vector<int>{0})
            for (auto [type, op] : {std::pair{DataType::i32, ReduceOp::sum}, std::pair{DataType::f16, ReduceOp::avg}})
              check_case(Case{.algorithm = algorithm, .ranks = n, .root = root, .type = type, .op = op,
                              .count = 5 * un + 3, .slice_bytes = 3 * size_of(type) + 1, .in_place = in_place,
                              .sends = sends, .ring = ring},
                         failures);
  }
  CHECK(failures.report() == "");
}

int ceil_log2(int n) {
  int bits = 0;
  while ((1 << bits) < n) ++bits;
  return bits;
}

/// A binomial tree's height: rank rel sits as deep as rel has set bits.
int binomial_height(int n) {
  int most = 0;
  for (int rel = 0; rel < n; ++rel) most = std::max(most, std::popcount(static_cast<unsigned>(rel)));
  return most;
}

TEST_CASE("tree schedules use each tag once per peer and direction, and every send meets its receive", "[schedule]") {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (const std::vector<int>& ring : {identity_ring(n), scrambled_ring(n)})
      for (Algorithm algorithm : kAlgorithms)
        for (int root : rooted(algorithm) ? roots_for(n) : std::vector<int>{0})
          for (DataType type : {DataType::u8, DataType::f32})
            for (const CountCase& cc : count_cases(n, size_of(type))) {
              const Case c{.algorithm = algorithm, .ranks = n, .root = root, .type = type, .count = cc.count,
                           .slice_bytes = cc.slice_bytes, .ring = ring};
              const std::vector<Schedule> schedules = schedules_of(c);
              for (int r = 0; r < n; ++r)
                if (auto e = repeated_tags(schedules[r]); !e.empty()) failures.add(cat(describe(c), ": rank ", r, ": ", e));
              if (auto e = unmatched_messages(schedules); !e.empty()) failures.add(cat(describe(c), ": ", e));
              if (message_depth(schedules) < 0) failures.add(cat(describe(c), ": the messages cannot all be delivered"));
            }
  CHECK(failures.report() == "");
}

TEST_CASE("the trees are shallow, and the two trees of a double tree are complementary", "[tree][binomial]") {
  // One slice per half (2 elements), so the depth counts tree levels, not
  // slices, and a step's region says which half, that is which tree, it is in.
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (const std::vector<int>& ring : {identity_ring(n), scrambled_ring(n)})
      for (Algorithm algorithm : kAlgorithms)
        for (int root : rooted(algorithm) ? roots_for(n) : std::vector<int>{0}) {
          const Case c{.algorithm = algorithm, .ranks = n, .root = root, .type = DataType::u8, .count = 2, .ring = ring};
          const std::vector<Schedule> schedules = schedules_of(c);
          const int depth = message_depth(schedules);
          const int limit = algorithm == Algorithm::tree_all_reduce ? 2 * ceil_log2(n)
                            : algorithm == Algorithm::tree_broadcast ? std::min(ceil_log2(n) + 1, n - 1)
                                                                      : binomial_height(n);
          const bool exact = algorithm == Algorithm::binomial_broadcast || algorithm == Algorithm::binomial_reduce;
          if (exact ? depth != limit : depth > limit)
            failures.add(cat(describe(c), ": ", depth, " messages deep, expected ", exact ? "" : "at most ", limit));
          for (int r = 0; r < n; ++r) {
            // A double-tree rank forwards (all-reduce: combines) data in one
            // half at most: it is an inner node of one tree only.
            std::set<std::size_t> inner_in, peers_to, peers_from;
            for (const Step& s : schedules[r].steps) {
              if (s.kind == StepKind::recv_reduce) inner_in.insert(s.dst.offset);
              if (s.kind == StepKind::send && algorithm == Algorithm::tree_broadcast && r != root)
                inner_in.insert(s.src.offset);
              if (s.kind == StepKind::send) peers_to.insert(static_cast<std::size_t>(s.peer));
              if (s.kind == StepKind::recv || s.kind == StepKind::recv_reduce)
                peers_from.insert(static_cast<std::size_t>(s.peer));
            }
            if (algorithm == Algorithm::tree_all_reduce || algorithm == Algorithm::tree_broadcast) {
              if (inner_in.size() > 1) failures.add(cat(describe(c), ": rank ", r, " is an inner node of both trees"));
              if (algorithm == Algorithm::tree_broadcast && r == root && peers_to.size() != static_cast<std::size_t>(std::min(n - 1, 2)))
                failures.add(cat(describe(c), ": the root sends to ", peers_to.size(), " ranks"));
            }
            if (algorithm == Algorithm::binomial_broadcast) {
              if (r == root && peers_to.size() != static_cast<std::size_t>(ceil_log2(n)))
                failures.add(cat(describe(c), ": the root sends to ", peers_to.size(), " ranks"));
              if (r != root && peers_from.size() != 1)
                failures.add(cat(describe(c), ": rank ", r, " receives from ", peers_from.size(), " ranks"));
            }
            if (algorithm == Algorithm::binomial_reduce && r == root &&
                peers_from.size() != static_cast<std::size_t>(ceil_log2(n)))
              failures.add(cat(describe(c), ": the root receives from ", peers_from.size(), " ranks"));
            if (algorithm == Algorithm::binomial_reduce && r != root && peers_to.size() != 1)
              failures.add(cat(describe(c), ": rank ", r, " sends to ", peers_to.size(), " ranks"));
          }
        }
  CHECK(failures.report() == "");
}

TEST_CASE("pipelining: a step waits only for steps on the same bytes", "[tree][binomial]") {
  // A forwarder's send of slice j waits for its receive of slice j and for
  // nothing on other slices, so the levels of a tree work on different slices
  // at once. (Every buffer is addressed with the same offsets, so offsets
  // compare across buffers.)
  Failures failures;
  for (int n = 2; n <= kMaxRanks; ++n)
    for (Algorithm algorithm : kAlgorithms) {
      const Case c{.algorithm = algorithm, .ranks = n, .root = n / 2, .type = DataType::u8, .count = 64, .slice_bytes = 4};
      for (const Schedule& s : schedules_of(c))
        for (std::size_t i = 0; i < s.steps.size(); ++i)
          for (auto d : s.steps[i].deps) {
            const Step& dep = s.steps[d];
            const Step& step = s.steps[i];
            const Region& read = step.kind == StepKind::send ? step.src : step.dst;
            const Region& wrote = dep.kind == StepKind::send ? dep.src : dep.dst;
            if (read.bytes > 0 && wrote.bytes > 0 &&
                (read.offset + read.bytes <= wrote.offset || wrote.offset + wrote.bytes <= read.offset))
              failures.add(cat(describe(c), ": step ", i, " waits for step ", d, ", which touches other bytes"));
          }
    }
  CHECK(failures.report() == "");
}

}  // namespace
}  // namespace braid::test
