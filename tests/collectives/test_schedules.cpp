// Schedule tests: the schedules of N ranks run against each other in one
// process over the in-memory fabric (memory_link.hpp, schedule_runner.hpp),
// and every rank's output is compared with a reference computed here
// (reduction_reference.hpp). Every all-reduce also runs with random
// non-integer inputs in one case, which checks that every rank ends with the
// same bits, as the ring promises by reducing each chunk once and copying it.
// Static checks of the schedules (tags, matching sends and receives, ring
// neighbours) need no run at all. The large matrices collect their failures
// and report the first few, so a broken case prints a handful of lines
// rather than thousands. What the schedule tests share (the matrix, memory
// with guard bytes, the static checks) is in schedule_checks.hpp.
#include <catch2/catch.hpp>

#include "collectives/algorithms.hpp"
#include "core/reduce.hpp"
#include "schedule_checks.hpp"

namespace braid::test {
namespace {

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

enum class Algorithm : std::uint8_t { ring_all_reduce, chain_broadcast };

using Case = ScheduleCase<Algorithm>;

std::string describe(const Case& c) {
  const bool broadcast = c.algorithm == Algorithm::chain_broadcast;
  return cat(broadcast ? "broadcast" : "all_reduce", " of ", c.count, " ", name_of(c.type),
             broadcast ? cat(" from rank ", c.root) : cat(" (", name_of(c.op), ")"), " over ", c.ranks, " ranks, slice ",
             c.slice_bytes, " B, ", c.in_place ? "in place" : "out of place", ", ", name_of(c.sends), " sends",
             c.ring.empty() ? "" : ", ring " + ring_text(c.ring));
}

/// Runs one case; returns every rank's memory (empty if the run failed).
std::vector<RankMemory> run_case(const Case& c, std::span<const std::vector<std::byte>> inputs, Failures& failures) {
  const std::size_t bytes = c.count * size_of(c.type);
  const std::vector<int> ring = c.ring.empty() ? identity_ring(c.ranks) : c.ring;
  std::vector<RankMemory> memories;
  std::vector<Schedule> schedules;
  for (int r = 0; r < c.ranks; ++r) {
    // A broadcast's every rank passes a send buffer; only the root's may be read.
    memories.push_back(make_memory(inputs[r], bytes, placement(c.in_place)));
    const CollectiveShape shape{.rank = r, .ranks = c.ranks, .ring = ring, .count = c.count, .type = c.type,
                                .op = c.op, .root = c.root, .slice_bytes = c.slice_bytes};
    schedules.push_back(c.algorithm == Algorithm::chain_broadcast ? chain_broadcast(shape) : ring_all_reduce(shape));
  }
  if (!run_to_completion(describe(c), c.sends, schedules, memories, failures)) return {};
  return memories;
}

void check_case(const Case& c, Failures& failures) {
  const bool broadcast = c.algorithm == Algorithm::chain_broadcast;
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.ranks; ++r)
    inputs.push_back(broadcast ? broadcast_input(r, c.count * size_of(c.type)) : make_input(c.type, c.op, r, c.count));
  const auto memories = run_case(c, inputs, failures);
  if (memories.empty()) return;
  const auto expected = broadcast ? inputs[c.root] : expected_all_reduce(c.type, c.op, c.ranks, c.count);
  const std::string what = describe(c);
  for (int r = 0; r < c.ranks; ++r) check_memory(what, r, c.type, memories[r], expected, failures);
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
              check_case(Case{.ranks = n, .type = kTypes[t], .op = kOps[o], .count = counts[k].count,
                              .slice_bytes = counts[k].slice_bytes, .in_place = in_place, .sends = sends},
                         failures);
            }
        }
      }
  CHECK(failures.report() == "");
}

