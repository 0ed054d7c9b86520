// ProcessGroupBraid (process_group_braid.hpp) and the Python module
// braid._braid_torch that hands it to torch.distributed.
#include "process_group_braid.hpp"

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <utility>

#include "c10d_store.hpp"

namespace braid::torch_backend {
namespace {

using Millis = std::chrono::milliseconds;
using TensorList = std::vector<at::Tensor>;

[[noreturn]] void fail_value(const std::string& message) { C10_THROW_ERROR(ValueError, message); }
[[noreturn]] void fail_type(const std::string& message) { C10_THROW_ERROR(TypeError, message); }

/// "braid all_reduce: argument 'tensor'": the call and the argument as
/// torch.distributed's Python functions name them.
std::string argument(std::string_view op, std::string_view name) {
  return "braid " + std::string(op) + ": argument '" + std::string(name) + "'";
}

/// A tensor braid can read and write in place: dense, on the CPU, contiguous.
void check_tensor(const at::Tensor& t, std::string_view op, std::string_view name) {
  if (!t.defined()) fail_value(argument(op, name) + " is an undefined tensor");
  if (t.layout() != c10::kStrided)
    fail_type(argument(op, name) + " is a " + c10::str(t.layout()) + " tensor; braid takes dense (strided) tensors");
  if (!t.device().is_cpu())
    fail_value(argument(op, name) + " is on device '" + t.device().str() +
               "'; the braid backend reads CPU tensors only");
  if (!t.is_contiguous())
    fail_value(argument(op, name) + " is not contiguous (sizes " + c10::str(t.sizes()) + ", strides " +
               c10::str(t.strides()) + "); pass tensor.contiguous()");
}

/// The one tensor of a per-rank list (torch's multi-device lists are not supported).
at::Tensor& single(TensorList& tensors, std::string_view op, std::string_view name) {
  if (tensors.size() != 1)
    fail_value(argument(op, name) + ": braid takes one tensor per rank, got a list of " +
               std::to_string(tensors.size()));
  check_tensor(tensors[0], op, name);
  return tensors[0];
}

/// Each of `list`: checked, of `like`'s dtype, and (when `same_numel`) of its element count.
void check_list(const TensorList& list, const at::Tensor& like, std::size_t expected_size, bool same_numel,
                std::string_view op, std::string_view name) {
  if (list.size() != expected_size)
    fail_value(argument(op, name) + " has " + std::to_string(list.size()) + " tensors; the group has " +
               std::to_string(expected_size) + " ranks");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string item = std::string(name) + "[" + std::to_string(i) + "]";
    check_tensor(list[i], op, item);
    if (list[i].scalar_type() != like.scalar_type())
      fail_type(argument(op, item) + " has dtype " + c10::toString(list[i].scalar_type()) + " but the tensor has " +
                c10::toString(like.scalar_type()));
    if (same_numel && list[i].numel() != like.numel())
      fail_value(argument(op, item) + " has " + std::to_string(list[i].numel()) + " elements but the tensor has " +
                 std::to_string(like.numel()));
  }
}

void check_same_dtype(const at::Tensor& a, const at::Tensor& b, std::string_view op, std::string_view a_name,
                      std::string_view b_name) {
  if (a.scalar_type() != b.scalar_type())
    fail_type(argument(op, a_name) + " has dtype " + c10::toString(a.scalar_type()) + " but '" + std::string(b_name) +
              "' has " + c10::toString(b.scalar_type()));
}

std::size_t bytes_of(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }
std::size_t count_of(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()); }
std::byte* data_of(const at::Tensor& t) { return static_cast<std::byte*>(t.data_ptr()); }

/// The braid type a reduction of `t` runs in. Data movement needs none:
/// it moves bytes (DataType::u8), whatever the dtype.
DataType reduce_type(const at::Tensor& t, std::string_view op, std::string_view name) {
  switch (t.scalar_type()) {
    case at::kFloat: return DataType::f32;
    case at::kDouble: return DataType::f64;
    case at::kHalf: return DataType::f16;
    case at::kBFloat16: return DataType::bf16;
    case at::kChar: return DataType::i8;
    case at::kByte: return DataType::u8;
    case at::kInt: return DataType::i32;
    case at::kLong: return DataType::i64;
    default:
      fail_type(argument(op, name) + " has dtype " + c10::toString(t.scalar_type()) +
                ", which braid cannot reduce (it reduces float16, bfloat16, float32, float64, int8, uint8, int32, "
                "int64)");
  }
}

