// Reduction kernels.
//
// reduce() switches once on (type, op) to a function that runs one
// element-wise loop over the whole buffer. The loops are written for GCC's
// vectoriser at -O3: the operator is an inlined functor, there are no calls or
// early exits, and data-dependent choices are selects, not branches. Every
// loop is compiled twice, once for the compiler's default target (SSE2 on
// x86-64) and once under target("avx2,f16c"); which one runs is decided once
// from cpuid (reduce_dispatch.hpp). GCC 12 vectorises all of them except, in
// the SSE2 build, 64-bit integer min, max and prod (SSE2 has no 64-bit
// compare or multiply) and f16 (its portable conversions branch); and the avg
// division of 64-bit integers, one element at a time in both builds.
//
// Aliasing. dst may be a, b, or both, and nothing else may overlap. The
// kernel compares the pointers first and runs one of four loop shapes, each
// of which reaches the memory it writes through exactly one __restrict
// pointer: d = d (op) d, d = d (op) b, d = a (op) d, or d = a (op) b. Without
// the restrict the vectoriser would version every loop on a runtime overlap
// check.
//
// f16 and bf16 are widened to f32, combined, and rounded back to nearest
// even. f32 has at least 2p+2 bits for both formats' precision p (11 and 8),
// so rounding twice (exact result -> f32 -> 16-bit) gives the correctly
// rounded 16-bit sum, product or quotient. bf16 runs through the same loops
// two elements to a 32-bit word (reduce_half.hpp says why); f16 runs eight
// at a time through VCVTPH2PS/VCVTPS2PH where the CPU has F16C, and through
// portable bit manipulation otherwise.
//
// Floating-point min and max are IEEE 754-2019 minimum and maximum: a NaN
// operand gives a NaN (a's when both are NaN) and -0 orders below +0. So the
// result does not depend on which operand is a and which is b (except for
// which NaN), which matters because ranks combine the same pair in different
// orders (recursive doubling computes x (op) y on one rank, y (op) x on its
// peer) and must agree on the bits. Which NaN a sum or product of two NaNs
// gives is unspecified: the compiler may swap the operands.
//
// Integer sum and prod are computed in unsigned arithmetic, so they wrap
// modulo 2^bits without undefined behaviour.
#include "core/reduce.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/reduce_dispatch.hpp"
#include "core/reduce_half.hpp"
#include "core/text.hpp"

#ifdef BRAID_REDUCE_X86
#include <cpuid.h>
#endif

namespace braid {
namespace {

template <typename T>
using WrapInt = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
using FloatBits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return a + b;
    else return static_cast<T>(static_cast<WrapInt<T>>(a) + static_cast<WrapInt<T>>(b));
  }
};

struct Prod {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return a * b;
    else return static_cast<T>(static_cast<WrapInt<T>>(a) * static_cast<WrapInt<T>>(b));
  }
};

struct Min {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      using Bits = FloatBits<T>;
      T r = a < b ? a : b;  // b when b is NaN
      // Equal: the same value, or +0 and -0, where OR-ing the bits picks -0.
      r = a == b ? std::bit_cast<T>(std::bit_cast<Bits>(a) | std::bit_cast<Bits>(b)) : r;
      return a != a ? a : r;
    } else {
      return a < b ? a : b;
    }
  }
};

struct Max {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      using Bits = FloatBits<T>;
      T r = a > b ? a : b;
      r = a == b ? std::bit_cast<T>(std::bit_cast<Bits>(a) & std::bit_cast<Bits>(b)) : r;  // +0 wins
      return a != a ? a : r;
    } else {
      return a > b ? a : b;
    }
  }
};

