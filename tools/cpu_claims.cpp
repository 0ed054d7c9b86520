#include "cpu_claims.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>

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

// Locks bytes [start, start + length) of the file for this open file
// description (length 0: to the end and beyond); false when another
// description holds one of them (another braid-run's claim).
bool try_lock(int fd, off_t start, off_t length) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = start;
  lock.l_len = length;
  return ::fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

// Whether `path` still names the file open at `fd`: the last braid-run to
// let go of another file may have removed it between open and lock.
bool still_named(int fd, const std::string& path) {
  struct stat open_one {}, named {};
  return ::fstat(fd, &open_one) == 0 && ::stat(path.c_str(), &named) == 0 && open_one.st_dev == named.st_dev &&
         open_one.st_ino == named.st_ino;
}

// The tasks the kernel counts runnable right now in a /proc/stat text (its
// procs_running line); nullopt where the text has none.
std::optional<int> runnable_tasks(std::string_view proc_stat) {
  constexpr std::string_view key = "procs_running ";
  for (std::size_t at = 0; at < proc_stat.size();) {
    const std::size_t end = std::min(proc_stat.find('\n', at), proc_stat.size());
    const std::string_view line = proc_stat.substr(at, end - at);
    if (line.starts_with(key)) {
      const std::string_view digits = line.substr(key.size());
      int n = 0;
      const auto [rest, err] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      if (err == std::errc() && rest != digits.data()) return n;
      return std::nullopt;
    }
    at = end + 1;
  }
  return std::nullopt;
}

}  // namespace

CpuClaims::CpuClaims(std::string path, std::span<const int> allowed, int ranks) : path_(std::move(path)) {
  std::vector<int> mine, others;
  // Claims count once they are locked in the file the path names; a file
  // removed meanwhile is opened anew (a few tries; then claims are off).
  for (int attempt = 0; attempt < 8 && !path_.empty(); ++attempt) {
    file_ = open_claims(path_);
    if (!file_) break;
    mine.clear();
    others.clear();
    for (int cpu : allowed) {
      const bool take = static_cast<int>(mine.size()) < ranks && try_lock(file_.get(), cpu, 1);
      (take ? mine : others).push_back(cpu);
    }
    if (still_named(file_.get(), path_)) break;
    file_.reset();
  }
  if (!file_) {  // no claims: every CPU counts as free
    mine.clear();
    others.clear();
    for (int cpu : allowed) (static_cast<int>(mine.size()) < ranks ? mine : others).push_back(cpu);
  }
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

CpuClaims::~CpuClaims() {
  // A lock on the whole file is granted only while no other braid-run holds
  // a byte of it (this one's own claims do not conflict): then nobody needs
  // the file, and one that opened it meanwhile finds it gone (still_named)
  // and makes a new one.
  if (file_ && try_lock(file_.get(), 0, 0)) ::unlink(path_.c_str());
}

bool others_running() {
  int least = -1;
  for (int sample = 0; sample < 5; ++sample) {
    if (sample > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::ifstream in("/proc/stat");
    std::ostringstream text;
    text << in.rdbuf();
    const std::optional<int> n = runnable_tasks(text.str());
    if (!n) return true;
    least = least < 0 ? *n : std::min(least, *n);
  }
  return least > 1;  // the caller is one of them
}

}  // namespace braid
