// Schedule tests: the schedules of N ranks run against each other in one
// process over the in-memory fabric (memory_link.hpp, schedule_runner.hpp),
// and every rank's output is compared with a reference computed here
// (reduction_reference.hpp). Every all-reduce also runs with random
// non-integer inputs in one case, which checks that every rank ends with the
// same bits, as the ring promises by reducing each chunk once and copying it.
// Static checks of the schedules (tags, matching sends and receives, ring
// neighbours) need no run at all. The large matrices collect their failures
// and report the first few, so a broken case prints a handful of lines
// rather than thousands.
#include <catch2/catch.hpp>

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
constexpr int kFullMatrixRanks = 4;  // the large matrices are sampled above this
constexpr DataType kTypes[] = {DataType::f16, DataType::bf16, DataType::f32, DataType::f64, DataType::i8,
                               DataType::u8,  DataType::i32,  DataType::u32, DataType::i64, DataType::u64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
static_assert(std::size(kTypes) == kDataTypeCount && std::size(kOps) == kReduceOpCount);
constexpr SendCompletion kSendModes[] = {SendCompletion::eager, SendCompletion::lazy, SendCompletion::rendezvous};
constexpr std::size_t kDefaultSlice = CollectiveShape{}.slice_bytes;
constexpr std::size_t kGuardBytes = 16;
constexpr std::byte kGuard{0x5a};      // after every output buffer; must survive
constexpr std::byte kUnwritten{0xa5};  // output bytes before the collective

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

RankMemory make_memory(std::span<const std::byte> input, std::size_t output_bytes, bool in_place) {
  RankMemory m;
  m.output.assign(output_bytes + kGuardBytes, kUnwritten);
  std::fill(m.output.begin() + static_cast<std::ptrdiff_t>(output_bytes), m.output.end(), kGuard);
  if (in_place) {
    BRAID_CHECK(input.size() == output_bytes, "in place needs equal sizes");
    std::copy(input.begin(), input.end(), m.output.begin());
    m.view = Buffers{m.output.data(), m.output.data(), output_bytes, output_bytes};
  } else {
    m.input.assign(input.begin(), input.end());
    m.view = Buffers{m.input.data(), m.output.data(), m.input.size(), output_bytes};
  }
  return m;
}

std::vector<Buffers> views_of(const std::vector<RankMemory>& memories) {
  std::vector<Buffers> out;
  for (const auto& m : memories) out.push_back(m.view);
  return out;
}

void check_output(const std::string& what, int rank, DataType type, const RankMemory& m,
                  std::span<const std::byte> expected, Failures& failures) {
  const std::size_t bytes = expected.size();
  const std::size_t element = size_of(type);
  if (bytes > 0 && std::memcmp(m.output.data(), expected.data(), bytes) != 0) {
    std::size_t i = 0;
    while (std::memcmp(m.output.data() + i * element, expected.data() + i * element, element) == 0) ++i;
    failures.add(cat(what, ": rank ", rank, " element ", i, " is ", element_text(type, m.output.data() + i * element),
                     ", expected ", element_text(type, expected.data() + i * element)));
  }
  if (std::any_of(m.output.begin() + static_cast<std::ptrdiff_t>(bytes), m.output.end(),
                  [](std::byte b) { return b != kGuard; }))
    failures.add(cat(what, ": rank ", rank, " wrote past the end of its output"));
}

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

struct CountCase {
  std::size_t count;
  std::size_t slice_bytes;
};

/// Counts around the rank count, an odd count above 1000 in one slice and in
/// many, one that cuts every chunk into about 12 slices of 3 elements (with a
/// slice size that is not a whole number of elements), one whose smaller
/// chunks have an empty last slice, and one with more slices than elements.
std::vector<CountCase> all_reduce_counts(int n, std::size_t element) {
  const auto un = static_cast<std::size_t>(n);
  std::vector<CountCase> out = {{0, kDefaultSlice},      {1, kDefaultSlice},     {2, kDefaultSlice},
                                {7, kDefaultSlice},      {un - 1, kDefaultSlice}, {un, kDefaultSlice},
                                {un + 1, kDefaultSlice}, {1001, kDefaultSlice},  {1001, 64},
                                {37 * un + 5, 3 * element + 1}, {5 * un + 1, element}};
  if (n > 1) out.push_back({un - 1, 1});
  return out;
}

struct AllReduceCase {
  int ranks = 1;
  DataType type = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  std::size_t count = 0;
  std::size_t slice_bytes = kDefaultSlice;
  bool in_place = false;
  SendCompletion sends = SendCompletion::eager;
  std::vector<int> ring;  // empty: rank order
};

std::string describe(const AllReduceCase& c) {
  return cat("all_reduce of ", c.count, " ", name_of(c.type), " (", name_of(c.op), ") over ", c.ranks, " ranks, slice ",
             c.slice_bytes, " B, ", c.in_place ? "in place" : "out of place", ", ", name_of(c.sends), " sends",
             c.ring.empty() ? "" : ", ring " + ring_text(c.ring));
}

/// Runs one all-reduce; returns every rank's memory (empty if the run failed).
std::vector<RankMemory> run_all_reduce(const AllReduceCase& c, std::span<const std::vector<std::byte>> inputs,
                                       Failures& failures) {
  const std::size_t bytes = c.count * size_of(c.type);
  const std::vector<int> ring = c.ring.empty() ? identity_ring(c.ranks) : c.ring;
  std::vector<RankMemory> memories;
  std::vector<Schedule> schedules;
  for (int r = 0; r < c.ranks; ++r) {
    memories.push_back(make_memory(inputs[r], bytes, c.in_place));
    schedules.push_back(ring_all_reduce(CollectiveShape{.rank = r, .ranks = c.ranks, .ring = ring, .count = c.count,
                                                        .type = c.type, .op = c.op, .slice_bytes = c.slice_bytes}));
  }
  MemoryFabric fabric(c.ranks, {.sends = c.sends});
  const RunOutcome run = run_schedules(fabric, schedules, views_of(memories), {.reverse = c.sends == SendCompletion::lazy});
  if (run.error || !run.all_finished()) {
    failures.add(cat(describe(c), ": ", run.describe()));
    return {};
  }
  if (fabric.undelivered() != 0) failures.add(cat(describe(c), ": messages left over: ", fabric.describe_undelivered()));
  for (int r = 0; r < c.ranks; ++r)
    if (!c.in_place && memories[r].input != inputs[r]) failures.add(cat(describe(c), ": rank ", r, " changed its input"));
  return memories;
}

void check_all_reduce(const AllReduceCase& c, Failures& failures) {
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.ranks; ++r) inputs.push_back(make_input(c.type, c.op, r, c.count));
  const auto memories = run_all_reduce(c, inputs, failures);
  if (memories.empty()) return;
  const auto expected = expected_all_reduce(c.type, c.op, c.ranks, c.count);
  for (int r = 0; r < c.ranks; ++r) check_output(describe(c), r, c.type, memories[r], expected, failures);
}