// How a loop reads and writes its words. Plain types are read as
// themselves. The 16-bit formats are read with memcpy, so that a pair of
// bf16 can be one 32-bit word within the aliasing rules (a fixed-size memcpy
// compiles to a plain load); doubles read that way would become integer
// loads, which the SSE2 build does not vectorise for min and max. Both are
// always_inline: inlined late, they would hide the __restrict.
template <typename T>
struct TypedAccess {
  using Word = T;
  [[gnu::always_inline]] static T load(const void* p, std::size_t i) { return static_cast<const T*>(p)[i]; }
  [[gnu::always_inline]] static void store(void* p, std::size_t i, T value) { static_cast<T*>(p)[i] = value; }
};
template <typename W>
struct BytewiseAccess {
  using Word = W;
  [[gnu::always_inline]] static W load(const void* p, std::size_t i) {
    W w;
    std::memcpy(&w, static_cast<const unsigned char*>(p) + i * sizeof(W), sizeof(W));
    return w;
  }
  [[gnu::always_inline]] static void store(void* p, std::size_t i, W w) {
    std::memcpy(static_cast<unsigned char*>(p) + i * sizeof(W), &w, sizeof(W));
  }
};

// The four loop shapes (see the top of the file): d[i] = f(a[i], b[i]) for
// i < n words. (f takes and returns values: a lambda taking the pointers
// would hide the __restrict too.)
template <typename Access, typename F>
[[gnu::always_inline]] inline void loop_self(void* d, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) Access::store(d, i, f(Access::load(d, i), Access::load(d, i)));
}
template <typename Access, typename F>
[[gnu::always_inline]] inline void loop_into_a(void* __restrict d, const void* __restrict b, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) Access::store(d, i, f(Access::load(d, i), Access::load(b, i)));
}
template <typename Access, typename F>
[[gnu::always_inline]] inline void loop_into_b(void* __restrict d, const void* __restrict a, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) Access::store(d, i, f(Access::load(a, i), Access::load(d, i)));
}
template <typename Access, typename F>
[[gnu::always_inline]] inline void loop_apart(void* __restrict d, const void* __restrict a, const void* __restrict b,
                                              std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) Access::store(d, i, f(Access::load(a, i), Access::load(b, i)));
}

template <typename Access, typename F>
[[gnu::always_inline]] inline void for_each_word(void* dst, const void* a, const void* b, std::size_t n, F f) {
  if (dst == a && dst == b) loop_self<Access>(dst, n, f);
  else if (dst == a) loop_into_a<Access>(dst, b, n, f);
  else if (dst == b) loop_into_b<Access>(dst, a, n, f);
  else loop_apart<Access>(dst, a, b, n, f);  // a == b is fine: neither is written
}

// f16 and bf16 in whole words, then the elements left over through a
// zero-padded word.
template <typename Format, typename F>
[[gnu::always_inline]] inline void run_16bit(void* dst, const void* a, const void* b, std::size_t n, F f) {
  using Word = typename Format::Word;
  constexpr std::size_t kPerWord = sizeof(Word) / 2;
  for_each_word<BytewiseAccess<Word>>(dst, a, b, n / kPerWord, [f](Word x, Word y) { return Format::apply(x, y, f); });
  if constexpr (kPerWord > 1) {
    const std::size_t done = n - n % kPerWord;
    const std::size_t rest_bytes = (n - done) * 2;
    if (rest_bytes == 0) return;
    Word x = 0, y = 0;
    std::memcpy(&x, static_cast<const std::uint16_t*>(a) + done, rest_bytes);
    std::memcpy(&y, static_cast<const std::uint16_t*>(b) + done, rest_bytes);
    const Word r = Format::apply(x, y, f);
    std::memcpy(static_cast<std::uint16_t*>(dst) + done, &r, rest_bytes);
  }
}

#ifdef BRAID_REDUCE_X86
// f16 with F16C, in blocks of eight; each block reads both inputs before it
// writes, so dst may be a or b. The tail goes through zero-padded copies.
template <typename F>
[[gnu::target("avx2,f16c")]] void run_f16c(void* dst, const void* a, const void* b, std::size_t n, F f) {
  constexpr std::size_t k = half::F16Hardware::kBlock;
  auto* d16 = static_cast<std::uint16_t*>(dst);
  const auto* a16 = static_cast<const std::uint16_t*>(a);
  const auto* b16 = static_cast<const std::uint16_t*>(b);
  std::size_t i = 0;
  for (; i + k <= n; i += k) half::F16Hardware::apply_block(d16 + i, a16 + i, b16 + i, f);
  if (i == n) return;
  std::uint16_t ta[k] = {}, tb[k] = {}, td[k];
  std::copy(a16 + i, a16 + n, ta);
  std::copy(b16 + i, b16 + n, tb);
  half::F16Hardware::apply_block(td, ta, tb, f);
  std::copy(td, td + (n - i), d16 + i);
}
#endif

