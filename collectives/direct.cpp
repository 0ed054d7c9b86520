// Direct all-reduce.
//
// Every rank sends its whole buffer to every other rank in one round and
// receives theirs into scratch space; then it reduces the n contributions
// locally in rank order 0, 1, ..., n-1. The latency is one message hop, the
// minimum (ring: 2(n-1) hops), and every rank performs the same operations in
// the same order, so the result is bit-identical on all ranks, as the ring's
// is. Each rank moves (n-1) times the buffer, so this wins only for tiny
// messages; the communicator uses it below a size threshold.
//
// On 2 ranks and up to 64 KiB it is two steps: send the input, and receive-and-reduce the
// peer's into the output (after the send, since in place the output is the
// input). Rank 0 computes in0 op in1 and rank 1 in1 op in0, which are the
// same bits for every operator (core/reduce.cpp: sum and product of two
// operands commute exactly, min and max are IEEE minimum and maximum; only
// which of two NaNs survives may differ), as recursive doubling relies on
// too. An 8-byte all-reduce then costs half the executor's work of the
// general form (copy in, send, receive, copy out, reduce).
#include "collectives/algorithms.hpp"
#include "core/eager.hpp"

namespace braid {

Schedule direct_all_reduce(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "direct");
  const std::size_t bytes = shape.count * size_of(shape.type);
  const int n = shape.ranks;
  if (bytes == 0) return sched;
  const Region in{BufferId::input, 0, bytes};
  const Region out{BufferId::output, 0, bytes};
  // The 2-step form waits for its send before it receives (in place, the
  // output is the input being sent). A send larger than a transport buffers
  // waits for the peer's receive in turn, so both ranks would wait for ever:
  // 4 MiB over shm (whose ring holds 2 MiB) did. Up to kEagerSendBytes
  // (core/eager.hpp) every transport takes the send without the receiver;
  // above, the scratch form receives while it sends.
  if (n == 2 && bytes <= kEagerSendBytes) {
    const int peer = 1 - shape.rank;
    const std::uint32_t sent = sched.add(Step{.kind = StepKind::send, .peer = peer, .src = in, .tag_index = 0});
    const std::uint32_t got = sched.add(
        Step{.kind = StepKind::recv_reduce, .peer = peer, .src = in, .dst = out, .tag_index = 0, .deps = {sent}});
    if (shape.op == ReduceOp::avg) sched.add(Step{.kind = StepKind::average, .dst = out, .deps = {got}});
    return sched;
  }
  sched.scratch_bytes = bytes * static_cast<std::size_t>(n);
  // Scratch slot r holds rank r's contribution. This rank's own input is
  // copied there first, so in place the output can be written while sends of
  // the input are still in flight.
  auto slot = [&](int r) { return Region{BufferId::scratch, bytes * static_cast<std::size_t>(r), bytes}; };
  std::vector<std::uint32_t> ready(static_cast<std::size_t>(n));
  const std::uint32_t own =
      sched.add(Step{.kind = StepKind::copy, .src = {BufferId::input, 0, bytes}, .dst = slot(shape.rank)});
  ready[static_cast<std::size_t>(shape.rank)] = own;
  for (int k = 1; k < n; ++k) {
    // Rank r talks to r+1 first, r+2 next, ...: no peer is everyone's first.
    int to = (shape.rank + k) % n;
    sched.add(Step{.kind = StepKind::send, .peer = to, .src = slot(shape.rank), .tag_index = 0, .deps = {own}});
    int from = (shape.rank - k + n) % n;
    ready[static_cast<std::size_t>(from)] =
        sched.add(Step{.kind = StepKind::recv, .peer = from, .dst = slot(from), .tag_index = 0});
  }
  std::uint32_t last = sched.add(Step{.kind = StepKind::copy, .src = slot(0), .dst = out, .deps = {ready[0], own}});
  for (int r = 1; r < n; ++r)
    last = sched.add(Step{.kind = StepKind::reduce, .src = slot(r), .dst = out,
                          .deps = {last, ready[static_cast<std::size_t>(r)]}});
  if (shape.op == ReduceOp::avg) sched.add(Step{.kind = StepKind::average, .dst = out, .deps = {last}});
  return sched;
}

}  // namespace braid
