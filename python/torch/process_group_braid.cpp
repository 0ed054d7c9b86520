// ProcessGroupBraid (process_group_braid.hpp): each call checks its
// arguments (tensor_arguments.hpp) and starts braid's operations in a
// WorkBraid (work_braid.hpp); and the Python module braid._braid_torch that
// hands the group to torch.distributed.
#include "process_group_braid.hpp"

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "c10d_store.hpp"
#include "tensor_arguments.hpp"
#include "work_braid.hpp"

namespace braid::torch_backend {

ProcessGroupBraid::ProcessGroupBraid(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size),
      timeout_(timeout),
      comm_(braid::Comm::init(std::make_shared<C10dStore>(store), rank, size, braid::CommOptions{.timeout = timeout})) {
  init();
}

ProcessGroupBraid::~ProcessGroupBraid() {
  // destroy_process_group() lets the group go with the GIL held, and the
  // communicator's end finishes its operations still in flight, whose
  // Futures' callbacks (DDP's hooks, fut.then in Python) take the GIL on the
  // thread that completes them: let it go meanwhile.
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    comm_ = braid::Comm();
  } else {
    comm_ = braid::Comm();
  }
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::broadcast(std::vector<at::Tensor>& tensors,
                                                              const ::c10d::BroadcastOptions& opts) {
  at::Tensor& t = single(tensors, "broadcast", "tensor");
  const int root = checked_root(opts.rootRank, size_, "broadcast", "src");
  auto work = make_work(rank_, ::c10d::OpType::BROADCAST, "broadcast", {t}, t.device(), timeout_);
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.broadcast_async(t.data_ptr(), t.data_ptr(), bytes_of(t), DataType::u8, root));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::allreduce(std::vector<at::Tensor>& tensors,
                                                              const ::c10d::AllreduceOptions& opts) {
  at::Tensor& t = single(tensors, "all_reduce", "tensor");
  const DataType type = reduce_type(t, "all_reduce", "tensor");
  const braid::ReduceOp op = reduce_op(opts.reduceOp, "all_reduce");
  auto work = make_work(rank_, ::c10d::OpType::ALLREDUCE, "all_reduce", {t}, t.device(), timeout_);
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.all_reduce_async(t.data_ptr(), t.data_ptr(), count_of(t), type, op));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                        const ::c10d::AllreduceCoalescedOptions& opts) {
  std::vector<DataType> types;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = "tensors[" + std::to_string(i) + "]";
    check_tensor(tensors[i], "all_reduce_coalesced", name);
    types.push_back(reduce_type(tensors[i], "all_reduce_coalesced", name));
  }
  for (std::size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].device() != tensors[0].device())
      fail_value(argument("all_reduce_coalesced", "tensors[" + std::to_string(i) + "]") + " is on device '" +
                 tensors[i].device().str() + "' but tensors[0] is on '" + tensors[0].device().str() + "'");
  const braid::ReduceOp op = reduce_op(opts.reduceOp, "all_reduce_coalesced");
  auto work = make_work(rank_, ::c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors,
                        tensors.empty() ? c10::Device(c10::kCPU) : tensors[0].device(), timeout_);
  return issue(mutex_, work, [&](WorkBraid& w) {
    for (std::size_t i = 0; i < tensors.size(); ++i)
      w.track(comm_.all_reduce_async(tensors[i].data_ptr(), tensors[i].data_ptr(), count_of(tensors[i]), types[i], op));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::reduce(std::vector<at::Tensor>& tensors,
                                                           const ::c10d::ReduceOptions& opts) {
  at::Tensor& t = single(tensors, "reduce", "tensor");
  const DataType type = reduce_type(t, "reduce", "tensor");
  const braid::ReduceOp op = reduce_op(opts.reduceOp, "reduce");
  const int root = checked_root(opts.rootRank, size_, "reduce", "dst");
  auto work = make_work(rank_, ::c10d::OpType::REDUCE, "reduce", {t}, t.device(), timeout_);
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.reduce_async(t.data_ptr(), t.data_ptr(), count_of(t), type, op, root));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const ::c10d::AllgatherOptions& /*opts*/) {
  at::Tensor& in = single(inputs, "all_gather", "tensor");
  if (outputs.size() != 1)
    fail_value(argument("all_gather", "tensor_list") + ": braid takes one list per rank, got " +
               std::to_string(outputs.size()));
  TensorList& list = outputs[0];
  check_list(list, in, static_cast<std::size_t>(size_), true, "all_gather", "tensor_list");
  auto work = make_work(rank_, ::c10d::OpType::ALLGATHER, "all_gather", list, in.device(), timeout_);
  work->keep(in);
  void* gathered = work->write_into(list, in.device());
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.all_gather_async(in.data_ptr(), gathered, bytes_of(in), DataType::u8));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                    const ::c10d::AllgatherOptions& /*opts*/) {
  check_tensor(output, "all_gather_into_tensor", "output_tensor");
  check_tensor(input, "all_gather_into_tensor", "input_tensor");
  check_alike(output, input, "all_gather_into_tensor", "output_tensor", "input_tensor");
  if (output.numel() != input.numel() * size_)
    fail_value(argument("all_gather_into_tensor", "output_tensor") + " has " + std::to_string(output.numel()) +
               " elements; it must hold world size (" + std::to_string(size_) + ") x input_tensor's " +
               std::to_string(input.numel()));
  auto work = make_work(rank_, ::c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output}, output.device(),
                        timeout_);
  work->keep(input);
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.all_gather_async(input.data_ptr(), output.data_ptr(), bytes_of(input), DataType::u8));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const ::c10d::GatherOptions& opts) {
  at::Tensor& in = single(inputs, "gather", "tensor");
  const int root = checked_root(opts.rootRank, size_, "gather", "dst");
  TensorList list;
  if (rank_ == root) {
    if (outputs.size() != 1)
      fail_value(argument("gather", "gather_list") + ": the destination rank must pass one list, got " +
                 std::to_string(outputs.size()));
    list = outputs[0];
    check_list(list, in, static_cast<std::size_t>(size_), true, "gather", "gather_list");
  } else if (!outputs.empty() && !outputs[0].empty()) {
    fail_value(argument("gather", "gather_list") + " must be None on a rank other than dst");
  }
  auto work = make_work(rank_, ::c10d::OpType::GATHER, "gather", list, in.device(), timeout_);
  work->keep(in);
  void* gathered = rank_ == root ? work->write_into(list, in.device()) : nullptr;
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.gather_async(in.data_ptr(), gathered, bytes_of(in), DataType::u8, root));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::scatter(std::vector<at::Tensor>& outputs,
                                                            std::vector<std::vector<at::Tensor>>& inputs,
                                                            const ::c10d::ScatterOptions& opts) {
  at::Tensor& out = single(outputs, "scatter", "tensor");
  const int root = checked_root(opts.rootRank, size_, "scatter", "src");
  if (rank_ == root) {
    if (inputs.size() != 1)
      fail_value(argument("scatter", "scatter_list") + ": the source rank must pass one list, got " +
                 std::to_string(inputs.size()));
    check_list(inputs[0], out, static_cast<std::size_t>(size_), true, "scatter", "scatter_list");
  } else if (!inputs.empty() && !inputs[0].empty()) {
    fail_value(argument("scatter", "scatter_list") + " must be None on a rank other than src");
  }
  auto work = make_work(rank_, ::c10d::OpType::SCATTER, "scatter", {out}, out.device(), timeout_);
  const void* source = rank_ == root ? work->read_from(inputs[0]) : nullptr;
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.scatter_async(source, out.data_ptr(), bytes_of(out), DataType::u8, root));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                                   const ::c10d::ReduceScatterOptions& opts) {
  at::Tensor& out = single(outputs, "reduce_scatter", "output");
  const DataType type = reduce_type(out, "reduce_scatter", "output");
  const braid::ReduceOp op = reduce_op(opts.reduceOp, "reduce_scatter");
  if (inputs.size() != 1)
    fail_value(argument("reduce_scatter", "input_list") + ": braid takes one list per rank, got " +
               std::to_string(inputs.size()));
  const TensorList& list = inputs[0];
  check_list(list, out, static_cast<std::size_t>(size_), false, "reduce_scatter", "input_list");
  std::vector<std::size_t> counts;
  for (const auto& t : list) counts.push_back(count_of(t));
  if (counts[static_cast<std::size_t>(rank_)] != count_of(out))
    fail_value(argument("reduce_scatter", "output") + " has " + std::to_string(out.numel()) +
               " elements but input_list[" + std::to_string(rank_) + "] (this rank's block) has " +
               std::to_string(counts[static_cast<std::size_t>(rank_)]));
  const bool even = std::all_of(counts.begin(), counts.end(), [&](std::size_t c) { return c == counts[0]; });
  auto work = make_work(rank_, ::c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {out}, out.device(), timeout_);
  const void* source = work->read_from(list);
  return issue(mutex_, work, [&](WorkBraid& w) {
    if (even)
      w.track(comm_.reduce_scatter_async(source, out.data_ptr(), count_of(out), type, op));
    else
      w.track(comm_.reduce_scatterv_async(source, out.data_ptr(), counts, type, op));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                         const ::c10d::ReduceScatterOptions& opts) {
  check_tensor(output, "reduce_scatter_tensor", "output");
  check_tensor(input, "reduce_scatter_tensor", "input");
  check_alike(output, input, "reduce_scatter_tensor", "output", "input");
  const DataType type = reduce_type(output, "reduce_scatter_tensor", "output");
  const braid::ReduceOp op = reduce_op(opts.reduceOp, "reduce_scatter_tensor");
  if (input.numel() != output.numel() * size_)
    fail_value(argument("reduce_scatter_tensor", "input") + " has " + std::to_string(input.numel()) +
               " elements; it must hold world size (" + std::to_string(size_) + ") x output's " +
               std::to_string(output.numel()));
  auto work = make_work(rank_, ::c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output}, output.device(),
                        timeout_);
  work->keep(input);
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.reduce_scatter_async(input.data_ptr(), output.data_ptr(), count_of(output), type, op));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                  std::vector<int64_t>& output_split_sizes,
                                                                  std::vector<int64_t>& input_split_sizes,
                                                                  const ::c10d::AllToAllOptions& /*opts*/) {
  check_tensor(output, "all_to_all_single", "output");
  check_tensor(input, "all_to_all_single", "input");
  check_alike(output, input, "all_to_all_single", "output", "input");
  const auto send = split_bytes(input, input_split_sizes, size_, "input", "input_split_sizes");
  const auto recv = split_bytes(output, output_split_sizes, size_, "output", "output_split_sizes");
  // braid's all_to_allv is not in place; a shared buffer sends from a copy.
  at::Tensor source = input.data_ptr() == output.data_ptr() && bytes_of(input) > 0 ? input.clone() : input;
  const bool even = input_split_sizes.empty() && output_split_sizes.empty();
  auto work = make_work(rank_, ::c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output}, output.device(), timeout_);
  work->keep(source);
  return issue(mutex_, work, [&](WorkBraid& w) {
    if (even)
      w.track(comm_.all_to_all_async(source.data_ptr(), output.data_ptr(), send[0], DataType::u8));
    else
      w.track(comm_.all_to_allv_async(source.data_ptr(), send, {}, output.data_ptr(), recv, {}, DataType::u8));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::alltoall(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const ::c10d::AllToAllOptions& /*opts*/) {
  const auto n = static_cast<std::size_t>(size_);
  if (inputs.empty()) fail_value(argument("all_to_all", "input_tensor_list") + " is empty");
  check_list(inputs, inputs[0], n, false, "all_to_all", "input_tensor_list");
  check_list(outputs, inputs[0], n, false, "all_to_all", "output_tensor_list");
  std::vector<std::size_t> send(n), recv(n);
  for (std::size_t p = 0; p < n; ++p) {
    send[p] = bytes_of(inputs[p]);
    recv[p] = bytes_of(outputs[p]);
  }
  auto work = make_work(rank_, ::c10d::OpType::ALLTOALL, "all_to_all", outputs, inputs[0].device(), timeout_);
  // braid's all_to_allv is not in place: lists in overlapping memory send from a copy.
  const auto* in_start = static_cast<const std::byte*>(inputs[0].data_ptr());
  const auto* out_start = static_cast<const std::byte*>(outputs[0].data_ptr());
  const bool shared = back_to_back(inputs) && back_to_back(outputs) &&
                      in_start < out_start + std::accumulate(recv.begin(), recv.end(), std::size_t{0}) &&
                      out_start < in_start + std::accumulate(send.begin(), send.end(), std::size_t{0});
  const void* source = shared ? work->read_from(TensorList{pack(inputs)}) : work->read_from(inputs);
  void* target = work->write_into(outputs, inputs[0].device());
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.all_to_allv_async(source, send, {}, target, recv, {}, DataType::u8));
  });
}

