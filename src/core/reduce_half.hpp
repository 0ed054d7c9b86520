// Conversions between f32 and the two 16-bit float formats, for the
// reduction kernels: exact bit manipulation, inline so that the loops over
// them can vectorise (bf16's do; f16's branch, see below). F16Hardware
// converts with the F16C instructions and gives the same bits as
// F16Portable, NaNs included (the tests compare them).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BRAID_REDUCE_X86 1
#endif

namespace braid::half {

// The f16 conversions for CPUs without F16C (and for the scalar API). They
// branch, so loops over them stay scalar: without F16C an f16 reduction runs
// at about 0.5 GB/s, which matters only on x86 CPUs from before 2013. (A
// branch-free version built from masks vectorises on SSE2 but was only 1.4x
// faster, and needs the rounding mode for subnormals.)
inline float f16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f)  // inf, or a NaN made quiet (as VCVTPH2PS does)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x400000u : 0u));
  if (exponent == 0)  // zero or subnormal: mantissa * 2^-24, exact and normal in f32
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(static_cast<float>(mantissa) * 0x1p-24f));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));  // rebias 15 -> 127
}

// Integer arithmetic only, so the result does not depend on the rounding
// mode or on flush-to-zero.
inline std::uint16_t f32_to_f16_bits(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t magnitude = x & 0x7fffffffu;
  std::uint32_t result;
  if (magnitude > 0x7f800000u) {
    // NaN: keep the top of the payload and set the quiet bit (as VCVTPS2PH does).
    result = 0x7e00u | ((magnitude >> 13) & 0x3ffu);
  } else if (magnitude >= 0x477ff000u) {
    // At or above 65520, halfway between the largest half (65504, odd
    // mantissa) and 2^16: rounds to inf.
    result = 0x7c00u;
  } else if (magnitude >= 0x38800000u) {
    // Normal half: rebias the exponent (127 -> 15) and round 23 mantissa bits
    // to 10, to nearest even. A carry out of the mantissa bumps the exponent,
    // which is what rounding up to the next binade means.
    const std::uint32_t rebiased = magnitude - 0x38000000u;
    result = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  } else if (magnitude > 0x33000000u) {
    // Subnormal half: value * 2^24 rounded to an integer. At exactly 2^-25
    // the tie goes to the even neighbour, 0 (the else branch).
    const std::uint32_t shift = 126 - (magnitude >> 23);  // 14..24
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t kept = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    result = kept + ((rest > halfway || (rest == halfway && (kept & 1u) != 0)) ? 1u : 0u);
  } else {
    result = 0;
  }
  return static_cast<std::uint16_t>(sign | result);
}

inline float bf16_bits_to_f32(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t{h} << 16); }

inline std::uint16_t f32_to_bf16_bits(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  // Round to nearest even by adding just under half an ulp, plus one more if
  // the kept part is odd; overflow carries into the exponent and reaches inf.
  // A NaN is truncated instead (rounding could carry it into the sign) and
  // made quiet.
  const bool nan = static_cast<std::int32_t>(x & 0x7fffffffu) > 0x7f800000;
  const std::uint32_t nan_mask = nan ? 0xffffffffu : 0u;
  const std::uint32_t bias = ~nan_mask & (0x7fffu + ((x >> 16) & 1u));
  return static_cast<std::uint16_t>(((x | (nan_mask & 0x400000u)) + bias) >> 16);
}

// The formats as the kernels run them. apply(x, y, f) combines a Word of
// each input, element by element: narrow(f(widen(x[j]), widen(y[j]))), where
// f is an element-wise function on floats.
struct F16Portable {
  using Word = std::uint16_t;  // one element
  template <typename F>
  static Word apply(Word x, Word y, F f) {
    return f32_to_f16_bits(f(f16_bits_to_f32(x), f16_bits_to_f32(y)));
  }
};

// bf16 as 32-bit words of two elements: one element sits in the low half and
// the other in the high half (on either byte order, and the output is built
// the same way), and both widen without shuffles: word << 16 and
// word & 0xffff0000 are their f32 values. Zero-extending each element to 32
// bits instead costs lane-crossing shuffles that halve the throughput.
struct BF16Bits {
  using Word = std::uint32_t;  // two elements
  template <typename F>
  static Word apply(Word x, Word y, F f) {
    const float low = f(std::bit_cast<float>(x << 16), std::bit_cast<float>(y << 16));
    const float high = f(std::bit_cast<float>(x & 0xffff0000u), std::bit_cast<float>(y & 0xffff0000u));
    return Word{f32_to_bf16_bits(low)} | Word{f32_to_bf16_bits(high)} << 16;
  }
};

#ifdef BRAID_REDUCE_X86
// f16 with the F16C instructions, eight elements per instruction. Only for
// code compiled with target("avx2,f16c"), on a CPU that has both. The
// scratch arrays stay in registers once this is inlined.
struct F16Hardware {
  static constexpr std::size_t kBlock = 8;
  template <typename F>
  [[gnu::target("avx2,f16c")]] static inline void apply_block(std::uint16_t* d, const std::uint16_t* a,
                                                              const std::uint16_t* b, F f) {
    alignas(32) float x[kBlock];
    alignas(32) float y[kBlock];
    _mm256_store_ps(x, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))));
    _mm256_store_ps(y, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b))));
    for (std::size_t j = 0; j < kBlock; ++j) x[j] = f(x[j], y[j]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d),
                     _mm256_cvtps_ph(_mm256_load_ps(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};
#endif

}  // namespace braid::half
