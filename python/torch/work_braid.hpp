// WorkBraid: the c10d Work of one ProcessGroupBraid call, and issue(), which
// starts its braid operations. Lists of tensors travel through one packed
// scratch tensor (pack, unpack), since braid's collectives take one buffer.
//
// CUDA tensors: braid reads and writes device memory on a CUDA stream of its
// own and returns only when that work is done, so the stream order that
// torch keeps is bridged on the host. Before braid starts, the caller's
// current stream on the device is synchronised (the kernels that wrote the
// inputs are done); the copies out of scratch at completion run on the
// completing thread's current stream, which is synchronised before the
// Work completes. The Future then holds the device, so that torch makes the
// streams of code chained on it wait as it does for NCCL's. All through
// c10's device-generic stream API: the extension needs no CUDA headers and
// builds against a CPU-only torch.
#pragma once

#include <atomic>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <functional>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>

#include "braid/braid.hpp"
#include "tensor_arguments.hpp"

namespace braid::torch_backend {

using Millis = std::chrono::milliseconds;

/// Waits until the work queued on this thread's current stream of `device`
/// is done; nothing for the CPU.
inline void finish_queued_work(const c10::Device& device) {
  if (device.is_cpu()) return;
  c10::impl::VirtualGuardImpl guard(device.type());
  guard.getStream(device).synchronize();
}

/// `t`'s bytes as a flat byte tensor sharing its memory.
inline at::Tensor bytes_view(const at::Tensor& t) { return t.reshape({-1}).view(at::kByte); }

inline at::Tensor scratch_bytes(std::size_t bytes, const c10::Device& device) {
  return at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(device));
}

/// Packs `list` one after another into a new contiguous byte tensor on their device.
inline at::Tensor pack(const TensorList& list) {
  std::size_t total = 0;
  for (const auto& t : list) total += bytes_of(t);
  at::Tensor flat = scratch_bytes(total, list.empty() ? c10::Device(c10::kCPU) : list[0].device());
  int64_t offset = 0;
  for (const auto& t : list) {
    const auto n = static_cast<int64_t>(bytes_of(t));
    if (n) flat.narrow(0, offset, n).copy_(bytes_view(t));
    offset += n;
  }
  return flat;
}

/// Copies consecutive bytes of `flat` out into `list` (the inverse of pack).
inline void unpack(const at::Tensor& flat, const TensorList& list) {
  int64_t offset = 0;
  for (const auto& t : list) {
    const auto n = static_cast<int64_t>(bytes_of(t));
    if (n) bytes_view(t).copy_(flat.narrow(0, offset, n));
    offset += n;
  }
}

/// Whether `list`'s tensors lie back to back in memory, in order (views of
/// one buffer, as list(t.chunk(n)) makes), so that braid can read or write
/// them as one buffer in place.
inline bool back_to_back(const TensorList& list) {
  const std::byte* next = nullptr;
  for (const auto& t : list) {
    const auto* start = static_cast<const std::byte*>(t.data_ptr());
    if (start == nullptr || (next != nullptr && start != next)) return false;
    next = start + bytes_of(t);
  }
  return !list.empty();
}

/// One torch.distributed call: one or more braid operations, the tensors
/// they use, and what to do when all are done. Completion runs on braid's
/// progress thread (Work::then): the success step (copies out of scratch),
/// then the Future (DDP chains its hooks on it), then wait()'s wake-up.
class WorkBraid final : public ::c10d::Work {
 public:
  /// `device`: where every tensor of the call lives.
  WorkBraid(int rank, ::c10d::OpType type, std::string op, TensorList outputs, c10::Device device, Millis timeout)
      : Work(rank, type),
        op_(std::move(op)),
        outputs_(std::move(outputs)),
        device_(device),
        timeout_(timeout),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()),
            device.is_cpu() ? std::vector<c10::Device>{} : std::vector<c10::Device>{device})) {}

  const c10::Device& device() const { return device_; }

  /// Keeps a tensor braid reads or writes (an input, a scratch buffer) alive until the work is done.
  void keep(at::Tensor t) { kept_.push_back(std::move(t)); }
  /// Runs once every part succeeded, before the work completes.
  void on_success(std::function<void()> step) { on_success_ = std::move(step); }
  /// The buffer braid reads `list` from, one tensor after another: the
  /// list's own memory when back to back, else a packed copy.
  void* read_from(const TensorList& list) {
    for (const auto& t : list) keep(t);
    if (back_to_back(list)) return list[0].data_ptr();
    at::Tensor flat = pack(list);
    keep(flat);
    return flat.data_ptr();
  }
  /// The buffer braid writes what belongs in `list` into: the list's own
  /// memory when back to back, else scratch on `device` that is copied out
  /// into the list when the work succeeds.
  void* write_into(const TensorList& list, const c10::Device& device) {
    for (const auto& t : list) keep(t);
    if (back_to_back(list)) return list[0].data_ptr();
    std::size_t total = 0;
    for (const auto& t : list) total += bytes_of(t);
    at::Tensor flat = scratch_bytes(total, device);
    keep(flat);
    on_success([flat, list] { unpack(flat, list); });
    return flat.data_ptr();
  }
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
        finish_queued_work(device_);
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
  c10::Device device_;
  Millis timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::function<void()> on_success_;
  std::atomic<int> pending_{1};  // the parts, plus one while they are being started
  std::mutex error_mutex_;
  std::exception_ptr first_error_;
};

inline c10::intrusive_ptr<WorkBraid> make_work(int rank, ::c10d::OpType type, std::string op, TensorList outputs,
                                               c10::Device device, Millis timeout) {
  return c10::make_intrusive<WorkBraid>(rank, type, std::move(op), std::move(outputs), device, timeout);
}

/// Starts `work`'s braid operations with `start(work)` under the group's
/// lock, once the work queued on the caller's stream of the work's device
/// is done. braid's own argument errors (a root out of range, counts that do
/// not fit) become ValueError; the work completes once the parts that did
/// start are done, so their buffers outlive them even then.
template <typename Start>
c10::intrusive_ptr<::c10d::Work> issue(std::mutex& mutex, const c10::intrusive_ptr<WorkBraid>& work, Start&& start) {
  std::exception_ptr error;
  finish_queued_work(work->device());
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

}  // namespace braid::torch_backend
