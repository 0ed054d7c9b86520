// Hierarchical all-reduce (collectives/hierarchical.cpp) over the in-memory
// fabric: hosts of 2 to 4 ranks, 2 to 4 hosts, every type x operator, counts
// around the rank count, in and out of place, every kind of send; the
// results checked against the exact reference, and with random non-integer
// inputs, bit-identical on every rank. Static checks: the bytes that cross
// between hosts (less than the flat ring's, and exactly 2(H-1) buffers), the
// ring's pieces composing a ring all-reduce unchanged, and the fallback to
// the ring on hosts of different sizes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include "collectives/algorithms.hpp"
#include "core/reduce.hpp"
#include "schedule_checks.hpp"

namespace braid::test {
namespace {

// A job of `hosts` hosts x `per_host` ranks, ranks dealt round-robin over
// the hosts (rank r on host r % hosts) so host and rank order differ; the
// ring keeps each host's ranks together, as the planner's does.
struct Layout {
  int hosts = 2;
  int per_host = 2;
  int ranks() const { return hosts * per_host; }
  std::vector<int> host_of() const {
    std::vector<int> h;
    for (int r = 0; r < ranks(); ++r) h.push_back(r % hosts);
    return h;
  }
  std::vector<int> ring() const {
    std::vector<int> ring(static_cast<std::size_t>(ranks()));
    std::iota(ring.begin(), ring.end(), 0);
    const auto h = host_of();
    std::stable_sort(ring.begin(), ring.end(), [&](int a, int b) { return h[a] < h[b]; });
    return ring;
  }
  std::string text() const { return cat(hosts, " hosts x ", per_host, " ranks"); }
};

constexpr Layout kLayouts[] = {{2, 2}, {2, 3}, {3, 2}, {4, 2}, {2, 4}};

std::vector<Schedule> schedules_of(const Layout& l, std::size_t count, DataType type, ReduceOp op,
                                   std::size_t slice = kDefaultSlice, bool hierarchical = true,
                                   std::size_t window = 0) {
  const std::vector<int> ring = l.ring(), hosts = l.host_of();
  const std::vector<int> groups(static_cast<std::size_t>(l.ranks()), 0);  // one kernel: every link between hosts
  std::vector<Schedule> out;
  for (int r = 0; r < l.ranks(); ++r) {
    const CollectiveShape shape{.rank = r, .ranks = l.ranks(), .ring = ring, .hosts = hosts, .count = count,
                                .type = type, .op = op, .slice_bytes = slice, .window_groups = groups,
                                .flow_window = window};
    out.push_back(hierarchical ? hierarchical_all_reduce(shape) : ring_all_reduce(shape));
  }
  return out;
}

std::size_t bytes_across(const Layout& l, const std::vector<Schedule>& schedules) {
  const auto hosts = l.host_of();
  std::size_t total = 0;
  for (int r = 0; r < l.ranks(); ++r)
    for (const Step& s : schedules[r].steps)
      if (s.kind == StepKind::send && hosts[s.peer] != hosts[r]) total += s.src.bytes;
  return total;
}

TEST_CASE("hierarchical all-reduce: every type, operator and count, 2 to 4 hosts", "[all_reduce][hierarchical]") {
  Failures failures;
  for (const Layout& l : kLayouts) {
    const int n = l.ranks();
    const auto un = static_cast<std::size_t>(n);
    for (DataType type : kTypes)
      for (ReduceOp op : kOps)
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, un - 1, un + 1, std::size_t{1001}})
          for (bool in_place : {false, true})
            for (SendCompletion sends : kSendModes) {
              // Small slices too, so every phase pipelines several.
              const std::size_t slice = count == 1001 ? 64 : kDefaultSlice;
              const std::string what = cat("hierarchical all_reduce of ", count, " ", name_of(type), " (",
                                           name_of(op), ") on ", l.text(), ", slice ", slice, ", ",
                                           in_place ? "in place" : "out of place", ", ", name_of(sends), " sends");
              std::vector<RankMemory> memories;
              for (int r = 0; r < n; ++r) {
                auto input = make_input(type, op, r, count);
                memories.push_back(make_memory(input, input.size(), placement(in_place)));
              }
              const auto schedules = schedules_of(l, count, type, op, slice);
              if (count > 0 && schedules[0].algorithm != "hierarchical")
                failures.add(cat(what, ": built ", schedules[0].algorithm));
              if (!run_to_completion(what, sends, schedules, memories, failures)) continue;
              const auto expected = expected_all_reduce(type, op, n, count);
              for (int r = 0; r < n; ++r) check_memory(what, r, type, memories[r], expected, failures);
            }
  }
  CHECK(failures.report() == "");
}

