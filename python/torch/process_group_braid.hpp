// ProcessGroupBraid: braid as a torch.distributed backend (c10d
// ProcessGroup), for `import braid.torch` and
// dist.init_process_group("braid", ...).
//
// Every call starts braid's *_async operation on the tensors' memory and
// returns a WorkBraid at once; braid runs the operations of the group one
// after another on its progress thread, and a completion callback
// (braid::Work::then) finishes the WorkBraid: it copies results where torch's
// layout differs from braid's (lists of tensors go through one packed
// scratch tensor), completes the Future that DDP's communication hooks chain
// on (getFuture), and wakes wait(). The WorkBraid keeps every tensor it
// touches alive until then.
//
// Tensors must be dense and contiguous, one per rank (torch's
// multi-tensor-per-process lists are gone with multi-GPU single-process
// training), all of a call on one device: the CPU or, where libbraid was
// built with CUDA, a CUDA device (work_braid.hpp: how streams are kept in
// order); anything else fails at the call with a ValueError or TypeError
// naming the torch.distributed argument. Data movement (broadcast, gathers,
// scatters, all-to-all, send/recv) works on any dtype as bytes; reductions
// need a dtype braid reduces (float16/32/64, bfloat16, int8/32/64, uint8)
// and SUM, AVG, PRODUCT, MIN or MAX.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "braid/braid.hpp"

namespace braid::torch_backend {

class ProcessGroupBraid final : public ::c10d::ProcessGroup {
 public:
  /// Joins the communicator of rank `rank` of `size` through torch's store;
  /// `timeout` bounds every braid wait and every Work::wait without one.
  ProcessGroupBraid(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~ProcessGroupBraid() override;

  const std::string getBackendName() const override { return "braid"; }
  /// braid's one-line description of the communicator (transport, algorithms).
  std::string describe() const { return comm_.describe(); }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                       const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors, const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs, const ::c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                  const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                        const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  /// braid matches point-to-point messages with one peer in the order they
  /// are issued; the tag is not used.
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;
  /// batch_isend_irecv's coalescing: braid's group_start/group_end, so a
  /// ring of sends and receives issued together cannot deadlock.
  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<::c10d::Work>>& reqs) override;

 private:
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;  // braid::Comm takes one calling thread at a time
  // Between startCoalescing and endCoalescing (batch_isend_irecv), which
  // torch calls on one thread with the sends and receives between them.
  std::atomic<bool> coalescing_{false};
  braid::Comm comm_;
};

}  // namespace braid::torch_backend
