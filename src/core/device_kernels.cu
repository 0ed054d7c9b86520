// The reduction kernels of braid::reduce and braid::finish_average for memory
// on a CUDA device, with the host kernels' semantics bit for bit (reduce.cpp):
// f16 and bf16 widen to f32, combine and round to nearest even (f32 holds
// 2p+2 bits of either format, so that is the correctly rounded 16-bit
// result); floating-point min and max are IEEE 754-2019 minimum and maximum
// (a NaN operand gives a NaN, -0 orders below +0); integer sum and prod wrap
// (computed unsigned); avg divides once at the end, floating point by
// division, integers truncating toward zero.
//
// One grid-stride loop per (type, op), launched on the caller's stream. The
// entry points are plain C++ (device_kernels.hpp) so that device.cpp and the
// rest of braid never see CUDA headers' device-side parts.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/device_kernels.hpp"

namespace braid::device::kernels {
namespace {

// How an element is loaded as its arithmetic type and stored back.
template <typename T> struct Elem {
  using Math = T;
  __device__ static Math load(T v) { return v; }
  __device__ static T store(Math v) { return v; }
};
template <> struct Elem<__half> {
  using Math = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <> struct Elem<__nv_bfloat16> {
  using Math = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

template <typename M> struct Bits;
template <> struct Bits<float> { using type = std::uint32_t; };
template <> struct Bits<double> { using type = std::uint64_t; };

template <typename M> __device__ M from_bits(typename Bits<M>::type b) {
  M m;
  memcpy(&m, &b, sizeof m);
  return m;
}
template <typename M> __device__ typename Bits<M>::type to_bits(M m) {
  typename Bits<M>::type b;
  memcpy(&b, &m, sizeof m);
  return b;
}

struct Sum {
  template <typename M> __device__ static M apply(M a, M b) {
    if constexpr (std::is_integral_v<M>) {
      using U = std::make_unsigned_t<M>;
      return static_cast<M>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct Prod {
  template <typename M> __device__ static M apply(M a, M b) {
    if constexpr (std::is_integral_v<M>) {
      using U = std::conditional_t<(sizeof(M) < sizeof(unsigned)), unsigned, std::make_unsigned_t<M>>;
      return static_cast<M>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
struct Min {
  template <typename M> __device__ static M apply(M a, M b) {
    if constexpr (std::is_floating_point_v<M>) {
      M r = a < b ? a : b;
      if (a == b) r = from_bits<M>(to_bits(a) | to_bits(b));  // -0 wins
      return a != a ? a : r;
    } else {
      return a < b ? a : b;
    }
  }
};
struct Max {
  template <typename M> __device__ static M apply(M a, M b) {
    if constexpr (std::is_floating_point_v<M>) {
      M r = a > b ? a : b;
      if (a == b) r = from_bits<M>(to_bits(a) & to_bits(b));  // +0 wins
      return a != a ? a : r;
    } else {
      return a > b ? a : b;
    }
  }
};

template <typename T, typename Op>
__global__ void combine(T* dst, const T* a, const T* b, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    dst[i] = Elem<T>::store(Op::apply(Elem<T>::load(a[i]), Elem<T>::load(b[i])));
}

template <typename T>
__global__ void divide(T* data, std::size_t n, int ranks) {
  using M = typename Elem<T>::Math;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    if constexpr (std::is_integral_v<M>) {
      using Wide = std::conditional_t<std::is_signed_v<M>, long long, unsigned long long>;
      data[i] = static_cast<T>(static_cast<Wide>(data[i]) / static_cast<Wide>(ranks));
    } else {
      data[i] = Elem<T>::store(Elem<T>::load(data[i]) / static_cast<M>(ranks));
    }
}

constexpr unsigned kThreads = 256;
unsigned blocks_for(std::size_t n) {
  const std::size_t want = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(want < 4096 ? (want == 0 ? 1 : want) : 4096);
}

template <typename T>
cudaError_t launch_combine(ReduceOp op, void* dst, const void* a, const void* b, std::size_t n, cudaStream_t s) {
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: combine<T, Sum><<<blocks_for(n), kThreads, 0, s>>>(d, x, y, n); break;
    case ReduceOp::prod: combine<T, Prod><<<blocks_for(n), kThreads, 0, s>>>(d, x, y, n); break;
    case ReduceOp::min: combine<T, Min><<<blocks_for(n), kThreads, 0, s>>>(d, x, y, n); break;
    case ReduceOp::max: combine<T, Max><<<blocks_for(n), kThreads, 0, s>>>(d, x, y, n); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_divide(void* data, std::size_t n, int ranks, cudaStream_t s) {
  divide<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(data), n, ranks);
  return cudaGetLastError();
}

}  // namespace

int combine(DataType type, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count, void* stream) {
  if (count == 0) return cudaSuccess;
  auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DataType::f16: return launch_combine<__half>(op, dst, a, b, count, s);
    case DataType::bf16: return launch_combine<__nv_bfloat16>(op, dst, a, b, count, s);
    case DataType::f32: return launch_combine<float>(op, dst, a, b, count, s);
    case DataType::f64: return launch_combine<double>(op, dst, a, b, count, s);
    case DataType::i8: return launch_combine<std::int8_t>(op, dst, a, b, count, s);
    case DataType::u8: return launch_combine<std::uint8_t>(op, dst, a, b, count, s);
    case DataType::i32: return launch_combine<std::int32_t>(op, dst, a, b, count, s);
    case DataType::u32: return launch_combine<std::uint32_t>(op, dst, a, b, count, s);
    case DataType::i64: return launch_combine<std::int64_t>(op, dst, a, b, count, s);
    case DataType::u64: return launch_combine<std::uint64_t>(op, dst, a, b, count, s);
  }
  return cudaErrorInvalidValue;
}

int divide(DataType type, void* data, std::size_t count, int ranks, void* stream) {
  if (count == 0) return cudaSuccess;
  auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DataType::f16: return launch_divide<__half>(data, count, ranks, s);
    case DataType::bf16: return launch_divide<__nv_bfloat16>(data, count, ranks, s);
    case DataType::f32: return launch_divide<float>(data, count, ranks, s);
    case DataType::f64: return launch_divide<double>(data, count, ranks, s);
    case DataType::i8: return launch_divide<std::int8_t>(data, count, ranks, s);
    case DataType::u8: return launch_divide<std::uint8_t>(data, count, ranks, s);
    case DataType::i32: return launch_divide<std::int32_t>(data, count, ranks, s);
    case DataType::u32: return launch_divide<std::uint32_t>(data, count, ranks, s);
    case DataType::i64: return launch_divide<std::int64_t>(data, count, ranks, s);
    case DataType::u64: return launch_divide<std::uint64_t>(data, count, ranks, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace braid::device::kernels
