// The Gloo side of bench/compare: gloo::allreduce or gloo::broadcast over
// Gloo's TCP device on loopback, timed the way braid-perf times braid
// (warm-up, a barrier, back-to-back iterations, each rank's average, the mean
// over ranks), float32 sum, out of place, printing braid-perf's --csv lines.
//
// Started by braid-run, which it uses only as a process launcher: the rank
// and size come from BRAID_RANK and BRAID_WORLD_SIZE, and the ranks meet
// through a gloo::rendezvous::FileStore in a directory that must be new for
// every launch (Gloo's keys are never removed).
//
//   braid-run -n 2 gloo_perf all_reduce|broadcast --store DIR -b 8 -e 64M -f 4 [-n ITERS] [-w WARMUP]
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::size_t parse_size(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  else if (*end == 'M') v *= 1024 * 1024;
  else if (*end == 'G') v *= 1024.0 * 1024 * 1024;
  return static_cast<std::size_t>(v);
}

// braid-perf's auto_iterations() and auto_warmup() (bench/perf_report.cpp).
int auto_iterations(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / std::max<std::size_t>(bytes, 1), 5, 200));
}
int auto_warmup(std::size_t bytes) { return std::clamp(auto_iterations(bytes) / 10, 2, 20); }

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) {
    std::fprintf(stderr, "gloo_perf: %s is not set; start it with braid-run\n", name);
    std::exit(2);
  }
  return std::atoi(v);
}

using Context = std::shared_ptr<gloo::Context>;

void all_reduce(const Context& context, float* send, float* recv, std::size_t count) {
  gloo::AllreduceOptions opts(context);
  opts.setInput(send, count);
  opts.setOutput(recv, count);
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
  gloo::allreduce(opts);
}

void broadcast(const Context& context, float* buffer, std::size_t count) {
  gloo::BroadcastOptions opts(context);
  if (context->rank == 0) opts.setInput(buffer, count);
  opts.setOutput(buffer, count);
  opts.setRoot(0);
  gloo::broadcast(opts);
}

double mean_over_ranks(const Context& context, double value) {
  double sum = 0;
  gloo::AllreduceOptions opts(context);
  opts.setInput(&value, 1);
  opts.setOutput(&sum, 1);
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<double>));
  gloo::allreduce(opts);
  return sum / context->size;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_bytes = 8, max_bytes = 64 << 20, factor = 2;
  int iters = 20, warmup = 5;
  bool bcast = false;
  std::string store_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "all_reduce") bcast = false;
    else if (a == "broadcast") bcast = true;
    else if (a == "-b") min_bytes = parse_size(v), ++i;
    else if (a == "-e") max_bytes = parse_size(v), ++i;
    else if (a == "-f") factor = std::max<std::size_t>(2, parse_size(v)), ++i;
    else if (a == "-n") iters = std::atoi(v), ++i;
    else if (a == "-w") warmup = std::atoi(v), ++i;
    else if (a == "--store") store_dir = v, ++i;
    else {
      std::fprintf(stderr, "gloo_perf: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (store_dir.empty()) {
    std::fprintf(stderr, "gloo_perf: --store DIR is required (a new directory for each launch)\n");
    return 2;
  }
  const int rank = env_int("BRAID_RANK"), n = env_int("BRAID_WORLD_SIZE");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(store_dir);
    gloo::rendezvous::PrefixStore store("gloo_perf", file_store);
    auto rendezvous = std::make_shared<gloo::rendezvous::Context>(rank, n);
    rendezvous->setTimeout(std::chrono::seconds(60));
    rendezvous->connectFullMesh(store, device);
    const Context context = rendezvous;

    const std::size_t max_count = std::max<std::size_t>(1, max_bytes / sizeof(float));
    std::vector<float> send(max_count), recv(max_count);
    if (rank == 0)
      std::printf("collective,algorithm,transport,ranks,hosts,size,count,type,redop,root,in_place,time_us,algbw_gbps,"
                  "busbw_gbps,wrong\n");
    for (std::size_t bytes = min_bytes; bytes <= max_bytes;) {
      const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
      const std::size_t size = count * sizeof(float);
      const int it = iters > 0 ? iters : auto_iterations(size);
      const int wu = iters > 0 ? warmup : auto_warmup(size);
      std::fill_n(send.begin(), count, static_cast<float>(rank + 1));
      auto once = [&] {
        if (bcast) broadcast(context, send.data(), count);
        else all_reduce(context, send.data(), recv.data(), count);
      };
      for (int i = 0; i < wu; ++i) once();
      gloo::BarrierOptions barrier(context);
      gloo::barrier(barrier);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < it; ++i) once();
      const double local_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / it;
      const double time_us = mean_over_ranks(context, local_us);
      // One checked run: all-reduce gives n(n+1)/2, broadcast the root's 1.
      std::fill_n(send.begin(), count, static_cast<float>(rank + 1));
      once();
      const float* result = bcast ? send.data() : recv.data();
      const float expected = bcast ? 1.0f : static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;
      double wrong = static_cast<double>(std::count_if(result, result + count, [&](float x) { return x != expected; }));
      wrong = mean_over_ranks(context, wrong) * n;
      const double algbw = static_cast<double>(size) / (time_us * 1e3);
      const double busbw = bcast ? algbw : algbw * 2.0 * (n - 1) / n;
      if (rank == 0)
        std::printf("%s,gloo,tcp,%d,1,%zu,%zu,f32,%s,%d,false,%.3f,%.6f,%.6f,%.0f\n", bcast ? "broadcast" : "all_reduce", n,
                    size, count, bcast ? "none" : "sum", bcast ? 0 : -1, time_us, algbw, busbw, wrong);
      std::fflush(stdout);
      if (bytes > max_bytes / factor) break;
      bytes = bytes == 0 ? 1 : bytes * factor;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_perf: rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
