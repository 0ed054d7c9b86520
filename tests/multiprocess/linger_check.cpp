// The store's linger ends for a rank that died: rank 0 hosts the store, and
// after an all-reduce rank 1 dies (_exit: no finalize, no "left" key; its
// connections close as the kernel reaps it), rank 2 finalizes a moment
// later and rank 0 leaves right away. The store lingers for ranks 1 and 2;
// it must stop waiting for rank 1 once its connection to the store is gone,
// not at the end of BRAID_LINGER. linger_check.py runs this with a linger far
// longer than the job's time limit and reads rank 0's log for why the store
// stopped lingering.
//
//   braid-run -n 3 linger_check
#include <unistd.h>

#include <braid/braid.hpp>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
  int rank = -1;
  try {
    braid::Comm comm = braid::Comm::from_env();
    rank = comm.rank();
    std::vector<float> v(1024, static_cast<float>(rank + 1));
    comm.all_reduce(v.data(), v.data(), v.size(), braid::DataType::f32, braid::ReduceOp::sum);
    const float expected = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
    if (v.front() != expected || v.back() != expected) {
      std::fprintf(stderr, "rank %d: FAILED all_reduce gave %g, not %g\n", rank, v.back(), expected);
      return 1;
    }
    std::printf("rank %d: all_reduce right\n", rank);
    std::fflush(stdout);
    if (rank == 1) ::_exit(0);  // dies: nothing of braid runs from here
    if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
