// What a process with many communicators costs, counted from /proc: one
// listening TCP socket and at most two braid threads (the service thread and
// the progress thread), however many communicators it has. Each rank makes
// the world plus 15 split children (colors that group the ranks in several
// ways), runs a blocking and an asynchronous all-reduce on every one (so the
// progress thread has run), checks the sums, then counts:
//
//   - the listening TCP sockets this process holds (its fds whose socket
//     inode is in /proc/net/tcp or tcp6 in state LISTEN): 1, also on the rank
//     that hosts the store (it serves the store on its listener's port);
//   - its threads other than the main one (/proc/self/task): at most 2,
//     each named braid-* (printed with their names).
//
//   braid-run -n 4 resources_check
#include <dirent.h>
#include <unistd.h>

#include <braid/braid.hpp>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tally.hpp"

namespace {

// Inodes of the TCP sockets in LISTEN state, from /proc/net/tcp and tcp6.
std::set<std::string> listening_inodes() {
  std::set<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state == "0A") out.insert(inode);  // TCP_LISTEN
    }
  }
  return out;
}

// This process's fds that are sockets in `inodes`.
int own_sockets_among(const std::set<std::string>& inodes) {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* e = ::readdir(dir)) {
    char target[256] = {};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string link(target, static_cast<std::size_t>(n));  // "socket:[12345]"
    if (link.rfind("socket:[", 0) == 0 && inodes.contains(link.substr(8, link.size() - 9))) ++count;
  }
  ::closedir(dir);
  return count;
}

// The names of this process's threads other than the main one.
std::vector<std::string> other_threads() {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return names;
  const std::string main_tid = std::to_string(::getpid());
  while (dirent* e = ::readdir(dir)) {
    const std::string tid = e->d_name;
    if (tid == "." || tid == ".." || tid == main_tid) continue;
    std::ifstream comm("/proc/self/task/" + tid + "/comm");
    std::string name;
    std::getline(comm, name);
    names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

}  // namespace

int main() {
  braid::Comm world = braid::Comm::from_env();
  braid::check::Tally tally{world.rank()};
  const int r = world.rank(), n = world.size();
  std::vector<braid::Comm> comms;
  comms.push_back(std::move(world));
  for (int i = 0; i < 15; ++i) {
    // Halves, thirds, everyone, each rank alone: children of every shape.
    const int color = i % 4 == 0 ? 0 : i % 4 == 1 ? r % 2 : i % 4 == 2 ? r % 3 : r;
    comms.push_back(comms.front().split(color, (i % 2 == 0) ? r : n - r));
  }
  for (std::size_t c = 0; c < comms.size(); ++c) {
    braid::Comm& comm = comms[c];
    int one = 1, sum = 0;
    comm.all_reduce(&one, &sum, 1, braid::DataType::i32, braid::ReduceOp::sum);
    tally.record(sum == comm.size(), "communicator " + std::to_string(c) + ": the blocking sum is " +
                                         std::to_string(sum) + ", not " + std::to_string(comm.size()));
    std::vector<float> v(1 << 14, 1.0f);
    comm.all_reduce_async(v.data(), v.data(), v.size(), braid::DataType::f32, braid::ReduceOp::sum).wait();
    tally.record(v.front() == static_cast<float>(comm.size()) && v.back() == static_cast<float>(comm.size()),
                 "communicator " + std::to_string(c) + ": the asynchronous sum");
  }
  const int listening = own_sockets_among(listening_inodes());
  const std::vector<std::string> threads = other_threads();
  std::string names;
  bool all_braid = true;
  for (const auto& t : threads) {
    names += (names.empty() ? "" : ", ") + t;
    all_braid = all_braid && t.rfind("braid-", 0) == 0;
  }
  std::printf("rank %d of %d: %zu communicators; %d listening TCP socket(s); %zu thread(s) besides main: %s\n", r, n,
              comms.size(), listening, threads.size(), names.c_str());
  tally.record(listening == 1, "listening TCP sockets: " + std::to_string(listening) + ", not 1");
  tally.record(threads.size() <= 2 && all_braid, "threads besides main: " + names + " (at most 2, braid's)");
  comms.front().barrier();
  std::printf("rank %d of %d: %d cases right, %d wrong\n", r, n, tally.cases - tally.failed, tally.failed);
  return tally.failed == 0 ? 0 : 1;
}
