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
// and the reduction of one slice overlaps the transfer of the next. Where a
// link of the ring has a flow window (ring_pieces.hpp), a round's sends run
// at most that many bytes ahead of its receives, in slices no larger.
//
// Every rank reduces chunk c in the same ring order, and the all-gather
// copies one rank's result to all, so the result is bit-identical everywhere.
//
// The two halves are pieces (ring_pieces.hpp) that work on any region and
// any subset of the ranks, so other schedules compose them
// (hierarchical.cpp).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/ring_pieces.hpp"
#include "core/check.hpp"

namespace braid {

std::size_t RingPiece::slices() const {
  // Every chunk is cut into the same number of slices so that slice j of any
  // chunk has the same step index on every rank.
  const std::size_t max_chunk_bytes = chunks().size(0) * element;
  return std::max<std::size_t>(1, (max_chunk_bytes + slice_bytes - 1) / slice_bytes);
}

std::size_t RingPiece::window_slices() const {
  if (window_bytes == 0 || !window_here) return 0;
  const std::size_t slice = std::max<std::size_t>(1, chunks().size(0) * element / slices());
  return std::max<std::size_t>(1, window_bytes / slice);
}

RingPiece with_flow_window(RingPiece p, const CollectiveShape& shape) {
  p.window_bytes = shape.ring_window(p.ring);
  if (p.window_bytes > 0 && p.window_bytes < p.slice_bytes) p.slice_bytes = p.window_bytes;
  const auto at = [&](int pos) { return p.ring[static_cast<std::size_t>(pos % p.n())]; };
  p.window_here = shape.window_between(at(p.pos), at(p.pos + 1)) > 0;
  return p;
}

Region RingPiece::slice(BufferId buffer, std::size_t chunk, std::size_t j) const {
  const Partition all = chunks();
  const Partition cut{all.size(chunk), slices()};
  return Region{buffer, (first + all.begin(chunk) + cut.begin(j)) * element, cut.size(j) * element};
}

std::uint32_t RingPiece::tags() const { return static_cast<std::uint32_t>(2 * static_cast<std::size_t>(n()) * slices()); }

namespace {

// tag_index = base + phase * (n * slices) + round * slices + j: unique per message.
std::uint32_t tag_of(const RingPiece& p, int phase, int round, std::size_t j) {
  return p.tag_base +
         static_cast<std::uint32_t>((static_cast<std::size_t>(phase) * p.n() + round) * p.slices() + j);
}

std::size_t chunk_at(const RingPiece& p, int round_offset) {
  const int n = p.n();
  return static_cast<std::size_t>(((p.pos + round_offset) % n + n) % n);
}

void add_deps(Step& step, std::span<const std::uint32_t> more) { step.deps.insert(step.deps.end(), more.begin(), more.end()); }

constexpr std::uint32_t kNoStep = UINT32_MAX;

// The flow window: slice j's send waits for this round's receive of slice
// j - window (one that was not skipped as empty).
void add_window_dep(Step& send, const std::vector<std::uint32_t>& received, std::size_t j, std::size_t window) {
  if (window == 0 || j < window) return;
  if (const std::uint32_t r = received[j - window]; r != kNoStep) send.deps.push_back(r);
}

}  // namespace

RingState append_ring_reduce_scatter(Schedule& sched, const RingPiece& p, BufferId source,
                                     std::span<const std::uint32_t> entry) {
  const std::size_t slices = p.slices();
  const int n = p.n();
  const int next = p.ring[static_cast<std::size_t>((p.pos + 1) % n)];
  const int prev = p.ring[static_cast<std::size_t>((p.pos + n - 1) % n)];
  const std::size_t rounds = static_cast<std::size_t>(n - 1);
  RingState state{std::vector<std::uint32_t>(slices), std::vector<std::uint32_t>(slices * rounds),
                  std::vector<bool>(slices, false)};
  const std::size_t window = p.window_slices();
  // Round s sends chunk pos-s and reduces chunk pos-s-1 into the output. A
  // slice that is empty (count < n * slices) is skipped; sender and receiver
  // compute the same size, so they skip the same message.
  for (std::size_t s = 0; s < rounds; ++s) {
    const int r = static_cast<int>(s);
    std::vector<std::uint32_t> received(slices, kNoStep);  // this round's receives
    for (std::size_t j = 0; j < slices; ++j) {
      Region src = p.slice(s == 0 ? source : BufferId::output, chunk_at(p, -r), j);
      if (src.bytes > 0) {
        Step send{.kind = StepKind::send, .peer = next, .src = src, .tag_index = tag_of(p, 0, r, j)};
        if (s > 0) send.deps = {state.last[j]};
        else add_deps(send, entry);
        add_window_dep(send, received, j, window);
        state.rs_send[s * slices + j] = sched.add(std::move(send));
      }
      Region dst = p.slice(BufferId::output, chunk_at(p, -r - 1), j);
      if (dst.bytes > 0) {
        // Each chunk is reduced once per rank: this rank's own part of it is
        // still untouched in `source`.
        Region local = p.slice(source, chunk_at(p, -r - 1), j);
        Step reduce{.kind = StepKind::recv_reduce, .peer = prev, .src = local, .dst = dst, .tag_index = tag_of(p, 0, r, j)};
        if (s == 0) add_deps(reduce, entry);
        state.last[j] = received[j] = sched.add(std::move(reduce));
        state.has_last[j] = true;
      }
    }
  }
  return state;
}

void append_ring_average(Schedule& sched, const RingPiece& p, RingState& state) {
  for (std::size_t j = 0; j < p.slices(); ++j) {
    Region mine = p.slice(BufferId::output, p.owned_chunk(), j);
    if (mine.bytes == 0) continue;
    Step average{.kind = StepKind::average, .dst = mine};
    if (state.has_last[j]) average.deps = {state.last[j]};
    state.last[j] = sched.add(std::move(average));
    state.has_last[j] = true;
  }
}

void append_ring_all_gather(Schedule& sched, const RingPiece& p, RingState& state,
                            std::span<const std::uint32_t> entry) {
  const std::size_t slices = p.slices();
  const int n = p.n();
  const int next = p.ring[static_cast<std::size_t>((p.pos + 1) % n)];
  const int prev = p.ring[static_cast<std::size_t>((p.pos + n - 1) % n)];
  // Round s sends chunk pos+1-s and receives chunk pos-s. A receive
  // overwrites a region that reduce-scatter sent from in round s (in place,
  // that is the caller's input), so it waits for that send.
  const std::size_t window = p.window_slices();
  for (std::size_t s = 0; s + 1 < static_cast<std::size_t>(n); ++s) {
    const int r = static_cast<int>(s);
    std::vector<std::uint32_t> received(slices, kNoStep);  // this round's receives
    for (std::size_t j = 0; j < slices; ++j) {
      Region src = p.slice(BufferId::output, chunk_at(p, 1 - r), j);
      if (src.bytes > 0) {
        Step send{.kind = StepKind::send, .peer = next, .src = src, .tag_index = tag_of(p, 1, r, j)};
        if (state.has_last[j]) send.deps = {state.last[j]};
        if (s == 0) add_deps(send, entry);
        add_window_dep(send, received, j, window);
        sched.add(std::move(send));
      }
      Region dst = p.slice(BufferId::output, chunk_at(p, -r), j);
      if (dst.bytes > 0) {
        state.last[j] = received[j] = sched.add(Step{.kind = StepKind::recv, .peer = prev, .dst = dst,
                                                     .tag_index = tag_of(p, 1, r, j),
                                                     .deps = {state.rs_send[s * slices + j]}});
        state.has_last[j] = true;
      }
    }
  }
}

std::vector<std::uint32_t> writes_since(const Schedule& sched, std::uint32_t from) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = from; i < sched.steps.size(); ++i) {
    const Step& s = sched.steps[i];
    if (s.kind != StepKind::send && s.dst.buffer == BufferId::output && s.dst.bytes > 0) out.push_back(i);
  }
  return out;
}

Schedule ring_all_reduce(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "ring");
  const std::size_t element = size_of(shape.type);
  if (shape.count == 0) return sched;
  if (shape.ranks == 1) {
    Region all{BufferId::output, 0, shape.count * element};
    sched.add(Step{.kind = StepKind::copy, .src = {BufferId::input, 0, all.bytes}, .dst = all});
    return sched;
  }
  const RingPiece piece = with_flow_window({.ring = shape.ring, .pos = ring_position(shape.ring, shape.rank),
                                            .count = shape.count, .element = element, .slice_bytes = shape.slice_bytes},
                                           shape);
  RingState state = append_ring_reduce_scatter(sched, piece, BufferId::input, {});
  // The owner finishes avg once, before the result travels.
  if (shape.op == ReduceOp::avg) append_ring_average(sched, piece, state);
  append_ring_all_gather(sched, piece, state, {});
  return sched;
}

}  // namespace braid
