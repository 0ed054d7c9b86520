// WorkBraid: the c10d Work of one ProcessGroupBraid call, and issue(), which
// starts its braid operations. Lists of tensors travel through one packed
// scratch tensor (pack, unpack), since braid's collectives take one buffer.
#pragma once

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>

#include "braid/braid.hpp"
#include "tensor_arguments.hpp"

namespace braid::torch_backend {

using Millis = std::chrono::milliseconds;

/// Packs `list` one after another into a new contiguous byte tensor.
inline at::Tensor pack(const TensorList& list) {
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
inline void unpack(const at::Tensor& flat, const TensorList& list) {
  const std::byte* cursor = data_of(flat);
  for (const auto& t : list) {
    if (bytes_of(t)) std::memcpy(t.data_ptr(), cursor, bytes_of(t));
    cursor += bytes_of(t);
  }
}

inline at::Tensor scratch_bytes(std::size_t bytes) {
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

inline c10::intrusive_ptr<WorkBraid> make_work(int rank, ::c10d::OpType type, std::string op, TensorList outputs,
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

}  // namespace braid::torch_backend
