// Chain broadcast and ring barrier: the two schedules that walk the ring once.
//
// Broadcast: the root sends the buffer to its ring successor in slices of
// about slice_bytes; every other rank receives a slice and forwards it at
// once, so after the pipeline fills every link carries a different slice and
// the time is about (n - 2 + slices) slice transfers: close to one buffer
// transfer for large messages, independent of n. (Trees win for small ones
// and come with the collectives issue.)
//
// Barrier: n-1 rounds of empty messages around the ring. A message of round s
// from rank q leaves q only after q heard round s-1, so it vouches that q and
// its s predecessors have arrived; after round n-2 every rank has heard for
// all the others.
#include <algorithm>

#include "collectives/algorithms.hpp"
#include "core/check.hpp"

namespace braid {
Schedule chain_broadcast(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "chain");
  const std::size_t element = size_of(shape.type);
  const std::size_t bytes = shape.count * element;
  const int n = shape.ranks;
  if (bytes == 0) return sched;
  const int pos = ring_position(shape.ring, shape.rank);
  const int rel = (pos - ring_position(shape.ring, shape.root) + n) % n;
  const int next = shape.ring[(pos + 1) % n];
  const int prev = shape.ring[(pos + n - 1) % n];
  const std::size_t slice_elements = std::max<std::size_t>(1, shape.slice_bytes / element);
  const std::size_t slices = (shape.count + slice_elements - 1) / slice_elements;
  const Partition cut{shape.count, slices};
  auto slice = [&](BufferId buffer, std::size_t j) {
    return Region{buffer, cut.begin(j) * element, cut.size(j) * element};
  };
  if (rel == 0) {
    sched.add(Step{.kind = StepKind::copy, .src = {BufferId::input, 0, bytes}, .dst = {BufferId::output, 0, bytes}});
    if (n == 1) return sched;
    for (std::size_t j = 0; j < slices; ++j)
      sched.add(Step{.kind = StepKind::send, .peer = next, .src = slice(BufferId::input, j),
                     .tag_index = static_cast<std::uint32_t>(j)});
    return sched;
  }
  for (std::size_t j = 0; j < slices; ++j) {
    auto got = sched.add(Step{.kind = StepKind::recv, .peer = prev, .dst = slice(BufferId::output, j),
                              .tag_index = static_cast<std::uint32_t>(j)});
    if (rel < n - 1)
      sched.add(Step{.kind = StepKind::send, .peer = next, .src = slice(BufferId::output, j),
                     .tag_index = static_cast<std::uint32_t>(j), .deps = {got}});
  }
  return sched;
}

Schedule ring_barrier(const CollectiveShape& shape) {
  Schedule sched;
  sched.algorithm = "ring";
  sched.type = DataType::u8;
  sched.ranks = shape.ranks;
  const int n = shape.ranks;
  if (n == 1) return sched;
  const int pos = ring_position(shape.ring, shape.rank);
  const int next = shape.ring[(pos + 1) % n];
  const int prev = shape.ring[(pos + n - 1) % n];
  std::uint32_t heard = 0;
  for (int s = 0; s < n - 1; ++s) {
    Step send{.kind = StepKind::send, .peer = next, .tag_index = static_cast<std::uint32_t>(s)};
    if (s > 0) send.deps = {heard};
    sched.add(std::move(send));
    heard = sched.add(Step{.kind = StepKind::recv, .peer = prev, .tag_index = static_cast<std::uint32_t>(s)});
  }
  return sched;
}

}  // namespace braid
