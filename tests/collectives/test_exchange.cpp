// Schedule tests for the collectives that move blocks between ranks:
// pairwise all-to-all, direct gather and scatter (exchange.cpp), ring
// all-gather and reduce-scatter (ring_gather_scatter.cpp). The schedules of N
// ranks run against each other over the in-memory fabric (memory_link.hpp,
// schedule_runner.hpp) in every kind of send.
//
// Every buffer a rank passes lies inside a larger allocation with guard bytes
// on both sides, and in place the input and output share one allocation as the
// API lays them out. After a run the whole allocation must equal what it was,
// with only the output region replaced by the expected output: that checks the
// placement of every block, the guards, an input left unchanged out of place
// and, for reduce-scatter in place, the rest of the send buffer. Buffers that
// only the root has are absent (null, size 0) elsewhere. Block bytes carry
// their source rank and destination block, so a block in the wrong place or
// from the wrong rank shows. Static checks of the schedules (tags, matching
// sends and receives, peers, message sizes) need no run. The memory layout
// and the helpers shared with the other schedule tests are in
// schedule_checks.hpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <tuple>

#include "collectives/algorithms.hpp"
#include "schedule_checks.hpp"

namespace braid::test {
namespace {

constexpr DataType kSomeTypes[] = {DataType::u8, DataType::f16, DataType::f32, DataType::i64};

/// Empty, one element, a few, an odd count above 1000 in one slice and in
/// about 12 (of 83 or 84 elements), about 12 slices of 3 or 4 elements, all
/// of them with slices that are not a whole number of elements, and slices
/// smaller than one element.
std::vector<CountCase> block_counts(std::size_t element) {
  return {{0, kDefaultSlice},          {1, kDefaultSlice},    {7, kDefaultSlice}, {1001, kDefaultSlice},
          {1001, 83 * element + 1},    {37, 3 * element + 1}, {5, 1}};
}

enum class Collective : std::uint8_t { all_to_all, gather, scatter, all_gather, reduce_scatter };

std::string_view name_of(Collective c) {
  switch (c) {
    case Collective::all_to_all: return "pairwise all_to_all";
    case Collective::gather: return "direct gather";
    case Collective::scatter: return "direct scatter";
    case Collective::all_gather: return "ring all_gather";
    case Collective::reduce_scatter: return "ring reduce_scatter";
  }
  return "?";
}

Schedule build(Collective c, const CollectiveShape& shape) {
  switch (c) {
    case Collective::all_to_all: return pairwise_all_to_all(shape);
    case Collective::gather: return direct_gather(shape);
    case Collective::scatter: return direct_scatter(shape);
    case Collective::all_gather: return ring_all_gather(shape);
    case Collective::reduce_scatter: return ring_reduce_scatter(shape);
  }
  return {};
}

using Case = ScheduleCase<Collective>;

std::string describe(const Case& c) {
  const bool rooted = c.algorithm == Collective::gather || c.algorithm == Collective::scatter;
  return cat(name_of(c.algorithm), " of ", c.count, " ", name_of(c.type),
             c.algorithm == Collective::reduce_scatter ? cat(" (", name_of(c.op), ")") : std::string(), " over ", c.ranks,
             " ranks", rooted ? cat(", root ", c.root) : std::string(), ", slice ", c.slice_bytes, " B, ",
             c.in_place ? "in place" : "out of place", ", ", name_of(c.sends), " sends",
             c.ring.empty() ? "" : ", ring " + ring_text(c.ring));
}

/// Byte i of the block that rank `from` sends towards block `to`: 17 from +
/// to plus a pseudo-random byte that varies along the block, so the first byte
/// alone tells apart the blocks that one rank gets from up to 17 senders.
std::vector<std::byte> block_bytes(int from, int to, std::size_t bytes) {
  static const std::vector<std::uint8_t> pattern = [] {  // long enough for every case here
    std::vector<std::uint8_t> p(1001 * 8);
    for (std::size_t i = 1; i < p.size(); ++i) p[i] = static_cast<std::uint8_t>(mix(i) >> 56);
    return p;
  }();
  BRAID_CHECK(bytes <= pattern.size(), "blocks of up to ", pattern.size(), " bytes");
  std::vector<std::byte> out(bytes);
  const auto first = static_cast<std::uint8_t>(17 * from + to);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::byte>(static_cast<std::uint8_t>(first + pattern[i]));
  return out;
}

void append(std::vector<std::byte>& to, std::span<const std::byte> bytes) { to.insert(to.end(), bytes.begin(), bytes.end()); }

/// Every rank's reduce-scatter input (n x count elements) and the all-reduce
/// of them, whose block r is rank r's result. The reference costs more than a
/// run, and the cases of one (type, operator, ranks, count) come one after
/// another, so the last one is kept.
struct ReductionInputs {
  std::tuple<DataType, ReduceOp, int, std::size_t> key{DataType::u8, ReduceOp::sum, 0, 0};
  std::vector<std::vector<std::byte>> inputs;
  std::vector<std::byte> result;
  static const ReductionInputs& none() {
    static const ReductionInputs empty;
    return empty;
  }
};

const ReductionInputs& reduction_inputs(DataType type, ReduceOp op, int n, std::size_t count) {
  static ReductionInputs last;
  if (last.key != std::tuple{type, op, n, count}) {
    last.key = {type, op, n, count};
    last.inputs.clear();
    for (int r = 0; r < n; ++r) last.inputs.push_back(make_input(type, op, r, count * static_cast<std::size_t>(n)));
    last.result = expected_all_reduce(type, op, n, count * static_cast<std::size_t>(n));
  }
  return last;
}

/// Runs one case: builds every rank's memory and expected output, runs the
/// schedules and checks every rank.
void check_case(const Case& c, Failures& failures) {
  const int n = c.ranks;
  const std::size_t block = c.count * size_of(c.type);
  const std::size_t total = block * static_cast<std::size_t>(n);
  const std::vector<int> ring = c.ring.empty() ? identity_ring(n) : c.ring;
  std::vector<RankMemory> memories;
  std::vector<std::vector<std::byte>> expected(static_cast<std::size_t>(n));
  const ReductionInputs& reduction =
      c.algorithm == Collective::reduce_scatter ? reduction_inputs(c.type, c.op, n, c.count) : ReductionInputs::none();

  for (int r = 0; r < n; ++r) {
    const std::size_t mine = block * static_cast<std::size_t>(r);
    std::vector<std::byte> input;
    auto& want = expected[r];
    switch (c.algorithm) {
      case Collective::all_to_all:
        for (int p = 0; p < n; ++p) {
          append(input, block_bytes(r, p, block));
          append(want, block_bytes(p, r, block));
        }
        memories.push_back(make_memory(input, total, c.in_place ? Alias::input_in_output : Alias::none));
        break;
      case Collective::all_gather:
        for (int p = 0; p < n; ++p) append(want, block_bytes(p, 0, block));
        memories.push_back(
            make_memory(block_bytes(r, 0, block), total, c.in_place ? Alias::input_in_output : Alias::none, mine));
        break;
      case Collective::reduce_scatter:
        want.assign(reduction.result.begin() + static_cast<std::ptrdiff_t>(mine),
                    reduction.result.begin() + static_cast<std::ptrdiff_t>(mine + block));
        memories.push_back(make_memory(reduction.inputs[r], block,
                                       c.in_place ? Alias::output_in_input : Alias::none, mine));
        break;
      case Collective::gather:
        if (r == c.root) {
          for (int p = 0; p < n; ++p) append(want, block_bytes(p, c.root, block));
          memories.push_back(make_memory(block_bytes(r, c.root, block), total,
                                         c.in_place ? Alias::input_in_output : Alias::none, mine));
        } else {
          memories.push_back(make_memory(block_bytes(r, c.root, block), 0, Alias::none));
        }
        break;
      case Collective::scatter:
        want = block_bytes(c.root, r, block);
        if (r == c.root) {
          for (int p = 0; p < n; ++p) append(input, block_bytes(c.root, p, block));
          memories.push_back(make_memory(input, block, c.in_place ? Alias::output_in_input : Alias::none, mine));
        } else {
          memories.push_back(make_memory({}, block, Alias::none));
        }
        break;
    }
  }

  std::vector<Schedule> schedules;
  for (int r = 0; r < n; ++r)
    schedules.push_back(build(c.algorithm, CollectiveShape{.rank = r, .ranks = n, .ring = ring, .count = c.count,
                                                           .type = c.type, .op = c.op, .root = c.root,
                                                           .slice_bytes = c.slice_bytes}));
  const std::string what = describe(c);
  if (!run_to_completion(what, c.sends, schedules, memories, failures)) return;
  for (int r = 0; r < n; ++r) check_memory(what, r, c.type, memories[r], expected[r], failures, block);
}

std::span<const DataType> types_for(int n) {
  if (n <= kFullMatrixRanks) return kTypes;
  return kSomeTypes;
}

/// Every rank count, type (all of them up to kFullMatrixRanks), count case,
/// placement and root (where the collective has one), each with every kind of
/// send up to kFullMatrixRanks. Above, the kinds of send take turns, except
/// that `always_rendezvous` runs rendezvous sends in every case.
Failures block_matrix_failures(Collective collective, bool rooted, bool always_rendezvous) {
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n) {
    int turn = 0;
    for (int root : rooted ? roots_for(n) : std::vector<int>{0})
      for (DataType type : types_for(n))
        for (const CountCase& cc : block_counts(size_of(type)))
          for (bool in_place : {false, true}) {
            ++turn;
            for (int s = 0; s < 3; ++s) {
              const bool rendezvous = kSendModes[s] == SendCompletion::rendezvous;
              if (n > kFullMatrixRanks && s != turn % 3 && !(always_rendezvous && rendezvous)) continue;
              check_case(Case{.algorithm = collective, .ranks = n, .root = root, .type = type, .count = cc.count,
                              .slice_bytes = cc.slice_bytes, .in_place = in_place, .sends = kSendModes[s]},
                         failures);
            }
          }
  }
  return failures;
}

TEST_CASE("pairwise all-to-all: every block lands in place on 1 to 17 ranks", "[all_to_all]") {
  CHECK(block_matrix_failures(Collective::all_to_all, false, true).report() == "");
}

TEST_CASE("direct gather: the root gets every block, from every root, on 1 to 17 ranks", "[gather]") {
  CHECK(block_matrix_failures(Collective::gather, true, false).report() == "");
}

TEST_CASE("direct scatter: every rank gets its block, from every root, on 1 to 17 ranks", "[scatter]") {
  CHECK(block_matrix_failures(Collective::scatter, true, false).report() == "");
}

TEST_CASE("ring all-gather: every block lands in place on 1 to 17 ranks, in rank order and not", "[all_gather]") {
  // Above kFullMatrixRanks the two rings take turns along the count cases,
  // so each still meets every type, count case, placement and kind of send.
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n) {
    const std::vector<int> rings[] = {identity_ring(n), scrambled_ring(n)};
    for (DataType type : types_for(n)) {
      const auto counts = block_counts(size_of(type));
      for (int k = 0; k < static_cast<int>(counts.size()); ++k)
        for (bool in_place : {false, true})
          for (int s = 0; s < 3; ++s)
            for (int g = 0; g < 2; ++g) {
              if (n > kFullMatrixRanks && g != (static_cast<int>(type) + k + in_place + s) % 2) continue;
              check_case(Case{.algorithm = Collective::all_gather, .ranks = n, .type = type, .count = counts[k].count,
                              .slice_bytes = counts[k].slice_bytes, .in_place = in_place, .sends = kSendModes[s],
                              .ring = rings[g]},
                         failures);
            }
    }
  }
  CHECK(failures.report() == "");
}

