// A rank that is done leaves at once, and its slower peers still finish:
// every rank runs a few collectives of every size (links made at start and
// links made when an operation first needs them), then a last broadcast
// from rank 0, which rank 0 can finish as soon as its data is out. Rank 0
// leaves right after it (std::exit, or returning from main with the
// communicator still in scope: --leave exit|return), while the others come
// to that broadcast late (each sleeps a few milliseconds first), so they
// take their data, and make their links to rank 0, after rank 0's process
// is gone. Every rank checks every result; a peer that fails because rank 0
// left (PeerLost) fails the job.
//
//   braid-run -n 4 early_exit_check [--leave exit|return]
#include <unistd.h>

#include <braid/braid.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tally.hpp"

int main(int argc, char** argv) {
  const bool by_exit = !(argc > 2 && std::strcmp(argv[1], "--leave") == 0 && std::strcmp(argv[2], "return") == 0);
  braid::Comm comm = braid::Comm::from_env();
  braid::check::Tally tally{comm.rank()};
  const int r = comm.rank(), n = comm.size();
  try {
    // Sizes on both sides of every algorithm switch the plan has here.
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 16, std::size_t{1} << 20}) {
      std::vector<float> v(count, static_cast<float>(r + 1));
      comm.all_reduce(v.data(), v.data(), count, braid::DataType::f32, braid::ReduceOp::sum);
      tally.record(v.back() == static_cast<float>(n * (n + 1) / 2), "all_reduce of " + std::to_string(count));
      std::vector<float> parts(count * static_cast<std::size_t>(n));
      comm.all_gather(v.data(), parts.data(), count, braid::DataType::f32);
      tally.record(parts.back() == v.back(), "all_gather of " + std::to_string(count));
    }
    // The others come late to the last broadcast.
    if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5 * r));
    for (std::size_t count : {std::size_t{8}, std::size_t{1} << 18}) {
      std::vector<double> w(count, r == 0 ? 2.5 : 0.0);
      comm.broadcast(w.data(), w.data(), count, braid::DataType::f64, 0);
      tally.record(w.front() == 2.5 && w.back() == 2.5, "broadcast of " + std::to_string(count) + " from rank 0");
    }
  } catch (const braid::Error& e) {
    tally.record(false, std::string("an operation failed: ") + e.what());
  }
  if (r == 0 && tally.failed == 0) {
    // Gone at once: its peers may not have taken a byte of the last broadcast.
    if (by_exit) std::exit(0);
    return 0;
  }
  std::printf("rank %d of %d: %d cases right, %d wrong\n", r, n, tally.cases - tally.failed, tally.failed);
  return tally.failed == 0 ? 0 : 1;
}
