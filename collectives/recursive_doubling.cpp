// Recursive doubling all-reduce.
//
// With p a power of two, rank q exchanges its whole partial result with rank
// q ^ 1, then q ^ 2, q ^ 4, ..., and both partners reduce what they hold with
// what they receive. After round k each rank holds the reduction over the 2^(k+1)
// ranks that agree with it above bit k, so after log2(p) rounds every rank
// holds the full result. That is log2(p) message hops, the latency lower bound
// for all-reduce with point-to-point messages (ring: 2(n-1); direct: one hop
// but n-1 whole-buffer messages per rank), at the price of sending the whole
// buffer every round: log2(p) buffers per rank against the ring's 2(n-1)/n.
// So it wins for tiny messages, where every hop costs latency and the bytes
// cost nothing.
//
// Any n: with p the largest power of two <= n and r = n - p, the first 2r
// ranks fold in pairs before the exchange: even rank 2i sends its buffer to
// rank 2i+1, which reduces it into its own and takes part for both; rank 2i
// sits out and receives the result from 2i+1 at the end. The p participants,
// renumbered 0..p-1 in rank order, run recursive doubling. Hops on the
// longest chain: log2(p) for a power of two; with a fold at most log2(p) + 2
// (fold, rounds, result back), but a participant that did not fold sends its
// first round at once, so the fold overlaps that round and the chain is
// log2(p) + 1 unless more than half the participants folded (r > p/2), whose
// partners in the last round then come late too. n = 5: 3 hops (rank 4 gets
// the late partial of ranks 0-1 through rank 2; rank 0 gets the result from
// rank 1); n = 7: 4.
//
// Bits: a reduction always takes the partial of the lower group (lower
// ranks) as its first operand, so the result is one balanced tree over the
// ranks in rank order, and both partners of an exchange compute the same
// operation on the same operands: every rank ends with the same bits. avg is
// summed and then divided once by every participant (they all hold the same
// sum); the ranks that sat out receive the divided result.
//
// Memory: a round's partial is being sent while the next one is written, so
// partials alternate between the output and scratch slots, and a write into a
// place waits for every earlier send and read from it (the input counts as the
// output, since they may be the same memory). The places are chosen backwards
// so that the last partial lands in the output; the first can never be the
// output (in place that is the input still being read), and only when there
// is a single write does the result need a copy at the end.
#include <bit>

#include "collectives/algorithms.hpp"
#include "collectives/fold.hpp"
#include "core/check.hpp"

namespace braid {
namespace {

/// Where a partial lives: the output (with the input, which may alias it) or
/// one of two scratch slots.
enum Place : int { kMain = 0, kSlotA = 1, kSlotB = 2 };

}  // namespace

Schedule recursive_doubling_all_reduce(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "recdbl");
  const std::size_t bytes = shape.count * size_of(shape.type);
  const int n = shape.ranks;
  const Region input{BufferId::input, 0, bytes};
  const Region output{BufferId::output, 0, bytes};
  if (bytes == 0) return sched;
  if (n == 1) {
    sched.add(Step{.kind = StepKind::copy, .src = input, .dst = output});
    return sched;
  }
  const Fold fold{n};
  const int rounds = std::countr_zero(static_cast<unsigned>(fold.p));
  const std::uint32_t fold_tag = 0;
  const auto round_tag = [](int k) { return static_cast<std::uint32_t>(1 + k); };
  const std::uint32_t result_tag = round_tag(rounds);

  if (fold.sits_out(shape.rank)) {
    Fold::sit_out(sched, shape.rank, input, output, fold_tag, result_tag);
    return sched;
  }

  const bool folded = fold.folded(shape.rank);
  const int writes = rounds + (folded ? 1 : 0);
  // Write j goes to the output if the number of writes after it is even, else
  // to slot A; a first write that would land in the output goes to slot B
  // (slot A when it is the only write, which a copy then finishes).
  const auto place_of = [&](int j) {
    const Place p = (writes - 1 - j) % 2 == 0 ? kMain : kSlotA;
    if (j == 0 && p == kMain) return writes == 1 ? kSlotA : kSlotB;
    return p;
  };
  const auto region_of = [&](Place p) {
    return p == kMain ? output : Region{BufferId::scratch, p == kSlotA ? 0 : bytes, bytes};
  };
  std::vector<std::uint32_t> readers[3];  // steps that read a place since its last write
  const auto claim = [&](Place p) {       // a write into p waits for them
    std::vector<std::uint32_t> deps = std::move(readers[p]);
    readers[p].clear();
    return deps;
  };
  const auto also = [](std::vector<std::uint32_t> deps, std::vector<std::uint32_t> more) {
    deps.insert(deps.end(), more.begin(), more.end());
    return deps;
  };

  Place cur = kMain;  // the input counts as the output
  Region cur_region = input;
  std::vector<std::uint32_t> ready;  // the step that produced the current partial
  int write = 0;
  // Writes partner's (op) mine into the next place when the partner is the
  // lower group, mine (op) partner's otherwise.
  const auto take = [&](int peer, std::uint32_t tag, bool partner_first) {
    const Place next = place_of(write++);
    const Region dst = region_of(next);
    std::uint32_t last;
    if (partner_first) {
      const std::uint32_t got =
          sched.add(Step{.kind = StepKind::recv, .peer = peer, .dst = dst, .tag_index = tag, .deps = claim(next)});
      last = sched.add(Step{.kind = StepKind::reduce, .src = cur_region, .dst = dst, .deps = also({got}, ready)});
    } else {
      last = sched.add(Step{.kind = StepKind::recv_reduce, .peer = peer, .src = cur_region, .dst = dst,
                            .tag_index = tag, .deps = also(claim(next), ready)});
    }
    readers[cur].push_back(last);
    cur = next;
    cur_region = dst;
    ready = {last};
  };

  if (folded) take(shape.rank - 1, fold_tag, true);
  const int me = fold.participant(shape.rank);
  for (int k = 0; k < rounds; ++k) {
    const int partner = me ^ (1 << k);
    const int peer = fold.rank_of(partner);
    readers[cur].push_back(sched.add(
        Step{.kind = StepKind::send, .peer = peer, .src = cur_region, .tag_index = round_tag(k), .deps = ready}));
    take(peer, round_tag(k), partner < me);
  }
  BRAID_CHECK(write == writes, "recursive doubling made ", write, " writes, planned ", writes);
  if (cur != kMain)
    ready = {sched.add(
        Step{.kind = StepKind::copy, .src = cur_region, .dst = output, .deps = also(claim(kMain), ready)})};
  sched.scratch_bytes = (place_of(0) == kSlotB ? 2 : 1) * bytes;
  if (shape.op == ReduceOp::avg) ready = {sched.add(Step{.kind = StepKind::average, .dst = output, .deps = ready})};
  if (folded)
    sched.add(
        Step{.kind = StepKind::send, .peer = shape.rank - 1, .src = output, .tag_index = result_tag, .deps = ready});
  return sched;
}

}  // namespace braid
