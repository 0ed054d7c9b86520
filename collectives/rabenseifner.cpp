// Rabenseifner all-reduce: recursive halving, then recursive doubling.
//
// With p a power of two, the buffer is cut into p blocks (Partition, so any
// count works; with fewer elements than ranks some blocks are empty and their
// messages are skipped by both sides alike). Reduce-scatter by recursive
// halving: in the first round rank q pairs with q ^ p/2, the lower of the two
// keeps the lower half of the blocks, the other the upper half; each sends
// the half it gives up and reduces the half it keeps with what arrives. The
// next round halves the kept range again with partner q ^ p/4, and so on, so
// after log2(p) rounds rank q holds block q reduced over all ranks. An
// all-gather by recursive doubling runs the rounds backwards (partner q ^ 1,
// q ^ 2, ...), each rank sending everything it has, which doubles every round.
// Each rank sends (p-1)/p of the buffer in each phase, 2(p-1)/p in all, like
// the ring, but in 2 log2(p) hops instead of 2(p-1): the algorithm for
// medium messages and many ranks, where the ring's hop count dominates and
// recursive doubling's log2(p) whole buffers are too many bytes.
//
// Any n: the same fold as recursive doubling (fold.hpp): of the
// first 2(n - p) ranks each even one sends its whole buffer to the odd one
// above it and sits out; the odd one reduces and takes part, and sends the
// whole result back at the end. Hops: 2 log2(p), plus 2 with a fold.
//
// Bits: each block is reduced at one rank only, taking the lower group's
// partial as the first operand (a balanced tree over the ranks in rank
// order), and then copied to everyone, so every rank ends with the same bits.
// avg is divided once, by the block's owner, before the all-gather.
//
// Memory: the rank that keeps the lower half reduces in place into the
// output (receive-and-reduce, source and destination the same region, or the
// input's region of the output out of place). The upper rank must compute
// partner's (op) mine, so it receives into the other place (scratch when its
// partial is in the input or output, the output when it is in scratch) and
// reduces there. Regions that were sent are only rewritten by the all-gather,
// and each such receive waits for the reduce-scatter send from that region.
#include <bit>

#include "collectives/algorithms.hpp"
#include "collectives/fold.hpp"
#include "core/check.hpp"

namespace braid {

Schedule rabenseifner_all_reduce(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "rabenseifner");
  const std::size_t element = size_of(shape.type);
  const std::size_t bytes = shape.count * element;
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
  // Tags: 0 the fold, 1.. the reduce-scatter rounds, then the all-gather
  // rounds, then the result for the rank that sat out.
  const std::uint32_t fold_tag = 0;
  const auto scatter_tag = [](int k) { return static_cast<std::uint32_t>(1 + k); };
  const auto gather_tag = [&](int k) { return static_cast<std::uint32_t>(1 + rounds + k); };
  const std::uint32_t result_tag = gather_tag(rounds);

  if (fold.sits_out(shape.rank)) {
    Fold::sit_out(sched, shape.rank, input, output, fold_tag, result_tag);
    return sched;
  }

  sched.scratch_bytes = bytes;
  const Partition blocks{shape.count, static_cast<std::size_t>(fold.p)};
  // Blocks [first, first + m) of a buffer.
  const auto span = [&](BufferId buffer, int first, int m) {
    const std::size_t begin = blocks.begin(static_cast<std::size_t>(first));
    const std::size_t end = blocks.begin(static_cast<std::size_t>(first + m));
    return Region{buffer, begin * element, (end - begin) * element};
  };
  const int me = fold.participant(shape.rank);
  BufferId cur = BufferId::input;    // where this rank's partial of its kept range is
  std::vector<std::uint32_t> ready;  // the step that produced it

