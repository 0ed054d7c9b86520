// One rank of the fault matrix (tests/faults/fault_matrix.py). It joins the
// communicator described by the BRAID_* environment and runs one of a few
// modes; the driver injects the fault from outside (kill, SIGSTOP, a link set
// down, a wrong key, garbage on a port) and judges how each rank ends.
//
//   fault_worker allreduce [--count N] [--seconds S]   all-reduce in a loop until S passes
//                          [--device 1]                 on GPU memory (fault_worker_device, a braid
//                                                      built with CUDA)
//   fault_worker mismatch  [--count N]                 rank 1 broadcasts while the others all-reduce
//   fault_worker join                                  join, one small all-reduce, exit
//   fault_worker garbage   --go-file PATH [--wait S]   join, barrier, print "ready", wait for PATH,
//                                                      then all-to-all and all-reduce (new links), check
//   fault_worker abort     --how pending|thread|idle --victim V [--delay S]
//                                                      join, barrier; the victim aborts 0.3 s later
//                                                      (with an all-to-all pending on links not made
//                                                      yet, from a watchdog thread while its main
//                                                      thread is blocked in one, or idle) and checks
//                                                      that its operation fails Aborted; the others
//                                                      start an all-to-all S s after the barrier
//   fault_worker idle      --go-file PATH             join, barrier, print "ready", wait for PATH,
//                                                      then all-to-all (the driver kills a rank first)
//   fault_worker cycles    [--count N]                N times: join, all-reduce, check, destroy
//
// What the driver reads:
//   stdout  "rank R: running" once the first iteration is done (allreduce),
//           "rank R: ready" (garbage), "rank R: OK ..." on success;
//   stderr  "fault_worker rank R: FAILED <Kind> (<code>) after T s in <phase> (op D s): <message>"
//           for a braid::Error (D: how long the failing operation ran), besides braid's
//           own WARN log lines; the abort victim prints
//           "rank V: aborted in M ms; its operation failed Aborted" on stdout.
//   exit    0 success, 3 a braid::Error, 4 any other exception, 5 a wrong result,
//           2 bad usage or a bounded wait of the worker itself ran out.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.hpp"
#ifdef FAULT_WORKER_DEVICE
#include "core/device.hpp"  // device memory: this build links braid's layers, not libbraid.so
#endif

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitBraidError = 3;
constexpr int kExitOtherError = 4;
constexpr int kExitWrongResult = 5;
constexpr int kExitUsage = 2;

struct Args {
  std::string mode;
  std::size_t count = std::size_t{4} << 20;  // 16 MiB of f32: long enough to be mid-transfer
  double seconds = 30;
  std::string go_file;
  double wait_seconds = 20;
  bool device = false;
  std::string how;
  int victim = -1;
  double delay = 1.0;
};

// When the operation that is running now started (for the FAILED line).
Clock::time_point g_op_start = Clock::now();

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "fault_worker: %s\nusage: fault_worker allreduce|mismatch|join|garbage [--count N] "
                       "[--seconds S] [--go-file PATH] [--wait S]\n", why);
  std::exit(kExitUsage);
}

Args parse(int argc, char** argv) {
  if (argc < 2) usage("no mode");
  Args a;
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--count") a.count = std::strtoull(value, nullptr, 10);
    else if (flag == "--seconds") a.seconds = std::strtod(value, nullptr);
    else if (flag == "--go-file") a.go_file = value;
    else if (flag == "--wait") a.wait_seconds = std::strtod(value, nullptr);
    else if (flag == "--device") a.device = std::atoi(value) != 0;
    else if (flag == "--how") a.how = value;
    else if (flag == "--victim") a.victim = std::atoi(value);
    else if (flag == "--delay") a.delay = std::strtod(value, nullptr);
    else usage(("unknown flag " + flag).c_str());
  }
  return a;
}