TEST_CASE("hierarchical all-reduce: the same bits on every rank", "[all_reduce][hierarchical]") {
  Failures failures;
  for (const Layout& l : kLayouts)
    for (DataType type : {DataType::f16, DataType::bf16, DataType::f32, DataType::f64})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        const std::size_t count = 333;
        const RandomInputs random = random_inputs(type, l.ranks(), count, 7);
        std::vector<RankMemory> memories;
        for (int r = 0; r < l.ranks(); ++r)
          memories.push_back(make_memory(random.inputs[r], random.inputs[r].size(), Alias::none));
        const std::string what = cat("hierarchical ", name_of(type), " ", name_of(op), " on ", l.text());
        if (!run_to_completion(what, SendCompletion::eager, schedules_of(l, count, type, op, 64), memories, failures))
          continue;
        for (int r = 1; r < l.ranks(); ++r)
          if (!std::ranges::equal(memories[r].output(), memories[0].output()))
            failures.add(cat(what, ": rank ", r, " differs from rank 0"));
      }
  CHECK(failures.report() == "");
}

TEST_CASE("hierarchical all-reduce: fewer bytes cross between hosts than with the ring", "[all_reduce][hierarchical]") {
  for (const Layout& l : kLayouts) {
    // A count every partition divides: chunks of whole elements everywhere.
    const std::size_t count = 4 * 3 * 5 * 7 * 64, bytes = count * 4;
    const std::size_t hierarchical = bytes_across(l, schedules_of(l, count, DataType::f32, ReduceOp::sum));
    const std::size_t ring = bytes_across(l, schedules_of(l, count, DataType::f32, ReduceOp::sum, kDefaultSlice, false));
    INFO(l.text() << ": hierarchical " << hierarchical << " bytes, ring " << ring);
    CHECK(hierarchical == 2 * static_cast<std::size_t>(l.hosts - 1) * bytes);
    CHECK(ring == static_cast<std::size_t>(l.hosts) * 2 * static_cast<std::size_t>(l.ranks() - 1) * bytes /
                      static_cast<std::size_t>(l.ranks()));
    CHECK(hierarchical < ring);
  }
}

TEST_CASE("hierarchical all-reduce: the plain ring where hosts are not alike", "[all_reduce][hierarchical]") {
  const std::vector<int> ring = identity_ring(5);
  // 3 ranks on host 0 and 2 on host 1; one host; one rank per host; no hosts known.
  const std::vector<std::vector<int>> cases = {{0, 0, 0, 1, 1}, {0, 0, 0, 0, 0}, {0, 1, 2, 3, 4}, {}};
  for (const auto& hosts : cases) {
    const Schedule s = hierarchical_all_reduce(
        CollectiveShape{.rank = 1, .ranks = 5, .ring = ring, .hosts = hosts, .count = 100, .type = DataType::f32});
    CHECK(s.algorithm == "ring");
  }
}

TEST_CASE("ring all-reduce from its pieces: tags unique, every message matched", "[all_reduce][hierarchical]") {
  for (const Layout& l : kLayouts) {
    const auto schedules = schedules_of(l, 1001, DataType::f32, ReduceOp::sum, 64);
    for (const auto& s : schedules) CHECK(repeated_tags(s) == "");
    CHECK(unmatched_messages(schedules) == "");
  }
}

// The steps of a schedule that send to a rank of another host without
// waiting for the receive `window` slices back in the same round (tag - window,
// from any peer: the ring's predecessor). Slices per round: `slices`.
std::size_t sends_without_window(const Schedule& s, std::span<const int> hosts, int rank, std::size_t slices,
                                 std::size_t window) {
  std::size_t missing = 0;
  for (const Step& step : s.steps) {
    if (step.kind != StepKind::send || hosts[static_cast<std::size_t>(step.peer)] == hosts[static_cast<std::size_t>(rank)])
      continue;
    if (step.tag_index % slices < window) continue;  // the first slices of a round go at once
    const bool waits = std::ranges::any_of(step.deps, [&](std::uint32_t d) {
      const Step& dep = s.steps[d];
      return (dep.kind == StepKind::recv || dep.kind == StepKind::recv_reduce) &&
             dep.tag_index + window == step.tag_index;
    });
    missing += waits ? 0 : 1;
  }
  return missing;
}

