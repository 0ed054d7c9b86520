// Element-wise arithmetic the mirrored layer does on its own buffers: combining
// the gradients of local replicas before they leave the process, scaling a
// sum into a mean, packing gradients into a narrower wire type with error
// feedback, and reading any float type as float for the optimizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "braid/types.hpp"

namespace braid::mirrored {

/// dst[i] = dst[i] op src[i] (avg combines like sum; divide afterwards).
void combine(void* dst, const void* src, std::size_t count, DataType type, ReduceOp op);
/// data[i] /= by (integer division for integer types).
void divide(void* data, std::size_t count, DataType type, std::int64_t by);
/// True for f16, bf16, f32 and f64.
bool is_floating(DataType type);

/// Compression with error feedback: e = src * scale + residual;
/// wire = round(e) in `wire_type` (f16 or bf16); residual = e - wire.
/// src and residual are f32.
void pack_with_feedback(const float* src, float* residual, void* wire, std::size_t count, DataType wire_type,
                        float scale);
/// dst (f32) = wire (f16 or bf16) widened.
void unpack(const void* wire, float* dst, std::size_t count, DataType wire_type);

/// Reading and writing any float type as double (the optimizers' view).
namespace detail {
template <typename T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return v.to_float();
  else return static_cast<double>(v);
}
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return T::from_float(static_cast<float>(v));
  else return static_cast<T>(v);
}
}  // namespace detail

}  // namespace braid::mirrored
