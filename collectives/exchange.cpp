// Pairwise all-to-all, direct gather and direct scatter: the collectives in
// which every block has exactly one sender and one receiver, so nothing is
// reduced and nothing is forwarded.
//
// All-to-all: n-1 rounds; in round k rank r sends its block for r+k and
// receives the block of r-k (mod n), and copies its own block locally. Every
// round is a permutation, so no rank is flooded by n-1 senders at once
// (incast) as when every block is posted together, and each rank sends and
// receives (n-1)/n of the buffer, the minimum. Blocks are cut into slices of
// about slice_bytes, and slice j of round k starts once slice j of round k-1
// has been sent and received: consecutive rounds overlap like a pipeline
// while about one block per rank is in flight. The n-1 message latencies make
// it a large-message algorithm; for tiny blocks on many ranks a log(n)-round
// scheme (Bruck) would win.
//
// In place, the region of block q is both what goes to q (in round
// s = q - r) and where q's block lands (in round n - s). If the send comes
// first (2s < n), the receive into the region waits until that send has
// completed. Otherwise (2s >= n) the outgoing block is copied into scratch
// just before the receive that would overwrite it, and leaves from there. The
// schedule cannot tell whether the caller is in place, so it does both alike:
// floor(n/2) blocks of scratch and a local copy of them. No rank can wait on
// another in a cycle, even when a send completes only once the peer has taken
// the data (rendezvous): once every rank has finished round k-1 of a slice,
// each can post both transfers of round k, since what they wait for besides is
// local (a copy) or done (a send of an earlier round), so round k finishes too.
//
// Gather and scatter: the root receives every block from (sends every block
// to) its owner directly, all at once, and copies its own. The root's link
// carries (n-1) blocks whatever the algorithm, so one hop is optimal unless
// the blocks are so small that the root's n-1 message latencies dominate,
// where a binomial tree (log n hops of growing messages) would win.
#include <algorithm>

#include "collectives/algorithms.hpp"

namespace braid {
namespace {

/// A block of shape.count elements cut into slices of about slice_bytes
/// (at least one element each, none empty; no slices when count is 0).
struct BlockSlices {
  std::size_t element;
  std::size_t block_bytes;
  std::size_t slices;

  explicit BlockSlices(const CollectiveShape& shape)
      : element(size_of(shape.type)), block_bytes(shape.count * element),
        slices(std::min(shape.count,
                        (block_bytes + std::max<std::size_t>(1, shape.slice_bytes) - 1) /
                            std::max<std::size_t>(1, shape.slice_bytes))),
        count_(shape.count) {}

  /// Slice j of the block that starts at byte `base` of `buffer`.
  Region slice(BufferId buffer, std::size_t base, std::size_t j) const {
    const Partition cut{count_, slices};
    return Region{buffer, base + cut.begin(j) * element, cut.size(j) * element};
  }
  Region whole(BufferId buffer, std::size_t base) const { return Region{buffer, base, block_bytes}; }
  std::size_t at(int block) const { return static_cast<std::size_t>(block) * block_bytes; }

 private:
  std::size_t count_;
};

std::uint32_t tag(std::size_t slice) { return static_cast<std::uint32_t>(slice); }

}  // namespace

Schedule pairwise_all_to_all(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "pairwise");
  const BlockSlices b(shape);
  if (b.slices == 0) return sched;
  const int n = shape.ranks;
  const int me = shape.rank;
  sched.add(Step{.kind = StepKind::copy, .src = b.whole(BufferId::input, b.at(me)),
                 .dst = b.whole(BufferId::output, b.at(me))});
  if (n == 1) return sched;

