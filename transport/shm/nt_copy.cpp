#include "transport/shm/nt_copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace braid {
namespace {

using CopyKernel = void (*)(void*, const void*, std::size_t);

void plain_copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

#if defined(__x86_64__)
// Copies the unaligned head with memcpy, streams whole `Width`-byte vectors
// to aligned addresses, then copies the tail. Four vectors per iteration so
// a 64-byte line is filled by consecutive stores (the write-combining buffer
// then flushes a full line).
// Stream = false stores through the cache: the copy out of a ring slot that
// another core just wrote, where glibc's memcpy (rep movsb on this CPU) ran
// at a fifth of this loop's speed.
template <bool Stream>
__attribute__((target("avx2"))) inline void store256(char* dst, __m256i v) {
  if constexpr (Stream) _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), v);
  else _mm256_store_si256(reinterpret_cast<__m256i*>(dst), v);
}

template <bool Stream>
__attribute__((target("avx2"))) void avx2_copy(void* dst_v, const void* src_v, std::size_t bytes) {
  auto* dst = static_cast<char*>(dst_v);
  auto* src = static_cast<const char*>(src_v);
  std::size_t head = (32 - reinterpret_cast<std::uintptr_t>(dst) % 32) % 32;
  if (head > bytes) head = bytes;
  std::memcpy(dst, src, head);
  dst += head, src += head, bytes -= head;
  for (; bytes >= 128; dst += 128, src += 128, bytes -= 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 96));
    store256<Stream>(dst, a);
    store256<Stream>(dst + 32, b);
    store256<Stream>(dst + 64, c);
    store256<Stream>(dst + 96, d);
  }
  for (; bytes >= 32; dst += 32, src += 32, bytes -= 32)
    store256<Stream>(dst, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  if constexpr (Stream) _mm_sfence();
  std::memcpy(dst, src, bytes);
}

void sse2_copy(void* dst_v, const void* src_v, std::size_t bytes) {
  auto* dst = static_cast<char*>(dst_v);
  auto* src = static_cast<const char*>(src_v);
  std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
  if (head > bytes) head = bytes;
  std::memcpy(dst, src, head);
  dst += head, src += head, bytes -= head;
  for (; bytes >= 64; dst += 64, src += 64, bytes -= 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  for (; bytes >= 16; dst += 16, src += 16, bytes -= 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  _mm_sfence();
  std::memcpy(dst, src, bytes);
}
#endif

struct Choice {
  CopyKernel kernel;
  std::string_view name;
  CopyKernel cached = plain_copy;  // the same loop with ordinary stores
};

Choice choose() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return {avx2_copy<true>, "avx2", avx2_copy<false>};
  return {sse2_copy, "sse2"};  // every x86-64 has SSE2
#else
  return {plain_copy, "memcpy"};
#endif
}

const Choice& chosen() {
  static const Choice choice = choose();
  return choice;
}

}  // namespace

void nt_copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes < 256) return plain_copy(dst, src, bytes);  // no whole line to stream
  chosen().kernel(dst, src, bytes);
}

void cached_copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes < 256) return plain_copy(dst, src, bytes);
  chosen().cached(dst, src, bytes);
}

void copy_large(void* dst, const void* src, std::size_t bytes, std::size_t transfer_bytes) {
  if (transfer_bytes < kNtCopyMinBytes) return cached_copy(dst, src, bytes);
  nt_copy(dst, src, bytes);
}

std::string_view nt_copy_kernel() { return chosen().name; }

}  // namespace braid
