// Double binary tree: all-reduce and broadcast over two complementary binary
// trees, as NCCL does.
//
// A binary tree reduces in about 2 log2 n hops (up, then down), where a ring
// needs 2(n - 1); but in one tree the leaves, half of the ranks, only ever
// send and receive once, while an inner node receives two children's data and
// sends to two children. Two trees that each carry half of the buffer fix the
// imbalance when every rank is inner in at most one of them and a leaf in the
// other: every rank then moves about one buffer each way per phase, close to
// the ring's bandwidth, with the tree's logarithmic latency. That is the range
// where this schedule wins: medium messages on many ranks, too large for
// recursive doubling and with too many ranks for the ring's latency.
//
// The trees are laid over ring positions, so ranks the planner placed together
// (one host) are neighbours low in the tree and only the upper levels cross
// hosts. Tree 0 is the in-order tree over positions 0..m-1 (m the largest
// even number <= the number of nodes): odd positions are leaves, position p
// with lowest set bit b has children p - b/2 and p + b/2 (or the nearest
// p + b/2^i inside the range), and position 0 is the root with a single child,
// the largest power of two below m. Tree 1 is the same tree over the mirrored
// positions m-1-p, so its inner nodes are the odd positions: every position
// is inner in exactly one tree. With an odd number of nodes the last position
// is left over and becomes the second child of both roots, a leaf in both.
// Over ring positions 0..7, tree 0 is 0-4, 4-{2,6}, 2-{1,3}, 6-{5,7} and
// tree 1 is 7-3, 3-{5,1}, 5-{6,4}, 1-{2,0}; over 0..4, tree 0 is 0-{2,4},
// 2-{1,3} and tree 1 is 3-{1,4}, 1-{2,0}.
//
// All-reduce: the buffer is split into two halves by elements, one per tree,
// each cut into slices of about slice_bytes. A node combines its input with
// its children's slices (in a fixed order, so the result does not depend on
// timing) and sends the slice to its parent; the root finishes avg and sends
// the result back down the same tree. Every rank ends with the root's bits.
// Broadcast: the two trees are built over the n - 1 ranks other than the
// root, at ring distance 1..n-1 from it; the root sends each half to the top
// of its tree and each rank forwards a slice to its children once it has it.
//
// The steps are added slice by slice, reduction before broadcast, so for any
// pair of ranks both sides post their messages to each other in the same
// order, and the order is one in which they can all complete; interleaving
// the trees slice by slice keeps one tree from waiting behind the other where
// two ranks are neighbours in both.
#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "collectives/algorithms.hpp"

namespace braid {
namespace {

/// One node's neighbours in one tree, as positions; -1 where there is none.
struct TreeNode {
  int parent = -1;
  std::vector<int> children;  // at most two, combined in this order
};

TreeNode in_order_node(int m, int p) {
  TreeNode node;
  if (p == 0) {
    int top = 1;
    while (top * 2 < m) top *= 2;
    if (top < m) node.children.push_back(top);
    return node;
  }
  const int low = p & -p;
  node.parent = (p & (2 * low)) == 0 && p + low < m ? p + low : p - low;
  if (low == 1) return node;
  node.children.push_back(p - low / 2);
  for (int half = low / 2; half > 0; half /= 2)
    if (p + half < m) {
      node.children.push_back(p + half);
      break;
    }
  return node;
}

/// The root of tree t of the double tree over `nodes` positions.
int double_tree_root(int nodes, int t) {
  const int m = nodes - nodes % 2;
  return t == 0 || m == 0 ? 0 : m - 1;
}

/// Position p's neighbours in tree t (0 or 1) of the double tree over `nodes`.
TreeNode double_tree_node(int nodes, int t, int p) {
  const int m = nodes - nodes % 2;
  const int root = double_tree_root(nodes, t);
  TreeNode node;
  if (p == m) {  // the odd one out, or the only node
    if (m > 0) node.parent = root;
    return node;
  }
  auto mirrored = [&](int q) { return q < 0 || t == 0 ? q : m - 1 - q; };
  const TreeNode placed = in_order_node(m, mirrored(p));
  node.parent = mirrored(placed.parent);
  for (int c : placed.children) node.children.push_back(mirrored(c));
  if (p == root && nodes > m) node.children.push_back(m);
  return node;
}

/// The buffer in two halves by elements, each in the same number of slices of
/// at most slice_bytes; slice j of the smaller half may be empty.
struct HalvedSlices {
  Partition halves;
  std::size_t slices;
  std::size_t element;