template <typename Format, typename F>
[[gnu::always_inline]] inline void run_float_op(void* dst, const void* a, const void* b, std::size_t n, F f) {
#ifdef BRAID_REDUCE_X86
  if constexpr (std::is_same_v<Format, half::F16Hardware>) run_f16c(dst, a, b, n, f);
  else
#endif
    run_16bit<Format>(dst, a, b, n, f);
}

template <typename T>
T divide(T x, int ranks) {
  if constexpr (std::is_floating_point_v<T>) {
    return x / static_cast<T>(ranks);
  } else if constexpr (sizeof(T) <= 4) {
    // Dividing in double and truncating gives exactly the integer quotient
    // for |x| < 2^32: the rounding error of x / ranks is below 2^-21 / ranks,
    // less than the 1 / ranks between a non-integral quotient and an integer.
    // Double division vectorises; integer division does not.
    return static_cast<T>(static_cast<double>(x) / ranks);
  } else {
    return static_cast<T>(x / static_cast<T>(ranks));  // ranks > 0; truncates toward zero
  }
}

// A Format is an arithmetic element type or one of the 16-bit formats in
// reduce_half.hpp.
template <typename Format, typename Op>
[[gnu::always_inline]] inline void run_combine(void* dst, const void* a, const void* b, std::size_t n) {
  if constexpr (std::is_arithmetic_v<Format>)
    for_each_word<TypedAccess<Format>>(dst, a, b, n, [](Format x, Format y) { return Op::apply(x, y); });
  else
    run_float_op<Format>(dst, a, b, n, [](float x, float y) { return Op::apply(x, y); });
}

template <typename Format>
[[gnu::always_inline]] inline void run_divide(void* data, std::size_t n, int ranks) {
  if constexpr (std::is_arithmetic_v<Format>)
    for_each_word<TypedAccess<Format>>(data, data, data, n, [ranks](Format x, Format) { return divide(x, ranks); });
  else
    run_float_op<Format>(data, data, data, n, [ranks](float x, float) { return divide(x, ranks); });
}

using CombineKernel = void (*)(void* dst, const void* a, const void* b, std::size_t n);
using DivideKernel = void (*)(void* data, std::size_t n, int ranks);

// The two builds of every loop.
template <typename Format, typename Op>
void combine_baseline(void* dst, const void* a, const void* b, std::size_t n) {
  run_combine<Format, Op>(dst, a, b, n);
}
template <typename Format>
void divide_baseline(void* data, std::size_t n, int ranks) {
  run_divide<Format>(data, n, ranks);
}
#ifdef BRAID_REDUCE_X86
template <typename Format, typename Op>
[[gnu::target("avx2,f16c")]] void combine_avx2(void* dst, const void* a, const void* b, std::size_t n) {
  run_combine<Format, Op>(dst, a, b, n);
}
template <typename Format>
[[gnu::target("avx2,f16c")]] void divide_avx2(void* data, std::size_t n, int ranks) {
  run_divide<Format>(data, n, ranks);
}
#endif

template <KernelIsa isa, typename Format, typename Op>
CombineKernel combine_kernel() {
#ifdef BRAID_REDUCE_X86
  if constexpr (isa == KernelIsa::avx2) return &combine_avx2<Format, Op>;
#endif
  return &combine_baseline<Format, Op>;
}

template <KernelIsa isa, typename Format>
DivideKernel divide_kernel() {
#ifdef BRAID_REDUCE_X86
  if constexpr (isa == KernelIsa::avx2) return &divide_avx2<Format>;
#endif
  return &divide_baseline<Format>;
}

#ifdef BRAID_REDUCE_X86
template <KernelIsa isa>
using F16Format = std::conditional_t<isa == KernelIsa::avx2, half::F16Hardware, half::F16Portable>;
#else
template <KernelIsa>
using F16Format = half::F16Portable;
#endif

