// Multi-process correctness check, run by the test suite under braid-run with
// 2, 3 and 4 ranks over real TCP sockets:
//
//   braid-run -n 3 collective_check [--large-mib 64] [--only all_reduce|broadcast]
//                                   [--expect-in-describe TEXT]... [--shared-memory]
//
// all_reduce: every type x op at counts 0, 1, odd, not divisible by the rank
// count, and several pipeline slices, in place and out of place; then one
// large buffer (default 64 MiB) of f32 sum, bf16 avg and i64 max.
// broadcast: every type from every root at the same counts, in place and out
// of place; large buffers from the last rank. barrier: a few in a row.
// Every rank checks its own result against independently computed values
// (bench/expected_values.hpp); any wrong element fails the process. --only
// runs one of the two (the tests that force one algorithm with BRAID_ALGO).
// --expect-in-describe fails the run unless Comm::describe() contains TEXT
// (the test on simulated hosts checks that it mixes shm and tcp).
// --shared-memory takes every buffer from braid::mem_alloc (host_bytes.hpp).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/braid.hpp"
#include "expected_values.hpp"
#include "host_bytes.hpp"

namespace {

constexpr braid::DataType kTypes[] = {braid::DataType::f16, braid::DataType::bf16, braid::DataType::f32,
                                      braid::DataType::f64, braid::DataType::i8,   braid::DataType::u8,
                                      braid::DataType::i32, braid::DataType::u32,  braid::DataType::i64,
                                      braid::DataType::u64};
constexpr braid::ReduceOp kOps[] = {braid::ReduceOp::sum, braid::ReduceOp::prod, braid::ReduceOp::min,
                                    braid::ReduceOp::max, braid::ReduceOp::avg};

struct Tally {
  int cases = 0;
  int failed = 0;
  void record(bool ok, const std::string& what, int rank) {
    ++cases;
    if (!ok) {
      ++failed;
      std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what.c_str());
    }
  }
};

std::string describe(const char* op, braid::DataType t, const std::string& detail, std::size_t count, bool in_place) {
  return std::string(op) + "(" + std::string(braid::name_of(t)) + " " + detail + ", count " + std::to_string(count) +
         (in_place ? ", in place)" : ", out of place)");
}

void check_all_reduce(braid::Comm& comm, Tally& tally, braid::DataType type, braid::ReduceOp op, std::size_t count,
                      bool in_place) {
  const std::size_t bytes = count * braid::size_of(type);
  braid::check::HostBytes send(bytes + 1), recv(bytes + 1, std::byte{0xcd});
  braid::check::fill_reduce_input(type, op, comm.rank(), send.data(), count);
  std::byte* out = in_place ? send.data() : recv.data();
  comm.all_reduce(send.data(), out, count, type, op);
  std::size_t wrong = braid::check::count_wrong_reduce(type, op, comm.size(), out, count);
  if (!in_place) {
    // The input must be left as it was.
    std::vector<std::byte> original(bytes + 1);
    braid::check::fill_reduce_input(type, op, comm.rank(), original.data(), count);
    wrong += std::memcmp(original.data(), send.data(), bytes) != 0;
  }
  tally.record(wrong == 0, describe("all_reduce", type, std::string(braid::name_of(op)), count, in_place) + ": " +
                               std::to_string(wrong) + " wrong", comm.rank());
}