TEST_CASE("ring all-reduce: every rank ends with the same bits for floating-point sums", "[all_reduce]") {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n)
    for (DataType type : {DataType::f16, DataType::bf16, DataType::f32})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
        for (const CountCase& cc : {CountCase{1001, kDefaultSlice}, CountCase{37 * static_cast<std::size_t>(n) + 5, 13}})
          for (bool in_place : {false, true}) {
            const Case c{.ranks = n, .type = type, .op = op, .count = cc.count, .slice_bytes = cc.slice_bytes,
                         .in_place = in_place};
            const RandomInputs random = random_inputs(type, n, cc.count, in_place);
            const auto memories = run_case(c, random.inputs, failures);
            if (!memories.empty()) check_float_sum(describe(c), type, op, memories, random.exact, failures);
          }
  CHECK(failures.report() == "");
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
              check_case(Case{.algorithm = Algorithm::chain_broadcast, .ranks = n, .root = root, .type = types[t],
                              .count = counts[k].count, .slice_bytes = counts[k].slice_bytes, .in_place = in_place,
                              .sends = sends},
                         failures);
            }
        }
      }
    }
  CHECK(failures.report() == "");
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
            check_case(Case{.ranks = n, .type = type, .op = op, .count = cc.count, .slice_bytes = cc.slice_bytes,
                            .in_place = in_place, .sends = sends, .ring = ring},
                       failures);
        for (int root : {0, n / 2, n - 1})
          check_case(Case{.algorithm = Algorithm::chain_broadcast, .ranks = n, .root = root, .type = DataType::f32,
                          .count = 3 * un + 1, .slice_bytes = 8, .in_place = in_place, .sends = sends, .ring = ring},
                     failures);
      }
  }
  CHECK(failures.report() == "");
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
          memories.push_back(make_memory(make_input(DataType::f32, ReduceOp::sum, r, count), count * 4, Alias::none));
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
    memories.push_back(
        make_memory(std::vector<std::byte>(count, std::byte{static_cast<unsigned char>(r + 1)}), count, Alias::none));
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
  for (int r = 0; r < n; ++r)
    memories.push_back(make_memory(make_input(DataType::i32, ReduceOp::sum, r, count), count * 4, Alias::input_in_output));
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
  CHECK(failures.report() == "");
}

}  // namespace
}  // namespace braid::test

namespace braid::test {
namespace {

// The 2-rank direct all-reduce of a few floats: send, then receive-and-reduce,
// a chain on the short path (Executor::advance_chain).
std::vector<Schedule> direct_pair(std::size_t count) {
  static const std::vector<int> ring{0, 1};
  std::vector<Schedule> out;
  for (int r = 0; r < 2; ++r)
    out.push_back(direct_all_reduce(CollectiveShape{.rank = r, .ranks = 2, .ring = ring, .count = count,
                                                    .type = DataType::f32, .op = ReduceOp::sum}));
  return out;
}

}  // namespace

TEST_CASE("a chain on the short path hands over to the general loop before a sleep, and restarts", "[executor]") {
  const std::size_t count = 2;
  const auto schedules = direct_pair(count);
  std::vector<float> in0{1, 2}, in1{10, 20}, out0(count), out1(count);
  auto buffers = [&](std::vector<float>& in, std::vector<float>& out) {
    return Buffers{reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()),
                   count * 4, count * 4};
  };
  MemoryFabric fabric(2, {.short_bytes = 64});
  const auto links0 = fabric.links_of(0), links1 = fabric.links_of(1);
  Executor e0(schedules[0], buffers(in0, out0), links0, 1);
  Executor e1(schedules[1], buffers(in1, out1), links1, 1);
  for (std::uint32_t sequence = 1; sequence <= 3; ++sequence) {
    if (sequence > 1) {
      e0.restart(buffers(in0, out0), sequence);
      e1.restart(buffers(in1, out1), sequence);
    }
    std::fill(out0.begin(), out0.end(), 0.0f);
    std::fill(out1.begin(), out1.end(), 0.0f);
    CHECK_FALSE(e0.advance());  // sent; the peer's message is not there yet
    e0.park();                  // about to sleep: the receive becomes a request
    CHECK_THAT(e0.describe_pending(), Catch::Contains("from rank 1"));
    CHECK(e1.advance());        // rank 0's message was there: done at once
    int passes = 0;
    while (!e0.advance()) REQUIRE(++passes < 100);
    CHECK(out0 == std::vector<float>{11, 22});
    CHECK(out1 == std::vector<float>{11, 22});
  }
}

