// GPU memory, as far as the layers above need it: where a pointer lives, and
// copies and reductions on memory of a CUDA device. Compiled against the CUDA
// runtime when the build found it (meson option `gpu`); without it every
// pointer is host memory and the device calls throw Error(unsupported).
//
// Each process uses one CUDA stream per device (non-blocking, made on first
// use). Every call here is synchronous: it returns when the work it queued on
// that stream is done, so a step that follows on the host sees the bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "braid/types.hpp"

namespace braid {

/// Where a buffer lives. Memory the host can read directly (pageable,
/// pinned, CUDA managed) is host.
enum class MemKind : std::uint8_t { host, cuda };
std::string_view name_of(MemKind kind);

namespace device {

/// True when this braid was built with CUDA.
bool compiled();
/// Number of usable CUDA devices (0 without CUDA, a driver or a GPU).
int count();
/// One line for logs and describe(): "CUDA 13.0 runtime, driver 13.0, 1 device
/// (NVIDIA H100 80GB HBM3)", or why there is none ("built without CUDA",
/// "CUDA driver version is insufficient for CUDA runtime version
/// (cudaErrorInsufficientDriver): device buffers are refused, host memory only").
std::string status();

/// Where a pointer lives: host memory (device -1), or memory of CUDA device
/// `device`.
struct Location {
  MemKind kind = MemKind::host;
  int device = -1;
};
/// One lookup (cudaPointerGetAttributes). Without CUDA, or for a pointer the
/// CUDA runtime does not know, host.
Location locate(const void* p);

/// dst = src, bytes long, in any direction between host and device memory.
void copy(void* dst, const void* src, std::size_t bytes);
/// The same on the stream of `device`, which holds dst or src (no lookup).
void copy_on(int device, void* dst, const void* src, std::size_t bytes);
/// dst[i] = a[i] (op) b[i] on the device that holds dst, with the semantics
/// of braid::reduce (avg sums; finish_average divides).
void reduce(DataType type, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count);
/// data[i] /= ranks on the device that holds data, as braid::finish_average.
void finish_average(DataType type, void* data, std::size_t count, int ranks);
/// Waits until the work queued on `stream` (a cudaStream_t; null: the
/// legacy default stream) is done. `buffer`, when it is device memory, must
/// be on the stream's device: InvalidArgument naming both otherwise. Without
/// CUDA or a device, a null stream is nothing to wait for, and another is
/// refused with the reason.
void wait_stream(void* stream, const void* buffer, std::string_view what);

/// CUDA IPC between processes of one host: the handle of the allocation
/// that holds a device pointer, and the pointer's offset inside it.
inline constexpr std::size_t kIpcHandleBytes = 64;  // cudaIpcMemHandle_t
struct IpcRegion {
  std::array<std::byte, kIpcHandleBytes> handle{};
  std::uint64_t offset = 0;
};
/// Exports the allocation holding `p` (cudaMalloc memory; memory from a
/// stream-ordered pool cannot be shared this way and is refused naming it).
IpcRegion export_region(const void* p);
/// Maps a peer's exported allocation into this process and returns its base;
/// each handle is opened once and kept (at most 256, the oldest closed
/// first), so a buffer reused call after call costs one lookup.
std::byte* import_region(const std::array<std::byte, kIpcHandleBytes>& handle);

/// Device memory on device `id` (cudaMalloc), or pinned host memory
/// (cudaMallocHost) when `id` is -1; freed on destruction.
class Memory {
 public:
  Memory() = default;
  Memory(std::size_t bytes, int id);
  Memory(Memory&&) noexcept;
  Memory& operator=(Memory&&) noexcept;
  ~Memory();
  std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  int id() const { return id_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  int id_ = -1;
};

}  // namespace device
}  // namespace braid
