// Non-temporal copy: memcpy for large buffers that bypasses the caches on
// the way out.
//
// A normal store first reads the destination line into the cache (a "read
// for ownership") and later writes it back: for a copy much larger than the
// last-level cache that is three memory transfers per line (read source,
// read destination, write destination) and it evicts everything else.
// Streaming stores (MOVNTDQ) write whole lines through write-combining
// buffers: two transfers per line, and the cache keeps its contents. glibc
// switches to them only above ~114 MiB on this machine (3/4 of its
// non-temporal threshold times the core count), so between the L3 size and
// that threshold memcpy pays the extra transfer. Measured here (AMD EPYC,
// 32 MiB L3, one process, `shm_pingpong copy --runs 5`, GB/s, median):
//
//   size      256 KiB  1 MiB  4 MiB  8 MiB  16 MiB  64 MiB
//   memcpy      19.8   29.8   23.2    9.4     5.6     4.6
//   nt_copy     13.9   16.4   16.4   14.9     7.7     7.3
//
// Streaming loses while source and destination fit in the cache (the
// destination line would have been a cache hit; now it is a memory write
// and, for a reader on another core, a memory read) and wins from 8 MiB,
// where source plus destination pass half the L3 that the other processes
// leave us. Hence kNtCopyMinBytes.
//
// The kernel is chosen once at run time with __builtin_cpu_supports: AVX2
// (32-byte stores), else SSE2 (16-byte), else plain memcpy. Loads are
// unaligned, stores aligned (the head up to the first aligned address goes
// through memcpy), and an sfence at the end makes the streamed lines visible
// before whatever the caller publishes next (a ring counter).
#pragma once

#include <cstddef>
#include <string_view>

namespace braid {

/// Below this size copy_large() uses memcpy: a copy that fits in the last
/// level cache is faster with ordinary stores, and the reader (another core
/// on the same L3) finds it there. The measured crossover (table above).
inline constexpr std::size_t kNtCopyMinBytes = 8u << 20;

/// Copies with streaming stores where the CPU has them (memcpy otherwise).
/// No overlap allowed.
void nt_copy(void* dst, const void* src, std::size_t bytes);

/// A vector copy through the cache (AVX2 where the CPU has it, memcpy
/// otherwise). Into and out of ring slots it beats glibc's memcpy, whose
/// `rep movsb` on this AMD EPYC moved lines another core had just written at
/// about a fifth of the speed: a 1 MiB all-reduce on 2 ranks took 540 us
/// with memcpy and 180 us with this loop.
void cached_copy(void* dst, const void* src, std::size_t bytes);

/// cached_copy below `threshold` bytes, nt_copy at or above it. `threshold` is
/// the size of the whole transfer the copy is part of (a 256 KiB chunk of a
/// 64 MiB message streams), since that decides whether the data stays in
/// the cache.
void copy_large(void* dst, const void* src, std::size_t bytes, std::size_t transfer_bytes);

/// "avx2", "sse2" or "memcpy": the kernel nt_copy uses on this CPU.
std::string_view nt_copy_kernel();

}  // namespace braid
