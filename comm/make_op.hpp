// What every operation builder of the communicator shares: the plan cache
// lookup (CommImpl::make_op) and the argument checks of buffers.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "comm_impl.hpp"
#include "core/text.hpp"

namespace braid {

template <typename Build, typename Describe>
std::shared_ptr<Operation> CommImpl::make_op(OpPlan::Key key, Buffers buffers, std::uint32_t sequence,
                                             Build&& build, Describe&& describe, bool cache) {
  // The caller's buffer sizes are part of the shape (the root's differ).
  key.input_bytes = buffers.input_bytes;
  key.output_bytes = buffers.output_bytes;
  bool device_input = false, device_output = false;
  if (device::count() > 0) {
    const device::Location in = device::locate(buffers.input), out = device::locate(buffers.output);
    device_input = in.kind == MemKind::cuda;
    device_output = out.kind == MemKind::cuda;
    if (device_input || device_output) {
      buffers.kind = MemKind::cuda;
      buffers.device = device_output ? out.device : in.device;
    }
  }
  // Device buffers move over the links directly when every pair of the
  // communicator has a link that takes device memory (the same answer on
  // every rank) and both buffers are on the device; else the operation runs
  // on a host copy; so does a collective below device_direct_min_, judged
  // by its descriptor, which every rank shares (a send and its receive
  // always agree: point-to-point never stages). A direct operation has a
  // schedule of its own.
  key.device_direct = buffers.kind == MemKind::cuda && device_links_ && (device_input || !buffers.input) &&
                      (device_output || !buffers.output) &&
                      (key.descriptor.kind == OpDescriptor::Kind::point_to_point ||
                       key.descriptor.count * size_of(key.descriptor.type) >= device_direct_min_);
  auto hit = cache ? std::find_if(plans_.begin(), plans_.end(), [&](const auto& p) { return p->key == key; })
                   : plans_.end();
  std::shared_ptr<OpPlan> uncached;
  if (hit != plans_.end()) {
    std::rotate(plans_.begin(), hit, hit + 1);
  } else {
    auto plan = std::make_shared<OpPlan>();
    plan->key = key;
    shaping_direct_ = key.device_direct;
    try {
      plan->schedule = build();
    } catch (...) {
      shaping_direct_ = false;
      throw;
    }
    shaping_direct_ = false;
    validate(plan->schedule, BufferSizes{key.input_bytes, key.output_bytes}, rank_);
    // On the wire the descriptor names the algorithm the schedule says it
    // is (a builder may hand a degenerate shape to another one).
    plan->schedule.descriptor = key.descriptor;
    plan->schedule.descriptor.algorithm = OpDescriptor::algorithm_id(plan->schedule.algorithm);
    plan->what = std::make_shared<const std::string>(describe());
    plan->peers = plan->schedule.peers();
    if (!cache) {
      uncached = std::move(plan);
    } else {
      if (plans_.size() == kPlanCache) plans_.pop_back();
      plans_.insert(plans_.begin(), std::move(plan));
    }
  }
  std::shared_ptr<Operation> op;
  if (spare_op_ && spare_op_.use_count() == 1) {
    op = std::move(spare_op_);
    op->clear();
  } else {
    op = std::make_shared<Operation>();
  }
  // A reused operation mostly ran this very plan: no reference counting then.
  if (!cache) op->plan = std::move(uncached);
  else if (op->plan != plans_.front()) op->plan = plans_.front();
  op->device_input = device_input;
  op->device_output = device_output;
  op->buffers = buffers;
  op->sequence = sequence;
  op->comm = this;
  return op;
}

// Two regions that overlap without being the same are a caller bug.
inline void check_overlap(int rank, std::string_view op, const void* a, std::size_t a_bytes, const void* b,
                          std::size_t b_bytes, const void* allowed_b_start) {
  auto* pa = static_cast<const std::byte*>(a);
  auto* pb = static_cast<const std::byte*>(b);
  if (pa == nullptr || pb == nullptr || a_bytes == 0 || b_bytes == 0) return;
  if (pa == allowed_b_start) return;
  if (pa < pb + b_bytes && pb < pa + a_bytes)
    throw InvalidArgument(cat("rank ", rank, ": ", op, ": send and recv buffers overlap (in place needs the exact layout "
                              "the API describes)"));
}

inline std::string shape_text(std::string_view op, DataType type, std::string_view detail, std::size_t count) {
  return cat(op, "(", name_of(type), detail.empty() ? "" : " ", detail, ", ", count, " elements)");
}


}  // namespace braid
