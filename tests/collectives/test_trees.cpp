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
// chain of messages through the schedules of all ranks).
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <map>
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
constexpr int kFullMatrixRanks = 4;  // the large matrices are sampled above this
constexpr int kAllRootsRanks = 5;    // above, the roots are 0, n/2 and n-1
constexpr DataType kTypes[] = {DataType::f16, DataType::bf16, DataType::f32, DataType::f64, DataType::i8,
                               DataType::u8,  DataType::i32,  DataType::u32, DataType::i64, DataType::u64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
static_assert(std::size(kTypes) == kDataTypeCount && std::size(kOps) == kReduceOpCount);
constexpr SendCompletion kSendModes[] = {SendCompletion::eager, SendCompletion::lazy, SendCompletion::rendezvous};
constexpr std::size_t kDefaultSlice = CollectiveShape{}.slice_bytes;
constexpr std::size_t kGuardBytes = 16;
constexpr std::byte kGuard{0x5a};      // after every output buffer; must survive
constexpr std::byte kUnwritten{0xa5};  // output bytes before the collective

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

std::vector<int> identity_ring(int n) {
  std::vector<int> ring(static_cast<std::size_t>(n));
  std::iota(ring.begin(), ring.end(), 0);
  return ring;
}

/// A ring order other than rank order: k -> (k * m + 3) mod n, m the
/// smallest multiplier above 1 coprime to n (the reversed ring for n <= 3).
std::vector<int> scrambled_ring(int n) {
  std::vector<int> ring(static_cast<std::size_t>(n));
  int m = n <= 3 ? n - 1 : 2;
  while (n > 3 && std::gcd(m, n) != 1) ++m;
  for (int k = 0; k < n; ++k) ring[k] = (k * std::max(m, 1) + 3) % n;
  return ring;
}

std::string ring_text(const std::vector<int>& ring) {
  std::string out;
  for (int r : ring) out += cat(out.empty() ? "" : " ", r);
  return out;
}

std::vector<int> roots_for(int n) {
  if (n <= kAllRootsRanks) return identity_ring(n);
  return {0, n / 2, n - 1};
}

struct CountCase {
  std::size_t count;
  std::size_t slice_bytes;
};

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

struct Case {
  Algorithm algorithm = Algorithm::tree_all_reduce;
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

/// One rank's memory, laid out as the communicator passes it: the output (if
/// this rank has one) is followed by guard bytes; in place, the input is the
/// output, filled with the input first.
struct RankMemory {
  std::vector<std::byte> input;
  std::vector<std::byte> output;
  bool has_input = false;
  bool has_output = false;
  Buffers view;
};

RankMemory make_memory(std::span<const std::byte> input, bool has_input, bool has_output, std::size_t bytes,
                       bool in_place) {
  RankMemory m{.has_input = has_input, .has_output = has_output};
  if (has_output) {
    m.output.assign(bytes + kGuardBytes, kUnwritten);
    std::fill(m.output.begin() + static_cast<std::ptrdiff_t>(bytes), m.output.end(), kGuard);
    m.view.output = m.output.data();
    m.view.output_bytes = bytes;
  }
  if (has_input && has_output && in_place) {
    std::copy(input.begin(), input.end(), m.output.begin());
    m.view.input = m.output.data();
    m.view.input_bytes = bytes;
  } else if (has_input) {
    m.input.assign(input.begin(), input.end());
    m.view.input = m.input.data();
    m.view.input_bytes = bytes;
  }
  return m;
}

/// Runs one case; returns every rank's memory (empty if the run failed).
std::vector<RankMemory> run_case(const Case& c, std::span<const std::vector<std::byte>> inputs, Failures& failures) {
  const std::size_t bytes = c.count * size_of(c.type);
  std::vector<RankMemory> memories;
  std::vector<Buffers> views;
  for (int r = 0; r < c.ranks; ++r) {
    const bool root = r == c.root;
    const bool has_input = c.algorithm == Algorithm::tree_all_reduce || c.algorithm == Algorithm::binomial_reduce || root;
    const bool has_output = c.algorithm != Algorithm::binomial_reduce || root;
    memories.push_back(make_memory(inputs[r], has_input, has_output, bytes, c.in_place));
    views.push_back(memories.back().view);
  }
  const std::vector<Schedule> schedules = schedules_of(c);
  MemoryFabric fabric(c.ranks, {.sends = c.sends});
  const RunOutcome run = run_schedules(fabric, schedules, views, {.reverse = c.sends == SendCompletion::lazy});
  if (run.error || !run.all_finished()) {
    failures.add(cat(describe(c), ": ", run.describe()));
    return {};
  }
  if (fabric.undelivered() != 0) failures.add(cat(describe(c), ": messages left over: ", fabric.describe_undelivered()));
  for (int r = 0; r < c.ranks; ++r) {
    const RankMemory& m = memories[r];
    if (m.has_input && m.view.input != m.output.data() && m.input != inputs[r])
      failures.add(cat(describe(c), ": rank ", r, " changed its input"));
    if (m.has_output && std::any_of(m.output.begin() + static_cast<std::ptrdiff_t>(bytes), m.output.end(),
                                    [](std::byte b) { return b != kGuard; }))
      failures.add(cat(describe(c), ": rank ", r, " wrote past the end of its output"));
  }
  return memories;
}

void check_output(const Case& c, int rank, const RankMemory& m, std::span<const std::byte> expected, Failures& failures) {
  const std::size_t element = size_of(c.type);
  if (expected.empty() || std::memcmp(m.output.data(), expected.data(), expected.size()) == 0) return;
  std::size_t i = 0;
  while (std::memcmp(m.output.data() + i * element, expected.data() + i * element, element) == 0) ++i;
  failures.add(cat(describe(c), ": rank ", rank, " element ", i, " is ", element_text(c.type, m.output.data() + i * element),
                   ", expected ", element_text(c.type, expected.data() + i * element)));
}

std::vector<std::byte> broadcast_input(int rank, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::byte>(mix(i * 131 + static_cast<std::size_t>(rank)) >> 56);
  return out;
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
  for (int r = 0; r < c.ranks; ++r)
    if (memories[r].has_output) check_output(c, r, memories[r], expected, failures);
}

/// Up to kFullMatrixRanks, every type, operator, count case, placement and
/// kind of send with the first root. Above, and for the other roots, each
/// (type, operator) takes every third count case in turn (every sixth for the
/// other roots) with one kind of send per placement, the kinds taking turns:
/// every rank count and every root still sees every type and operator, and
/// every rank count every count case, placement and kind of send.
void check_reduction_matrix(Algorithm algorithm, Failures& failures) {
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
}

/// Broadcast moves bytes without looking at them, so the types matter only by
/// their element sizes; sampled as the reductions are above
/// kFullMatrixRanks, every root up to kAllRootsRanks.
void check_broadcast_matrix(Algorithm algorithm, Failures& failures) {
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
}

TEST_CASE("tree all-reduce: every type, operator and count on 1 to 17 ranks", "[all_reduce][tree]") {
  Failures failures;
  check_reduction_matrix(Algorithm::tree_all_reduce, failures);
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("binomial reduce: every type, operator, count and root on 1 to 17 ranks", "[reduce][binomial]") {
  Failures failures;
  check_reduction_matrix(Algorithm::binomial_reduce, failures);
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("tree broadcast: every root, count and element size on 1 to 17 ranks", "[broadcast][tree]") {
  Failures failures;
  check_broadcast_matrix(Algorithm::tree_broadcast, failures);
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("binomial broadcast: every root, count and element size on 1 to 17 ranks", "[broadcast][binomial]") {
  Failures failures;
  check_broadcast_matrix(Algorithm::binomial_broadcast, failures);
  INFO(failures.text());
  CHECK(failures.count() == 0);
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
            const std::size_t element = size_of(type);
            std::mt19937 rng(static_cast<unsigned>(n * 1000 + static_cast<int>(type) * 10 + in_place));
            std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
            std::vector<std::vector<std::byte>> inputs(static_cast<std::size_t>(n), std::vector<std::byte>(cc.count * element));
            std::vector<double> exact(cc.count, 0.0);
            for (auto& input : inputs)
              for (std::size_t i = 0; i < cc.count; ++i) {
                encode_float(type, uniform(rng), input.data() + i * element);
                exact[i] += decode(type, input.data() + i * element);
              }
            const auto memories = run_case(c, inputs, failures);
            if (memories.empty()) continue;
            for (int r = 1; r < n; ++r)
              if (std::memcmp(memories[r].output.data(), memories[0].output.data(), cc.count * element) != 0)
                failures.add(cat(describe(c), ": rank ", r, " differs from rank 0"));
            const double eps = type == DataType::f16 ? 0x1p-10 : type == DataType::bf16 ? 0x1p-7 : 0x1p-23;
            for (std::size_t i = 0; i < cc.count; ++i) {
              const double want = op == ReduceOp::avg ? exact[i] / n : exact[i];
              const double got = decode(type, memories[0].output.data() + i * element);
              if (!(std::abs(got - want) <= n * n * eps)) {
                failures.add(cat(describe(c), ": element ", i, " is ", got, ", expected about ", want));
                break;
              }
            }
          }
  INFO(failures.text());
  CHECK(failures.count() == 0);
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
  INFO(failures.text());
  CHECK(failures.count() == 0);
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

/// The longest chain of messages through the schedules of all ranks, or -1
/// if the messages cannot all be delivered (a cycle, or one without its
/// match). A step waits for its dependencies, and a receive also for the
/// matching send, one message deeper. For a tree that is its height (twice it
/// for all-reduce); a chain would give n - 1.
int message_depth(const std::vector<Schedule>& schedules) {
  const auto n = schedules.size();
  std::vector<std::size_t> first(n + 1, 0);  // node of rank r's step i: first[r] + i
  for (std::size_t r = 0; r < n; ++r) first[r + 1] = first[r] + schedules[r].steps.size();
  std::vector<std::vector<std::pair<std::size_t, int>>> after(first[n]);  // (node, added depth)
  std::vector<int> waits(first[n], 0);
  std::map<std::tuple<std::size_t, std::size_t, std::size_t>, std::size_t> sends;  // (from, to, k) -> node
  std::vector<std::vector<std::size_t>> counted(n, std::vector<std::size_t>(n, 0));
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < schedules[r].steps.size(); ++i) {
      const Step& s = schedules[r].steps[i];
      for (auto d : s.deps) after[first[r] + d].emplace_back(first[r] + i, 0), ++waits[first[r] + i];
      if (s.kind == StepKind::send) sends[{r, static_cast<std::size_t>(s.peer), counted[r][s.peer]++}] = first[r] + i;
    }
  for (auto& row : counted) std::fill(row.begin(), row.end(), 0);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < schedules[r].steps.size(); ++i) {
      const Step& s = schedules[r].steps[i];
      if (s.kind != StepKind::recv && s.kind != StepKind::recv_reduce) continue;
      auto it = sends.find({static_cast<std::size_t>(s.peer), r, counted[s.peer][r]++});
      if (it == sends.end()) return -1;
      after[it->second].emplace_back(first[r] + i, 1);
      ++waits[first[r] + i];
    }
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
  INFO(failures.text());
  CHECK(failures.count() == 0);
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
  INFO(failures.text());
  CHECK(failures.count() == 0);
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
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

}  // namespace
}  // namespace braid::test