struct BroadcastCase {
  int ranks = 1;
  int root = 0;
  DataType type = DataType::u8;
  std::size_t count = 0;
  std::size_t slice_bytes = kDefaultSlice;
  bool in_place = false;
  SendCompletion sends = SendCompletion::eager;
  std::vector<int> ring;  // empty: rank order
};

std::string describe(const BroadcastCase& c) {
  return cat("broadcast of ", c.count, " ", name_of(c.type), " from rank ", c.root, " over ", c.ranks, " ranks, slice ",
             c.slice_bytes, " B, ", c.in_place ? "in place" : "out of place", ", ", name_of(c.sends), " sends",
             c.ring.empty() ? "" : ", ring " + ring_text(c.ring));
}

void check_broadcast(const BroadcastCase& c, Failures& failures) {
  const std::size_t bytes = c.count * size_of(c.type);
  const std::vector<int> ring = c.ring.empty() ? identity_ring(c.ranks) : c.ring;
  std::vector<std::vector<std::byte>> inputs;
  std::vector<RankMemory> memories;
  std::vector<Schedule> schedules;
  for (int r = 0; r < c.ranks; ++r) {
    // Every rank passes a send buffer; only the root's may be read.
    std::vector<std::byte> input(bytes);
    for (std::size_t i = 0; i < bytes; ++i) input[i] = static_cast<std::byte>(mix(i * 131 + r) >> 56);
    inputs.push_back(input);
    memories.push_back(make_memory(input, bytes, c.in_place));
    schedules.push_back(chain_broadcast(CollectiveShape{.rank = r, .ranks = c.ranks, .ring = ring, .count = c.count,
                                                        .type = c.type, .root = c.root, .slice_bytes = c.slice_bytes}));
  }
  MemoryFabric fabric(c.ranks, {.sends = c.sends});
  const RunOutcome run = run_schedules(fabric, schedules, views_of(memories), {.reverse = c.sends == SendCompletion::lazy});
  if (run.error || !run.all_finished()) {
    failures.add(cat(describe(c), ": ", run.describe()));
    return;
  }
  if (fabric.undelivered() != 0) failures.add(cat(describe(c), ": messages left over: ", fabric.describe_undelivered()));
  for (int r = 0; r < c.ranks; ++r) {
    check_output(describe(c), r, c.type, memories[r], inputs[c.root], failures);
    if (!c.in_place && memories[r].input != inputs[r]) failures.add(cat(describe(c), ": rank ", r, " changed its input"));
  }
}

