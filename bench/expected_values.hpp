// Deterministic inputs and exact expected results for checking collectives:
// braid-perf --check and the multi-process tests use the same patterns.
//
// Inputs are small integers (for prod: 1, 2 and -1), so every partial sum or
// product is exact in every type, and the expected value of each element is
// computed independently of braid: in 64-bit integers, wrapped to the type
// for integer types, and converted once for floating types (avg divides in
// f32 for f16/bf16/f32 and in f64 for f64, as braid defines it).
//
// The collectives that only move data (all_gather, gather, scatter,
// all_to_all, send/recv) carry "blocks": the block that rank `from` sends to
// rank `to` holds values hashed from (from, to, element index) into
// [-125, 125], exact in every type. A block that lands in the wrong place, or
// shifted by any number of elements, differs in almost every element.
//   all_gather, gather   block q of the output = block(q -> q)
//   all_to_all           block p of rank r's input = block(r -> p), so block q
//                        of rank r's output must be block(q -> r)
//   scatter              block p of the root's input = block(root -> p)
//   reduce_scatter       rank q's input (n x count) is fill_reduce_input over
//                        n x count elements; rank r's output is elements
//                        [r x count, (r+1) x count) of the all-reduce
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

/// Number of elements of rank `rank`'s reduce_scatter output (`count`
/// elements) that differ from its block of the all-reduce of
/// fill_reduce_input(..., n x count) over `ranks` ranks.
std::size_t count_wrong_reduce_scatter(DataType type, ReduceOp op, int rank, int ranks, const void* data,
                                       std::size_t count);

/// Fills `count` elements with the block that rank `from` sends to rank `to`.
void fill_block(DataType type, int from, int to, void* data, std::size_t count);
std::size_t count_wrong_block(DataType type, int from, int to, const void* data, std::size_t count);

/// Fills rank `rank`'s all_to_all input (`ranks` blocks of `count`): block p
/// is block(rank -> p). Also the root's scatter input.
void fill_all_to_all_input(DataType type, int rank, int ranks, void* data, std::size_t count);
/// Checks rank `rank`'s all_to_all output: block q must be block(q -> rank).
std::size_t count_wrong_all_to_all(DataType type, int rank, int ranks, const void* data, std::size_t count);
/// Checks an all_gather output or the root's gather output: block q must be
/// block(q -> q), each rank's contribution being fill_block(type, q, q, ...).
std::size_t count_wrong_gather(DataType type, int ranks, const void* data, std::size_t count);

}  // namespace braid::check
