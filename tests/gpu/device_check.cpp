// The CUDA side of braid checked against the host: every reduction kernel
// (type x operator, each aliasing of dst) bit for bit against braid::reduce on
// the same inputs, the average kernel against finish_average, copies both
// ways, and pointer classification. Without a GPU (or a braid built without
// CUDA) it says why and exits 77, which meson reports as a skip.
//
//   device_check              run the checks
//   device_check --available  exit 0 when a device is usable, 77 otherwise
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.hpp"
#include "core/reduce.hpp"

namespace {

using namespace braid;

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::printf("FAILED: %s\n", what.c_str());
}

constexpr DataType kTypes[] = {DataType::f16, DataType::bf16, DataType::f32, DataType::f64, DataType::i8,
                               DataType::u8,  DataType::i32,  DataType::u32, DataType::i64, DataType::u64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};

// Values of `type` without NaN (which NaN a sum gives is unspecified), with
// negative and positive zeros, small integers for prod and a spread of
// magnitudes for the floating-point types.
std::vector<std::byte> values(DataType type, std::size_t count, std::mt19937& rng) {
  std::vector<std::byte> out(count * size_of(type));
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  std::uniform_int_distribution<int> small(-100, 100);
  for (std::size_t i = 0; i < count; ++i) {
    std::byte* p = out.data() + i * size_of(type);
    const float f = i % 17 == 0 ? (i % 34 == 0 ? 0.0f : -0.0f) : real(rng) * static_cast<float>(1 << (i % 9));
    switch (type) {
      case DataType::f16: { auto b = f32_to_f16(f); std::memcpy(p, &b, 2); break; }
      case DataType::bf16: { auto b = f32_to_bf16(f); std::memcpy(p, &b, 2); break; }
      case DataType::f32: std::memcpy(p, &f, 4); break;
      case DataType::f64: { double d = static_cast<double>(f) * 1.000001; std::memcpy(p, &d, 8); break; }
      case DataType::i8:
      case DataType::u8: { auto v = static_cast<std::int8_t>(small(rng)); std::memcpy(p, &v, 1); break; }
      case DataType::i32:
      case DataType::u32: { auto v = static_cast<std::int32_t>(small(rng) * 40000); std::memcpy(p, &v, 4); break; }
      case DataType::i64:
      case DataType::u64: { auto v = static_cast<std::int64_t>(small(rng)) << (i % 40); std::memcpy(p, &v, 8); break; }
    }
  }
  return out;
}

std::string where(DataType t, ReduceOp op, std::string_view form) {
  return std::string(name_of(t)) + " " + std::string(name_of(op)) + " (" + std::string(form) + ")";
}

void check_kernels() {
  std::mt19937 rng(7);
  // Not a multiple of the block size, and more elements than one grid pass.
  const std::size_t count = 256 * 4096 + 1234;
  for (DataType t : kTypes) {
    const std::size_t bytes = count * size_of(t);
    const auto a = values(t, count, rng), b = values(t, count, rng);
    device::Memory da(bytes, 0), db(bytes, 0), dd(bytes, 0);
    for (ReduceOp op : kOps) {
      std::vector<std::byte> want(bytes), got(bytes);
      reduce(t, op, want.data(), a.data(), b.data(), count);
      // dst separate, dst == a, dst == b.
      device::copy(da.data(), a.data(), bytes);
      device::copy(db.data(), b.data(), bytes);
      device::reduce(t, op, dd.data(), da.data(), db.data(), count);
      device::copy(got.data(), dd.data(), bytes);
      expect(got == want, where(t, op, "dst apart"));
      device::reduce(t, op, da.data(), da.data(), db.data(), count);
      device::copy(got.data(), da.data(), bytes);
      expect(got == want, where(t, op, "dst == a"));
      device::copy(da.data(), a.data(), bytes);
      device::reduce(t, op, db.data(), da.data(), db.data(), count);
      device::copy(got.data(), db.data(), bytes);
      expect(got == want, where(t, op, "dst == b"));
      // A count of one and of zero.
      device::copy(db.data(), b.data(), bytes);
      device::reduce(t, op, dd.data(), da.data(), db.data(), 1);
      device::copy(got.data(), dd.data(), size_of(t));
      expect(std::memcmp(got.data(), want.data(), size_of(t)) == 0, where(t, op, "one element"));
      device::reduce(t, op, dd.data(), da.data(), db.data(), 0);
    }
    for (int ranks : {1, 3, 7, 200}) {
      std::vector<std::byte> want = a, got(bytes);
      finish_average(t, want.data(), count, ranks);
      device::copy(da.data(), a.data(), bytes);
      device::finish_average(t, da.data(), count, ranks);
      device::copy(got.data(), da.data(), bytes);
      expect(got == want, std::string(name_of(t)) + " average over " + std::to_string(ranks) + " ranks");
    }
    std::printf("%-5s every operator and the average: %s\n", std::string(name_of(t)).c_str(),
                failures ? "FAILED so far" : "bit for bit as the host");
  }
}

void check_memory() {
  device::Memory d(4096, 0), pinned(4096, -1);
  std::vector<std::byte> host(4096);
  expect(device::locate(d.data()).kind == MemKind::cuda, "cudaMalloc memory is cuda");
  expect(device::locate(d.data() + 100).kind == MemKind::cuda, "an interior device pointer is cuda");
  expect(device::locate(pinned.data()).kind == MemKind::host, "pinned memory is host");
  expect(device::locate(host.data()).kind == MemKind::host, "pageable memory is host");
  expect(device::locate(nullptr).kind == MemKind::host, "null is host");
  expect(device::locate(d.data()).device == 0, "locate names device 0");
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::byte>(i * 7);
  device::copy(d.data(), host.data(), host.size());
  device::copy(pinned.data(), d.data(), host.size());
  expect(std::memcmp(pinned.data(), host.data(), host.size()) == 0, "host -> device -> pinned round trip");
  bool refused = false;
  try {
    device::reduce(static_cast<DataType>(42), ReduceOp::sum, d.data(), d.data(), d.data(), 1);
  } catch (const InvalidArgument&) {
    refused = true;
  }
  expect(refused, "an unknown type is refused");
}

}  // namespace

int main(int argc, char** argv) {
  const bool probe_only = argc > 1 && std::string_view(argv[1]) == "--available";
  if (device::count() == 0) {
    std::printf("skipped: %s\n", device::status().c_str());
    return 77;
  }
  if (probe_only) return 0;
  std::printf("%s\n", device::status().c_str());
  check_memory();
  check_kernels();
  std::printf("%s\n", failures ? "FAILED" : "all device checks passed");
  return failures ? 1 : 0;
}
