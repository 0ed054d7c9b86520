// shm_pingpong: the shared-memory building blocks measured between two
// processes on this host.
//
//   shm_pingpong latency    8-byte half round trip: spin-then-futex for a few
//                           spin bounds, and futex-only (spin 0)
//   shm_pingpong bandwidth  one-way bandwidth at 1, 16, 64 MiB: ring (memcpy
//                           both sides), ring + nt_copy, and CMA; and CMA
//                           both ways at once (each side's rate)
//   shm_pingpong slots      ring bandwidth for several slot sizes and counts
//   shm_pingpong copy       memcpy against nt_copy in one process
//   shm_pingpong all        everything (the default)
//
// Each number is the median of --runs repetitions (default 5), measured in
// one launch with the variants interleaved, because timings on this shared
// machine drift through the day.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "transport/shm/cma.hpp"
#include "transport/shm/nt_copy.hpp"
#include "transport/shm/shm_ring.hpp"
#include "transport/shm/shm_segment.hpp"

using namespace braid;
using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::nanoseconds;

namespace {

constexpr auto kPatience = microseconds(20'000'000);
int runs = 5;

// CPU seconds this process has used: with ranks outnumbering cores, the
// wall clock measures the scheduler; bytes / max(CPU seconds of either side)
// estimates what the path moves when each side has a core (spinning counts
// as CPU, so it is a lower bound).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Rate {
  double wall = 0;  // GB/s by the wall clock
  double cpu = 0;   // GB/s by the busier side's CPU time
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double best(const std::vector<double>& v, bool lower_is_better) {
  return lower_is_better ? *std::min_element(v.begin(), v.end()) : *std::max_element(v.begin(), v.end());
}

// Two rings in one segment: 0 parent -> child, 1 child -> parent.
struct Pair {
  RingGeometry geometry;
  std::size_t ring_bytes;
  ShmSegment segment;
  explicit Pair(RingGeometry g) : geometry(g), ring_bytes(ShmRing::bytes_needed(g)) {
    segment = ShmSegment::create(2 * ring_bytes);
    ShmRing::format(region(segment, 0), g);
    ShmRing::format(region(segment, 1), g);
  }
  std::span<std::byte> region(ShmSegment& s, int i) const { return s.bytes().subspan(i * ring_bytes, ring_bytes); }
};

struct Side {
  ShmRingSender out;
  ShmRingReceiver in;
  nanoseconds spin;
  SpinBudget budget;
  bool adaptive = false;
};

void send(Side& side, std::uint64_t id, const std::byte* data, std::size_t bytes) {
  OutgoingMessage m{Tag{id, {}}, ConstMemView{data, bytes}};
  while (!side.out.try_push(m))
    if (!(side.adaptive ? side.out.wait_for_space(side.budget, kPatience) : side.out.wait_for_space(side.spin, kPatience)))
      throw std::runtime_error("send timed out");
}

void receive(Side& side, std::uint64_t id, std::byte* data, std::size_t bytes) {
  IncomingMessage m{Tag{id, {}}, MemView{data, bytes}};
  while (!side.in.try_pop(m))
    if (!(side.adaptive ? side.in.wait_for_data(side.budget, kPatience) : side.in.wait_for_data(side.spin, kPatience)))
      throw std::runtime_error("receive timed out");
}

// Forks; the child opens the segment by name and runs `child(side)`, the
// parent runs `parent(side)`, which returns the measurement.
template <typename Parent, typename Child>
auto with_child(Pair& pair, nanoseconds spin, RingCopy send_copy, RingCopy receive_copy, Parent parent, Child child) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int status = 0;
    try {
      ShmSegment mine = ShmSegment::open(pair.segment.name());
      Side side{ShmRingSender(pair.region(mine, 1), "child out", send_copy),
                ShmRingReceiver(pair.region(mine, 0), "child in", receive_copy), spin, SpinBudget(), spin.count() < 0};
      child(side);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      status = 1;
    }
    _exit(status);
  }
  Side side{ShmRingSender(pair.region(pair.segment, 0), "parent out", send_copy),
            ShmRingReceiver(pair.region(pair.segment, 1), "parent in", receive_copy), spin, SpinBudget(),
            spin.count() < 0};
  auto result = parent(side);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("child failed");
  return result;
}

