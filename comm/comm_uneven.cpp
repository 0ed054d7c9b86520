// The uneven collectives of the communicator (all_to_allv, all_gatherv,
// reduce_scatterv, gatherv, scatterv): argument checks, block layouts and
// their schedules (collectives/uneven.cpp). Their plans are not cached: the
// counts and displacements are part of the shape, and differ between ranks.
#include <numeric>

#include "collectives/algorithms.hpp"
#include "comm_impl.hpp"
#include "make_op.hpp"

namespace braid {
namespace {

std::string entries(std::span<const std::size_t> v) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < 8; ++i) out += cat(i ? ", " : "", v[i]);
  if (v.size() > 8) out += ", ...";
  return cat("[", out, "]");
}

}  // namespace

BlockLayout CommImpl::layout_of(std::string_view op, std::string_view what, std::span<const std::size_t> counts,
                                std::span<const std::size_t> displs, DataType type, bool output) const {
  const std::size_t element = size_of(type);
  const auto n = static_cast<std::size_t>(size_);
  if (counts.size() != n)
    throw InvalidArgument(cat("rank ", rank_, ": ", op, ": ", what, "_counts has ", counts.size(),
                              " entries but the communicator has ", n, " ranks"));
  if (!displs.empty() && displs.size() != n)
    throw InvalidArgument(cat("rank ", rank_, ": ", op, ": ", what, "_displs has ", displs.size(),
                              " entries but the communicator has ", n, " ranks"));
  constexpr std::size_t kLimit = std::size_t{1} << 62;
  BlockLayout layout;
  layout.offset.resize(n);
  layout.bytes.resize(n);
  std::size_t packed = 0;
  for (std::size_t p = 0; p < n; ++p) {
    const std::size_t displ = displs.empty() ? packed : displs[p];
    if (counts[p] > kLimit / element || displ > kLimit / element || counts[p] + displ > kLimit / element)
      throw InvalidArgument(cat("rank ", rank_, ": ", op, ": ", what, " block of rank ", p, " (count ", counts[p],
                                ", displacement ", displ, ") is too large (a negative value passed as size_t?)"));
    layout.offset[p] = counts[p] == 0 ? 0 : displ * element;  // an empty block may point anywhere
    layout.bytes[p] = counts[p] * element;
    packed += counts[p];
  }
  if (output) {
    // Two ranks' blocks written to the same bytes: whichever lands last wins.
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return layout.offset[a] < layout.offset[b]; });
    std::size_t last = n;
    for (std::size_t p : order) {
      if (layout.bytes[p] == 0) continue;
      if (last != n && layout.offset[last] + layout.bytes[last] > layout.offset[p])
        throw InvalidArgument(cat("rank ", rank_, ": ", op, ": the ", what, " blocks of ranks ", std::min(last, p),
                                  " and ", std::max(last, p), " overlap (", what, "_counts ", entries(counts), ", ",
                                  what, "_displs ", entries(displs), ")"));
      last = p;
    }
  }
  return layout;
}

std::shared_ptr<Operation> CommImpl::all_to_allv(const void* send, std::span<const std::size_t> send_counts,
                                                 std::span<const std::size_t> send_displs, void* recv,
                                                 std::span<const std::size_t> recv_counts,
                                                 std::span<const std::size_t> recv_displs, DataType type) {
  const BlockLayout in = layout_of("all_to_allv", "send", send_counts, send_displs, type, false);
  const BlockLayout out = layout_of("all_to_allv", "recv", recv_counts, recv_displs, type, true);
  const std::size_t in_bytes = in.extent(), out_bytes = out.extent();
  check_buffer(send, in_bytes, "all_to_allv", "send");
  check_buffer(recv, out_bytes, "all_to_allv", "recv");
  check_overlap(rank_, "all_to_allv", send, in_bytes, recv, out_bytes, nullptr);
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::all_to_allv, type, ReduceOp::sum, -1, 0, "pairwise")},
      Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), in_bytes, out_bytes},
      ++collective_sequence_, [&] { return pairwise_all_to_allv(shape(0, type, ReduceOp::sum, 0), in, out); },
      [&] { return cat("all_to_allv(", name_of(type), ", ", in_bytes / size_of(type), " elements out, ",
                       out_bytes / size_of(type), " in)"); },
      false);
}

std::shared_ptr<Operation> CommImpl::all_gatherv(const void* send, std::size_t send_count, void* recv,
                                                 std::span<const std::size_t> recv_counts,
                                                 std::span<const std::size_t> recv_displs, DataType type) {
  const std::size_t in_bytes = checked_bytes(send_count, type, 1, "all_gatherv");
  const BlockLayout out = layout_of("all_gatherv", "recv", recv_counts, recv_displs, type, true);
  const std::size_t out_bytes = out.extent();
  const auto me = static_cast<std::size_t>(rank_);
  if (out.bytes[me] != in_bytes)
    throw InvalidArgument(cat("rank ", rank_, ": all_gatherv: send_count is ", send_count, " but recv_counts[", rank_,
                              "] is ", recv_counts[me]));
  check_buffer(send, send_count, "all_gatherv", "send");
  check_buffer(recv, out_bytes, "all_gatherv", "recv");
  check_overlap(rank_, "all_gatherv", send, in_bytes, recv, out_bytes,
                recv ? static_cast<std::byte*>(recv) + out.offset[me] : nullptr);
  const std::size_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::all_gatherv, type, ReduceOp::sum, -1, total, "pairwise")},
      Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), in_bytes, out_bytes},
      ++collective_sequence_, [&] { return pairwise_all_gatherv(shape(0, type, ReduceOp::sum, 0), out); },
      [&] { return cat("all_gatherv(", name_of(type), ", ", total, " elements in all)"); }, false);
}