TEST_CASE("flow window: every type, operator and count, hierarchical and ring", "[all_reduce][hierarchical]") {
  Failures failures;
  for (const Layout& l : kLayouts) {
    const int n = l.ranks();
    for (bool hierarchical : {true, false})
      for (std::size_t window : {std::size_t{64}, std::size_t{128}, std::size_t{256}})
        for (DataType type : {DataType::i8, DataType::f16, DataType::f32, DataType::f64})
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
            for (std::size_t count : {std::size_t{1}, static_cast<std::size_t>(n + 1), std::size_t{1001}})
              for (SendCompletion sends : kSendModes) {
                const std::string what = cat(hierarchical ? "hierarchical" : "ring", " all_reduce of ", count, " ",
                                             name_of(type), " (", name_of(op), ") on ", l.text(), ", window ",
                                             window, ", ", name_of(sends), " sends");
                std::vector<RankMemory> memories;
                for (int r = 0; r < n; ++r) {
                  auto input = make_input(type, op, r, count);
                  memories.push_back(make_memory(input, input.size(), Alias::none));
                }
                // Slices of 512 bytes: the window cuts them to its size.
                const auto schedules = schedules_of(l, count, type, op, 512, hierarchical, window);
                if (!run_to_completion(what, sends, schedules, memories, failures)) continue;
                const auto expected = expected_all_reduce(type, op, n, count);
                for (int r = 0; r < n; ++r) check_memory(what, r, type, memories[r], expected, failures);
              }
  }
  CHECK(failures.report() == "");
}

TEST_CASE("flow window: sends between hosts wait for the receive a window back", "[all_reduce][hierarchical]") {
  // 2 hosts of 1 rank: the ring is the only piece, every link crosses. f32,
  // 2000 elements: chunks of 4000 bytes. The slice is the smaller of the one
  // asked for and the window; the window then spans window / slice slices.
  const Layout l{2, 1};
  const auto hosts = l.host_of();
  struct Case {
    std::size_t asked, window, slice;
  };
  for (const Case c : {Case{512, 64, 64}, Case{512, 128, 128}, Case{64, 128, 64}, Case{64, 256, 64}}) {
    const auto schedules = schedules_of(l, 2000, DataType::f32, ReduceOp::sum, c.asked, false, c.window);
    const std::size_t slices = (4000 + c.slice - 1) / c.slice;
    for (int r = 0; r < 2; ++r) {
      INFO("slice " << c.asked << " asked, window " << c.window << ", rank " << r);
      CHECK(sends_without_window(schedules[r], hosts, r, slices, c.window / c.slice) == 0);
      CHECK(std::ranges::count(schedules[r].steps, StepKind::send, &Step::kind) == static_cast<long>(2 * slices));
    }
    CHECK(unmatched_messages(schedules) == "");
  }
  // Without the window the same sends go at once: the check above can fail.
  const auto unbounded = schedules_of(l, 2000, DataType::f32, ReduceOp::sum, 64, false, 0);
  CHECK(sends_without_window(unbounded[0], hosts, 0, 63, 1) > 0);
}

TEST_CASE("flow window: only between hosts of one window group", "[all_reduce][hierarchical]") {
  const std::vector<int> ring = identity_ring(4), hosts = {0, 0, 1, 1};
  CollectiveShape shape{.rank = 0, .ranks = 4, .ring = ring, .hosts = hosts, .flow_window = 4096};
  const std::vector<int> one_kernel = {0, 0, 0, 0}, two_kernels = {0, 0, 2, 2}, none = {-1, -1, -1, -1};
  shape.window_groups = one_kernel;
  CHECK(shape.window_between(0, 2) == 4096);
  CHECK(shape.window_between(0, 1) == 0);  // one host: shared memory
  CHECK(shape.ring_window(ring) == 4096);
  CHECK(shape.ring_window(std::vector<int>{0, 1}) == 0);
  shape.window_groups = two_kernels;  // two machines
  CHECK(shape.window_between(0, 2) == 0);
  CHECK(shape.ring_window(ring) == 0);
  shape.window_groups = none;
  CHECK(shape.ring_window(ring) == 0);
  shape.window_groups = one_kernel;
  shape.flow_window = 0;
  CHECK(shape.ring_window(ring) == 0);
}

}  // namespace
}  // namespace braid::test