// Half round trip of an 8-byte message, in microseconds.
double latency(nanoseconds spin, int iterations) {
  Pair pair(RingGeometry{});
  auto rounds = [iterations](Side& side, bool first) {
    std::uint64_t word = 0;
    auto* p = reinterpret_cast<std::byte*>(&word);
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      if (first) send(side, i, p, 8), receive(side, i, p, 8);
      else receive(side, i, p, 8), send(side, i, p, 8);
    }
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iterations / 2;
  };
  return with_child(pair, spin, RingCopy::cached, RingCopy::cached, [&](Side& s) { return rounds(s, true); },
                    [&](Side& s) { rounds(s, false); });
}

// One-way: the parent sends `reps` messages of `bytes`, the child receives
// them into one buffer and answers 8 bytes at the end. GB/s.
Rate ring_bandwidth(RingGeometry g, RingCopy send_copy, RingCopy receive_copy, std::size_t bytes, int reps) {
  Pair pair(g);
  std::vector<std::byte> buffer(bytes, std::byte{1});
  return with_child(pair, nanoseconds(-1), send_copy, receive_copy,
      [&](Side& s) {
        double child_cpu = 0;
        auto* ack = reinterpret_cast<std::byte*>(&child_cpu);
        send(s, 0, buffer.data(), bytes);  // warm-up
        receive(s, 0, ack, 8);
        auto start = Clock::now();
        double cpu = cpu_seconds();
        for (int i = 0; i < reps; ++i) send(s, i + 1, buffer.data(), bytes);
        cpu = cpu_seconds() - cpu;
        receive(s, 1, ack, 8);
        double moved = bytes * double(reps) / 1e9;
        return Rate{moved / std::chrono::duration<double>(Clock::now() - start).count(),
                    moved / std::max(cpu, child_cpu)};
      },
      [&](Side& s) {
        double cpu = 0;
        receive(s, 0, buffer.data(), bytes);
        send(s, 0, reinterpret_cast<std::byte*>(&cpu), 8);
        cpu = cpu_seconds();
        for (int i = 0; i < reps; ++i) receive(s, i + 1, buffer.data(), bytes);
        cpu = cpu_seconds() - cpu;
        send(s, 1, reinterpret_cast<std::byte*>(&cpu), 8);
      });
}

// One-way through CMA: per message the parent sends its buffer's address
// through the ring, the child process_vm_readv's it and acknowledges.
Rate cma_bandwidth(std::size_t bytes, int reps) {
  Pair pair(RingGeometry{});
  std::vector<std::byte> buffer(bytes, std::byte{2});
  return with_child(pair, nanoseconds(-1), RingCopy::cached, RingCopy::cached,
      [&](Side& s) {
        std::uint64_t address = reinterpret_cast<std::uint64_t>(buffer.data());
        double child_cpu = 0;
        auto* a = reinterpret_cast<std::byte*>(&address);
        auto* k = reinterpret_cast<std::byte*>(&child_cpu);
        send(s, 0, a, 8), receive(s, 0, k, 8);  // warm-up
        auto start = Clock::now();
        double cpu = cpu_seconds();
        for (int i = 0; i < reps; ++i) send(s, i + 1, a, 8), receive(s, i + 1, k, 8);
        cpu = cpu_seconds() - cpu;
        double moved = bytes * double(reps) / 1e9;
        return Rate{moved / std::chrono::duration<double>(Clock::now() - start).count(),
                    moved / std::max(cpu, child_cpu)};
      },
      [&](Side& s) {
        pid_t parent = getppid();
        std::uint64_t address = 0;
        double total = 0;
        for (int i = 0; i <= reps; ++i) {
          receive(s, i, reinterpret_cast<std::byte*>(&address), 8);
          double cpu = cpu_seconds();
          cma_read(parent, address, buffer);
          if (i > 0) total += cpu_seconds() - cpu;
          double answer = i == reps ? total : 0;
          send(s, i, reinterpret_cast<std::byte*>(&answer), 8);
        }
      });
}