// braid does not group device buffers: inside batch_isend_irecv a CUDA
// tensor is sent from a host copy and received into one.
c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::send(std::vector<at::Tensor>& tensors, int dst_rank, int /*tag*/) {
  at::Tensor& t = single(tensors, "send", "tensor");
  const int peer = checked_root(dst_rank, size_, "send", "dst");
  const bool staged = coalescing_ && !t.device().is_cpu();
  at::Tensor source = staged ? t.to(at::kCPU) : t;
  auto work = make_work(rank_, ::c10d::OpType::SEND, "send", {t}, t.device(), timeout_);
  work->keep(source);
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.send_async(source.data_ptr(), bytes_of(source), DataType::u8, peer));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::recv(std::vector<at::Tensor>& tensors, int src_rank, int /*tag*/) {
  at::Tensor& t = single(tensors, "recv", "tensor");
  const int peer = checked_root(src_rank, size_, "recv", "src");
  const bool staged = coalescing_ && !t.device().is_cpu();
  at::Tensor target = staged ? at::empty_like(t, at::TensorOptions().device(at::kCPU)) : t;
  auto work = make_work(rank_, ::c10d::OpType::RECV, "recv", {t}, t.device(), timeout_);
  if (staged) {
    work->keep(target);
    work->on_success([t, target]() mutable { t.copy_(target); });
  }
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.recv_async(target.data_ptr(), bytes_of(target), DataType::u8, peer));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::barrier(const ::c10d::BarrierOptions& /*opts*/) {
  auto work = make_work(rank_, ::c10d::OpType::BARRIER, "barrier", {}, c10::Device(c10::kCPU), timeout_);
  return issue(mutex_, work, [&](WorkBraid& w) { w.track(comm_.barrier_async()); });
}

