// Ring all-reduce.
//
// The ranks stand in a ring; the buffer is cut into n chunks, one per rank
// position. In n-1 reduce-scatter rounds each rank sends one chunk to its
// successor and receives-and-reduces another from its predecessor; after
// round s the chunk a rank just reduced holds the contributions of s+2 ranks,
// so after n-1 rounds rank at position p owns chunk p+1 fully reduced. In n-1
// all-gather rounds the reduced chunks travel once more around the ring.
// Every rank sends and receives 2(n-1)/n of the buffer, the bandwidth lower
// bound for all-reduce, which is why this is the algorithm for large messages
// (its latency, 2(n-1) message hops, is what makes trees win for small ones).
//
// Pipelining: each chunk is cut into slices of about slice_bytes, and a
// slice's step in round s+1 waits only for the same slice's step in round s,
// so round s+1 of slice 0 runs while round s of slice 1 is still in flight,
// and the reduction of one slice overlaps the transfer of the next.
//
// Every rank reduces chunk c in the same ring order, and the all-gather
// copies one rank's result to all, so the result is bit-identical everywhere.
#include <algorithm>

#include "collectives/algorithms.hpp"
#include "core/check.hpp"

namespace braid {
Schedule ring_all_reduce(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "ring");
  const std::size_t element = size_of(shape.type);
  const int n = shape.ranks;
  if (shape.count == 0) return sched;
  if (n == 1) {
    Region all{BufferId::output, 0, shape.count * element};
    sched.add(Step{.kind = StepKind::copy, .src = {BufferId::input, 0, all.bytes}, .dst = all});
    return sched;
  }
  const int pos = ring_position(shape.ring, shape.rank);
  const int next = shape.ring[(pos + 1) % n];
  const int prev = shape.ring[(pos + n - 1) % n];
  const Partition chunks{shape.count, static_cast<std::size_t>(n)};
  // Every chunk is cut into the same number of slices so that slice j of any
  // chunk has the same step index on every rank.
  const std::size_t max_chunk_bytes = chunks.size(0) * element;
  const std::size_t slices = std::max<std::size_t>(1, (max_chunk_bytes + shape.slice_bytes - 1) / shape.slice_bytes);
  auto chunk_at = [&](int round_offset) { return static_cast<std::size_t>(((pos + round_offset) % n + n) % n); };
  auto slice_region = [&](BufferId buffer, std::size_t chunk, std::size_t j) {
    Partition cut{chunks.size(chunk), slices};
    return Region{buffer, (chunks.begin(chunk) + cut.begin(j)) * element, cut.size(j) * element};
  };
  // tag_index = phase * (n * slices) + round * slices + j: unique per message.
  auto tag = [&](int phase, int round, std::size_t j) {
    return static_cast<std::uint32_t>((static_cast<std::size_t>(phase) * n + round) * slices + j);
  };

  const std::size_t rounds = static_cast<std::size_t>(n - 1);
  std::vector<std::uint32_t> last(slices), rs_send(slices * rounds);
  // Reduce-scatter: round s sends chunk pos-s, reduces chunk pos-s-1 into
  // output. A slice that is empty (count < n * slices) is skipped; sender and
  // receiver compute the same size, so they skip the same message.
  for (std::size_t s = 0; s < rounds; ++s) {
    const int r = static_cast<int>(s);
    for (std::size_t j = 0; j < slices; ++j) {
      Region src = slice_region(s == 0 ? BufferId::input : BufferId::output, chunk_at(-r), j);
      if (src.bytes > 0) {
        Step send{.kind = StepKind::send, .peer = next, .src = src, .tag_index = tag(0, r, j)};
        if (s > 0) send.deps = {last[j]};
        rs_send[s * slices + j] = sched.add(std::move(send));
      }
      Region dst = slice_region(BufferId::output, chunk_at(-r - 1), j);
      if (dst.bytes > 0) {
        Region local = slice_region(BufferId::input, chunk_at(-r - 1), j);
        last[j] = sched.add(
            Step{.kind = StepKind::recv_reduce, .peer = prev, .src = local, .dst = dst, .tag_index = tag(0, r, j)});
      }
    }
  }
  // The owner finishes avg once, before the result travels.
  if (shape.op == ReduceOp::avg) {
    for (std::size_t j = 0; j < slices; ++j) {
      Region mine = slice_region(BufferId::output, chunk_at(1), j);
      if (mine.bytes == 0) continue;
      last[j] = sched.add(Step{.kind = StepKind::average, .dst = mine, .deps = {last[j]}});
    }
  }
  // All-gather: round s sends chunk pos+1-s and receives chunk pos-s. A receive
  // overwrites a region that reduce-scatter sent from in round s (in place,
  // that is the caller's input), so it waits for that send.
  for (std::size_t s = 0; s < rounds; ++s) {
    const int r = static_cast<int>(s);
    for (std::size_t j = 0; j < slices; ++j) {
      Region src = slice_region(BufferId::output, chunk_at(1 - r), j);
      if (src.bytes > 0)
        sched.add(Step{.kind = StepKind::send, .peer = next, .src = src, .tag_index = tag(1, r, j), .deps = {last[j]}});
      Region dst = slice_region(BufferId::output, chunk_at(-r), j);
      if (dst.bytes > 0)
        last[j] = sched.add(Step{.kind = StepKind::recv, .peer = prev, .dst = dst, .tag_index = tag(1, r, j),
                                 .deps = {rs_send[s * slices + j]}});
    }
  }
  return sched;
}

}  // namespace braid
