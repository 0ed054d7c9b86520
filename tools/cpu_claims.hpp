// The CPUs braid-run binds its ranks to, chosen so that two braid-runs on one
// machine do not pile onto the same ones.
//
// Binding rank i to the i-th CPU a braid-run may use is right for one
// braid-run per machine. Two of them on one machine (two jobs; the nodes of a
// job tried out on one machine, or in network namespaces as bench/'s two
// hosts are) bound their ranks from the same first CPU, pairwise on the same
// CPUs while others idled: at 2 nodes of 1 rank on 2 CPUs both ranks shared
// CPU 0, and a 256 KiB all-reduce took 239 us instead of 55.
//
// So each braid-run claims the CPUs it binds to: one byte per CPU of a file
// in /dev/shm, locked with an open-file-description lock (F_OFD_SETLK) that
// the kernel drops when braid-run exits, however it exits, so no claim
// outlives its job. The last braid-run to let go removes the file (one
// killed leaves it, emptied of locks, for the next to remove). A braid-run binds its ranks to the CPUs nobody claimed
// first, in order. When there are too few left, the rest of its ranks share
// the claimed CPUs round robin, starting where the fewest of them land on a
// CPU that holds the other braid-run's rank of the same local position (each
// claimed byte says which): the ranks at the same position of two nodes
// (the pairs a hierarchical all-reduce joins across hosts) then share no CPU
// whichever node claimed first. With 2 nodes of 2 ranks on 2 CPUs, node 1's
// ranks go to CPUs 1 and 0.
//
// Claims are advisory and best effort: where the file cannot be opened or
// locked (no /dev/shm, another user's file without write access), every CPU
// counts as free, which is the binding of one braid-run alone.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/socket.hpp"  // Fd

namespace braid {

class CpuClaims {
 public:
  /// The file the claims are locked in (BRAID_CPU_CLAIMS overrides it, for
  /// tests that must not meet other jobs' claims).
  static std::string default_path();

  /// Claims CPUs of `allowed` (in that order) for `ranks` ranks, in the file
  /// at `path` (none where empty); held until this object is destroyed.
  CpuClaims(std::string path, std::span<const int> allowed, int ranks);
  /// Drops the claims; the last braid-run holding any removes the file.
  ~CpuClaims();
  CpuClaims(const CpuClaims&) = delete;
  CpuClaims& operator=(const CpuClaims&) = delete;

  /// The CPU of each rank position, repeated round robin for more ranks than
  /// entries: first the CPUs this object claimed, then (where those are fewer
  /// than the ranks) the others, rotated as the comment above says.
  const std::vector<int>& order() const { return order_; }

 private:
  std::string path_;
  Fd file_;
  std::vector<int> order_;
};

/// Whether a task other than the caller keeps a CPU of this machine busy:
/// /proc/stat's procs_running, the least of 5 reads 1 ms apart (so that a
/// daemon waking for a moment is not load), less the caller. true where
/// /proc/stat cannot be read. braid-run binds more ranks than CPUs only when
/// this is false (tools/braid_run.cpp says why).
bool others_running();

}  // namespace braid