void ProcessGroupBraid::startCoalescing() {
  coalescing_ = true;
  braid::group_start();
}

void ProcessGroupBraid::endCoalescing(std::vector<c10::intrusive_ptr<::c10d::Work>>& /*reqs*/) {
  coalescing_ = false;
  std::lock_guard<std::mutex> lock(mutex_);
  braid::group_end();
}

}  // namespace braid::torch_backend

namespace py = pybind11;

PYBIND11_MODULE(_braid_torch, m) {
  using braid::torch_backend::ProcessGroupBraid;
  m.doc() = "braid's torch.distributed backend (ProcessGroupBraid); import braid.torch to register it";
  // braid/torch.py registers it with atexit (in a wheel this extension holds
  // its own copy of braid, whose threads must stop before the interpreter
  // finalizes too).
  m.def(
      "_shutdown", [] { braid::shutdown(); }, py::call_guard<py::gil_scoped_release>(),
      "Finalizes every braid communicator of this process and stops braid's threads.");
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int world_size,
         std::chrono::milliseconds timeout) -> c10::intrusive_ptr<::c10d::ProcessGroup> {
        return c10::make_intrusive<ProcessGroupBraid>(store, rank, world_size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "The creator torch.distributed.Backend.register_backend calls: joins rank of world_size through torch's store.");
  m.def(
      "describe",
      [](const c10::intrusive_ptr<::c10d::ProcessGroup>& group) {
        const auto* braid_group = dynamic_cast<const ProcessGroupBraid*>(group.get());
        if (braid_group == nullptr)
          throw py::value_error("braid.torch.describe: the process group's backend is " + group->getBackendName() +
                                ", not braid");
        return braid_group->describe();
      },
      py::arg("group"), "braid's one-line description of a braid process group (transport, algorithms, settings).");
}
