// Binomial trees: broadcast from a root and reduce to it.
//
// Ranks are numbered by their distance from the root along the ring,
// rel = (ring position - root's ring position) mod n, so ranks that the
// planner placed next to each other (one host) stay close in the tree too.
// Broadcast takes ceil(log2 n) rounds: in round k every rank with rel < 2^k
// already holds the data and sends it to rel + 2^k, so the set of ranks that
// have it doubles each round. Rank rel's parent is rel minus its highest set
// bit and its children are rel + 2^k for every 2^k > rel; the first child
// heads the largest subtree. Reduce runs the same tree backwards: each rank
// combines its input with its children's partial results and sends the
// combination to its parent; the root finishes avg.
//
// Every hop carries the whole message, so the root sends (and, reducing,
// receives) log2 n times the buffer, where a chain or a ring moves about one
// or two buffers per rank; but the latency is log2 n hops instead of n - 1.
// Binomial trees therefore win for small and medium messages on many ranks.
// The message is cut into slices of about slice_bytes and a rank forwards
// slice j as soon as it has it (reducing: as soon as its children's slice j
// are combined), so the levels of the tree work on different slices at once.
//
// A rank combines, for every slice, its input and then its children from the
// smallest subtree to the largest (the order in which they tend to finish).
// The order is fixed by the schedule, not by arrival, so the result is the
// same from run to run. Only the root's output is significant for reduce, so
// the other ranks keep their partial results in scratch.
#include <algorithm>
#include <optional>
#include <vector>

#include "collectives/algorithms.hpp"

namespace braid {
namespace {

struct BinomialNode {
  int parent = -1;            // rank; -1 at the root
  std::vector<int> children;  // ranks, largest subtree first
};

BinomialNode binomial_node(const CollectiveShape& shape) {
  const int n = shape.ranks;
  const int root_pos = ring_position(shape.ring, shape.root);
  const int rel = (ring_position(shape.ring, shape.rank) - root_pos + n) % n;
  auto rank_at = [&](int r) { return shape.ring[static_cast<std::size_t>((r + root_pos) % n)]; };
  int above = 1;  // the smallest power of two above rel
  while (above <= rel) above *= 2;
  BinomialNode node;
  if (rel > 0) node.parent = rank_at(rel - above / 2);
  for (int step = above; step < n - rel; step *= 2) node.children.push_back(rank_at(rel + step));
  return node;
}

/// The message cut into slices of at most slice_bytes, and at least one element.
Partition slices_of(const CollectiveShape& shape) {
  const std::size_t per = std::max<std::size_t>(1, shape.slice_bytes / size_of(shape.type));
  return Partition{shape.count, (shape.count + per - 1) / per};
}

Region slice(const Partition& cut, std::size_t element, BufferId buffer, std::size_t j) {
  return Region{buffer, cut.begin(j) * element, cut.size(j) * element};
}

}  // namespace

Schedule binomial_broadcast(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "binomial");
  const std::size_t element = size_of(shape.type);
  const std::size_t bytes = shape.count * element;
  if (bytes == 0) return sched;
  const BinomialNode node = binomial_node(shape);
  const Partition cut = slices_of(shape);
  // The root sends from its input, so its sends need not wait for the copy.
  if (node.parent < 0) {
    sched.add(Step{.kind = StepKind::copy, .src = {BufferId::input, 0, bytes}, .dst = {BufferId::output, 0, bytes}});
    for (std::size_t j = 0; j < cut.parts; ++j)
      for (int child : node.children)
        sched.add(Step{.kind = StepKind::send, .peer = child, .src = slice(cut, element, BufferId::input, j),
                       .tag_index = static_cast<std::uint32_t>(j)});
    return sched;
  }
  for (std::size_t j = 0; j < cut.parts; ++j) {
    const Region mine = slice(cut, element, BufferId::output, j);
    const std::uint32_t got = sched.add(
        Step{.kind = StepKind::recv, .peer = node.parent, .dst = mine, .tag_index = static_cast<std::uint32_t>(j)});
    for (int child : node.children)
      sched.add(Step{.kind = StepKind::send, .peer = child, .src = mine, .tag_index = static_cast<std::uint32_t>(j),
                     .deps = {got}});
  }
  return sched;
}

Schedule binomial_reduce(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "binomial");
  const std::size_t element = size_of(shape.type);
  const std::size_t bytes = shape.count * element;
  if (bytes == 0) return sched;
  const BinomialNode node = binomial_node(shape);
  const bool root = node.parent < 0;
  if (root && node.children.empty()) {
    sched.add(Step{.kind = StepKind::copy, .src = {BufferId::input, 0, bytes}, .dst = {BufferId::output, 0, bytes}});
    return sched;
  }
  if (!root && !node.children.empty()) sched.scratch_bytes = bytes;
  const BufferId partial = root ? BufferId::output : BufferId::scratch;
  const Partition cut = slices_of(shape);
  for (std::size_t j = 0; j < cut.parts; ++j) {
    const auto tag = static_cast<std::uint32_t>(j);
    const Region sum = slice(cut, element, partial, j);
    Region from = slice(cut, element, BufferId::input, j);
    std::optional<std::uint32_t> last;
    for (auto child = node.children.rbegin(); child != node.children.rend(); ++child) {
      Step step{.kind = StepKind::recv_reduce, .peer = *child, .src = from, .dst = sum, .tag_index = tag};
      if (last) step.deps = {*last};
      last = sched.add(std::move(step));
      from = sum;
    }
    if (root) {
      if (shape.op == ReduceOp::avg) sched.add(Step{.kind = StepKind::average, .dst = sum, .deps = {*last}});
      continue;
    }
    Step up{.kind = StepKind::send, .peer = node.parent, .src = from, .tag_index = tag};
    if (last) up.deps = {*last};
    sched.add(std::move(up));
  }
  return sched;
}

}  // namespace braid