std::shared_ptr<Operation> CommImpl::reduce_scatterv(const void* send, void* recv,
                                                     std::span<const std::size_t> recv_counts, DataType type,
                                                     ReduceOp op) {
  name_of(op);
  const BlockLayout in = layout_of("reduce_scatterv", "recv", recv_counts, {}, type, false);
  const auto me = static_cast<std::size_t>(rank_);
  const std::size_t in_bytes = in.extent(), out_bytes = in.bytes[me];
  check_buffer(send, in_bytes, "reduce_scatterv", "send");
  check_buffer(recv, out_bytes, "reduce_scatterv", "recv");
  check_overlap(rank_, "reduce_scatterv", recv, out_bytes, send, in_bytes,
                send ? static_cast<const std::byte*>(send) + in.offset[me] : nullptr);
  const std::size_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::reduce_scatterv, type, op, -1, total, "pairwise")},
      Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), in_bytes, out_bytes},
      ++collective_sequence_, [&] { return pairwise_reduce_scatterv(shape(0, type, op, 0), in); },
      [&] { return cat("reduce_scatterv(", name_of(type), " ", name_of(op), ", ", total, " elements in all)"); },
      false);
}

std::shared_ptr<Operation> CommImpl::gatherv(const void* send, std::size_t send_count, void* recv,
                                             std::span<const std::size_t> recv_counts,
                                             std::span<const std::size_t> recv_displs, DataType type, int root) {
  check_root(root, "gatherv");
  const std::size_t in_bytes = checked_bytes(send_count, type, 1, "gatherv");
  check_buffer(send, send_count, "gatherv", "send");
  BlockLayout out;
  std::size_t out_bytes = 0;
  void* at_root = rank_ == root ? recv : nullptr;
  checks_at_root(root, [&] {
    out = layout_of("gatherv", "recv", recv_counts, recv_displs, type, true);
    out_bytes = out.extent();
    const auto me = static_cast<std::size_t>(rank_);
    if (out.bytes[me] != in_bytes)
      throw InvalidArgument(cat("rank ", rank_, ": gatherv: the root's send_count is ", send_count,
                                " but recv_counts[", root, "] is ", recv_counts[me]));
    check_buffer(recv, out_bytes, "gatherv", "the root's recv");
    check_overlap(rank_, "gatherv", send, in_bytes, recv, out_bytes,
                  recv ? static_cast<std::byte*>(recv) + out.offset[me] : nullptr);
  });
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::gatherv, type, ReduceOp::sum, root, 0, "direct")},
      Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(at_root), in_bytes, out_bytes},
      ++collective_sequence_, [&] { return direct_gatherv(shape(0, type, ReduceOp::sum, root), in_bytes, out); },
      [&] { return cat("gatherv(", name_of(type), ", root ", root, ", ", send_count, " elements from this rank)"); },
      false);
}

std::shared_ptr<Operation> CommImpl::scatterv(const void* send, std::span<const std::size_t> send_counts,
                                              std::span<const std::size_t> send_displs, void* recv,
                                              std::size_t recv_count, DataType type, int root) {
  check_root(root, "scatterv");
  const std::size_t out_bytes = checked_bytes(recv_count, type, 1, "scatterv");
  check_buffer(recv, recv_count, "scatterv", "recv");
  BlockLayout in;
  std::size_t in_bytes = 0;
  const void* at_root = rank_ == root ? send : nullptr;
  checks_at_root(root, [&] {
    in = layout_of("scatterv", "send", send_counts, send_displs, type, false);
    in_bytes = in.extent();
    const auto me = static_cast<std::size_t>(rank_);
    if (in.bytes[me] != out_bytes)
      throw InvalidArgument(cat("rank ", rank_, ": scatterv: the root's recv_count is ", recv_count,
                                " but send_counts[", root, "] is ", send_counts[me]));
    check_buffer(send, in_bytes, "scatterv", "the root's send");
    check_overlap(rank_, "scatterv", recv, out_bytes, send, in_bytes,
                  send ? static_cast<const std::byte*>(send) + in.offset[me] : nullptr);
  });
  return make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::scatterv, type, ReduceOp::sum, root, 0, "direct")},
      Buffers{static_cast<const std::byte*>(at_root), static_cast<std::byte*>(recv), in_bytes, out_bytes},
      ++collective_sequence_, [&] { return direct_scatterv(shape(0, type, ReduceOp::sum, root), in, out_bytes); },
      [&] { return cat("scatterv(", name_of(type), ", root ", root, ", ", recv_count, " elements to this rank)"); },
      false);
}

}  // namespace braid
