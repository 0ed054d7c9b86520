#include "core/device.hpp"

#include <cstring>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "core/text.hpp"

#ifdef BRAID_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/device_kernels.hpp"
#endif

namespace braid {

std::string_view name_of(MemKind kind) {
  switch (kind) {
    case MemKind::host: return "host";
    case MemKind::cuda: return "cuda";
  }
  return "unknown";
}

namespace device {

#ifdef BRAID_HAVE_CUDA
namespace {

[[noreturn]] void fail(cudaError_t e, std::string_view what) {
  throw Error(ErrorCode::system, cat("CUDA: ", what, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")"));
}
void check(cudaError_t e, std::string_view what) {
  if (e != cudaSuccess) fail(e, what);
}

// What the runtime said at first use: the device count, or why there is none.
struct Probe {
  int devices = 0;
  std::string line;
};
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    auto version = [](int v) { return cat(v / 1000, ".", v % 1000 / 10); };  // 13000 -> "13.0"
    const cudaError_t e = cudaGetDeviceCount(&r.devices);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: leave no error for the application
      r.devices = 0;
      r.line = cat("CUDA ", version(runtime), " runtime but no usable device: ",
                   cudaGetErrorString(e), " (", cudaGetErrorName(e), "); device buffers are refused, host memory only");
      return r;
    }
    r.line = cat("CUDA ", version(runtime), " runtime, driver ", version(driver), ", ", r.devices,
                 r.devices == 1 ? " device" : " devices");
    for (int d = 0; d < r.devices; ++d) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) r.line += cat(d == 0 ? " (" : ", ", prop.name);
      if (d + 1 == r.devices) r.line += ")";
    }
    return r;
  }();
  return p;
}

// Makes `id` current for the calling thread and returns the process's
// stream on it.
cudaStream_t stream_on(int id) {
  static std::mutex mutex;
  static std::vector<cudaStream_t> streams;
  check(cudaSetDevice(id), cat("selecting device ", id));
  std::lock_guard lock(mutex);
  if (streams.size() <= static_cast<std::size_t>(id)) streams.resize(static_cast<std::size_t>(id) + 1, nullptr);
  auto& s = streams[static_cast<std::size_t>(id)];
  if (!s) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cat("creating a stream on device ", id));
  return s;
}

// The device holding `p`, which the caller says is device memory.
int on_device(const void* p) {
  cudaPointerAttributes a{};
  check(cudaPointerGetAttributes(&a, p), "looking up a device pointer");
  return a.device;
}

void require_device(int devices, std::string_view what) {
  if (devices == 0) throw Error(ErrorCode::unsupported, cat(what, ": ", probe().line));
}

}  // namespace

bool compiled() { return true; }
int count() { return probe().devices; }
std::string status() { return probe().line; }

Location locate(const void* p) {
  if (p == nullptr || probe().devices == 0) return {};
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  if (a.type != cudaMemoryTypeDevice) return {};
  return {MemKind::cuda, a.device};
}

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  require_device(count(), "copying device memory");
  Location on = locate(dst);
  if (on.kind == MemKind::host) on = locate(src);
  copy_on(on.kind == MemKind::cuda ? on.device : 0, dst, src, bytes);
}

void copy_on(int device, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  cudaStream_t s = stream_on(device);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), cat("copying ", bytes, " bytes"));
  check(cudaStreamSynchronize(s), cat("copying ", bytes, " bytes"));
}

void reduce(DataType type, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count) {
  size_of(type);
  name_of(op);
  if (count == 0) return;
  require_device(device::count(), "reducing device memory");
  cudaStream_t s = stream_on(on_device(dst));
  const auto e = static_cast<cudaError_t>(kernels::combine(type, op, dst, a, b, count, s));
  check(e, cat("launching the ", name_of(type), " ", name_of(op), " kernel"));
  check(cudaStreamSynchronize(s), cat("the ", name_of(type), " ", name_of(op), " kernel"));
}

void finish_average(DataType type, void* data, std::size_t count, int ranks) {
  size_of(type);
  if (ranks <= 0) throw InvalidArgument(cat("finish_average needs a positive rank count, not ", ranks));
  if (count == 0) return;
  require_device(device::count(), "averaging device memory");
  cudaStream_t s = stream_on(on_device(data));
  check(static_cast<cudaError_t>(kernels::divide(type, data, count, ranks, s)),
        cat("launching the ", name_of(type), " average kernel"));
  check(cudaStreamSynchronize(s), cat("the ", name_of(type), " average kernel"));
}

void wait_stream(void* stream, const void* buffer, std::string_view what) {
  if (count() == 0) {
    if (stream == nullptr) return;
    throw Error(ErrorCode::unsupported, cat(what, ": a CUDA stream was given, but ", status()));
  }
  auto s = static_cast<cudaStream_t>(stream);
  const Location on = locate(buffer);
  if (on.kind == MemKind::cuda) {
    int stream_device = -1;
    if (stream == nullptr) {
      check(cudaGetDevice(&stream_device), cat(what, ": the current device"));
    } else if (cudaStreamGetDevice(s, &stream_device) != cudaSuccess) {
      cudaGetLastError();
      throw InvalidArgument(cat(what, ": stream ", stream, " is not a CUDA stream this process can use"));
    }
    if (stream_device != on.device)
      throw InvalidArgument(cat(what, ": the stream is on device ", stream_device, " but the buffers are on device ",
                                on.device, "; pass a stream of the buffers' device"));
  }
  check(cudaStreamSynchronize(s), cat(what, ": waiting for the work queued on the stream"));
}