TEST_CASE("ring reduce-scatter: every type and operator on 1 to 17 ranks, in rank order and not", "[reduce_scatter]") {
  // Up to kFullMatrixRanks every combination runs. Above, each (type,
  // operator) pair takes every third count case in turn and the kinds of send
  // and the two rings take turns, so every rank count still sees every type,
  // operator, count case, placement, kind of send and ring.
  Failures failures;
  for (int n = 1; n <= kMaxRanks; ++n) {
    const std::vector<int> rings[] = {identity_ring(n), scrambled_ring(n)};
    for (int t = 0; t < kDataTypeCount; ++t)
      for (int o = 0; o < kReduceOpCount; ++o) {
        const auto counts = block_counts(size_of(kTypes[t]));
        for (int k = 0; k < static_cast<int>(counts.size()); ++k) {
          if (n > kFullMatrixRanks && (t + 2 * o + k) % 3 != 0) continue;
          for (bool in_place : {false, true})
            for (int s = 0; s < 3; ++s)
              for (int g = 0; g < 2; ++g) {
                if (n > kFullMatrixRanks && (s != (t + o + k + in_place) % 3 || g != (t + k + s) % 2)) continue;
                check_case(Case{.algorithm = Collective::reduce_scatter, .ranks = n, .type = kTypes[t], .op = kOps[o],
                                .count = counts[k].count, .slice_bytes = counts[k].slice_bytes, .in_place = in_place,
                                .sends = kSendModes[s], .ring = rings[g]},
                           failures);
              }
        }
      }
  }
  CHECK(failures.report() == "");
}