const char* kind_of(braid::ErrorCode code) {
  switch (code) {
    case braid::ErrorCode::invalid_argument: return "InvalidArgument";
    case braid::ErrorCode::invalid_usage: return "InvalidUsage";
    case braid::ErrorCode::timeout: return "Timeout";
    case braid::ErrorCode::peer_lost: return "PeerLost";
    case braid::ErrorCode::protocol: return "ProtocolMismatch";
    case braid::ErrorCode::system: return "SystemError";
    case braid::ErrorCode::aborted: return "Aborted";
    case braid::ErrorCode::internal: return "Internal";
    case braid::ErrorCode::unsupported: return "Unsupported";
  }
  return "Unknown";
}

int env_rank() {
  const char* r = std::getenv("BRAID_RANK");
  return r ? std::atoi(r) : -1;
}

void say(int rank, const std::string& line) {
  std::printf("rank %d: %s\n", rank, line.c_str());
  std::fflush(stdout);
}

// Fills every element with rank + 1; the sum over n ranks is n (n + 1) / 2.
bool check_sum(const std::vector<float>& v, int ranks) {
  const float expected = static_cast<float>(ranks * (ranks + 1) / 2);
  for (float x : v)
    if (x != expected) return false;
  return true;
}

int run_allreduce(braid::Comm& comm, const Args& a, std::string& phase) {
  std::vector<float> buffer(a.count);
  const auto end = Clock::now() + std::chrono::duration<double>(a.seconds);
  long iterations = 0;
#ifdef FAULT_WORKER_DEVICE
  const int devices = braid::device::count();
  if (a.device && devices == 0) throw braid::Error(braid::ErrorCode::unsupported, braid::device::status());
  braid::device::Memory on_gpu(a.device ? a.count * sizeof(float) : 0, devices ? comm.rank() % devices : 0);
#else
  if (a.device) usage("--device needs fault_worker_device (a braid built with CUDA)");
#endif
  while (Clock::now() < end) {
    std::fill(buffer.begin(), buffer.end(), static_cast<float>(comm.rank() + 1));
    phase = "all_reduce #" + std::to_string(iterations);
#ifdef FAULT_WORKER_DEVICE
    if (a.device) {
      braid::device::copy(on_gpu.data(), buffer.data(), a.count * sizeof(float));
      comm.all_reduce(on_gpu.data(), on_gpu.data(), a.count, braid::DataType::f32, braid::ReduceOp::sum);
      braid::device::copy(buffer.data(), on_gpu.data(), a.count * sizeof(float));
    } else
#endif
      comm.all_reduce(std::span(buffer), braid::ReduceOp::sum);
    if (!check_sum(buffer, comm.size())) {
      std::fprintf(stderr, "fault_worker rank %d: WRONG RESULT in %s\n", comm.rank(), phase.c_str());
      return kExitWrongResult;
    }
    if (iterations++ == 0) say(comm.rank(), "running");
  }
  say(comm.rank(), "OK " + std::to_string(iterations) + " all-reduces");
  return 0;
}

int run_mismatch(braid::Comm& comm, const Args& a, std::string& phase) {
  std::vector<float> buffer(a.count, static_cast<float>(comm.rank() + 1));
  // One matching collective first, so the links are up and the mismatch is
  // the second operation, not the first.
  phase = "barrier";
  comm.barrier();
  if (comm.rank() == 1) {
    phase = "broadcast (the odd one out)";
    comm.broadcast(std::span(buffer), 0);
  } else {
    phase = "all_reduce";
    comm.all_reduce(std::span(buffer), braid::ReduceOp::sum);
  }
  say(comm.rank(), "OK (a mismatch went unnoticed)");
  return 0;
}

int run_join(braid::Comm& comm, std::string& phase) {
  std::vector<float> buffer(1024, static_cast<float>(comm.rank() + 1));
  phase = "all_reduce";
  comm.all_reduce(std::span(buffer), braid::ReduceOp::sum);
  if (!check_sum(buffer, comm.size())) return kExitWrongResult;
  say(comm.rank(), "OK");
  return 0;
}

