// The arguments of ProcessGroupBraid's calls: what braid can take (dense,
// contiguous tensors on the CPU or, where libbraid was built with CUDA, on a
// CUDA device, one per rank, all of one call on one device), the braid type and operator of a
// reduction, roots and all-to-all split sizes. Every refusal is a
// c10::ValueError or c10::TypeError (Python's ValueError and TypeError) that
// names the call and the argument as torch.distributed's Python functions
// do: "braid all_reduce: argument 'tensor' is not contiguous ...".
#pragma once

#include <string>
#include <string_view>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "braid/types.hpp"

namespace braid::torch_backend {

using TensorList = std::vector<at::Tensor>;

[[noreturn]] inline void fail_value(const std::string& message) { C10_THROW_ERROR(ValueError, message); }
[[noreturn]] inline void fail_type(const std::string& message) { C10_THROW_ERROR(TypeError, message); }

/// "braid all_reduce: argument 'tensor'": the call and the argument as
/// torch.distributed's Python functions name them.
inline std::string argument(std::string_view op, std::string_view name) {
  return "braid " + std::string(op) + ": argument '" + std::string(name) + "'";
}

/// Whether libbraid takes CUDA device pointers (meson: BRAID_TORCH_CUDA,
/// libbraid built with CUDA). It tells device memory from host memory
/// itself, so a CUDA tensor's data pointer goes to it as it is.
#if BRAID_TORCH_CUDA
inline constexpr bool kCudaTensors = true;
#else
inline constexpr bool kCudaTensors = false;
#endif

/// A tensor braid can read and write in place: dense, on the CPU (or a CUDA
/// device), contiguous.
inline void check_tensor(const at::Tensor& t, std::string_view op, std::string_view name) {
  if (!t.defined()) fail_value(argument(op, name) + " is an undefined tensor");
  if (t.layout() != c10::kStrided)
    fail_type(argument(op, name) + " is a " + c10::str(t.layout()) + " tensor; braid takes dense (strided) tensors");
  if (t.device().is_cuda() && !kCudaTensors)
    fail_value(argument(op, name) + " is on device '" + t.device().str() +
               "', but this braid was built without CUDA (it takes CPU tensors; build braid where nvcc is found)");
  if (!t.device().is_cpu() && !t.device().is_cuda())
    fail_value(argument(op, name) + " is on device '" + t.device().str() + "'; the braid backend reads CPU" +
               (kCudaTensors ? " and CUDA tensors" : " tensors only"));
  if (!t.is_contiguous())
    fail_value(argument(op, name) + " is not contiguous (sizes " + c10::str(t.sizes()) + ", strides " +
               c10::str(t.strides()) + "); pass tensor.contiguous()");
}

/// The one tensor of a per-rank list (torch's multi-device lists are not supported).
inline at::Tensor& single(TensorList& tensors, std::string_view op, std::string_view name) {
  if (tensors.size() != 1)
    fail_value(argument(op, name) + ": braid takes one tensor per rank, got a list of " +
               std::to_string(tensors.size()));
  check_tensor(tensors[0], op, name);
  return tensors[0];
}

/// Each of `list`: checked, of `like`'s dtype, and (when `same_numel`) of its element count.
inline void check_list(const TensorList& list, const at::Tensor& like, std::size_t expected_size, bool same_numel,
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
    if (list[i].device() != like.device())
      fail_value(argument(op, item) + " is on device '" + list[i].device().str() + "' but the tensor is on '" +
                 like.device().str() + "'");
    if (same_numel && list[i].numel() != like.numel())
      fail_value(argument(op, item) + " has " + std::to_string(list[i].numel()) + " elements but the tensor has " +
                 std::to_string(like.numel()));
  }
}

/// a and b (an output and an input) of one dtype, on one device.
inline void check_alike(const at::Tensor& a, const at::Tensor& b, std::string_view op, std::string_view a_name,
                        std::string_view b_name) {
  if (a.scalar_type() != b.scalar_type())
    fail_type(argument(op, a_name) + " has dtype " + c10::toString(a.scalar_type()) + " but '" + std::string(b_name) +
              "' has " + c10::toString(b.scalar_type()));
  if (a.device() != b.device())
    fail_value(argument(op, a_name) + " is on device '" + a.device().str() + "' but '" + std::string(b_name) +
               "' is on '" + b.device().str() + "'");
}

inline std::size_t bytes_of(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }
inline std::size_t count_of(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()); }

/// The braid type a reduction of `t` runs in. Data movement needs none:
/// it moves bytes (DataType::u8), whatever the dtype.
inline DataType reduce_type(const at::Tensor& t, std::string_view op, std::string_view name) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DataType::f32;
    case at::kDouble:
      return DataType::f64;
    case at::kHalf:
      return DataType::f16;
    case at::kBFloat16:
      return DataType::bf16;
    case at::kChar:
      return DataType::i8;
    case at::kByte:
      return DataType::u8;
    case at::kInt:
      return DataType::i32;
    case at::kLong:
      return DataType::i64;
    default:
      fail_type(argument(op, name) + " has dtype " + c10::toString(t.scalar_type()) +
                ", which braid cannot reduce (it reduces float16, bfloat16, float32, float64, int8, uint8, int32, "
                "int64)");
  }
}

inline braid::ReduceOp reduce_op(const ::c10d::ReduceOp& op, std::string_view call) {
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM:
      return braid::ReduceOp::sum;
    case ::c10d::ReduceOp::AVG:
      return braid::ReduceOp::avg;
    case ::c10d::ReduceOp::PRODUCT:
      return braid::ReduceOp::prod;
    case ::c10d::ReduceOp::MIN:
      return braid::ReduceOp::min;
    case ::c10d::ReduceOp::MAX:
      return braid::ReduceOp::max;
    case ::c10d::ReduceOp::BAND:
      fail_value(argument(call, "op") + ": ReduceOp.BAND is not supported by braid (SUM, AVG, PRODUCT, MIN, MAX are)");
    case ::c10d::ReduceOp::BOR:
      fail_value(argument(call, "op") + ": ReduceOp.BOR is not supported by braid (SUM, AVG, PRODUCT, MIN, MAX are)");
    case ::c10d::ReduceOp::BXOR:
      fail_value(argument(call, "op") + ": ReduceOp.BXOR is not supported by braid (SUM, AVG, PRODUCT, MIN, MAX are)");
    default:
      fail_value(argument(call, "op") + ": this ReduceOp is not supported by braid (SUM, AVG, PRODUCT, MIN, MAX are)");
  }
}

inline int checked_root(int64_t root, int size, std::string_view op, std::string_view name) {
  if (root < 0 || root >= size)
    fail_value(argument(op, name) + " is " + std::to_string(root) + ", not a rank of the group of " +
               std::to_string(size));
  return static_cast<int>(root);
}

/// Bytes per block of an all-to-all: split sizes along dimension 0, or
/// equal blocks when there are none.
inline std::vector<std::size_t> split_bytes(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
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

}  // namespace braid::torch_backend
