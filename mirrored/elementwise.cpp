// Element-wise arithmetic on the mirrored layer's buffers (see elementwise.hpp).
// Plain loops: the compiler vectorises the f32/f64 ones, and none of them is
// on a path where the network is not the bottleneck.
#include "elementwise.hpp"

#include <algorithm>
#include <string>

namespace braid::mirrored {
namespace {

template <typename T>
T combine_one(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) + static_cast<std::make_unsigned_t<T>>(b));
      else return a + b;
    case ReduceOp::prod:
      if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) * static_cast<std::make_unsigned_t<T>>(b));
      else return a * b;
    case ReduceOp::min: return std::min(a, b);
    case ReduceOp::max: return std::max(a, b);
  }
  return a;
}

template <typename T>
void combine_typed(void* dst, const void* src, std::size_t count, ReduceOp op) {
  auto* d = static_cast<T*>(dst);
  auto* s = static_cast<const T*>(src);
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    for (std::size_t i = 0; i < count; ++i) d[i] = T::from_float(combine_one(d[i].to_float(), s[i].to_float(), op));
  } else {
    for (std::size_t i = 0; i < count; ++i) d[i] = combine_one(d[i], s[i], op);
  }
}

template <typename T>
void divide_typed(void* data, std::size_t count, std::int64_t by) {
  auto* d = static_cast<T*>(data);
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    for (std::size_t i = 0; i < count; ++i) d[i] = T::from_float(d[i].to_float() / static_cast<float>(by));
  } else if constexpr (std::is_floating_point_v<T>) {
    for (std::size_t i = 0; i < count; ++i) d[i] = d[i] / static_cast<T>(by);
  } else {
    for (std::size_t i = 0; i < count; ++i) d[i] = static_cast<T>(d[i] / static_cast<T>(by));
  }
}

template <template <typename> class Op, typename... Args>
void dispatch(DataType type, Args&&... args) {
  switch (type) {
    case DataType::f16: return Op<Float16>::run(args...);
    case DataType::bf16: return Op<BFloat16>::run(args...);
    case DataType::f32: return Op<float>::run(args...);
    case DataType::f64: return Op<double>::run(args...);
    case DataType::i8: return Op<std::int8_t>::run(args...);
    case DataType::u8: return Op<std::uint8_t>::run(args...);
    case DataType::i32: return Op<std::int32_t>::run(args...);
    case DataType::u32: return Op<std::uint32_t>::run(args...);
    case DataType::i64: return Op<std::int64_t>::run(args...);
    case DataType::u64: return Op<std::uint64_t>::run(args...);
  }
  throw InvalidArgument("unknown data type " + std::to_string(static_cast<int>(type)));
}

template <typename T>
struct Combine {
  static void run(void* dst, const void* src, std::size_t count, ReduceOp op) { combine_typed<T>(dst, src, count, op); }
};
template <typename T>
struct Divide {
  static void run(void* data, std::size_t count, std::int64_t by) { divide_typed<T>(data, count, by); }
};

}  // namespace

bool is_floating(DataType type) {
  return type == DataType::f16 || type == DataType::bf16 || type == DataType::f32 || type == DataType::f64;
}

void combine(void* dst, const void* src, std::size_t count, DataType type, ReduceOp op) {
  dispatch<Combine>(type, dst, src, count, op);
}

void divide(void* data, std::size_t count, DataType type, std::int64_t by) {
  if (by == 1) return;
  dispatch<Divide>(type, data, count, by);
}

void pack_with_feedback(const float* src, float* residual, void* wire, std::size_t count, DataType wire_type,
                        float scale) {
  if (wire_type == DataType::f16) {
    auto* w = static_cast<Float16*>(wire);
    for (std::size_t i = 0; i < count; ++i) {
      float e = src[i] * scale + residual[i];
      w[i] = Float16::from_float(e);
      residual[i] = e - w[i].to_float();
    }
  } else {
    auto* w = static_cast<BFloat16*>(wire);
    for (std::size_t i = 0; i < count; ++i) {
      float e = src[i] * scale + residual[i];
      w[i] = BFloat16::from_float(e);
      residual[i] = e - w[i].to_float();
    }
  }
}

void unpack(const void* wire, float* dst, std::size_t count, DataType wire_type) {
  if (wire_type == DataType::f16) {
    auto* w = static_cast<const Float16*>(wire);
    for (std::size_t i = 0; i < count; ++i) dst[i] = w[i].to_float();
  } else {
    auto* w = static_cast<const BFloat16*>(wire);
    for (std::size_t i = 0; i < count; ++i) dst[i] = w[i].to_float();
  }
}

}  // namespace braid::mirrored
