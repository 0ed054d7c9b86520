#include "transport/shm/cma.hpp"

#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// The kernel moves at most this much per call before it may return a short
// count; looping in pieces also bounds the time one call holds the peer's
// mm lock.
constexpr std::size_t kPieceBytes = std::size_t{1} << 30;

std::uint64_t probe_value() {
  static const std::uint64_t value = [] {
    std::uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = 0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(getpid());
    return v | 1;  // never 0, so an unread word cannot match
  }();
  return value;
}

std::uint64_t probe_storage() {
  static std::uint64_t word = 0;
  std::atomic_ref<std::uint64_t>(word).store(probe_value(), std::memory_order_relaxed);
  return reinterpret_cast<std::uint64_t>(&word);
}

uid_t owner_of(pid_t pid) {
  struct stat st {};
  if (::stat(cat("/proc/", pid).c_str(), &st) != 0) return static_cast<uid_t>(-1);
  return st.st_uid;
}

std::string why_refused(pid_t peer, int err) {
  if (err == ESRCH) return cat("process ", peer, " does not exist (exited?)");
  if (err == ENOSYS) return "process_vm_readv is not available in this kernel (or is blocked by seccomp)";
  if (err != EPERM) return cat("process_vm_readv from process ", peer, " failed: ", errno_text(err));
  uid_t theirs = owner_of(peer);
  if (theirs != static_cast<uid_t>(-1) && theirs != ::geteuid())
    return cat("process ", peer, " belongs to uid ", theirs, ", this process runs as uid ", ::geteuid(),
               ": cross-memory attach needs the same user");
  int scope = yama_ptrace_scope();
  if (scope >= 2)
    return cat("kernel.yama.ptrace_scope is ", scope, ", which forbids attaching to process ", peer,
               (scope == 2 ? " without CAP_SYS_PTRACE" : ""));
  if (scope == 1)
    return cat("kernel.yama.ptrace_scope is 1 and process ", peer,
               " did not allow this one (PR_SET_PTRACER); set the sysctl to 0 or let braid call prctl in the peer");
  return cat("the kernel refused to attach to process ", peer,
             " (EPERM: a container or seccomp policy, or a setuid/undumpable peer)");
}

void move(pid_t peer, std::uint64_t remote, std::byte* local, std::size_t bytes, bool write) {
  std::size_t done = 0;
  while (done < bytes) {
    std::size_t piece = std::min(bytes - done, kPieceBytes);
    iovec mine{local + done, piece};
    iovec theirs{reinterpret_cast<void*>(remote + done), piece};
    ssize_t n = write ? ::process_vm_writev(peer, &mine, 1, &theirs, 1, 0)
                      : ::process_vm_readv(peer, &mine, 1, &theirs, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      throw SystemError(cat("cross-memory attach: ", write ? "process_vm_writev to" : "process_vm_readv from",
                            " process ", peer, " at 0x", std::hex, remote + done, std::dec, " (", piece,
                            " bytes) failed: ", errno_text(err), err == EPERM ? "; " + why_refused(peer, err) : ""));
    }
    if (n == 0)
      throw SystemError(cat("cross-memory attach: process ", peer, " at 0x", std::hex, remote + done, std::dec,
                            ": no bytes moved (address not mapped in the peer?)"));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

int yama_ptrace_scope() {
  std::ifstream in("/proc/sys/kernel/yama/ptrace_scope");
  int scope = -1;
  if (!(in >> scope)) return -1;
  return scope;
}

bool allow_cma_from_any_process() {
  if (yama_ptrace_scope() != 1) return true;
  return ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0;
}

CmaProbeWord cma_probe_word() {
  allow_cma_from_any_process();
  return CmaProbeWord{probe_storage(), probe_value()};
}

CmaVerdict cma_probe(pid_t peer, CmaProbeWord word) {
  std::uint64_t seen = 0;
  iovec mine{&seen, sizeof(seen)};
  iovec theirs{reinterpret_cast<void*>(word.address), sizeof(seen)};
  ssize_t n = ::process_vm_readv(peer, &mine, 1, &theirs, 1, 0);
  if (n < 0) return {false, why_refused(peer, errno)};
  if (n != sizeof(seen) || seen != word.value)
    return {false, cat("process ", peer, " does not hold the probe value at 0x", std::hex, word.address,
                       ": it is not the process that published the address (another PID namespace?)")};
  return {true, ""};
}

void cma_read(pid_t peer, std::uint64_t remote, std::span<std::byte> local) {
  move(peer, remote, local.data(), local.size(), false);
}

void cma_write(pid_t peer, std::uint64_t remote, std::span<const std::byte> local) {
  move(peer, remote, const_cast<std::byte*>(local.data()), local.size(), true);
}

}  // namespace braid