  if (fold.folded(shape.rank)) {
    // The lower rank's buffer comes first: scratch = theirs (op) mine.
    const Region all{BufferId::scratch, 0, bytes};
    const std::uint32_t got =
        sched.add(Step{.kind = StepKind::recv, .peer = shape.rank - 1, .dst = all, .tag_index = fold_tag});
    ready = {sched.add(Step{.kind = StepKind::reduce, .src = input, .dst = all, .deps = {got}})};
    cur = BufferId::scratch;
  }

  // Reduce-scatter. Round k halves the range of 2m blocks that holds block
  // `me` (m = p / 2^(k+1)); sent[k] is the send of the half given up.
  std::vector<std::vector<std::uint32_t>> sent(static_cast<std::size_t>(rounds));
  for (int k = 0; k < rounds; ++k) {
    const int m = fold.p >> (k + 1);
    const int partner = me ^ m;
    const int peer = fold.rank_of(partner);
    const bool upper = (me & m) != 0;
    const int lo = me & ~(2 * m - 1);
    const int give = upper ? lo : lo + m;
    const int keep = upper ? lo + m : lo;
    const Region out = span(cur, give, m);
    if (out.bytes > 0)
      sent[k] = {sched.add(
          Step{.kind = StepKind::send, .peer = peer, .src = out, .tag_index = scatter_tag(k), .deps = ready})};
    const Region mine = span(cur, keep, m);
    if (mine.bytes == 0) continue;  // and so are all later kept ranges
    if (!upper) {
      const BufferId to = cur == BufferId::input ? BufferId::output : cur;
      ready = {sched.add(Step{.kind = StepKind::recv_reduce, .peer = peer, .src = mine, .dst = span(to, keep, m),
                              .tag_index = scatter_tag(k), .deps = ready})};
      cur = to;
    } else {
      // Waiting for the last partial also orders the receive after every
      // earlier read of the place it overwrites.
      const BufferId to = cur == BufferId::scratch ? BufferId::output : BufferId::scratch;
      const Region dst = span(to, keep, m);
      const std::uint32_t got =
          sched.add(Step{.kind = StepKind::recv, .peer = peer, .dst = dst, .tag_index = scatter_tag(k), .deps = ready});
      ready = {sched.add(Step{.kind = StepKind::reduce, .src = mine, .dst = dst, .deps = {got}})};
      cur = to;
    }
  }

  // Block `me` is complete: bring it to the output and finish avg there.
  const Region own = span(BufferId::output, me, 1);
  std::vector<std::uint32_t> gathered;  // steps that completed parts of the output
  if (own.bytes > 0) {
    if (cur != BufferId::output)
      ready = {sched.add(Step{.kind = StepKind::copy, .src = span(cur, me, 1), .dst = own, .deps = ready})};
    if (shape.op == ReduceOp::avg) ready = {sched.add(Step{.kind = StepKind::average, .dst = own, .deps = ready})};
    gathered = ready;
  }

  // All-gather: round k sends the 2^k blocks this rank has and receives the
  // partner's 2^k, which are the blocks sent in reduce-scatter round
  // rounds-1-k; in place, that send may still be reading them.
  for (int k = 0; k < rounds; ++k) {
    const int m = 1 << k;
    const int partner = me ^ m;
    const int peer = fold.rank_of(partner);
    const Region out = span(BufferId::output, me & ~(m - 1), m);
    const Region in = span(BufferId::output, partner & ~(m - 1), m);
    if (out.bytes > 0)
      sched.add(Step{.kind = StepKind::send, .peer = peer, .src = out, .tag_index = gather_tag(k), .deps = gathered});
    if (in.bytes > 0)
      gathered.push_back(sched.add(Step{.kind = StepKind::recv, .peer = peer, .dst = in, .tag_index = gather_tag(k),
                                        .deps = sent[static_cast<std::size_t>(rounds - 1 - k)]}));
  }
  if (fold.folded(shape.rank))
    sched.add(
        Step{.kind = StepKind::send, .peer = shape.rank - 1, .src = output, .tag_index = result_tag, .deps = gathered});
  return sched;
}

}  // namespace braid