// Both ways at once through CMA, as the ranks of an all-reduce copy: each
// process reads the other's buffer `reps` times after a common start; the
// rate is one side's bytes over the slower side's time (wall and cpu alike:
// with a core each, neither waits on the other).
Rate cma_duplex_bandwidth(std::size_t bytes, int reps) {
  Pair pair(RingGeometry{});
  std::vector<std::byte> buffer(bytes, std::byte{2}), into(bytes, std::byte{0});
  // Exchanges (pid, address), reads the peer's buffer once (warm-up), meets
  // the peer, then times `reps` reads; returns the seconds they took.
  auto side_run = [&](Side& s, bool parent) {
    std::uint64_t mine[2] = {static_cast<std::uint64_t>(getpid()), reinterpret_cast<std::uint64_t>(buffer.data())};
    std::uint64_t theirs[2] = {};
    auto* m = reinterpret_cast<std::byte*>(mine);
    auto* t = reinterpret_cast<std::byte*>(theirs);
    if (parent) send(s, 0, m, 16), receive(s, 0, t, 16);
    else receive(s, 0, t, 16), send(s, 0, m, 16);
    const auto peer = static_cast<pid_t>(theirs[0]);
    cma_read(peer, theirs[1], into);
    std::uint64_t ready = 0;
    auto* r = reinterpret_cast<std::byte*>(&ready);
    if (parent) send(s, 1, r, 8), receive(s, 1, r, 8);
    else receive(s, 1, r, 8), send(s, 1, r, 8);
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i) cma_read(peer, theirs[1], into);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  return with_child(pair, nanoseconds(-1), RingCopy::cached, RingCopy::cached,
      [&](Side& s) {
        const double mine = side_run(s, true);
        double theirs = 0;
        receive(s, 2, reinterpret_cast<std::byte*>(&theirs), 8);
        send(s, 3, reinterpret_cast<const std::byte*>(&theirs), 8);  // the child may go: this side read its last
        const double gbps = bytes * double(reps) / 1e9 / std::max(mine, theirs);
        return Rate{gbps, gbps};
      },
      [&](Side& s) {
        const double mine = side_run(s, false);
        send(s, 2, reinterpret_cast<const std::byte*>(&mine), 8);
        double done = 0;
        receive(s, 3, reinterpret_cast<std::byte*>(&done), 8);  // the parent's reads of this buffer are over
      });
}

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }
int reps_for(std::size_t bytes) { return bytes >= (64u << 20) ? 6 : bytes >= (16u << 20) ? 20 : 200; }

void run_latency() {
  std::printf("# 8-byte half round trip (us), median of %d launches of 5000 round trips\n", runs);
  std::printf("%-22s %10s %10s\n", "wait", "median", "best");
  // -1: SpinBudget (20 us while spinning pays, else 0.5 us and a probe)
  std::vector<long> spins_ns = {0, 1000, 5000, 20000, 100000, -1};
  std::vector<std::vector<double>> results(spins_ns.size());
  for (int r = 0; r < runs; ++r)
    for (std::size_t i = 0; i < spins_ns.size(); ++i) results[i].push_back(latency(nanoseconds(spins_ns[i]), 5000));
  for (std::size_t i = 0; i < spins_ns.size(); ++i) {
    std::string name = spins_ns[i] == 0  ? "futex only"
                       : spins_ns[i] < 0 ? "adaptive spin + futex"
                                         : "spin " + std::to_string(spins_ns[i] / 1000) + " us + futex";
    std::printf("%-22s %10.2f %10.2f\n", name.c_str(), median(results[i]), best(results[i], true));
  }
}

void print_rates(const char* what, const std::vector<std::vector<Rate>>& rates, std::size_t bytes) {
  std::printf("%-8s %-5s", mib(bytes).c_str(), what);
  for (const auto& column : rates) {
    std::vector<double> v;
    for (const Rate& r : column) v.push_back(what[0] == 'w' ? r.wall : r.cpu);
    std::printf(" %9.2f", median(v));
  }
  std::printf("\n");
}