std::vector<Schedule> barrier_schedules(int n, const std::vector<int>& ring) {
  std::vector<Schedule> out;
  for (int r = 0; r < n; ++r) out.push_back(ring_barrier(CollectiveShape{.rank = r, .ranks = n, .ring = ring}));
  return out;
}

TEST_CASE("ring all-reduce: every type, operator and count on 1 to 17 ranks", "[all_reduce]") {
  // Up to kFullMatrixRanks every combination runs. Above, each (type,
  // operator) pair takes every third count case in turn, and the three kinds
  // of send take turns too, so every rank count still sees every type, every
  // operator, every count case, both placements and every kind of send.
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (int t = 0; t < kDataTypeCount; ++t)
      for (int o = 0; o < kReduceOpCount; ++o) {
        const auto counts = all_reduce_counts(n, size_of(kTypes[t]));
        for (int k = 0; k < static_cast<int>(counts.size()); ++k) {
          if (n > kFullMatrixRanks && (t + 2 * o + k) % 3 != 0) continue;
          for (bool in_place : {false, true})
            for (SendCompletion sends : kSendModes) {
              if (n > kFullMatrixRanks && sends != kSendModes[(t + o + k + in_place) % 3]) continue;
              check_all_reduce(AllReduceCase{.ranks = n, .type = kTypes[t], .op = kOps[o], .count = counts[k].count,
                                             .slice_bytes = counts[k].slice_bytes, .in_place = in_place,
                                             .sends = sends},
                               failures);
            }
        }
      }
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("ring all-reduce: every rank ends with the same bits for floating-point sums", "[all_reduce]") {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (DataType type : {DataType::f16, DataType::bf16, DataType::f32})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
        for (const CountCase& cc : {CountCase{1001, kDefaultSlice}, CountCase{37 * static_cast<std::size_t>(n) + 5, 13}})
          for (bool in_place : {false, true}) {
            const AllReduceCase c{.ranks = n, .type = type, .op = op, .count = cc.count,
                                  .slice_bytes = cc.slice_bytes, .in_place = in_place};
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
            const auto memories = run_all_reduce(c, inputs, failures);
            if (memories.empty()) continue;
            const double eps = type == DataType::f16 ? 0x1p-10 : type == DataType::bf16 ? 0x1p-7 : 0x1p-23;
            for (int r = 1; r < n; ++r)
              if (std::memcmp(memories[r].output.data(), memories[0].output.data(), cc.count * element) != 0)
                failures.add(cat(describe(c), ": rank ", r, " differs from rank 0"));
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

TEST_CASE("chain broadcast: every root, in and out of place, on 1 to 17 ranks", "[broadcast]") {
  // Broadcast moves bytes without looking at them, so three element sizes
  // stand for all types. Above kFullMatrixRanks the roots are the first two,
  // the middle and the last two, and each count case runs with one type and
  // one kind of send per placement.
  Failures failures;
  constexpr DataType types[] = {DataType::u8, DataType::f16, DataType::f64};
  for (int n = 1; n <= kMaxRanks; ++n)
    for (int root = 0; root < n; ++root) {
      if (n > kFullMatrixRanks && root > 1 && root != n / 2 && root < n - 2) continue;
      for (int t = 0; t < 3; ++t) {
        const std::size_t element = size_of(types[t]);
        const auto un = static_cast<std::size_t>(n);
        const CountCase counts[] = {{0, kDefaultSlice},      {1, kDefaultSlice},         {7, kDefaultSlice},
                                    {un + 1, kDefaultSlice}, {1001, kDefaultSlice},      {1001, 64},
                                    {37 * un + 5, 3 * element + 1}, {5, 1}};
        for (int k = 0; k < 8; ++k) {
          if (n > kFullMatrixRanks && (k + root + t) % 3 != 0) continue;
          for (bool in_place : {false, true})
            for (SendCompletion sends : kSendModes) {
              if (n > kFullMatrixRanks && sends != kSendModes[(k + t + in_place) % 3]) continue;
              check_broadcast(BroadcastCase{.ranks = n, .root = root, .type = types[t], .count = counts[k].count,
                                            .slice_bytes = counts[k].slice_bytes, .in_place = in_place, .sends = sends},
                              failures);
            }
        }
      }
    }
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("ring all-reduce and chain broadcast follow a ring that is not in rank order", "[all_reduce][broadcast]") {
  Failures failures;
  for (int n = 2; n <= kMaxRanks; ++n) {
    const std::vector<int> ring = scrambled_ring(n);
    const auto un = static_cast<std::size_t>(n);
    for (SendCompletion sends : kSendModes)
      for (bool in_place : {false, true}) {
        for (auto [type, op] : {std::pair{DataType::i32, ReduceOp::sum}, std::pair{DataType::f16, ReduceOp::avg},
                                std::pair{DataType::u8, ReduceOp::max}})
          for (const CountCase& cc : {CountCase{un + 1, kDefaultSlice}, CountCase{37 * un + 5, 3 * size_of(type) + 1}})
            check_all_reduce(AllReduceCase{.ranks = n, .type = type, .op = op, .count = cc.count,
                                           .slice_bytes = cc.slice_bytes, .in_place = in_place, .sends = sends,
                                           .ring = ring},
                             failures);
        for (int root : {0, n / 2, n - 1})
          check_broadcast(BroadcastCase{.ranks = n, .root = root, .type = DataType::f32, .count = 3 * un + 1,
                                        .slice_bytes = 8, .in_place = in_place, .sends = sends, .ring = ring},
                          failures);
      }
  }
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

TEST_CASE("ring barrier completes on 1 to 17 ranks", "[barrier]") {
  for (int n = 1; n <= kMaxRanks; ++n)
    for (SendCompletion sends : kSendModes) {
      const auto schedules = barrier_schedules(n, identity_ring(n));
      MemoryFabric fabric(n, {.sends = sends});
      const RunOutcome run = run_schedules(fabric, schedules, std::vector<Buffers>(static_cast<std::size_t>(n)));
      INFO(n << " ranks, " << name_of(sends) << " sends: " << run.describe());
      CHECK(run.all_finished());
      CHECK(fabric.undelivered() == 0);
    }
}

TEST_CASE("a rank that never runs its schedule holds every other rank back", "[barrier][all_reduce]") {
  for (int n = 2; n <= kMaxRanks; ++n)
    for (int absent : {0, n / 2, n - 1}) {
      INFO(n << " ranks, rank " << absent << " absent");
      {
        const auto schedules = barrier_schedules(n, identity_ring(n));
        MemoryFabric fabric(n);
        const RunOutcome run = run_schedules(fabric, schedules, std::vector<Buffers>(static_cast<std::size_t>(n)),
                                             {.absent = {absent}});
        INFO("barrier: " << run.describe());
        CHECK(run.stuck);
        CHECK_FALSE(run.error);
        CHECK(std::none_of(run.finished.begin(), run.finished.end(), [](bool f) { return f; }));
        CHECK_THAT(run.pending, Catch::Contains("recv from rank"));
      }
      {
        const std::size_t count = 4 * static_cast<std::size_t>(n) + 3;
        const std::vector<int> ring = identity_ring(n);
        std::vector<RankMemory> memories;
        std::vector<Schedule> schedules;
        for (int r = 0; r < n; ++r) {
          memories.push_back(make_memory(make_input(DataType::f32, ReduceOp::sum, r, count), count * 4, false));
          schedules.push_back(ring_all_reduce(CollectiveShape{.rank = r, .ranks = n, .ring = ring, .count = count}));
        }
        MemoryFabric fabric(n, {.sends = SendCompletion::lazy});
        const RunOutcome run = run_schedules(fabric, schedules, views_of(memories), {.absent = {absent}});
        INFO("all_reduce: " << run.describe());
        CHECK(run.stuck);
        CHECK_FALSE(run.error);
        CHECK(std::none_of(run.finished.begin(), run.finished.end(), [](bool f) { return f; }));
      }
    }
}

TEST_CASE("lazy sends keep requests posted across advance() calls", "[executor]") {
  // The root of a broadcast of 16 slices posts 16 sends; a lazy link delivers
  // one per progress(), so the root needs many passes, and still finishes.
  const int n = 3;
  const std::size_t count = 1024;
  const std::vector<int> ring = identity_ring(n);
  std::vector<RankMemory> memories;
  std::vector<Schedule> schedules;
  for (int r = 0; r < n; ++r) {
    memories.push_back(make_memory(std::vector<std::byte>(count, std::byte{static_cast<unsigned char>(r + 1)}), count, false));
    schedules.push_back(chain_broadcast(CollectiveShape{.rank = r, .ranks = n, .ring = ring, .count = count,
                                                        .type = DataType::u8, .slice_bytes = 64}));
  }
  MemoryFabric fabric(n, {.sends = SendCompletion::lazy});
  const auto links = fabric.links_of(0);
  Executor root(schedules[0], memories[0].view, links, 1);
  CHECK_FALSE(root.advance());
  CHECK(root.moved());
  CHECK_THAT(root.describe_pending(), Catch::Contains("send to rank 1"));
  const RunOutcome run = run_schedules(fabric, schedules, views_of(memories), {.absent = {0}});
  CHECK(run.stuck);  // the others wait for slices the root has not delivered yet
  int advances = 1;
  for (bool done = false; !done; ++advances) done = root.advance();
  CHECK(advances > 2);
}

TEST_CASE("one fabric carries collectives back to back, and foreign messages are caught", "[executor]") {
  const int n = 5;
  const std::size_t count = 77;
  const std::vector<int> ring = identity_ring(n);
  auto broadcast = [&](std::size_t c) {
    std::vector<Schedule> schedules;
    for (int r = 0; r < n; ++r)
      schedules.push_back(chain_broadcast(CollectiveShape{.rank = r, .ranks = n, .ring = ring, .count = c,
                                                          .type = DataType::i32, .root = 2, .slice_bytes = 64}));
    return schedules;
  };
  std::vector<RankMemory> memories;
  for (int r = 0; r < n; ++r) memories.push_back(make_memory(make_input(DataType::i32, ReduceOp::sum, r, count), count * 4, true));
  const auto views = views_of(memories);
  MemoryFabric fabric(n, {.sends = SendCompletion::lazy});

  SECTION("matching sequences") {
    for (std::uint32_t sequence = 1; sequence <= 3; ++sequence) {
      const RunOutcome run = run_schedules(fabric, broadcast(count), views,
                                           {.sequences = std::vector<std::uint32_t>(n, sequence)});
      INFO(run.describe());
      CHECK(run.all_finished());
      CHECK(fabric.undelivered() == 0);
    }
  }
  SECTION("one rank on a different sequence number") {
    const RunOutcome run = run_schedules(fabric, broadcast(count), views, {.sequences = {1, 1, 1, 2, 1}});
    REQUIRE(run.error);
    CHECK_THROWS_AS(std::rethrow_exception(run.error), ProtocolMismatch);
    CHECK_THAT(run.error_text, Catch::Contains("op #2 step 0") && Catch::Contains("op #1 step 0"));
  }
  SECTION("one rank expecting a different count") {
    auto schedules = broadcast(count);
    schedules[4] = broadcast(count + 1)[4];
    std::vector<Buffers> longer = views;
    std::vector<std::byte> big((count + 1) * 4);
    longer[4] = Buffers{big.data(), big.data(), big.size(), big.size()};
    const RunOutcome run = run_schedules(fabric, schedules, longer);
    REQUIRE(run.error);
    CHECK_THROWS_AS(std::rethrow_exception(run.error), ProtocolMismatch);
  }
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

TEST_CASE("schedules use each tag once per peer and direction, and every send meets its receive", "[schedule]") {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (const std::vector<int>& ring : {identity_ring(n), scrambled_ring(n)}) {
      auto check = [&](const std::string& what, const std::vector<Schedule>& schedules) {
        for (int r = 0; r < n; ++r) {
          if (auto e = repeated_tags(schedules[r]); !e.empty()) failures.add(cat(what, ": rank ", r, ": ", e));
          const std::vector<int> peers = schedules[r].peers();
          const int pos = ring_position(ring, r);
          for (int p : peers)
            if (p != ring[(pos + 1) % n] && p != ring[(pos + n - 1) % n])
              failures.add(cat(what, ": rank ", r, " talks to rank ", p, ", not a ring neighbour"));
        }
        if (auto e = unmatched_messages(schedules); !e.empty()) failures.add(cat(what, ": ", e));
      };
      for (DataType type : {DataType::u8, DataType::f32})
        for (const CountCase& cc : all_reduce_counts(n, size_of(type))) {
          const std::string what = cat(n, " ranks, ", cc.count, " ", name_of(type), ", slice ", cc.slice_bytes, ", ring ",
                                       ring_text(ring));
          std::vector<Schedule> reduce;
          for (int r = 0; r < n; ++r)
            reduce.push_back(ring_all_reduce(CollectiveShape{.rank = r, .ranks = n, .ring = ring, .count = cc.count,
                                                             .type = type, .slice_bytes = cc.slice_bytes}));
          check("all_reduce of " + what, reduce);
          for (int root : {0, n / 2, n - 1}) {
            std::vector<Schedule> bcast;
            for (int r = 0; r < n; ++r)
              bcast.push_back(chain_broadcast(CollectiveShape{.rank = r, .ranks = n, .ring = ring, .count = cc.count,
                                                              .type = type, .root = root, .slice_bytes = cc.slice_bytes}));
            check(cat("broadcast from ", root, " of ", what), bcast);
          }
        }
      check(cat("barrier of ", n, " ranks"), barrier_schedules(n, ring));
    }
  }
  INFO(failures.text());
  CHECK(failures.count() == 0);
}

}  // namespace
}  // namespace braid::test
