// Ring reduce-scatter and ring all-gather: the two halves of the ring
// all-reduce (ring.cpp), as collectives of their own.
//
// All-gather: in round s every rank forwards to its ring successor the block
// it received in round s-1 (its own block in round 0), so after n-1 rounds
// every block has visited every rank. Reduce-scatter: in round s a rank sends
// its running partial sum of one block and folds the incoming partial of the
// next into its own contribution; the block that arrives in the last round is
// complete and is the one this rank keeps. Each rank sends and receives
// (n-1)/n of the full buffer, the bandwidth optimum, in n-1 hops; blocks are
// cut into slices so consecutive rounds overlap.
//
// Blocks are in rank order in the buffers, while the ring may be in any order,
// so a round names blocks by ring[position].
#include <algorithm>

#include "collectives/algorithms.hpp"

namespace braid {
namespace {

struct RingBlocks {
  int n, pos, next, prev;
  std::size_t element, block_bytes, slices;
  std::span<const int> ring;

  RingBlocks(const CollectiveShape& shape)
      : n(shape.ranks), pos(ring_position(shape.ring, shape.rank)), next(shape.ring[(pos + 1) % n]),
        prev(shape.ring[(pos + n - 1) % n]), element(size_of(shape.type)), block_bytes(shape.count * element),
        slices(std::max<std::size_t>(1, (block_bytes + shape.slice_bytes - 1) / std::max<std::size_t>(1, shape.slice_bytes))),
        ring(shape.ring), count(shape.count) {}

  // The rank whose block sits `offset` positions around the ring from us.
  std::size_t block_at(int offset) const { return static_cast<std::size_t>(ring[((pos + offset) % n + n) % n]); }
  Region slice(BufferId buffer, std::size_t block, std::size_t j, bool whole_buffer = true) const {
    Partition cut{count, slices};
    std::size_t base = whole_buffer ? block * block_bytes : 0;
    return Region{buffer, base + cut.begin(j) * element, cut.size(j) * element};
  }
  std::uint32_t tag(std::size_t round, std::size_t j) const { return static_cast<std::uint32_t>(round * slices + j); }

 private:
  std::size_t count;
};

}  // namespace

Schedule ring_all_gather(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "ring");
  if (shape.count == 0) return sched;
  const RingBlocks rb(shape);
  const std::size_t me = static_cast<std::size_t>(shape.rank);
  // Our own block lands in the output (nothing to do in place).
  sched.add(Step{.kind = StepKind::copy, .src = {BufferId::input, 0, rb.block_bytes},
                 .dst = {BufferId::output, me * rb.block_bytes, rb.block_bytes}});
  std::vector<std::uint32_t> got(rb.slices);
  for (std::size_t s = 0; s + 1 < static_cast<std::size_t>(rb.n); ++s) {
    const int r = static_cast<int>(s);
    for (std::size_t j = 0; j < rb.slices; ++j) {
      Region out = s == 0 ? rb.slice(BufferId::input, 0, j, false) : rb.slice(BufferId::output, rb.block_at(-r), j);
      if (out.bytes == 0) continue;
      Step send{.kind = StepKind::send, .peer = rb.next, .src = out, .tag_index = rb.tag(s, j)};
      if (s > 0) send.deps = {got[j]};
      sched.add(std::move(send));
      got[j] = sched.add(Step{.kind = StepKind::recv, .peer = rb.prev, .dst = rb.slice(BufferId::output, rb.block_at(-r - 1), j),
                              .tag_index = rb.tag(s, j)});
    }
  }
  return sched;
}

Schedule ring_reduce_scatter(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "ring");
  if (shape.count == 0) return sched;
  const RingBlocks rb(shape);
  if (rb.n == 1) {
    sched.add(Step{.kind = StepKind::copy, .src = {BufferId::input, 0, rb.block_bytes}, .dst = {BufferId::output, 0, rb.block_bytes}});
    if (shape.op == ReduceOp::avg) sched.add(Step{.kind = StepKind::average, .dst = {BufferId::output, 0, rb.block_bytes}, .deps = {0}});
    return sched;
  }
  // Partial sums of blocks in flight live in scratch, at the block's offset.
  sched.scratch_bytes = rb.block_bytes * static_cast<std::size_t>(rb.n);
  std::vector<std::uint32_t> partial(rb.slices);
  const std::size_t rounds = static_cast<std::size_t>(rb.n - 1);
  for (std::size_t s = 0; s < rounds; ++s) {
    const int r = static_cast<int>(s);
    const bool last = s + 1 == rounds;
    for (std::size_t j = 0; j < rb.slices; ++j) {
      std::size_t out_block = rb.block_at(-r - 1), in_block = rb.block_at(-r - 2);
      Region src = s == 0 ? rb.slice(BufferId::input, out_block, j) : rb.slice(BufferId::scratch, out_block, j);
      if (src.bytes == 0) continue;
      Step send{.kind = StepKind::send, .peer = rb.next, .src = src, .tag_index = rb.tag(s, j)};
      if (s > 0) send.deps = {partial[j]};
      sched.add(std::move(send));
      Region dst = last ? rb.slice(BufferId::output, 0, j, false) : rb.slice(BufferId::scratch, in_block, j);
      partial[j] = sched.add(Step{.kind = StepKind::recv_reduce, .peer = rb.prev, .src = rb.slice(BufferId::input, in_block, j),
                                  .dst = dst, .tag_index = rb.tag(s, j)});
      if (last && shape.op == ReduceOp::avg) sched.add(Step{.kind = StepKind::average, .dst = dst, .deps = {partial[j]}});
    }
  }
  return sched;
}

}  // namespace braid