  explicit HalvedSlices(const CollectiveShape& shape)
      : halves{shape.count, 2}, slices(0), element(size_of(shape.type)) {
    const std::size_t per = std::max<std::size_t>(1, shape.slice_bytes / element);
    slices = (halves.size(0) + per - 1) / per;
  }
  Region at(BufferId buffer, int t, std::size_t j) const {
    const auto half = static_cast<std::size_t>(t);
    const Partition cut{halves.size(half), slices};
    return Region{buffer, (halves.begin(half) + cut.begin(j)) * element, cut.size(j) * element};
  }
};

Step whole_copy(std::size_t bytes) {
  return Step{.kind = StepKind::copy, .src = {BufferId::input, 0, bytes}, .dst = {BufferId::output, 0, bytes}};
}

}  // namespace

Schedule tree_all_reduce(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "tree");
  const int n = shape.ranks;
  const std::size_t bytes = shape.count * size_of(shape.type);
  if (bytes == 0) return sched;
  if (n == 1) {
    sched.add(whole_copy(bytes));
    return sched;
  }
  const int pos = ring_position(shape.ring, shape.rank);
  auto rank_at = [&](int p) { return shape.ring[static_cast<std::size_t>(p)]; };
  const std::array<TreeNode, 2> tree = {double_tree_node(n, 0, pos), double_tree_node(n, 1, pos)};
  const HalvedSlices cut(shape);
  auto tag = [&](int phase, int t, std::size_t j) {
    return static_cast<std::uint32_t>((static_cast<std::size_t>(phase) * 2 + static_cast<std::size_t>(t)) * cut.slices + j);
  };
  // ready[t][j]: the step after which this rank's slice holds the result (the
  // root) or was sent up (the others: the broadcast may then overwrite it).
  std::array<std::vector<std::uint32_t>, 2> ready = {std::vector<std::uint32_t>(cut.slices),
                                                     std::vector<std::uint32_t>(cut.slices)};
  for (std::size_t j = 0; j < cut.slices; ++j)
    for (int t = 0; t < 2; ++t) {
      const Region sum = cut.at(BufferId::output, t, j);
      if (sum.bytes == 0) continue;
      Region from = cut.at(BufferId::input, t, j);
      std::optional<std::uint32_t> last;
      for (int child : tree[t].children) {
        Step step{.kind = StepKind::recv_reduce, .peer = rank_at(child), .src = from, .dst = sum, .tag_index = tag(0, t, j)};
        if (last) step.deps = {*last};
        last = sched.add(std::move(step));
        from = sum;
      }
      if (tree[t].parent < 0) {
        if (shape.op == ReduceOp::avg) last = sched.add(Step{.kind = StepKind::average, .dst = sum, .deps = {*last}});
        ready[t][j] = *last;
        continue;
      }
      Step up{.kind = StepKind::send, .peer = rank_at(tree[t].parent), .src = from, .tag_index = tag(0, t, j)};
      if (last) up.deps = {*last};
      ready[t][j] = sched.add(std::move(up));
    }
  for (std::size_t j = 0; j < cut.slices; ++j)
    for (int t = 0; t < 2; ++t) {
      const Region result = cut.at(BufferId::output, t, j);
      if (result.bytes == 0) continue;
      std::uint32_t have = ready[t][j];
      if (tree[t].parent >= 0)
        have = sched.add(Step{.kind = StepKind::recv, .peer = rank_at(tree[t].parent), .dst = result,
                              .tag_index = tag(1, t, j), .deps = {have}});
      for (int child : tree[t].children)
        sched.add(Step{.kind = StepKind::send, .peer = rank_at(child), .src = result, .tag_index = tag(1, t, j),
                       .deps = {have}});
    }
  return sched;
}

Schedule tree_broadcast(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "tree");
  sched.op = ReduceOp::sum;
  const int n = shape.ranks;
  const std::size_t bytes = shape.count * size_of(shape.type);
  if (bytes == 0) return sched;
  const int root_pos = ring_position(shape.ring, shape.root);
  const int rel = (ring_position(shape.ring, shape.rank) - root_pos + n) % n;
  // Tree position p is the rank at ring distance p + 1 from the root.
  auto rank_at = [&](int p) { return shape.ring[static_cast<std::size_t>((p + 1 + root_pos) % n)]; };
  const int nodes = n - 1;
  const HalvedSlices cut(shape);
  auto tag = [&](int t, std::size_t j) { return static_cast<std::uint32_t>(static_cast<std::size_t>(t) * cut.slices + j); };
  if (rel == 0) {
    sched.add(whole_copy(bytes));
    if (n == 1) return sched;
    for (std::size_t j = 0; j < cut.slices; ++j)
      for (int t = 0; t < 2; ++t) {
        const Region src = cut.at(BufferId::input, t, j);
        if (src.bytes > 0)
          sched.add(Step{.kind = StepKind::send, .peer = rank_at(double_tree_root(nodes, t)), .src = src,
                         .tag_index = tag(t, j)});
      }
    return sched;
  }
  const std::array<TreeNode, 2> tree = {double_tree_node(nodes, 0, rel - 1), double_tree_node(nodes, 1, rel - 1)};
  for (std::size_t j = 0; j < cut.slices; ++j)
    for (int t = 0; t < 2; ++t) {
      const Region mine = cut.at(BufferId::output, t, j);
      if (mine.bytes == 0) continue;
      const int parent = tree[t].parent < 0 ? shape.root : rank_at(tree[t].parent);
      const std::uint32_t got =
          sched.add(Step{.kind = StepKind::recv, .peer = parent, .dst = mine, .tag_index = tag(t, j)});
      for (int child : tree[t].children)
        sched.add(Step{.kind = StepKind::send, .peer = rank_at(child), .src = mine, .tag_index = tag(t, j), .deps = {got}});
    }
  return sched;
}

}  // namespace braid
