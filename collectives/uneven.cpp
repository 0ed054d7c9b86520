// The uneven ("v") collectives: all-to-all-v, all-gather-v, reduce-scatter-v,
// gather-v and scatter-v, where each rank's block has its own size and place
// (counts and displacements, as MPI and c10d take them).
//
// All-to-all-v, all-gather-v and reduce-scatter-v run the pairwise exchange of
// exchange.cpp with whole blocks: n-1 rounds, in round k rank r sends to r+k
// and receives from r-k, a round starting once the previous one has sent and
// received, so no rank is flooded by n-1 senders at once. Each rank sends and
// receives exactly the bytes it must (for reduce-scatter, everything but its
// own block, as the ring does), in n-1 message latencies. Reduce-scatter-v
// folds the incoming blocks into the output in round order, so its result does
// not depend on timing. Gather-v and scatter-v are one hop between the root
// and every rank, like their even forms.
//
// Every pair exchanges a message in every round, empty blocks included: a
// rank whose counts disagree with its peer's then fails at once with a size
// mismatch naming both, instead of waiting for a message that never comes.
//
// Blocks are not cut into slices: a block is one message, which the links
// stream in pieces of their own.
#include <algorithm>
#include <functional>
#include <optional>

#include "collectives/algorithms.hpp"
#include "core/check.hpp"

namespace braid {
namespace {

/// The pairwise exchange of whole blocks: send_block(p) goes to rank p and
/// recv_block(p) comes from it. With `fold` (reduce-scatter), what arrives is
/// reduced into that region, which starts as send_block(self), instead of
/// being stored.
Schedule pairwise_blocks(const CollectiveShape& shape, std::string_view name,
                         const std::function<Region(int)>& send_block, const std::function<Region(int)>& recv_block,
                         std::optional<Region> fold) {
  Schedule sched = Schedule::for_shape(shape, std::string(name));
  const int n = shape.ranks;
  const int me = shape.rank;
  std::vector<std::uint32_t> previous;
  std::optional<std::uint32_t> folded;
  if (fold) {
    // The running result starts as this rank's own contribution.
    const Region own = send_block(me);
    folded = sched.add(Step{.kind = StepKind::copy, .src = own, .dst = *fold});
  } else {
    const Region from = send_block(me), to = recv_block(me);
    BRAID_CHECK(from.bytes == to.bytes, name, ": rank ", me, " sends itself ", from.bytes, " bytes but receives ",
                to.bytes);
    if (from.bytes > 0) sched.add(Step{.kind = StepKind::copy, .src = from, .dst = to});
  }
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    const int from = (me - k + n) % n;
    const std::uint32_t sent =
        sched.add(Step{.kind = StepKind::send, .peer = to, .src = send_block(to), .deps = previous});
    Step recv{.kind = StepKind::recv, .peer = from, .dst = recv_block(from), .deps = previous};
    if (fold) {
      recv.kind = StepKind::recv_reduce;
      recv.src = *fold;
      recv.dst = *fold;
      recv.deps.push_back(*folded);
    }
    const std::uint32_t received = sched.add(std::move(recv));
    if (fold) folded = received;
    previous = {sent, received};
  }
  if (fold && shape.op == ReduceOp::avg && fold->bytes > 0)
    sched.add(Step{.kind = StepKind::average, .dst = *fold, .deps = {*folded}});
  return sched;
}

}  // namespace

Region BlockLayout::at(BufferId buffer, int rank) const {
  const auto r = static_cast<std::size_t>(rank);
  // An empty block may say any offset; its region stays inside the buffer.
  return Region{buffer, bytes.at(r) == 0 ? 0 : offset.at(r), bytes.at(r)};
}

std::size_t BlockLayout::extent() const {
  std::size_t end = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] > 0) end = std::max(end, offset[i] + bytes[i]);
  return end;
}

Schedule pairwise_all_to_allv(const CollectiveShape& shape, const BlockLayout& send, const BlockLayout& recv) {
  return pairwise_blocks(
      shape, "pairwise", [&](int p) { return send.at(BufferId::input, p); },
      [&](int p) { return recv.at(BufferId::output, p); }, std::nullopt);
}

Schedule pairwise_all_gatherv(const CollectiveShape& shape, const BlockLayout& recv) {
  const Region own{BufferId::input, 0, recv.bytes.at(static_cast<std::size_t>(shape.rank))};
  return pairwise_blocks(
      shape, "pairwise", [&](int) { return own; }, [&](int p) { return recv.at(BufferId::output, p); },
      std::nullopt);
}

Schedule pairwise_reduce_scatterv(const CollectiveShape& shape, const BlockLayout& send) {
  const Region out{BufferId::output, 0, send.bytes.at(static_cast<std::size_t>(shape.rank))};
  // What arrives from rank p is p's contribution to this rank's block.
  return pairwise_blocks(
      shape, "pairwise", [&](int p) { return send.at(BufferId::input, p); }, [&](int) { return out; }, out);
}

Schedule direct_gatherv(const CollectiveShape& shape, std::size_t send_bytes, const BlockLayout& recv) {
  Schedule sched = Schedule::for_shape(shape, "direct");
  const Region own{BufferId::input, 0, send_bytes};
  if (shape.rank != shape.root) {
    sched.add(Step{.kind = StepKind::send, .peer = shape.root, .src = own});
    return sched;
  }
  const Region mine = recv.at(BufferId::output, shape.root);
  BRAID_CHECK(mine.bytes == send_bytes, "gatherv: the root's own block is ", mine.bytes, " bytes, its input ",
              send_bytes);
  if (send_bytes > 0) sched.add(Step{.kind = StepKind::copy, .src = own, .dst = mine});
  for (int k = 1; k < shape.ranks; ++k) {
    const int from = (shape.root + k) % shape.ranks;
    sched.add(Step{.kind = StepKind::recv, .peer = from, .dst = recv.at(BufferId::output, from)});
  }
  return sched;
}

Schedule direct_scatterv(const CollectiveShape& shape, const BlockLayout& send, std::size_t recv_bytes) {
  Schedule sched = Schedule::for_shape(shape, "direct");
  const Region own{BufferId::output, 0, recv_bytes};
  if (shape.rank != shape.root) {
    sched.add(Step{.kind = StepKind::recv, .peer = shape.root, .dst = own});
    return sched;
  }
  const Region mine = send.at(BufferId::input, shape.root);
  BRAID_CHECK(mine.bytes == recv_bytes, "scatterv: the root's own block is ", mine.bytes, " bytes, its output ",
              recv_bytes);
  if (recv_bytes > 0) sched.add(Step{.kind = StepKind::copy, .src = mine, .dst = own});
  for (int k = 1; k < shape.ranks; ++k) {
    const int to = (shape.root + k) % shape.ranks;
    sched.add(Step{.kind = StepKind::send, .peer = to, .src = send.at(BufferId::input, to)});
  }
  return sched;
}

}  // namespace braid