TEST_CASE("an empty message on a link without a short path is posted, not polled", "[executor]") {
  // A link whose short_message_bytes() is 0 (TCP) never takes a message on
  // the short path, not even an empty one (the pieces of a buffer smaller
  // than the ranks): polled there, the receive would never complete.
  Schedule send_empty, recv_empty;
  send_empty.add(Step{.kind = StepKind::send, .peer = 1, .src = {BufferId::input, 0, 0}, .tag_index = 0});
  recv_empty.add(Step{.kind = StepKind::recv, .peer = 0, .dst = {BufferId::output, 0, 0}, .tag_index = 0});
  std::byte in{}, out{};
  MemoryFabric fabric(2, {.short_bytes = 0});
  const auto links0 = fabric.links_of(0), links1 = fabric.links_of(1);
  Executor e0(send_empty, Buffers{&in, nullptr, 0, 0}, links0, 1);
  Executor e1(recv_empty, Buffers{nullptr, &out, 0, 0}, links1, 1);
  bool done0 = false, done1 = false;
  for (int passes = 0; !(done0 && done1); ++passes) {
    REQUIRE(passes < 100);
    if (!done0) done0 = e0.advance();
    if (!done1) done1 = e1.advance();
  }
  CHECK(fabric.undelivered() == 0);
}

TEST_CASE("a chain whose send the link refuses goes on in the general loop", "[executor]") {
  // A lazy link keeps earlier sends of 64 bytes queued (one delivered per
  // progress), so it refuses the chain's send_now.
  const std::size_t count = 2;
  const auto schedules = direct_pair(count);
  std::vector<std::byte> big(64 * 3, std::byte{7}), big_in(64 * 3);
  Schedule send_big, recv_big;
  for (std::uint32_t i = 0; i < 3; ++i) {
    send_big.add(Step{.kind = StepKind::send, .peer = 1, .src = {BufferId::input, 64 * i, 64}, .tag_index = i});
    recv_big.add(Step{.kind = StepKind::recv, .peer = 0, .dst = {BufferId::output, 64 * i, 64}, .tag_index = i});
  }
  std::vector<float> in0{1, 2}, in1{10, 20}, out0(count), out1(count);
  MemoryFabric fabric(2, {.sends = SendCompletion::lazy, .short_bytes = 16});
  const auto links0 = fabric.links_of(0), links1 = fabric.links_of(1);
  Executor big0(send_big, Buffers{big.data(), nullptr, big.size(), 0}, links0, 1);
  Executor big1(recv_big, Buffers{nullptr, big_in.data(), 0, big_in.size()}, links1, 1);
  CHECK_FALSE(big0.advance());
  Executor e0(schedules[0], Buffers{reinterpret_cast<const std::byte*>(in0.data()),
                                    reinterpret_cast<std::byte*>(out0.data()), count * 4, count * 4}, links0, 2);
  Executor e1(schedules[1], Buffers{reinterpret_cast<const std::byte*>(in1.data()),
                                    reinterpret_cast<std::byte*>(out1.data()), count * 4, count * 4}, links1, 2);
  CHECK_FALSE(e0.advance());
  CHECK_THAT(e0.describe_pending(), Catch::Contains("send to rank 1"));
  bool done[4] = {false, false, false, false};
  for (int passes = 0; !(done[0] && done[1] && done[2] && done[3]); ++passes) {
    REQUIRE(passes < 1000);
    if (!done[0]) done[0] = big0.advance();
    if (!done[1]) done[1] = big1.advance();
    if (!done[2]) done[2] = e0.advance();
    if (!done[3] && done[1]) done[3] = e1.advance();
  }
  CHECK(big_in == big);
  CHECK(out0 == std::vector<float>{11, 22});
  CHECK(out1 == std::vector<float>{11, 22});
}

}  // namespace braid::test