braid::ReduceOp reduce_op(const ::c10d::ReduceOp& op, std::string_view call) {
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM: return braid::ReduceOp::sum;
    case ::c10d::ReduceOp::AVG: return braid::ReduceOp::avg;
    case ::c10d::ReduceOp::PRODUCT: return braid::ReduceOp::prod;
    case ::c10d::ReduceOp::MIN: return braid::ReduceOp::min;
    case ::c10d::ReduceOp::MAX: return braid::ReduceOp::max;
    case ::c10d::ReduceOp::BAND: fail_value(argument(call, "op") + ": ReduceOp.BAND is not supported by braid (SUM, AVG, PRODUCT, MIN, MAX are)");
    case ::c10d::ReduceOp::BOR: fail_value(argument(call, "op") + ": ReduceOp.BOR is not supported by braid (SUM, AVG, PRODUCT, MIN, MAX are)");
    case ::c10d::ReduceOp::BXOR: fail_value(argument(call, "op") + ": ReduceOp.BXOR is not supported by braid (SUM, AVG, PRODUCT, MIN, MAX are)");
    default: fail_value(argument(call, "op") + ": this ReduceOp is not supported by braid (SUM, AVG, PRODUCT, MIN, MAX are)");
  }
}

/// Packs `list` one after another into a new contiguous byte tensor.
at::Tensor pack(const TensorList& list) {
  std::size_t total = 0;
  for (const auto& t : list) total += bytes_of(t);
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, at::TensorOptions().dtype(at::kByte));
  std::byte* cursor = data_of(flat);
  for (const auto& t : list) {
    if (bytes_of(t)) std::memcpy(cursor, t.data_ptr(), bytes_of(t));
    cursor += bytes_of(t);
  }
  return flat;
}

/// Copies consecutive bytes of `flat` out into `list` (the inverse of pack).
void unpack(const at::Tensor& flat, const TensorList& list) {
  const std::byte* cursor = data_of(flat);
  for (const auto& t : list) {
    if (bytes_of(t)) std::memcpy(t.data_ptr(), cursor, bytes_of(t));
    cursor += bytes_of(t);
  }
}

at::Tensor scratch_bytes(std::size_t bytes) {
  return at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte));
}

/// One torch.distributed call: one or more braid operations, the tensors
/// they use, and what to do when all are done. Completion runs on braid's
/// progress thread (Work::then): the success step (copies out of scratch),
/// then the Future (DDP chains its hooks on it), then wait()'s wake-up.
class WorkBraid final : public ::c10d::Work {
 public:
  WorkBraid(int rank, ::c10d::OpType type, std::string op, TensorList outputs, Millis timeout)
      : Work(rank, type),
        op_(std::move(op)),
        outputs_(std::move(outputs)),
        timeout_(timeout),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  /// Keeps a tensor braid reads or writes (an input, a scratch buffer) alive until the work is done.
  void keep(at::Tensor t) { kept_.push_back(std::move(t)); }
  /// Runs once every part succeeded, before the work completes.
  void on_success(std::function<void()> step) { on_success_ = std::move(step); }
  /// Adds a started braid operation to the ones this work waits for.
  void track(braid::Work part) {
    pending_.fetch_add(1, std::memory_order_relaxed);
    part.then([self = c10::intrusive_ptr<WorkBraid>::reclaim_copy(this)](std::exception_ptr error) {
      self->part_done(std::move(error));
    });
  }
  /// Every part is started (or starting one failed with `error`).
  void issued(std::exception_ptr error) { part_done(std::move(error)); }

  bool wait(Millis timeout) override {
    const Millis limit = timeout == kNoTimeout ? timeout_ : timeout;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, limit, [&] { return completed_; }))
      TORCH_CHECK(false, "braid ", op_, ": not done after ", limit.count(), " ms (Work.wait)");
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  void part_done(std::exception_ptr error) {
    if (error) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!first_error_) first_error_ = std::move(error);
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    std::exception_ptr failed;
    {
      std::lock_guard<std::mutex> lock(error_mutex_);
      failed = first_error_;
    }
    if (!failed && on_success_) {
      try {
        on_success_();
      } catch (...) {
        failed = std::current_exception();
      }
    }
    try {
      if (failed)
        future_->setError(failed);
      else
        future_->markCompleted(c10::IValue(outputs_));
    } catch (...) {
      // A callback chained on the future threw; it is the chain's error, not this work's.
    }
    kept_.clear();
    finish(failed);
  }

  std::string op_;
  TensorList outputs_;
  TensorList kept_;
  Millis timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::function<void()> on_success_;
  std::atomic<int> pending_{1};  // the parts, plus one while they are being started
  std::mutex error_mutex_;
  std::exception_ptr first_error_;
};

