#include "cpu_claims.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace braid {

std::string CpuClaims::default_path() { return "/dev/shm/braid-cpu-claims"; }

namespace {

// Opens (creating) the claims file so that every user's braid-run can lock
// in it: read-write for all, whatever this process's umask.
Fd open_claims(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666));
  if (!fd) return fd;
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 0777) != 0666)
    ::fchmod(fd.get(), 0666);
  return fd;
}

// Locks byte `cpu` of the file for this open file description; false when
// another description holds it (another braid-run's claim).
bool try_claim(int fd, int cpu) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = cpu;
  lock.l_len = 1;
  return ::fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

}  // namespace

CpuClaims::CpuClaims(std::string path, std::span<const int> allowed, int ranks) {
  std::vector<int> mine, others;
  if (!path.empty()) file_ = open_claims(path);
  for (int cpu : allowed) {
    const bool take = static_cast<int>(mine.size()) < ranks && (!file_ || try_claim(file_.get(), cpu));
    (take ? mine : others).push_back(cpu);
  }
  claimed_ = mine.size();
  // Each claimed byte says which of this braid-run's rank positions binds
  // there (plus 1; 0: not known), for the next braid-run's choice below.
  if (file_)
    for (std::size_t j = 0; j < mine.size(); ++j) {
      const auto mark = static_cast<unsigned char>(j % 255 + 1);
      if (::pwrite(file_.get(), &mark, 1, mine[j]) != 1) break;
    }
  order_ = std::move(mine);
  if (static_cast<int>(order_.size()) >= ranks || others.empty()) return;
  // Too few free CPUs: the remaining ranks share the claimed ones, round
  // robin from the shift that puts the fewest of them on a CPU where the
  // other braid-run has its rank of the same position.
  std::vector<int> position(others.size(), -1);
  for (std::size_t k = 0; k < others.size(); ++k) {
    unsigned char mark = 0;
    if (file_ && ::pread(file_.get(), &mark, 1, others[k]) == 1 && mark > 0) position[k] = mark - 1;
  }
  const std::size_t first = order_.size(), m = others.size();
  std::size_t best_shift = 0, best_clashes = SIZE_MAX;
  for (std::size_t shift = 0; shift < m; ++shift) {
    std::size_t clashes = 0;
    for (std::size_t i = first; i < static_cast<std::size_t>(ranks); ++i)
      clashes += position[(i - first + shift) % m] == static_cast<int>(i) ? 1 : 0;
    if (clashes < best_clashes) best_shift = shift, best_clashes = clashes;
  }
  std::rotate(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(best_shift), others.end());
  order_.insert(order_.end(), others.begin(), others.end());
}

}  // namespace braid
