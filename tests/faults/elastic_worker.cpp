// One process of an elastic job (tests/faults/elastic_matrix.py): it
// all-reduces in a loop and checks every sum; when an operation fails because
// a rank died, stalled or became unreachable, it goes on with the survivors
// (Comm::shrink_lost); every --grow-every iterations the members admit the
// processes waiting in Comm::join (Comm::grow). Every member of a new
// communicator starts again from the lowest iteration any of them reached, so
// that all run the same iterations to the end.
//
//   elastic_worker [--join] [--iters N] [--count C] [--sleep-ms M] [--grow-every G]
//
// --join: join the running job at BRAID_STORE_ADDR (Comm::join) instead of
// starting with it (Comm::from_env).
//
// What the driver reads (stdout, one line each, flushed):
//   "running rank R size S pid P" the first iteration of a communicator is done
//   "shrunk rank R size S at I"  went on without the lost ranks at iteration I
//   "grown rank R size S at I"   admitted newcomers (or was admitted) at iteration I
//   "late: <message>"            the others went on without this process: it joins again
//   "done rank R size S iters N" every iteration ran, every sum right
// exit 0 done, 3 a braid::Error (stderr: "elastic_worker: FAILED <message>"),
// 5 a wrong sum, 2 bad usage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.hpp"

namespace {

struct Args {
  bool join = false;
  long iters = 300;
  std::size_t count = 4096;
  int sleep_ms = 10;
  long grow_every = 10;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "elastic_worker: %s needs a value\n", flag.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (flag == "--join") a.join = true;
    else if (flag == "--iters") a.iters = std::atol(value());
    else if (flag == "--count") a.count = static_cast<std::size_t>(std::atol(value()));
    else if (flag == "--sleep-ms") a.sleep_ms = std::atoi(value());
    else if (flag == "--grow-every") a.grow_every = std::atol(value());
    else {
      std::fprintf(stderr, "elastic_worker: unknown argument %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return a;
}

std::string store_address() {
  const char* addr = std::getenv("BRAID_STORE_ADDR");
  if (addr == nullptr) {
    std::fprintf(stderr, "elastic_worker: --join needs BRAID_STORE_ADDR\n");
    std::exit(2);
  }
  return addr;
}

// The iteration the survivors go on from: the lowest any of them reached.
long agree_on_iteration(braid::Comm& comm, long mine) {
  comm.all_reduce(std::span<long>(&mine, 1), braid::ReduceOp::min);
  return mine;
}

// The iteration of a new or grown communicator: rank 0's (its first ranks are
// the members, all at one iteration; a process that joined knows none).
long rank0_iteration(braid::Comm& comm, long mine) {
  comm.broadcast(std::span<long>(&mine, 1), 0);
  return mine;
}

// One iteration: element i of rank r is (r + 1) * (i % 13 + 1) + iteration,
// so the sum over S ranks is S(S+1)/2 * (i % 13 + 1) + S * iteration.
bool all_reduce_and_check(braid::Comm& comm, std::vector<double>& data, long iteration) {
  const double r = comm.rank(), s = comm.size();
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = (r + 1) * static_cast<double>(i % 13 + 1) + iteration;
  comm.all_reduce(std::span<double>(data), braid::ReduceOp::sum);
  for (std::size_t i = 0; i < data.size(); ++i) {
    const double want = s * (s + 1) / 2 * static_cast<double>(i % 13 + 1) + s * iteration;
    if (data[i] != want) {
      std::printf("WRONG rank %d size %d iteration %ld element %zu: %g, not %g\n", comm.rank(), comm.size(),
                  iteration, i, data[i], want);
      std::fflush(stdout);
      return false;
    }
  }
  return true;
}

void say(const char* what, const braid::Comm& comm, long iteration) {
  std::printf("%s rank %d size %d at %ld\n", what, comm.rank(), comm.size(), iteration);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  std::vector<double> data(args.count);
  try {
    braid::Comm comm = args.join ? braid::Comm::join(store_address()) : braid::Comm::from_env();
    // A process started again with the same command joins the running job
    // as a newcomer (Comm::from_env in an elastic job), so it too takes
    // rank 0's iteration.
    long iteration = rank0_iteration(comm, 0);
    if (iteration > 0 || args.join) say("grown", comm, iteration);
    bool reported = false;
    while (iteration < args.iters) {
      try {
        if (!all_reduce_and_check(comm, data, iteration)) return 5;
        if (!reported) {
          std::printf("running rank %d size %d pid %d\n", comm.rank(), comm.size(), static_cast<int>(::getpid()));
          std::fflush(stdout);
          reported = true;
        }
        ++iteration;
        if (args.grow_every > 0 && iteration % args.grow_every == 0) {
          if (braid::Comm grown = comm.grow(); grown.valid()) {
            comm = std::move(grown);
            iteration = rank0_iteration(comm, iteration);
            say("grown", comm, iteration);
          }
        }
      } catch (const braid::Error& e) {
        if (e.code() != braid::ErrorCode::peer_lost && e.code() != braid::ErrorCode::timeout &&
            e.code() != braid::ErrorCode::aborted)
          throw;
        std::printf("lost at %ld: %s\n", iteration, e.what());
        std::fflush(stdout);
        try {
          comm = comm.shrink_lost();
        } catch (const braid::PeerLost& late) {
          if (std::strstr(late.what(), "went on without this one") == nullptr) throw;
          std::printf("late: %s\n", late.what());
          std::fflush(stdout);
          comm = braid::Comm::join(store_address());
          iteration = rank0_iteration(comm, 0);
          say("grown", comm, iteration);
          continue;
        }
        iteration = agree_on_iteration(comm, iteration);
        say("shrunk", comm, iteration);
      }
      if (args.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(args.sleep_ms));
    }
    std::printf("done rank %d size %d iters %ld\n", comm.rank(), comm.size(), args.iters);
    std::fflush(stdout);
    comm.finalize();
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "elastic_worker: FAILED %s\n", e.what());
    return 3;
  }
  return 0;
}
