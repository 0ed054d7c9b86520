#include "expected_values.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace braid::check {
namespace {

bool is_signed_type(DataType t) {
  return t != DataType::u8 && t != DataType::u32 && t != DataType::u64;
}

std::int64_t input_value(DataType type, ReduceOp op, int rank, std::size_t i) {
  const auto mix = static_cast<std::int64_t>((i * 7 + static_cast<std::size_t>(rank) * 3) % 5);
  if (op == ReduceOp::prod) {
    std::int64_t v = static_cast<std::int64_t>((i + static_cast<std::size_t>(rank)) % 3);  // 0, 1, 2
    if (v == 0) return 1;
    if (v == 1) return 2;
    return is_signed_type(type) ? -1 : 1;
  }
  return is_signed_type(type) ? mix - 2 : mix + 1;
}

template <typename T>
T from_integer(std::int64_t v) {
  if constexpr (std::is_same_v<T, Float16>) return Float16::from_float(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16::from_float(static_cast<float>(v));
  else return static_cast<T>(v);  // C++20: conversion to an integer type wraps modulo 2^bits
}

template <typename T>
T expected(DataType type, ReduceOp op, int ranks, std::size_t i) {
  std::int64_t acc = input_value(type, op, 0, i);
  std::uint64_t wrapped = static_cast<std::uint64_t>(acc);  // products wrap modulo 2^64 first
  for (int r = 1; r < ranks; ++r) {
    std::int64_t v = input_value(type, op, r, i);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: acc += v; break;
      case ReduceOp::prod: wrapped *= static_cast<std::uint64_t>(v); break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::prod) acc = static_cast<std::int64_t>(wrapped);
  if (op != ReduceOp::avg) return from_integer<T>(acc);
  if constexpr (std::is_integral_v<T>) {
    T sum = from_integer<T>(acc);
    return static_cast<T>(sum / static_cast<T>(ranks));
  } else if constexpr (std::is_same_v<T, double>) {
    return static_cast<double>(acc) / static_cast<double>(ranks);
  } else {
    float avg = static_cast<float>(acc) / static_cast<float>(ranks);
    if constexpr (std::is_same_v<T, float>) return avg;
    else return T::from_float(avg);
  }
}

template <typename T>
T broadcast_value(int root, std::size_t i) {
  return from_integer<T>(static_cast<std::int64_t>((i * 13 + static_cast<std::size_t>(root) * 5) % 97) - 48);
}

// splitmix64's finaliser: every input bit affects every output bit.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
T block_value(int from, int to, std::size_t i) {
  const std::uint64_t key = mix64(static_cast<std::uint64_t>(i)) ^
                            mix64((static_cast<std::uint64_t>(static_cast<std::uint32_t>(from)) << 32) |
                                  static_cast<std::uint32_t>(to));
  return from_integer<T>(static_cast<std::int64_t>(mix64(key) % 251) - 125);
}

template <typename Fn>
decltype(auto) with_type(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::f16: return fn(Float16{});
    case DataType::bf16: return fn(BFloat16{});
    case DataType::f32: return fn(float{});
    case DataType::f64: return fn(double{});
    case DataType::i8: return fn(std::int8_t{});
    case DataType::u8: return fn(std::uint8_t{});
    case DataType::i32: return fn(std::int32_t{});
    case DataType::u32: return fn(std::uint32_t{});
    case DataType::i64: return fn(std::int64_t{});
    case DataType::u64: return fn(std::uint64_t{});
  }
  throw InvalidArgument("unknown data type");
}

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Counts the elements of `data` that differ from value(i), i < count.
template <typename Value>
std::size_t count_differing(DataType type, const void* data, std::size_t count, Value&& value) {
  return with_type(type, [&](auto zero) {
    using T = decltype(zero);
    auto* in = static_cast<const T*>(data);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += !same_bits(in[i], value(zero, i));
    return wrong;
  });
}

}  // namespace

void fill_reduce_input(DataType type, ReduceOp op, int rank, void* data, std::size_t count) {
  with_type(type, [&](auto zero) {
    using T = decltype(zero);
    auto* out = static_cast<T*>(data);
    for (std::size_t i = 0; i < count; ++i) out[i] = from_integer<T>(input_value(type, op, rank, i));
  });
}

std::size_t count_wrong_reduce(DataType type, ReduceOp op, int ranks, const void* data, std::size_t count) {
  return count_differing(type, data, count,
                         [&](auto zero, std::size_t i) { return expected<decltype(zero)>(type, op, ranks, i); });
}

void fill_broadcast_input(DataType type, int root, void* data, std::size_t count) {
  with_type(type, [&](auto zero) {
    using T = decltype(zero);
    auto* out = static_cast<T*>(data);
    for (std::size_t i = 0; i < count; ++i) out[i] = broadcast_value<T>(root, i);
  });
}

std::size_t count_wrong_broadcast(DataType type, int root, const void* data, std::size_t count) {
  return count_differing(type, data, count,
                         [&](auto zero, std::size_t i) { return broadcast_value<decltype(zero)>(root, i); });
}

std::size_t count_wrong_reduce_scatter(DataType type, ReduceOp op, int rank, int ranks, const void* data,
                                       std::size_t count) {
  const std::size_t first = static_cast<std::size_t>(rank) * count;
  return count_differing(type, data, count, [&](auto zero, std::size_t i) {
    return expected<decltype(zero)>(type, op, ranks, first + i);
  });
}

void fill_block(DataType type, int from, int to, void* data, std::size_t count) {
  with_type(type, [&](auto zero) {
    using T = decltype(zero);
    auto* out = static_cast<T*>(data);
    for (std::size_t i = 0; i < count; ++i) out[i] = block_value<T>(from, to, i);
  });
}

std::size_t count_wrong_block(DataType type, int from, int to, const void* data, std::size_t count) {
  return count_differing(type, data, count,
                         [&](auto zero, std::size_t i) { return block_value<decltype(zero)>(from, to, i); });
}

void fill_all_to_all_input(DataType type, int rank, int ranks, void* data, std::size_t count) {
  auto* out = static_cast<std::byte*>(data);
  for (int p = 0; p < ranks; ++p)
    fill_block(type, rank, p, out + static_cast<std::size_t>(p) * count * size_of(type), count);
}

std::size_t count_wrong_all_to_all(DataType type, int rank, int ranks, const void* data, std::size_t count) {
  auto* in = static_cast<const std::byte*>(data);
  std::size_t wrong = 0;
  for (int q = 0; q < ranks; ++q)
    wrong += count_wrong_block(type, q, rank, in + static_cast<std::size_t>(q) * count * size_of(type), count);
  return wrong;
}

std::size_t count_wrong_gather(DataType type, int ranks, const void* data, std::size_t count) {
  auto* in = static_cast<const std::byte*>(data);
  std::size_t wrong = 0;
  for (int q = 0; q < ranks; ++q)
    wrong += count_wrong_block(type, q, q, in + static_cast<std::size_t>(q) * count * size_of(type), count);
  return wrong;
}

}  // namespace braid::check
