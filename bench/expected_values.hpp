// Deterministic inputs and exact expected results for checking collectives:
// braid-perf --check and the multi-process tests use the same patterns.
//
// Inputs are small integers (for prod: 1, 2 and -1), so every partial sum or
// product is exact in every type, and the expected value of each element is
// computed independently of braid: in 64-bit integers, wrapped to the type
// for integer types, and converted once for floating types (avg divides in
// f32 for f16/bf16/f32 and in f64 for f64, as braid defines it).
#pragma once

#include <cstddef>
#include <span>

#include "braid/types.hpp"

namespace braid::check {

/// Fills `count` elements at `data` with rank `rank`'s input for `op`.
void fill_reduce_input(DataType type, ReduceOp op, int rank, void* data, std::size_t count);
/// Number of elements of `data` that differ (bitwise) from the all-reduce of
/// the inputs of `ranks` ranks.
std::size_t count_wrong_reduce(DataType type, ReduceOp op, int ranks, const void* data, std::size_t count);

/// Fills the root's broadcast payload.
void fill_broadcast_input(DataType type, int root, void* data, std::size_t count);
std::size_t count_wrong_broadcast(DataType type, int root, const void* data, std::size_t count);

}  // namespace braid::check