void run_bandwidth() {
  std::printf("# one-way bandwidth (GB/s), median of %d, 8 x 256 KiB slots; wall: by the clock, cpu: bytes over\n"
              "# the busier side's CPU seconds (what the path does when each side has a core)\n", runs);
  // ring: memcpy on both sides; nt-recv: the consumer streams into the
  // destination; nt-both: both sides stream; by_size: what the ring does by
  // default (streams when the message is at least kNtCopyMinBytes).
  // duplex: CMA both ways at once (each side's rate), the traffic of a
  // 2-rank all-reduce.
  std::printf("%-14s %9s %9s %9s %9s %9s %9s\n", "size", "ring", "nt-recv", "nt-both", "by_size", "cma", "duplex");
  using C = RingCopy;
  for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{64} << 20}) {
    std::vector<std::vector<Rate>> rates(6);
    int reps = reps_for(bytes);
    for (int r = 0; r < runs; ++r) {
      rates[0].push_back(ring_bandwidth(RingGeometry{}, C::cached, C::cached, bytes, reps));
      rates[1].push_back(ring_bandwidth(RingGeometry{}, C::cached, C::streaming, bytes, reps));
      rates[2].push_back(ring_bandwidth(RingGeometry{}, C::streaming, C::streaming, bytes, reps));
      rates[3].push_back(ring_bandwidth(RingGeometry{}, C::by_size, C::by_size, bytes, reps));
      rates[4].push_back(cma_bandwidth(bytes, reps));
      rates[5].push_back(cma_duplex_bandwidth(bytes, reps));
    }
    print_rates("wall", rates, bytes);
    print_rates("cpu", rates, bytes);
  }
}

void run_slots() {
  std::printf("# ring bandwidth (GB/s, wall/cpu as in bandwidth) by geometry, median of %d, memcpy into\n"
              "# the slot, copy_large out of it\n", runs);
  std::vector<RingGeometry> shapes = {{8, 64 << 10}, {16, 64 << 10}, {4, 256 << 10}, {8, 256 << 10},
                                      {16, 256 << 10}, {8, 1 << 20}, {16, 1 << 20}};
  std::printf("%-16s %11s %11s %11s\n", "slots", "1 MiB", "16 MiB", "64 MiB");
  for (auto g : shapes) {
    std::printf("%2u x %5zu KiB   ", g.slot_count, g.slot_bytes >> 10);
    for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{64} << 20}) {
      std::vector<double> wall, cpu;
      for (int r = 0; r < runs; ++r) {
        Rate rate = ring_bandwidth(g, RingCopy::cached, RingCopy::by_size, bytes, reps_for(bytes));
        wall.push_back(rate.wall), cpu.push_back(rate.cpu);
      }
      std::printf(" %5.2f/%5.2f", median(wall), median(cpu));
    }
    std::printf("\n");
  }
}

void run_copy() {
  std::printf("# one-process copy (GB/s), median of %d: memcpy against nt_copy (%s)\n", runs,
              std::string(nt_copy_kernel()).c_str());
  std::printf("%-10s %10s %10s\n", "size", "memcpy", "nt_copy");
  for (std::size_t bytes : {std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{4} << 20,
                            std::size_t{8} << 20, std::size_t{16} << 20, std::size_t{64} << 20}) {
    std::vector<std::byte> src(bytes, std::byte{3}), dst(bytes, std::byte{4});
    int reps = static_cast<int>(std::max<std::size_t>(4, (std::size_t{2} << 30) / bytes / 4));
    auto time = [&](auto copy) {
      auto start = Clock::now();
      for (int i = 0; i < reps; ++i) copy(dst.data(), src.data(), bytes);
      return bytes * double(reps) / std::chrono::duration<double>(Clock::now() - start).count() / 1e9;
    };
    std::vector<double> plain, nt;
    for (int r = 0; r < runs; ++r) {
      plain.push_back(time([](void* d, const void* s, std::size_t n) { std::memcpy(d, s, n); }));
      nt.push_back(time([](void* d, const void* s, std::size_t n) { nt_copy(d, s, n); }));
    }
    std::string name = bytes < (1u << 20) ? std::to_string(bytes >> 10) + " KiB" : mib(bytes);
    std::printf("%-10s %10.2f %10.2f\n", name.c_str(), median(plain), median(nt));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "all";
  for (int i = 2; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
  try {
    if (what == "copy" || what == "all") run_copy();
    if (what == "latency" || what == "all") run_latency();
    if (what == "bandwidth" || what == "all") run_bandwidth();
    if (what == "slots" || what == "all") run_slots();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shm_pingpong: %s\n", e.what());
    return 1;
  }
  return 0;
}
