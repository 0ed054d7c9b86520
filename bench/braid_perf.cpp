// braid-perf: an nccl-tests style benchmark. Run it under braid-run:
//
//   braid-run -n 4 braid-perf all_reduce -b 8 -e 64M -f 4 --check
//
// For each size it times `iters` back-to-back operations after `warmup`
// untimed ones, takes the slowest rank's average, and prints nccl-tests'
// columns. algbw = size / time. busbw scales algbw by the bytes each rank
// must move for the collective, so it is comparable across rank counts and
// with the link's bandwidth: 2(n-1)/n for all-reduce, 1 for broadcast.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "braid/braid.hpp"
#include "core/settings.hpp"
#include "expected_values.hpp"

namespace {

struct Options {
  std::string collective;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = 64 << 20;
  std::size_t factor = 2;
  braid::DataType type = braid::DataType::f32;
  braid::ReduceOp op = braid::ReduceOp::sum;
  int root = 0;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  bool json = false;
  bool in_place = false;
};

const char* kUsage =
    "usage: braid-perf all_reduce|broadcast [-b MIN] [-e MAX] [-f FACTOR] [-d TYPE] [-o OP]\n"
    "                  [-r ROOT] [-n ITERS] [-w WARMUP] [--inplace] [--check] [--json]\n"
    "  -b, -e   smallest and largest message in bytes (8, 1K, 64M); default 8 .. 64M\n"
    "  -f       multiply the size by FACTOR each row; default 2\n"
    "  -d       f16 bf16 f32 f64 i8 u8 i32 u32 i64 u64; default f32\n"
    "  -o       sum prod min max avg (all_reduce); default sum\n"
    "  -r       root rank (broadcast); default 0\n"
    "  -n, -w   timed and warm-up iterations per size; default 20 and 5\n"
    "  --check  verify every result against an independently computed one (#wrong)\n"
    "  --json   one JSON object per size instead of the table\n"
    "Run under braid-run (braid-run -n 4 braid-perf all_reduce) or with BRAID_RANK,\n"
    "BRAID_WORLD_SIZE and BRAID_STORE_ADDR set.\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "braid-perf: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

int parse_int(const char* text, const char* what) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < 0 || v > 1000000000) usage_error(std::string(what) + " '" + text + "' is not a count");
  return static_cast<int>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) usage_error("missing the collective");
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "-h" || a == "--help") {
        std::fputs(kUsage, stdout);
        std::exit(0);
      } else if (a == "-b") o.min_bytes = braid::parse_bytes(value(), "-b");
      else if (a == "-e") o.max_bytes = braid::parse_bytes(value(), "-e");
      else if (a == "-f") o.factor = static_cast<std::size_t>(parse_int(value(), "-f"));
      else if (a == "-d") o.type = braid::parse_data_type(value());
      else if (a == "-o") o.op = braid::parse_reduce_op(value());
      else if (a == "-r") o.root = parse_int(value(), "-r");
      else if (a == "-n") o.iters = parse_int(value(), "-n");
      else if (a == "-w") o.warmup = parse_int(value(), "-w");
      else if (a == "-c" || a == "--check") o.check = true;
      else if (a == "--json") o.json = true;
      else if (a == "--inplace") o.in_place = true;
      else if (!a.empty() && a[0] != '-' && o.collective.empty()) o.collective = a;
      else usage_error("unknown argument '" + a + "'");
    } catch (const braid::Error& e) {
      usage_error(e.what());
    }
  }
  if (o.collective == "allreduce") o.collective = "all_reduce";
  if (o.collective != "all_reduce" && o.collective != "broadcast")
    usage_error("unknown collective '" + o.collective + "' (all_reduce or broadcast)");
  if (o.factor < 2) usage_error("-f must be at least 2");
  if (o.iters < 1) usage_error("-n must be at least 1");
  if (o.min_bytes > o.max_bytes) usage_error("-b is larger than -e");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    braid::Comm comm = braid::Comm::from_env();
    const int rank = comm.rank(), n = comm.size();
    if (o.root < 0 || o.root >= n) usage_error("-r " + std::to_string(o.root) + " is not a rank of " + std::to_string(n));
    const bool all_reduce = o.collective == "all_reduce";
    const std::size_t element = braid::size_of(o.type);
    const double bus_factor = all_reduce ? 2.0 * (n - 1) / n : 1.0;
    const std::size_t max_count = std::max<std::size_t>(1, o.max_bytes / element);
    std::vector<std::byte> send(max_count * element), recv(max_count * element);

    if (rank == 0 && !o.json) {
      std::printf("# braid-perf %s: %d ranks, %s %s%s, iters %d, warmup %d, %s\n", o.collective.c_str(), n,
                  std::string(braid::name_of(o.type)).c_str(), all_reduce ? std::string(braid::name_of(o.op)).c_str() : "",
                  o.in_place ? ", in place" : ", out of place", o.iters, o.warmup, o.check ? "checked" : "unchecked");
      std::printf("# %s\n#\n", comm.describe().c_str());
      std::printf("# %12s %12s %6s %6s %6s %12s %10s %10s %8s\n", "size(B)", "count", "type", "redop", "root", "time(us)",
                  "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    long long total_wrong = 0;
    for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      const std::size_t count = std::max<std::size_t>(1, bytes / element);
      const std::size_t size = count * element;
      std::byte* out = o.in_place ? send.data() : recv.data();
      auto one = [&] {
        if (all_reduce) comm.all_reduce(send.data(), out, count, o.type, o.op);
        else comm.broadcast(send.data(), out, count, o.type, o.root);
      };
      auto prepare = [&] {
        if (all_reduce) braid::check::fill_reduce_input(o.type, o.op, rank, send.data(), count);
        else if (rank == o.root) braid::check::fill_broadcast_input(o.type, o.root, send.data(), count);
        else std::memset(out, 0xcd, size);
      };
      prepare();
      for (int i = 0; i < o.warmup; ++i) {
        one();
        if (o.in_place) prepare();
      }
      // In place, every iteration reduces the previous result: correct data
      // only matters for the checked run below.
      comm.barrier();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iters; ++i) one();
      double local_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / o.iters;
      double slowest_us = local_us;
      comm.all_reduce(&local_us, &slowest_us, 1, braid::DataType::f64, braid::ReduceOp::max);

      long long wrong = 0;
      if (o.check) {
        prepare();
        one();
        std::size_t local_wrong = all_reduce ? braid::check::count_wrong_reduce(o.type, o.op, n, out, count)
                                             : braid::check::count_wrong_broadcast(o.type, o.root, out, count);
        long long mine = static_cast<long long>(local_wrong);
        comm.all_reduce(&mine, &wrong, 1, braid::DataType::i64, braid::ReduceOp::sum);
      }
      total_wrong += wrong;
      double algbw = static_cast<double>(size) / (slowest_us * 1e3);
      double busbw = algbw * bus_factor;
      if (rank == 0) {
        const std::string type(braid::name_of(o.type));
        const std::string op = all_reduce ? std::string(braid::name_of(o.op)) : "none";
        const int root = all_reduce ? -1 : o.root;
        if (o.json)
          std::printf("{\"collective\":\"%s\",\"ranks\":%d,\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\","
                      "\"root\":%d,\"time_us\":%.3f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,\"wrong\":%s}\n",
                      o.collective.c_str(), n, size, count, type.c_str(), op.c_str(), root, slowest_us, algbw, busbw,
                      o.check ? std::to_string(wrong).c_str() : "null");
        else
          std::printf("  %12zu %12zu %6s %6s %6d %12.2f %10.3f %10.3f %8s\n", size, count, type.c_str(), op.c_str(), root,
                      slowest_us, algbw, busbw, o.check ? std::to_string(wrong).c_str() : "N/A");
        std::fflush(stdout);
      }
      if (bytes > o.max_bytes / o.factor) break;
    }
    if (rank == 0 && !o.json) std::printf("# %s: %lld wrong elements in total\n", o.check ? "checked" : "unchecked", total_wrong);
    return total_wrong == 0 ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-perf: %s\n", e.what());
    return 1;
  }
}
