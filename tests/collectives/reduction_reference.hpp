// The all-reduce reference: the inputs every rank contributes and the exact
// result, in the bytes of every DataType.
//
// The inputs are small integers (for prod: 1, 2 and -1, with at most three 2s
// per element), so the exact result is representable in every type and every
// order of reduction gives the same bits; avg is the correctly rounded
// quotient of that exact sum (truncated for integers).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "braid/types.hpp"
#include "core/check.hpp"
#include "core/reduce.hpp"
#include "core/text.hpp"

namespace braid::test {

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline bool is_unsigned(DataType t) { return t == DataType::u8 || t == DataType::u32 || t == DataType::u64; }

template <typename T>
inline void put(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
inline T get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Stores v, converted to `type` (integers wrap; floats of small integers are exact).
inline void encode(DataType type, std::int64_t v, std::byte* p) {
  switch (type) {
    case DataType::f16: return put(p, f32_to_f16(static_cast<float>(v)));
    case DataType::bf16: return put(p, f32_to_bf16(static_cast<float>(v)));
    case DataType::f32: return put(p, static_cast<float>(v));
    case DataType::f64: return put(p, static_cast<double>(v));
    case DataType::i8: return put(p, static_cast<std::int8_t>(v));
    case DataType::u8: return put(p, static_cast<std::uint8_t>(v));
    case DataType::i32: return put(p, static_cast<std::int32_t>(v));
    case DataType::u32: return put(p, static_cast<std::uint32_t>(v));
    case DataType::i64: return put(p, v);
    case DataType::u64: return put(p, static_cast<std::uint64_t>(v));
  }
}

/// Stores sum / ranks as avg defines it: truncated for integers, correctly
/// rounded for floats (f32 has more than 2p+2 bits for the 16-bit formats, so
/// dividing in f32 and rounding again is still correctly rounded).
inline void encode_mean(DataType type, std::int64_t sum, int ranks, std::byte* p) {
  const float quotient = static_cast<float>(sum) / static_cast<float>(ranks);
  switch (type) {
    case DataType::f16: return put(p, f32_to_f16(quotient));
    case DataType::bf16: return put(p, f32_to_bf16(quotient));
    case DataType::f32: return put(p, quotient);
    case DataType::f64: return put(p, static_cast<double>(sum) / ranks);
    default: return encode(type, sum / ranks, p);
  }
}

inline void encode_float(DataType type, float v, std::byte* p) {
  switch (type) {
    case DataType::f16: return put(p, f32_to_f16(v));
    case DataType::bf16: return put(p, f32_to_bf16(v));
    case DataType::f32: return put(p, v);
    case DataType::f64: return put(p, static_cast<double>(v));
    default: BRAID_CHECK(false, "not a floating-point type");
  }
}

inline double decode(DataType type, const std::byte* p) {
  switch (type) {
    case DataType::f16: return f16_to_f32(get<std::uint16_t>(p));
    case DataType::bf16: return bf16_to_f32(get<std::uint16_t>(p));
    case DataType::f32: return get<float>(p);
    case DataType::f64: return get<double>(p);
    case DataType::i8: return get<std::int8_t>(p);
    case DataType::u8: return get<std::uint8_t>(p);
    case DataType::i32: return get<std::int32_t>(p);
    case DataType::u32: return get<std::uint32_t>(p);
    case DataType::i64: return static_cast<double>(get<std::int64_t>(p));
    case DataType::u64: return static_cast<double>(get<std::uint64_t>(p));
  }
  return 0;
}

inline std::string element_text(DataType type, const std::byte* p) {
  return cat(decode(type, p), " (bytes ", to_hex(std::span(p, size_of(type))), ")");
}

/// Rank `rank`'s element i: in [-3, 3] ([0, 6] unsigned); for prod one of 1,
/// 2 or -1, where a 2 comes from the one rank in seven with i + 3 rank = 0
/// (mod 7), so at most three of 17 ranks: products stay within +-8.
inline std::int64_t input_value(DataType type, ReduceOp op, int rank, std::size_t i) {
  const std::uint64_t h = mix((static_cast<std::uint64_t>(rank) << 40) ^ i);
  const bool is_signed = !is_unsigned(type);
  if (op == ReduceOp::prod) {
    const std::int64_t magnitude = (i + 3 * static_cast<std::size_t>(rank)) % 7 == 0 ? 2 : 1;
    return is_signed && h % 4 == 1 ? -magnitude : magnitude;
  }
  const auto v = static_cast<std::int64_t>(h % 7);
  return is_signed ? v - 3 : v;
}

inline std::vector<std::byte> make_input(DataType type, ReduceOp op, int rank, std::size_t count) {
  const std::size_t element = size_of(type);
  std::vector<std::byte> out(count * element);
  for (std::size_t i = 0; i < count; ++i) encode(type, input_value(type, op, rank, i), out.data() + i * element);
  return out;
}

inline std::vector<std::byte> expected_all_reduce(DataType type, ReduceOp op, int ranks, std::size_t count) {
  const std::size_t element = size_of(type);
  std::vector<std::byte> out(count * element);
  for (std::size_t i = 0; i < count; ++i) {
    std::int64_t sum = 0, prod = 1, lo = INT64_MAX, hi = INT64_MIN;
    for (int r = 0; r < ranks; ++r) {
      const std::int64_t v = input_value(type, op, r, i);
      sum += v;
      prod *= v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    std::byte* p = out.data() + i * element;
    switch (op) {
      case ReduceOp::sum: encode(type, sum, p); break;
      case ReduceOp::prod: encode(type, prod, p); break;
      case ReduceOp::min: encode(type, lo, p); break;
      case ReduceOp::max: encode(type, hi, p); break;
      case ReduceOp::avg: encode_mean(type, sum, ranks, p); break;
    }
  }
  return out;
}

}  // namespace braid::test
