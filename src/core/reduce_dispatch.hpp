// Which instruction-set build of the reduction kernels runs. reduce() and
// finish_average() use the best one the CPU has; the *_with variants let the
// tests and the kernel benchmark run each build and compare them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "braid/types.hpp"

namespace braid {

enum class KernelIsa : std::uint8_t {
  baseline,  // the compiler's default target (SSE2 on x86-64); f16 converted in portable code
  avx2,      // AVX2 loops, f16 converted with F16C
};

/// The build reduce() uses: avx2 where the CPU has AVX2 and F16C.
KernelIsa best_kernel_isa();
bool kernel_isa_supported(KernelIsa isa);

/// reduce() and finish_average() on a chosen build; throws Error(unsupported)
/// if the CPU (or this compilation) lacks it.
void reduce_with(KernelIsa isa, DataType type, ReduceOp op, void* dst, const void* a, const void* b,
                 std::size_t count);
void finish_average_with(KernelIsa isa, DataType type, void* data, std::size_t count, int ranks);

}  // namespace braid