[[noreturn]] void throw_bad_type(DataType type) {
  throw InvalidArgument(cat("unknown data type value ", static_cast<int>(type)));
}

template <KernelIsa isa, typename Format>
CombineKernel combine_kernel(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return combine_kernel<isa, Format, Sum>();
    case ReduceOp::prod: return combine_kernel<isa, Format, Prod>();
    case ReduceOp::min: return combine_kernel<isa, Format, Min>();
    case ReduceOp::max: return combine_kernel<isa, Format, Max>();
  }
  throw InvalidArgument(cat("unknown reduction operator value ", static_cast<int>(op)));
}

template <KernelIsa isa>
CombineKernel combine_kernel(DataType type, ReduceOp op) {
  switch (type) {
    case DataType::f16: return combine_kernel<isa, F16Format<isa>>(op);
    case DataType::bf16: return combine_kernel<isa, half::BF16Bits>(op);
    case DataType::f32: return combine_kernel<isa, float>(op);
    case DataType::f64: return combine_kernel<isa, double>(op);
    case DataType::i8: return combine_kernel<isa, std::int8_t>(op);
    case DataType::u8: return combine_kernel<isa, std::uint8_t>(op);
    case DataType::i32: return combine_kernel<isa, std::int32_t>(op);
    case DataType::u32: return combine_kernel<isa, std::uint32_t>(op);
    case DataType::i64: return combine_kernel<isa, std::int64_t>(op);
    case DataType::u64: return combine_kernel<isa, std::uint64_t>(op);
  }
  throw_bad_type(type);
}

template <KernelIsa isa>
DivideKernel divide_kernel(DataType type) {
  switch (type) {
    case DataType::f16: return divide_kernel<isa, F16Format<isa>>();
    case DataType::bf16: return divide_kernel<isa, half::BF16Bits>();
    case DataType::f32: return divide_kernel<isa, float>();
    case DataType::f64: return divide_kernel<isa, double>();
    case DataType::i8: return divide_kernel<isa, std::int8_t>();
    case DataType::u8: return divide_kernel<isa, std::uint8_t>();
    case DataType::i32: return divide_kernel<isa, std::int32_t>();
    case DataType::u32: return divide_kernel<isa, std::uint32_t>();
    case DataType::i64: return divide_kernel<isa, std::int64_t>();
    case DataType::u64: return divide_kernel<isa, std::uint64_t>();
  }
  throw_bad_type(type);
}

bool cpu_has_avx2_f16c() {
#ifdef BRAID_REDUCE_X86
  // __builtin_cpu_supports("avx2") also checks that the OS saves the AVX
  // registers; clang's builtin does not know "f16c", so that bit comes from
  // cpuid leaf 1 directly.
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
#else
  return false;
#endif
}

void require_supported(KernelIsa isa) {
  if (!kernel_isa_supported(isa))
    throw Error(ErrorCode::unsupported, cat("the ", isa == KernelIsa::avx2 ? "AVX2+F16C" : "baseline",
                                            " reduction kernels are not available on this CPU"));
}

void check_ranks(int ranks) {
  if (ranks <= 0) throw InvalidArgument(cat("finish_average needs a positive rank count, not ", ranks));
}

}  // namespace

KernelIsa best_kernel_isa() {
  static const KernelIsa best = cpu_has_avx2_f16c() ? KernelIsa::avx2 : KernelIsa::baseline;
  return best;
}

bool kernel_isa_supported(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::baseline: return true;
    case KernelIsa::avx2: return best_kernel_isa() == KernelIsa::avx2;
  }
  return false;
}

void reduce_with(KernelIsa isa, DataType type, ReduceOp op, void* dst, const void* a, const void* b,
                 std::size_t count) {
  require_supported(isa);
  const CombineKernel kernel = isa == KernelIsa::avx2 ? combine_kernel<KernelIsa::avx2>(type, op)
                                                      : combine_kernel<KernelIsa::baseline>(type, op);
  kernel(dst, a, b, count);
}

