// One task of a TensorFlow-style cluster: started by tf_config_launch.py with
// its own TF_CONFIG and no BRAID_RANK, it joins through Comm::from_env and
// checks that braid gave it the rank and size that TensorFlow's task order
// implies (computed by the launcher, not by braid's parser), then
// all-reduces and splits a pair off with rank 0.
//
//   TF_CONFIG=... tf_config_check EXPECTED_RANK EXPECTED_SIZE
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "braid/braid.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tf_config_check EXPECTED_RANK EXPECTED_SIZE (with TF_CONFIG set)\n");
    return 2;
  }
  const int want_rank = std::atoi(argv[1]), want_size = std::atoi(argv[2]);
  int failed = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++failed;
      std::fprintf(stderr, "task of rank %d: FAILED %s\n", want_rank, what.c_str());
    }
  };
  try {
    auto cluster = braid::ClusterSpec::from_env();
    check(cluster.has_value(), "TF_CONFIG is set");
    braid::Comm comm = braid::Comm::from_env();
    check(comm.rank() == want_rank && comm.size() == want_size,
          "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) + ", expected " +
              std::to_string(want_rank) + " of " + std::to_string(want_size));
    if (cluster) check(cluster->rank() == comm.rank(), "ClusterSpec::rank() is the communicator's rank");

    const int n = comm.size();
    std::vector<std::int64_t> v(10007);
    std::iota(v.begin(), v.end(), comm.rank());
    comm.all_reduce(std::span(v), braid::ReduceOp::sum);
    bool right = true;
    for (std::size_t i = 0; i < v.size(); ++i)
      right &= v[i] == static_cast<std::int64_t>(n) * static_cast<std::int64_t>(i) + n * (n - 1) / 2;
    check(right, "all_reduce sum");

    // The last task and rank 0 split off a pair; the rest pass kNoColor.
    const bool member = comm.rank() == 0 || comm.rank() == n - 1;
    braid::Comm pair = comm.split(member ? 0 : braid::Comm::kNoColor, comm.rank());
    check(pair.valid() == member, "split: only the pair's members get a communicator");
    if (member && pair.valid() && n > 1) {
      std::int32_t mine = comm.rank(), theirs = -1;
      braid::Work sent = pair.send_async(&mine, 1, braid::DataType::i32, 1 - pair.rank());
      pair.recv(&theirs, 1, braid::DataType::i32, 1 - pair.rank());
      sent.wait();
      check(theirs == (comm.rank() == 0 ? n - 1 : 0), "send/recv on the pair");
    }
    comm.barrier();
    std::printf("task rank %d of %d: %s\n", comm.rank(), n, failed == 0 ? "ok" : "FAILED");
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "tf_config_check (expected rank %d): %s\n", want_rank, e.what());
    return 1;
  }
  return failed == 0 ? 0 : 1;
}