  // A block sent in round s >= first_staged leaves from scratch slot s - first_staged.
  const int first_staged = (n + 1) / 2;
  sched.scratch_bytes = static_cast<std::size_t>(n - first_staged) * b.block_bytes;
  auto staged = [&](int round) { return round >= first_staged; };
  auto slot = [&](int round) { return static_cast<std::size_t>(round - first_staged) * b.block_bytes; };
  auto index = [&](int round, std::size_t j) { return static_cast<std::size_t>(round) * b.slices + j; };
  const std::size_t steps = static_cast<std::size_t>(n) * b.slices;
  std::vector<std::uint32_t> staging(steps), sent(steps), received(steps);

  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    const int from = (me - k + n) % n;
    for (std::size_t j = 0; j < b.slices; ++j) {
      std::vector<std::uint32_t> after_previous_round;
      if (k > 1) after_previous_round = {sent[index(k - 1, j)], received[index(k - 1, j)]};
      // The region this round receives into still holds our block for `from`,
      // which leaves in round n - k: save it now if that is still to come.
      if (staged(n - k))
        staging[index(n - k, j)] =
            sched.add(Step{.kind = StepKind::copy, .src = b.slice(BufferId::input, b.at(from), j),
                           .dst = b.slice(BufferId::scratch, slot(n - k), j), .deps = after_previous_round});

      Step send{.kind = StepKind::send, .peer = to, .src = b.slice(BufferId::input, b.at(to), j),
                .tag_index = tag(j), .deps = after_previous_round};
      if (staged(k)) {  // saved in round n - k <= k
        send.src = b.slice(BufferId::scratch, slot(k), j);
        send.deps.push_back(staging[index(k, j)]);
      }
      sent[index(k, j)] = sched.add(std::move(send));

      Step recv{.kind = StepKind::recv, .peer = from, .dst = b.slice(BufferId::output, b.at(from), j),
                .tag_index = tag(j), .deps = std::move(after_previous_round)};
      recv.deps.push_back(staged(n - k) ? staging[index(n - k, j)] : sent[index(n - k, j)]);
      received[index(k, j)] = sched.add(std::move(recv));
    }
  }
  return sched;
}

Schedule direct_gather(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "direct");
  const BlockSlices b(shape);
  if (b.slices == 0) return sched;
  const int n = shape.ranks;
  if (shape.rank != shape.root) {
    for (std::size_t j = 0; j < b.slices; ++j)
      sched.add(Step{.kind = StepKind::send, .peer = shape.root, .src = b.slice(BufferId::input, 0, j),
                     .tag_index = tag(j)});
    return sched;
  }
  sched.add(Step{.kind = StepKind::copy, .src = b.whole(BufferId::input, 0),
                 .dst = b.whole(BufferId::output, b.at(shape.root))});
  for (int k = 1; k < n; ++k) {
    const int from = (shape.root + k) % n;
    for (std::size_t j = 0; j < b.slices; ++j)
      sched.add(Step{.kind = StepKind::recv, .peer = from, .dst = b.slice(BufferId::output, b.at(from), j),
                     .tag_index = tag(j)});
  }
  return sched;
}

Schedule direct_scatter(const CollectiveShape& shape) {
  Schedule sched = Schedule::for_shape(shape, "direct");
  const BlockSlices b(shape);
  if (b.slices == 0) return sched;
  const int n = shape.ranks;
  if (shape.rank != shape.root) {
    for (std::size_t j = 0; j < b.slices; ++j)
      sched.add(Step{.kind = StepKind::recv, .peer = shape.root, .dst = b.slice(BufferId::output, 0, j),
                     .tag_index = tag(j)});
    return sched;
  }
  sched.add(Step{.kind = StepKind::copy, .src = b.whole(BufferId::input, b.at(shape.root)),
                 .dst = b.whole(BufferId::output, 0)});
  // Rank root+1 first, root+2 next, ...: the order in which the slices leave.
  for (int k = 1; k < n; ++k) {
    const int to = (shape.root + k) % n;
    for (std::size_t j = 0; j < b.slices; ++j)
      sched.add(Step{.kind = StepKind::send, .peer = to, .src = b.slice(BufferId::input, b.at(to), j),
                     .tag_index = tag(j)});
  }
  return sched;
}

}  // namespace braid
