// The C ABI's *_stream collectives (braid.h), run under braid-run on 2 or
// more ranks. Everywhere: with host buffers and a NULL stream they work; and
// without a usable CUDA device a stream is refused with the reason. With a
// device: buffers written by a copy still queued behind other work on a
// stream are all-reduced only after it (the result proves braid waited for
// the stream), and broadcast and reduce-scatter on the stream agree too.
#include <cstdio>
#include <cstring>
#include <vector>

#include "braid/braid.h"
#include "core/device.hpp"
#ifdef BRAID_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (ok) return;
  ++failures;
  std::printf("FAILED: %s (last error: %s)\n", what, braid_last_error());
}

// Every element is `want`.
bool all_equal(const std::vector<float>& v, float want) {
  for (float x : v)
    if (x != want) return false;
  return true;
}

void host_checks(braid_comm_t comm, int rank, int size) {
  std::vector<float> v(1000, static_cast<float>(rank + 1));
  expect(braid_all_reduce_stream(v.data(), v.data(), v.size(), braid_f32, braid_sum, comm, nullptr) == braid_success,
         "all_reduce_stream on host buffers with a NULL stream");
  expect(all_equal(v, static_cast<float>(size * (size + 1) / 2)), "all_reduce_stream's host result");
  if (braid::device::count() == 0) {
    int not_a_stream = 0;
    expect(braid_all_reduce_stream(v.data(), v.data(), v.size(), braid_f32, braid_sum, comm, &not_a_stream) ==
               braid_unsupported,
           "a stream without a usable device is refused (braid_unsupported)");
    expect(std::strstr(braid_last_error(), "a CUDA stream was given") != nullptr,
           "the refusal says a stream was given and why it cannot be used");
  }
}

#ifdef BRAID_HAVE_CUDA
void device_checks(braid_comm_t comm, int rank, int size) {
  const std::size_t n = std::size_t{16} << 20;  // 64 MiB of f32
  cudaStream_t stream{};
  float* buffer = nullptr;
  float* pinned = nullptr;
  void* busy = nullptr;
  const std::size_t busy_bytes = std::size_t{1} << 30;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&buffer), n * sizeof(float)) != cudaSuccess ||
      cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&busy, busy_bytes) != cudaSuccess) {
    expect(false, "allocating the device buffers");
    return;
  }
  for (std::size_t i = 0; i < n; ++i) pinned[i] = static_cast<float>(rank + 1);
  cudaMemset(buffer, 0, n * sizeof(float));
  cudaDeviceSynchronize();
  // Keep the stream busy (8 GiB of memsets), then queue the copy that writes
  // the input: a braid that did not wait for the stream would reduce zeros.
  for (int i = 0; i < 8; ++i) cudaMemsetAsync(busy, i, busy_bytes, stream);
  cudaMemcpyAsync(buffer, pinned, n * sizeof(float), cudaMemcpyHostToDevice, stream);
  expect(braid_all_reduce_stream(buffer, buffer, n, braid_f32, braid_sum, comm, stream) == braid_success,
         "all_reduce_stream on device buffers");
  std::vector<float> out(n);
  cudaMemcpy(out.data(), buffer, n * sizeof(float), cudaMemcpyDeviceToHost);
  expect(all_equal(out, static_cast<float>(size * (size + 1) / 2)),
         "all_reduce_stream's device result includes the copy queued on the stream before it");

  for (std::size_t i = 0; i < n; ++i) pinned[i] = static_cast<float>(rank == 0 ? 7 : -1);
  for (int i = 0; i < 8; ++i) cudaMemsetAsync(busy, i, busy_bytes, stream);
  cudaMemcpyAsync(buffer, pinned, n * sizeof(float), cudaMemcpyHostToDevice, stream);
  expect(braid_broadcast_stream(buffer, buffer, n, braid_f32, 0, comm, stream) == braid_success,
         "broadcast_stream on device buffers");
  cudaMemcpy(out.data(), buffer, n * sizeof(float), cudaMemcpyDeviceToHost);
  expect(all_equal(out, 7.0f), "broadcast_stream's device result");

  const std::size_t block = n / static_cast<std::size_t>(size);
  for (std::size_t i = 0; i < n; ++i) pinned[i] = static_cast<float>(rank + 1);
  cudaMemcpyAsync(buffer, pinned, n * sizeof(float), cudaMemcpyHostToDevice, stream);
  expect(braid_reduce_scatter_stream(buffer, buffer + static_cast<std::size_t>(rank) * block, block, braid_f32,
                                     braid_sum, comm, stream) == braid_success,
         "reduce_scatter_stream on device buffers (in place)");
  std::vector<float> mine(block);
  cudaMemcpy(mine.data(), buffer + static_cast<std::size_t>(rank) * block, block * sizeof(float),
             cudaMemcpyDeviceToHost);
  expect(all_equal(mine, static_cast<float>(size * (size + 1) / 2)), "reduce_scatter_stream's device result");

  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices > 1) {
    // A stream of another device than the buffers' is refused, naming both.
    int current = 0;
    cudaGetDevice(&current);
    cudaStream_t other{};
    cudaSetDevice((current + 1) % devices);
    cudaStreamCreate(&other);
    cudaSetDevice(current);
    expect(braid_all_reduce_stream(buffer, buffer, n, braid_f32, braid_sum, comm, other) == braid_invalid_argument,
           "a stream of another device is refused");
    expect(std::strstr(braid_last_error(), "pass a stream of the buffers' device") != nullptr,
           "the refusal names both devices");
    cudaStreamDestroy(other);
  } else {
    std::printf("rank %d: one device: the other-device stream case needs two\n", rank);
  }
  cudaFree(busy);
  cudaFreeHost(pinned);
  cudaFree(buffer);
  cudaStreamDestroy(stream);
}
#endif

}  // namespace

int main() {
  braid_comm_t comm = nullptr;
  if (braid_comm_init_env(&comm) != braid_success) {
    std::printf("FAILED: braid_comm_init_env: %s\n", braid_last_error());
    return 1;
  }
  int rank = 0, size = 1;
  braid_comm_user_rank(comm, &rank);
  braid_comm_count(comm, &size);
  host_checks(comm, rank, size);
#ifdef BRAID_HAVE_CUDA
  if (braid::device::count() > 0) {
    cudaSetDevice(rank % braid::device::count());
    device_checks(comm, rank, size);
  } else {
    std::printf("rank %d: no usable CUDA device: the device cases did not run (%s)\n", rank,
                braid::device::status().c_str());
  }
#endif
  braid_comm_destroy(comm);
  std::printf("rank %d: %s\n", rank, failures ? "FAILED" : "stream checks passed");
  return failures ? 1 : 0;
}
