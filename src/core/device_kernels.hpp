// The CUDA reduction kernels (device_kernels.cu), as plain C++ entry points
// for device.cpp. Each launches on `stream` (a cudaStream_t) and returns the
// cudaError_t of the launch; the caller synchronizes.
#pragma once

#include <cstddef>

#include "braid/types.hpp"

namespace braid::device::kernels {

/// dst[i] = a[i] (op) b[i]; avg sums.
int combine(DataType type, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count, void* stream);
/// data[i] /= ranks.
int divide(DataType type, void* data, std::size_t count, int ranks, void* stream);

}  // namespace braid::device::kernels