// Waits for the driver's go file, bounded by --wait.
bool wait_for_go(int rank, const Args& a) {
  const auto end = Clock::now() + std::chrono::duration<double>(a.wait_seconds);
  while (!std::filesystem::exists(a.go_file)) {
    if (Clock::now() >= end) {
      std::fprintf(stderr, "fault_worker rank %d: no go file %s within %.0f s\n", rank, a.go_file.c_str(),
                   a.wait_seconds);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int run_garbage(braid::Comm& comm, const Args& a, std::string& phase) {
  if (a.go_file.empty()) usage("garbage needs --go-file");
  phase = "barrier";
  comm.barrier();
  say(comm.rank(), "ready");
  phase = "waiting for the go file";
  if (!wait_for_go(comm.rank(), a)) return kExitUsage;
  // The all-to-all talks to every peer, so ranks connect to the ones that
  // are not ring neighbours now, after the garbage reached the listeners.
  const int n = comm.size();
  const std::size_t block = 4096;
  std::vector<std::int32_t> send(block * n), recv(block * n, -1);
  for (int p = 0; p < n; ++p)
    for (std::size_t i = 0; i < block; ++i) send[p * block + i] = comm.rank() * 1000 + p;
  phase = "all_to_all";
  comm.all_to_all(std::span<const std::int32_t>(send), std::span(recv));
  for (int p = 0; p < n; ++p)
    for (std::size_t i = 0; i < block; ++i)
      if (recv[p * block + i] != p * 1000 + comm.rank()) {
        std::fprintf(stderr, "fault_worker rank %d: WRONG RESULT in all_to_all from rank %d\n", comm.rank(), p);
        return kExitWrongResult;
      }
  std::vector<float> buffer(a.count, static_cast<float>(comm.rank() + 1));
  phase = "all_reduce";
  comm.all_reduce(std::span(buffer), braid::ReduceOp::sum);
  if (!check_sum(buffer, n)) {
    std::fprintf(stderr, "fault_worker rank %d: WRONG RESULT in all_reduce\n", comm.rank());
    return kExitWrongResult;
  }
  phase = "barrier";
  comm.barrier();
  say(comm.rank(), "OK all_to_all and all_reduce correct");
  return 0;
}

// One small all-to-all: it needs a link to every peer, so it makes the links
// the ring did not.
void small_all_to_all(braid::Comm& comm, std::string& phase) {
  std::vector<std::int32_t> send(static_cast<std::size_t>(comm.size()) * 16, comm.rank()), recv(send.size());
  phase = "all_to_all";
  g_op_start = Clock::now();
  comm.all_to_all(std::span<const std::int32_t>(send), std::span(recv));
}

int run_abort(braid::Comm& comm, const Args& a, std::string& phase) {
  if (a.victim < 0 || a.victim >= comm.size()) usage("abort needs --victim in [0, size)");
  if (a.how != "pending" && a.how != "thread" && a.how != "idle") usage("abort needs --how pending|thread|idle");
  phase = "barrier";
  comm.barrier();
  say(comm.rank(), "ready");
  const auto after_barrier = Clock::now();
  if (comm.rank() != a.victim) {
    phase = "waiting before the all_to_all";
    std::this_thread::sleep_until(after_barrier + std::chrono::duration<double>(a.delay));
    small_all_to_all(comm, phase);
    say(comm.rank(), "OK (the all_to_all completed although a rank aborted)");
    return kExitWrongResult;
  }
  const int n = comm.size();
  std::vector<std::int32_t> send(static_cast<std::size_t>(n) * 16, comm.rank()), recv(send.size());
  double abort_ms = -1;
  auto abort_later = [&] {
    std::this_thread::sleep_until(after_barrier + std::chrono::milliseconds(300));
    auto t = Clock::now();
    comm.abort();
    abort_ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  std::string outcome = "succeeded";
  try {
    if (a.how == "pending") {
      phase = "all_to_all_async (pending)";
      braid::Work work = comm.all_to_all_async(send.data(), recv.data(), 16, braid::DataType::i32);
      abort_later();
      work.wait();
    } else if (a.how == "thread") {
      phase = "all_to_all (blocked while a watchdog thread aborts)";
      std::thread watchdog(abort_later);
      try {
        comm.all_to_all(std::span<const std::int32_t>(send), std::span(recv));
      } catch (...) {
        watchdog.join();
        throw;
      }
      watchdog.join();
    } else {
      abort_later();
      phase = "all_to_all after abort";
      comm.all_to_all(std::span<const std::int32_t>(send), std::span(recv));
    }
  } catch (const braid::Error& e) {
    outcome = std::string(kind_of(e.code())) + ": " + e.what();
  }
  say(comm.rank(), "aborted in " + std::to_string(abort_ms) + " ms; its operation failed " + outcome);
  return outcome.starts_with("Aborted") ? 0 : kExitWrongResult;
}

int run_idle(braid::Comm& comm, const Args& a, std::string& phase) {
  if (a.go_file.empty()) usage("idle needs --go-file");
  phase = "barrier";
  comm.barrier();
  say(comm.rank(), "ready");
  phase = "waiting for the go file";
  if (!wait_for_go(comm.rank(), a)) return kExitUsage;
  small_all_to_all(comm, phase);
  say(comm.rank(), "OK (the all_to_all completed although a rank was killed)");
  return kExitWrongResult;
}

// Re-creates the communicator at one store address, again and again: a new
// rank must never reach the previous cycle's store and mix with it.
int run_cycles(const Args& a, std::string& phase, int& rank) {
  std::vector<float> buffer(256);
  const auto cycles = static_cast<long>(a.count);
  for (long i = 0; i < cycles; ++i) {
    phase = "cycle " + std::to_string(i) + ": join";
    braid::Comm comm = braid::Comm::from_env();
    rank = comm.rank();
    std::fill(buffer.begin(), buffer.end(), static_cast<float>(comm.rank() + 1));
    phase = "cycle " + std::to_string(i) + ": all_reduce";
    comm.all_reduce(std::span(buffer), braid::ReduceOp::sum);
    if (!check_sum(buffer, comm.size())) {
      std::fprintf(stderr, "fault_worker rank %d: WRONG RESULT in cycle %ld\n", comm.rank(), i);
      return kExitWrongResult;
    }
  }
  say(rank, "OK " + std::to_string(cycles) + " cycles");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const std::string_view modes[] = {"allreduce", "mismatch", "join", "garbage", "abort", "idle", "cycles"};
  if (std::find(std::begin(modes), std::end(modes), a.mode) == std::end(modes)) usage(("unknown mode " + a.mode).c_str());
  const auto start = Clock::now();
  int rank = env_rank();
  std::string phase = "join";
  std::optional<Clock::time_point> failed_at;
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  try {
    if (a.mode == "cycles") return run_cycles(a, phase, rank);
    braid::Comm comm = braid::Comm::from_env();
    rank = comm.rank();
    try {
      if (a.mode == "allreduce") return run_allreduce(comm, a, phase);
      if (a.mode == "mismatch") return run_mismatch(comm, a, phase);
      if (a.mode == "join") return run_join(comm, phase);
      if (a.mode == "abort") return run_abort(comm, a, phase);
      if (a.mode == "idle") return run_idle(comm, a, phase);
      return run_garbage(comm, a, phase);
    } catch (const braid::Error&) {
      failed_at = Clock::now();  // before the communicator's destruction
      throw;
    }
  } catch (const braid::Error& e) {
    double op = std::chrono::duration<double>(failed_at.value_or(Clock::now()) - g_op_start).count();
    std::fprintf(stderr, "fault_worker rank %d: FAILED %s (%s) after %.3f s in %s (op %.3f s): %s\n", rank,
                 kind_of(e.code()), std::string(braid::name_of(e.code())).c_str(), seconds(), phase.c_str(), op,
                 e.what());
    return kExitBraidError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_worker rank %d: FAILED with a non-braid exception after %.3f s in %s: %s\n", rank,
                 seconds(), phase.c_str(), e.what());
    return kExitOtherError;
  }
}