IpcRegion export_region(const void* p) {
  // The allocation's base, from the driver's cuMemGetAddressRange (the
  // runtime has no call for it; the entry point avoids linking libcuda).
  using GetRange = int (*)(unsigned long long* base, std::size_t* size, unsigned long long ptr);
  static const GetRange get_range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<GetRange>(fn);
  }();
  if (!get_range) throw Error(ErrorCode::unsupported, "CUDA IPC: the driver has no cuMemGetAddressRange");
  unsigned long long base = 0;
  std::size_t size = 0;
  if (get_range(&base, &size, reinterpret_cast<unsigned long long>(p)) != 0)
    throw Error(ErrorCode::system, cat("CUDA IPC: cannot find the allocation holding device pointer ", p));
  cudaIpcMemHandle_t h{};
  const cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(ErrorCode::unsupported,
                cat("CUDA IPC: device buffer ", p, " cannot be shared with another process (", cudaGetErrorName(e),
                    "); allocate it with cudaMalloc (memory from cudaMallocAsync pools is not shareable), or set "
                    "BRAID_TRANSPORT=shm,tcp to copy device buffers through the host"));
  }
  IpcRegion r;
  std::memcpy(r.handle.data(), &h, sizeof h);
  r.offset = reinterpret_cast<unsigned long long>(p) - base;
  return r;
}

std::byte* import_region(const std::array<std::byte, kIpcHandleBytes>& handle) {
  struct Import {
    std::array<std::byte, kIpcHandleBytes> handle;
    std::byte* base;
  };
  static std::mutex mutex;
  static std::deque<Import> imports;  // most recent last
  constexpr std::size_t kKept = 256;
  std::lock_guard lock(mutex);
  for (auto it = imports.rbegin(); it != imports.rend(); ++it)
    if (it->handle == handle) return it->base;
  cudaIpcMemHandle_t h{};
  std::memcpy(&h, handle.data(), sizeof h);
  void* p = nullptr;
  check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "opening a peer's device buffer (CUDA IPC)");
  if (imports.size() == kKept) {
    cudaIpcCloseMemHandle(imports.front().base);
    imports.pop_front();
  }
  imports.push_back(Import{handle, static_cast<std::byte*>(p)});
  return static_cast<std::byte*>(p);
}

Memory::Memory(std::size_t bytes, int id) : bytes_(bytes), id_(id) {
  if (bytes == 0) return;
  void* p = nullptr;
  if (id < 0) {
    check(cudaMallocHost(&p, bytes), cat("allocating ", bytes, " bytes of pinned host memory"));
  } else {
    require_device(count(), "allocating device memory");
    check(cudaSetDevice(id), cat("selecting device ", id));
    check(cudaMalloc(&p, bytes), cat("allocating ", bytes, " bytes on device ", id));
  }
  data_ = static_cast<std::byte*>(p);
}

Memory::~Memory() {
  if (!data_) return;
  if (id_ < 0) cudaFreeHost(data_);
  else cudaFree(data_);
}

#else  // built without CUDA

namespace {
[[noreturn]] void unsupported(std::string_view what) {
  throw Error(ErrorCode::unsupported,
              cat(what, " needs a braid built with CUDA (meson -Dgpu=enabled, with nvcc at /usr/local/cuda/bin)"));
}
}  // namespace

bool compiled() { return false; }
int count() { return 0; }
std::string status() { return "built without CUDA: host memory only"; }
Location locate(const void*) { return {}; }
void copy(void*, const void*, std::size_t) { unsupported("copying device memory"); }
void copy_on(int, void*, const void*, std::size_t) { unsupported("copying device memory"); }
void reduce(DataType, ReduceOp, void*, const void*, const void*, std::size_t) { unsupported("reducing device memory"); }
void finish_average(DataType, void*, std::size_t, int) { unsupported("averaging device memory"); }
void wait_stream(void* stream, const void*, std::string_view what) {
  if (stream != nullptr)
    throw Error(ErrorCode::unsupported, cat(what, ": a CUDA stream was given, but braid was built without CUDA"));
}
IpcRegion export_region(const void*) { unsupported("CUDA IPC"); }
std::byte* import_region(const std::array<std::byte, kIpcHandleBytes>&) { unsupported("CUDA IPC"); }
Memory::Memory(std::size_t bytes, int) {
  if (bytes > 0) unsupported("device or pinned memory");
}
Memory::~Memory() = default;

#endif

Memory::Memory(Memory&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), id_(o.id_) {}
Memory& Memory::operator=(Memory&& o) noexcept {
  if (this != &o) {
    Memory old(std::move(*this));
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    id_ = o.id_;
  }
  return *this;
}

}  // namespace device
}  // namespace braid