c10::intrusive_ptr<WorkBraid> make_work(int rank, ::c10d::OpType type, std::string op, TensorList outputs,
                                        Millis timeout) {
  return c10::make_intrusive<WorkBraid>(rank, type, std::move(op), std::move(outputs), timeout);
}

/// Starts `work`'s braid operations with `start(work)` under the group's
/// lock. braid's own argument errors (a root out of range, counts that do
/// not fit) become ValueError; the work completes once the parts that did
/// start are done, so their buffers outlive them even then.
template <typename Start>
c10::intrusive_ptr<::c10d::Work> issue(std::mutex& mutex, const c10::intrusive_ptr<WorkBraid>& work, Start&& start) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex);
    try {
      start(*work);
    } catch (...) {
      error = std::current_exception();
    }
  }
  work->issued(error);
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const braid::InvalidArgument& e) {
      fail_value(e.what());
    }
  }
  return work;
}

int checked_root(int64_t root, int size, std::string_view op, std::string_view name) {
  if (root < 0 || root >= size)
    fail_value(argument(op, name) + " is " + std::to_string(root) + ", not a rank of the group of " +
               std::to_string(size));
  return static_cast<int>(root);
}

/// Bytes per block of an all-to-all: split sizes along dimension 0, or
/// equal blocks when there are none.
std::vector<std::size_t> split_bytes(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                     std::string_view name, std::string_view splits_name) {
  const auto n = static_cast<std::size_t>(size);
  if (splits.empty()) {
    if (bytes_of(t) % n != 0)
      fail_value(argument("all_to_all_single", name) + " has " + std::to_string(t.numel()) +
                 " elements, not divisible into " + std::to_string(n) + " equal blocks; pass " +
                 std::string(splits_name));
    return std::vector<std::size_t>(n, bytes_of(t) / n);
  }
  if (splits.size() != n)
    fail_value(argument("all_to_all_single", splits_name) + " has " + std::to_string(splits.size()) +
               " entries; the group has " + std::to_string(n) + " ranks");
  if (t.dim() == 0) fail_value(argument("all_to_all_single", name) + " is a scalar; split sizes need dimension 0");
  const std::size_t row = t.size(0) == 0 ? 0 : bytes_of(t) / static_cast<std::size_t>(t.size(0));
  std::vector<std::size_t> out(n);
  int64_t sum = 0;
  for (std::size_t p = 0; p < n; ++p) {
    if (splits[p] < 0)
      fail_value(argument("all_to_all_single", splits_name) + " has a negative entry " + std::to_string(splits[p]));
    sum += splits[p];
    out[p] = static_cast<std::size_t>(splits[p]) * row;
  }
  if (sum != t.size(0))
    fail_value(argument("all_to_all_single", splits_name) + " sums to " + std::to_string(sum) + " but '" +
               std::string(name) + "' has " + std::to_string(t.size(0)) + " rows");
  return out;
}

}  // namespace

ProcessGroupBraid::ProcessGroupBraid(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size),
      timeout_(timeout),
      comm_(braid::Comm::init(std::make_shared<C10dStore>(store), rank, size, braid::CommOptions{.timeout = timeout})) {
  init();
}

