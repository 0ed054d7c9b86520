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
  auto hit = cache ? std::find_if(plans_.begin(), plans_.end(), [&](const auto& p) { return p->key == key; })
                   : plans_.end();
  std::shared_ptr<OpPlan> uncached;
  if (hit != plans_.end()) {
    std::rotate(plans_.begin(), hit, hit + 1);
  } else {
    auto plan = std::make_shared<OpPlan>();
    plan->key = key;
    plan->schedule = build();
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
  auto op = std::make_shared<Operation>();
  op->plan = cache ? plans_.front() : std::move(uncached);
  if (device::count() > 0) {
    const device::Location in = device::locate(buffers.input), out = device::locate(buffers.output);
    op->device_input = in.kind == MemKind::cuda;
    op->device_output = out.kind == MemKind::cuda;
    if (op->device_input || op->device_output) {
      buffers.kind = MemKind::cuda;
      buffers.device = op->device_output ? out.device : in.device;
    }
  }
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