/// The peers rank r of `collective` should talk to, sorted.
std::vector<int> expected_peers(Collective collective, int n, int r, int root, const std::vector<int>& ring) {
  std::vector<int> out;
  switch (collective) {
    case Collective::all_to_all:
      for (int p = 0; p < n; ++p)
        if (p != r) out.push_back(p);
      break;
    case Collective::gather:
    case Collective::scatter:
      if (r != root) out.push_back(root);
      else
        for (int p = 0; p < n; ++p)
          if (p != r) out.push_back(p);
      break;
    case Collective::all_gather:
    case Collective::reduce_scatter: {
      if (n == 1) break;
      const int pos = ring_position(ring, r);
      out = {ring[(pos + 1) % n], ring[(pos + n - 1) % n]};
      break;
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

TEST_CASE("exchange and ring gather/scatter schedules: tags, matching, peers and message sizes", "[schedule]") {
  // Tags are unique per peer and direction; the k-th send of a to b meets the
  // k-th receive of b from a in tag and size; a rank talks to exactly the
  // peers its algorithm names; no message is empty or much above slice_bytes;
  // an empty collective has no steps at all.
  Failures failures;
  constexpr Collective kAll[] = {Collective::all_to_all, Collective::gather, Collective::scatter, Collective::all_gather,
                                 Collective::reduce_scatter};
  for (int n = 1; n <= kMaxRanks; ++n)
    for (Collective collective : kAll) {
      const bool rooted = collective == Collective::gather || collective == Collective::scatter;
      const bool ringed = collective == Collective::all_gather || collective == Collective::reduce_scatter;
      std::vector<std::vector<int>> rings = {identity_ring(n)};
      if (ringed) rings.push_back(scrambled_ring(n));
      for (const std::vector<int>& ring : rings)
        for (int root : rooted ? roots_for(n) : std::vector<int>{0})
          for (DataType type : {DataType::u8, DataType::f32, DataType::f64}) {
            const std::size_t element = size_of(type);
            for (const CountCase& cc : block_counts(element)) {
              const std::string what = cat(name_of(collective), " of ", cc.count, " ", name_of(type), " over ", n,
                                           " ranks, root ", root, ", slice ", cc.slice_bytes, ", ring ", ring_text(ring));
              std::vector<Schedule> schedules;
              for (int r = 0; r < n; ++r)
                schedules.push_back(build(collective, CollectiveShape{.rank = r, .ranks = n, .ring = ring, .count = cc.count,
                                                                      .type = type, .root = root,
                                                                      .slice_bytes = cc.slice_bytes}));
              for (int r = 0; r < n; ++r) {
                const Schedule& s = schedules[r];
                if (auto e = repeated_tags(s); !e.empty()) failures.add(cat(what, ": rank ", r, ": ", e));
                if (cc.count == 0) {
                  if (!s.steps.empty()) failures.add(cat(what, ": rank ", r, " has ", s.steps.size(), " steps"));
                  continue;
                }
                if (s.peers() != expected_peers(collective, n, r, root, ring))
                  failures.add(cat(what, ": rank ", r, " talks to ", s.peers().size(), " peers, not the expected ones"));
                for (const Step& step : s.steps) {
                  if (step.peer < 0) continue;
                  const std::size_t bytes = step.kind == StepKind::send ? step.src.bytes : step.dst.bytes;
                  if (bytes == 0 || bytes > cc.slice_bytes + element)
                    failures.add(cat(what, ": rank ", r, " ", braid::name_of(step.kind), " of ", bytes, " B with rank ",
                                     step.peer));
                }
              }
              if (auto e = unmatched_messages(schedules); !e.empty()) failures.add(cat(what, ": ", e));
            }
          }
    }
  CHECK(failures.report() == "");
}

TEST_CASE("pairwise all-to-all keeps its rounds in order and its scratch at half the buffer", "[all_to_all]") {
  // Round k's transfers of a slice wait for round k-1's, so a rank has about
  // one block in flight; in place needs scratch for floor(n/2) blocks.
  for (int n = 2; n <= kMaxRanks; ++n)
    for (int r : {0, n / 2, n - 1}) {
      const std::vector<int> ring = identity_ring(n);
      const Schedule s = pairwise_all_to_all(
          CollectiveShape{.rank = r, .ranks = n, .ring = ring, .count = 100, .type = DataType::f32, .slice_bytes = 64});
      INFO(n << " ranks, rank " << r);
      CHECK(s.scratch_bytes == static_cast<std::size_t>(n / 2) * 400);
      int last_to = 0;
      for (const Step& step : s.steps)
        if (step.kind == StepKind::send) {
          const int k = (step.peer - r + n) % n;
          CHECK(k >= last_to);
          last_to = k;
          if (k > 1) CHECK(!step.deps.empty());
        }
      CHECK(last_to == n - 1);
    }
}

}  // namespace
}  // namespace braid::test