ProcessGroupBraid::~ProcessGroupBraid() = default;

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::broadcast(std::vector<at::Tensor>& tensors,
                                                              const ::c10d::BroadcastOptions& opts) {
  at::Tensor& t = single(tensors, "broadcast", "tensor");
  const int root = checked_root(opts.rootRank, size_, "broadcast", "src");
  auto work = make_work(rank_, ::c10d::OpType::BROADCAST, "broadcast", {t}, timeout_);
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.broadcast_async(t.data_ptr(), t.data_ptr(), bytes_of(t), DataType::u8, root));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::allreduce(std::vector<at::Tensor>& tensors,
                                                              const ::c10d::AllreduceOptions& opts) {
  at::Tensor& t = single(tensors, "all_reduce", "tensor");
  const DataType type = reduce_type(t, "all_reduce", "tensor");
  const braid::ReduceOp op = reduce_op(opts.reduceOp, "all_reduce");
  auto work = make_work(rank_, ::c10d::OpType::ALLREDUCE, "all_reduce", {t}, timeout_);
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.all_reduce_async(t.data_ptr(), t.data_ptr(), count_of(t), type, op));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  std::vector<DataType> types;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = "tensors[" + std::to_string(i) + "]";
    check_tensor(tensors[i], "all_reduce_coalesced", name);
    types.push_back(reduce_type(tensors[i], "all_reduce_coalesced", name));
  }
  const braid::ReduceOp op = reduce_op(opts.reduceOp, "all_reduce_coalesced");
  auto work = make_work(rank_, ::c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, timeout_);
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
  auto work = make_work(rank_, ::c10d::OpType::REDUCE, "reduce", {t}, timeout_);
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
  at::Tensor flat = scratch_bytes(bytes_of(in) * static_cast<std::size_t>(size_));
  auto work = make_work(rank_, ::c10d::OpType::ALLGATHER, "all_gather", list, timeout_);
  work->keep(in);
  work->keep(flat);
  work->on_success([flat, list] { unpack(flat, list); });
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.all_gather_async(in.data_ptr(), flat.data_ptr(), bytes_of(in), DataType::u8));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                    const ::c10d::AllgatherOptions& /*opts*/) {
  check_tensor(output, "all_gather_into_tensor", "output_tensor");
  check_tensor(input, "all_gather_into_tensor", "input_tensor");
  check_same_dtype(output, input, "all_gather_into_tensor", "output_tensor", "input_tensor");
  if (output.numel() != input.numel() * size_)
    fail_value(argument("all_gather_into_tensor", "output_tensor") + " has " + std::to_string(output.numel()) +
               " elements; it must hold world size (" + std::to_string(size_) + ") x input_tensor's " +
               std::to_string(input.numel()));
  auto work = make_work(rank_, ::c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output}, timeout_);
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
  at::Tensor flat;
  if (rank_ == root) {
    if (outputs.size() != 1)
      fail_value(argument("gather", "gather_list") + ": the destination rank must pass one list, got " +
                 std::to_string(outputs.size()));
    list = outputs[0];
    check_list(list, in, static_cast<std::size_t>(size_), true, "gather", "gather_list");
    flat = scratch_bytes(bytes_of(in) * static_cast<std::size_t>(size_));
  } else if (!outputs.empty() && !outputs[0].empty()) {
    fail_value(argument("gather", "gather_list") + " must be None on a rank other than dst");
  }
  auto work = make_work(rank_, ::c10d::OpType::GATHER, "gather", list, timeout_);
  work->keep(in);
  if (flat.defined()) {
    work->keep(flat);
    work->on_success([flat, list] { unpack(flat, list); });
  }
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.gather_async(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, bytes_of(in), DataType::u8,
                               root));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::scatter(std::vector<at::Tensor>& outputs,
                                                            std::vector<std::vector<at::Tensor>>& inputs,
                                                            const ::c10d::ScatterOptions& opts) {
  at::Tensor& out = single(outputs, "scatter", "tensor");
  const int root = checked_root(opts.rootRank, size_, "scatter", "src");
  at::Tensor flat;
  if (rank_ == root) {
    if (inputs.size() != 1)
      fail_value(argument("scatter", "scatter_list") + ": the source rank must pass one list, got " +
                 std::to_string(inputs.size()));
    check_list(inputs[0], out, static_cast<std::size_t>(size_), true, "scatter", "scatter_list");
    flat = pack(inputs[0]);
  } else if (!inputs.empty() && !inputs[0].empty()) {
    fail_value(argument("scatter", "scatter_list") + " must be None on a rank other than src");
  }
  auto work = make_work(rank_, ::c10d::OpType::SCATTER, "scatter", {out}, timeout_);
  if (flat.defined()) work->keep(flat);
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.scatter_async(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), bytes_of(out),
                                DataType::u8, root));
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
  at::Tensor flat = pack(list);
  auto work = make_work(rank_, ::c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {out}, timeout_);
  work->keep(flat);
  return issue(mutex_, work, [&](WorkBraid& w) {
    if (even)
      w.track(comm_.reduce_scatter_async(flat.data_ptr(), out.data_ptr(), count_of(out), type, op));
    else
      w.track(comm_.reduce_scatterv_async(flat.data_ptr(), out.data_ptr(), counts, type, op));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                         const ::c10d::ReduceScatterOptions& opts) {
  check_tensor(output, "reduce_scatter_tensor", "output");
  check_tensor(input, "reduce_scatter_tensor", "input");
  check_same_dtype(output, input, "reduce_scatter_tensor", "output", "input");
  const DataType type = reduce_type(output, "reduce_scatter_tensor", "output");
  const braid::ReduceOp op = reduce_op(opts.reduceOp, "reduce_scatter_tensor");
  if (input.numel() != output.numel() * size_)
    fail_value(argument("reduce_scatter_tensor", "input") + " has " + std::to_string(input.numel()) +
               " elements; it must hold world size (" + std::to_string(size_) + ") x output's " +
               std::to_string(output.numel()));
  auto work = make_work(rank_, ::c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output}, timeout_);
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
  check_same_dtype(output, input, "all_to_all_single", "output", "input");
  const auto send = split_bytes(input, input_split_sizes, size_, "input", "input_split_sizes");
  const auto recv = split_bytes(output, output_split_sizes, size_, "output", "output_split_sizes");
  // braid's all_to_allv is not in place; a shared buffer sends from a copy.
  at::Tensor source = input.data_ptr() == output.data_ptr() && bytes_of(input) > 0 ? input.clone() : input;
  const bool even = input_split_sizes.empty() && output_split_sizes.empty();
  auto work = make_work(rank_, ::c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output}, timeout_);
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
  at::Tensor flat_in = pack(inputs);
  at::Tensor flat_out = scratch_bytes(std::accumulate(recv.begin(), recv.end(), std::size_t{0}));
  auto work = make_work(rank_, ::c10d::OpType::ALLTOALL, "all_to_all", outputs, timeout_);
  work->keep(flat_in);
  work->keep(flat_out);
  work->on_success([flat_out, list = outputs] { unpack(flat_out, list); });
  return issue(mutex_, work, [&](WorkBraid& w) {
    w.track(comm_.all_to_allv_async(flat_in.data_ptr(), send, {}, flat_out.data_ptr(), recv, {}, DataType::u8));
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                         int /*tag*/) {
  at::Tensor& t = single(tensors, "send", "tensor");
  const int peer = checked_root(dst_rank, size_, "send", "dst");
  auto work = make_work(rank_, ::c10d::OpType::SEND, "send", {t}, timeout_);
  return issue(mutex_, work,
               [&](WorkBraid& w) { w.track(comm_.send_async(t.data_ptr(), bytes_of(t), DataType::u8, peer)); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                         int /*tag*/) {
  at::Tensor& t = single(tensors, "recv", "tensor");
  const int peer = checked_root(src_rank, size_, "recv", "src");
  auto work = make_work(rank_, ::c10d::OpType::RECV, "recv", {t}, timeout_);
  return issue(mutex_, work,
               [&](WorkBraid& w) { w.track(comm_.recv_async(t.data_ptr(), bytes_of(t), DataType::u8, peer)); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::barrier(const ::c10d::BarrierOptions& /*opts*/) {
  auto work = make_work(rank_, ::c10d::OpType::BARRIER, "barrier", {}, timeout_);
  return issue(mutex_, work, [&](WorkBraid& w) { w.track(comm_.barrier_async()); });
}

void ProcessGroupBraid::startCoalescing() { braid::group_start(); }

void ProcessGroupBraid::endCoalescing(std::vector<c10::intrusive_ptr<::c10d::Work>>& /*reqs*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  braid::group_end();
}

}  // namespace braid::torch_backend

namespace py = pybind11;

PYBIND11_MODULE(_braid_torch, m) {
  using braid::torch_backend::ProcessGroupBraid;
  m.doc() = "braid's torch.distributed backend (ProcessGroupBraid); import braid.torch to register it";
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int world_size, std::chrono::milliseconds timeout)
          -> c10::intrusive_ptr<::c10d::ProcessGroup> {
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
