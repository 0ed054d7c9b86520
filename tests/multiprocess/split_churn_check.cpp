// Communicators made and closed at once, over and over: split children that
// are destroyed without a single operation (a rank may close its child while
// a slower peer is still connecting to it), alternating with children that
// all-reduce once, then one all-reduce on the parent. With --broadcast, each
// round's child of every rank broadcasts from a root that moves round by
// round and destroys its child the moment its broadcast returns (its data
// may not have left for the others yet; they come a little late). Every rank
// must get through every round well within BRAID_TIMEOUT (a peer left
// waiting for a shared-memory segment the creator already removed used to
// time out), and nothing of this job may be left in /dev/shm.
//
//   braid-run -n 4 split_churn_check [ROUNDS] [--broadcast]
#include <dirent.h>
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
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 30;
  const bool broadcast = argc > 2 && std::strcmp(argv[2], "--broadcast") == 0;
  braid::Comm comm = braid::Comm::from_env();
  braid::check::Tally tally{comm.rank()};
  for (int i = 0; i < rounds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (broadcast) {
      const int root = i % comm.size();
      try {
        braid::Comm child = comm.split(0, comm.rank());
        if (comm.rank() != root) std::this_thread::sleep_for(std::chrono::microseconds(100 * (i % 4)));
        std::vector<std::int64_t> data(i % 2 == 0 ? 4 : 40000, comm.rank() == root ? i : -1);
        child.broadcast(data.data(), data.data(), data.size(), braid::DataType::i64, root);
        tally.record(data.front() == i && data.back() == i, "round " + std::to_string(i) + ": the broadcast from rank " +
                                                                std::to_string(root) + " carried " +
                                                                std::to_string(data.back()));
      } catch (const braid::Error& e) {
        tally.record(false, "round " + std::to_string(i) + ": " + e.what());
        break;
      }
      continue;
    }
    try {
      braid::Comm child = comm.split(i % 3 == 2 ? comm.rank() % 2 : 0, comm.size() - comm.rank());
      if (i % 2 == 1) {
        int one = 1, sum = 0;
        child.all_reduce(&one, &sum, 1, braid::DataType::i32, braid::ReduceOp::sum);
        tally.record(sum == child.size(), "round " + std::to_string(i) + ": the child's sum is " + std::to_string(sum) +
                                              ", not " + std::to_string(child.size()));
      }
    } catch (const braid::Error& e) {
      tally.record(false, "round " + std::to_string(i) + ": " + e.what());
      break;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s > 5) std::fprintf(stderr, "rank %d: round %d took %.1f s\n", comm.rank(), i, s);
  }
  int one = 1, sum = 0;
  comm.all_reduce(&one, &sum, 1, braid::DataType::i32, braid::ReduceOp::sum);
  tally.record(sum == comm.size(), "the parent's all-reduce after the rounds");
  comm.barrier();  // every child of every rank is gone
  // This rank's pid starts the names of the pair segments it created.
  const std::string mine = "braid-" + std::to_string(::getpid()) + "-";
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      tally.record(name.rfind(mine, 0) != 0, "/dev/shm/" + name + " is left");
    }
    ::closedir(dir);
  }
  std::printf("rank %d of %d: %d cases right, %d wrong\n", comm.rank(), comm.size(), tally.cases - tally.failed,
              tally.failed);
  return tally.failed == 0 ? 0 : 1;
}