void finish_average_with(KernelIsa isa, DataType type, void* data, std::size_t count, int ranks) {
  require_supported(isa);
  check_ranks(ranks);
  const DivideKernel kernel =
      isa == KernelIsa::avx2 ? divide_kernel<KernelIsa::avx2>(type) : divide_kernel<KernelIsa::baseline>(type);
  kernel(data, count, ranks);
}

void reduce(DataType type, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count) {
  // A sum of a few elements (a small all-reduce) here, without the kernel
  // dispatch, which cost 4x the arithmetic. Element-wise like the kernels, so
  // the bits are theirs.
  constexpr std::size_t kFew = 16;
  if (count <= kFew && (op == ReduceOp::sum || op == ReduceOp::avg)) {
    switch (type) {
      case DataType::f32: return run_combine<float, Sum>(dst, a, b, count);
      case DataType::f64: return run_combine<double, Sum>(dst, a, b, count);
      case DataType::i32: return run_combine<std::int32_t, Sum>(dst, a, b, count);
      case DataType::u32: return run_combine<std::uint32_t, Sum>(dst, a, b, count);
      case DataType::i64: return run_combine<std::int64_t, Sum>(dst, a, b, count);
      case DataType::u64: return run_combine<std::uint64_t, Sum>(dst, a, b, count);
      default: break;
    }
  }
  reduce_with(best_kernel_isa(), type, op, dst, a, b, count);
}

void finish_average(DataType type, void* data, std::size_t count, int ranks) {
  finish_average_with(best_kernel_isa(), type, data, count, ranks);
}

namespace {

template <typename T>
void scale_as(void* dst, const void* src, std::size_t count, const void* scalar) {
  T k;
  std::memcpy(&k, scalar, sizeof k);
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wraps instead of overflowing
    for (std::size_t i = 0; i < count; ++i) d[i] = static_cast<T>(static_cast<U>(s[i]) * static_cast<U>(k));
  } else {
    for (std::size_t i = 0; i < count; ++i) d[i] = s[i] * k;
  }
}

template <float (*Widen)(std::uint16_t), std::uint16_t (*Narrow)(float)>
void scale_half(void* dst, const void* src, std::size_t count, const void* scalar) {
  std::uint16_t k;
  std::memcpy(&k, scalar, sizeof k);
  const float factor = Widen(k);
  auto* d = static_cast<std::uint16_t*>(dst);
  const auto* s = static_cast<const std::uint16_t*>(src);
  for (std::size_t i = 0; i < count; ++i) d[i] = Narrow(Widen(s[i]) * factor);
}

}  // namespace

void scale(DataType type, void* dst, const void* src, std::size_t count, const void* scalar) {
  switch (type) {
    case DataType::f16: return scale_half<half::f16_bits_to_f32, half::f32_to_f16_bits>(dst, src, count, scalar);
    case DataType::bf16: return scale_half<half::bf16_bits_to_f32, half::f32_to_bf16_bits>(dst, src, count, scalar);
    case DataType::f32: return scale_as<float>(dst, src, count, scalar);
    case DataType::f64: return scale_as<double>(dst, src, count, scalar);
    case DataType::i8: return scale_as<std::int8_t>(dst, src, count, scalar);
    case DataType::u8: return scale_as<std::uint8_t>(dst, src, count, scalar);
    case DataType::i32: return scale_as<std::int32_t>(dst, src, count, scalar);
    case DataType::u32: return scale_as<std::uint32_t>(dst, src, count, scalar);
    case DataType::i64: return scale_as<std::int64_t>(dst, src, count, scalar);
    case DataType::u64: return scale_as<std::uint64_t>(dst, src, count, scalar);
  }
  throw InvalidArgument(cat("scale: unknown data type ", static_cast<int>(type)));
}

float f16_to_f32(std::uint16_t bits) { return half::f16_bits_to_f32(bits); }
std::uint16_t f32_to_f16(float value) { return half::f32_to_f16_bits(value); }
float bf16_to_f32(std::uint16_t bits) { return half::bf16_bits_to_f32(bits); }
std::uint16_t f32_to_bf16(float value) { return half::f32_to_bf16_bits(value); }

}  // namespace braid
