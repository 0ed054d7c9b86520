// Reduction kernels. Every collective's arithmetic goes through these four
// entry points; they dispatch once on (type, op) and then run a loop the
// compiler vectorises. f16 and bf16 are widened to f32, combined, and rounded
// back to nearest-even, so a sum of two halves is the correctly rounded sum.
#pragma once

#include <cstddef>

#include "braid/types.hpp"

namespace braid {

/// dst[i] = a[i] (op) b[i] for i < count. dst may alias a or b exactly; no
/// other overlap. For avg this is the sum (the division happens once, in
/// finish_average). Floating-point min and max are IEEE 754-2019 minimum and
/// maximum: a NaN operand gives a NaN, and -0 is less than +0. Throws
/// InvalidArgument for a type or op outside the enums.
void reduce(DataType type, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count);

/// data[i] = data[i] / ranks: the last step of avg. Integers divide with
/// truncation toward zero; floating point types divide (not multiply by a
/// reciprocal), so the average of equal values is that value exactly.
/// Throws InvalidArgument unless ranks > 0.
void finish_average(DataType type, void* data, std::size_t count, int ranks);

/// dst[i] = src[i] x *scalar (a value of `type`) for i < count: the first
/// half of a pre-multiplied sum. f16 and bf16 multiply in f32 and round to
/// nearest even; integers multiply modulo 2^bits. dst may alias src exactly.
void scale(DataType type, void* dst, const void* src, std::size_t count, const void* scalar);

/// Scalar conversions used by Float16/BFloat16 and the tests.
float f16_to_f32(std::uint16_t bits);
std::uint16_t f32_to_f16(float value);   // round to nearest even, overflow to inf, NaN stays NaN
float bf16_to_f32(std::uint16_t bits);
std::uint16_t f32_to_bf16(float value);  // round to nearest even, NaN stays NaN (quiet)

}  // namespace braid