void check_broadcast(braid::Comm& comm, Tally& tally, braid::DataType type, int root, std::size_t count, bool in_place) {
  const std::size_t bytes = count * braid::size_of(type);
  braid::check::HostBytes send(bytes + 1, std::byte{0xab}), recv(bytes + 1, std::byte{0xcd});
  if (comm.rank() == root) braid::check::fill_broadcast_input(type, root, send.data(), count);
  std::byte* out = in_place ? send.data() : recv.data();
  comm.broadcast(send.data(), out, count, type, root);
  std::size_t wrong = braid::check::count_wrong_broadcast(type, root, out, count);
  tally.record(wrong == 0, describe("broadcast", type, "root " + std::to_string(root), count, in_place) + ": " +
                               std::to_string(wrong) + " wrong", comm.rank());
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t large_mib = 64;
  std::string only;
  std::vector<std::string> expected_in_describe;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--large-mib") == 0 && i + 1 < argc) large_mib = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (std::strcmp(argv[i], "--shared-memory") == 0) braid::check::g_shared_memory = true;
    else if (std::strcmp(argv[i], "--expect-in-describe") == 0 && i + 1 < argc) expected_in_describe.push_back(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: collective_check [--large-mib N] [--only all_reduce|broadcast] [--expect-in-describe TEXT]...\n");
      return 2;
    }
  }
  if (!only.empty() && only != "all_reduce" && only != "broadcast") {
    std::fprintf(stderr, "collective_check: --only takes all_reduce or broadcast\n");
    return 2;
  }
  const bool all_reduces = only.empty() || only == "all_reduce";
  const bool broadcasts = only.empty() || only == "broadcast";
  try {
    braid::Comm comm = braid::Comm::from_env();
    const int n = comm.size();
    Tally tally;
    // Under BRAID_HOST_ID=sim<rank / 2> (the simulated-hosts test) ranks
    // pair up; otherwise they share one host.
    const char* simulated = std::getenv("BRAID_HOST_ID");
    const bool paired = simulated != nullptr && *simulated != '\0';
    const int want_local_rank = paired ? comm.rank() % 2 : comm.rank();
    const int want_local_size = paired ? std::min(2, n - comm.rank() / 2 * 2) : n;
    tally.record(comm.local_rank() == want_local_rank && comm.local_size() == want_local_size,
                 "local rank " + std::to_string(comm.local_rank()) + " of " + std::to_string(comm.local_size()) +
                     ", expected " + std::to_string(want_local_rank) + " of " + std::to_string(want_local_size),
                 comm.rank());
    const std::string description = comm.describe();
    for (const auto& text : expected_in_describe)
      tally.record(description.find(text) != std::string::npos,
                   "the communicator's description contains '" + text + "': " + description, comm.rank());
    const std::size_t n_sz = static_cast<std::size_t>(n);
    // 0, 1, odd, not divisible by n, and enough elements for several slices.
    const std::vector<std::size_t> counts = {0, 1, 7, n_sz * 13 + 1, 1001, 300007};
    if (all_reduces)
      for (auto type : kTypes)
        for (auto op : kOps)
          for (auto count : counts)
            for (bool in_place : {false, true}) check_all_reduce(comm, tally, type, op, count, in_place);
    if (broadcasts)
      for (auto type : kTypes)
        for (int root = 0; root < n; ++root)
          for (auto count : counts)
            for (bool in_place : {false, true}) check_broadcast(comm, tally, type, root, count, in_place);
    for (int i = 0; i < 5; ++i) {
      comm.barrier();
      tally.record(true, "barrier", comm.rank());
    }
    if (large_mib > 0) {
      const std::size_t large = large_mib << 20;
      if (all_reduces) {
        check_all_reduce(comm, tally, braid::DataType::f32, braid::ReduceOp::sum, large / 4, false);
        check_all_reduce(comm, tally, braid::DataType::bf16, braid::ReduceOp::avg, large / 2, true);
        check_all_reduce(comm, tally, braid::DataType::i64, braid::ReduceOp::max, large / 8 + 3, false);
      }
      if (broadcasts) {
        check_broadcast(comm, tally, braid::DataType::f32, n - 1, large / 4 + 1, false);
        check_broadcast(comm, tally, braid::DataType::i8, 0, large + 5, true);
      }
    }
    std::printf("rank %d of %d: %d cases right, %d wrong\n", comm.rank(), n, tally.cases - tally.failed, tally.failed);
    return tally.failed == 0 ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "collective_check: %s\n", e.what());
    return 1;
  }
}
