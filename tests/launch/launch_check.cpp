// launch_check: one rank of a job started by some launcher (mpirun, torchrun-
// or Slurm-style variables, braid-run across network namespaces). It joins
// with Comm::from_env(), and checks:
//   - describe() names the expected launch source (--expect-source TEXT);
//   - an all-reduce (sum) of 1 Mi floats, every rank's element i holding
//     rank + i, gives size*i + size*(size-1)/2 at each i on every rank;
//   - a split into two colours (rank % 2) all-reduces within each half;
//   - with --port-range LO-HI, every TCP socket this process listens on (the
//     store's on rank 0, each communicator's listener, the split's included)
//     has a port in [LO, HI], read from /proc/net/tcp and tcp6 by the inodes
//     of this process's own descriptors; and there is at least one.
// Prints "launch_check: rank R of N OK" and exits 0, else says what differed
// and exits 1.
#include <braid/braid.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

int failures = 0;

void fail(int rank, const std::string& what) {
  std::fprintf(stderr, "launch_check: rank %d: %s\n", rank, what.c_str());
  ++failures;
}

// The inodes of the sockets this process holds.
std::set<unsigned long> own_socket_inodes() {
  std::set<unsigned long> out;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char target[128];
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(target, "socket:[%lu]", &inode) == 1) out.insert(inode);
  }
  ::closedir(d);
  return out;
}

// Ports of the listening TCP sockets among `inodes`.
std::vector<unsigned> listening_ports(const std::set<unsigned long>& inodes) {
  std::vector<unsigned> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr;
      unsigned long uid = 0, timeout = 0, inode = 0;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.contains(inode)) continue;  // 0A: LISTEN
      ports.push_back(static_cast<unsigned>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

bool sum_ok(braid::Comm& comm, int rank, const char* what) {
  const std::size_t count = 1 << 20;
  const int n = comm.size(), r = comm.rank();
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>(r + static_cast<int>(i % 1000));
  comm.all_reduce(data.data(), data.data(), count, braid::DataType::f32, braid::ReduceOp::sum);
  for (std::size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(n * static_cast<int>(i % 1000) + n * (n - 1) / 2);
    if (data[i] != want) {
      fail(rank, std::string(what) + ": all-reduce element " + std::to_string(i) + " is " + std::to_string(data[i]) +
                     ", expected " + std::to_string(want));
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string expect_source;
  unsigned lo = 0, hi = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--expect-source" && i + 1 < argc) {
      expect_source = argv[++i];
    } else if (a == "--port-range" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%u-%u", &lo, &hi) != 2) return 99;
    } else {
      std::fprintf(stderr, "usage: launch_check [--expect-source TEXT] [--port-range LO-HI]\n");
      return 99;
    }
  }
  try {
    braid::Comm comm = braid::Comm::from_env();
    const int rank = comm.rank();
    const std::string described = comm.describe();
    if (!expect_source.empty() && described.find("identity from " + expect_source) == std::string::npos)
      fail(rank, "describe() does not say 'identity from " + expect_source + "': " + described);
    sum_ok(comm, rank, "world");
    braid::Comm half = comm.split(rank % 2, rank);
    sum_ok(half, rank, "split half");
    if (hi > 0) {
      auto ports = listening_ports(own_socket_inodes());
      if (ports.empty()) fail(rank, "no listening TCP socket found in /proc/net/tcp{,6} for this process");
      for (unsigned p : ports)
        if (p < lo || p > hi)
          fail(rank, "listens on port " + std::to_string(p) + ", outside BRAID_PORT_RANGE " + std::to_string(lo) +
                         "-" + std::to_string(hi));
      std::printf("launch_check: rank %d listens on %zu port(s) in %u-%u\n", rank, ports.size(), lo, hi);
    }
    comm.barrier();
    if (failures == 0) std::printf("launch_check: rank %d of %d OK (%s)\n", rank, comm.size(), described.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launch_check: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
