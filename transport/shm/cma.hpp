// Cross-memory attach (CMA): one process copies straight from or into
// another's address space with process_vm_readv/process_vm_writev.
//
// Through a ring every byte is copied twice (sender into the slot, receiver
// out of it); through CMA once, by the kernel, from the sender's buffer into
// the receiver's. That wins for large messages, where the copy is the cost,
// and loses for small ones, where the system call (about 1-2 us plus page
// table walks) and the address exchange (a round trip through the ring) are
// the cost. The caller, not this file, picks the size at which to switch:
// bench/shm_pingpong measures both paths.
//
// The kernel allows it only if the caller may ptrace the target
// (PTRACE_MODE_ATTACH_REALCREDS): same real/effective user, no setuid
// transition, and Yama's /proc/sys/kernel/yama/ptrace_scope (1: only a
// descendant or a process that named us with PR_SET_PTRACER; 2: only with
// CAP_SYS_PTRACE; 3: never) and seccomp/container policies agree. Rather than
// reproduce those rules, cma_probe() tries: it reads a word the peer
// published and compares it with the value the peer said it holds. The
// reason it gives when that fails names the rule most likely at fault, so
// the caller can log it and fall back to the ring.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace braid {

/// Whether this process may copy from/to a peer through CMA, and if not why.
struct CmaVerdict {
  bool allowed = false;
  std::string reason;  // empty when allowed
};

/// A word a process publishes (its address and value) so a peer can probe.
struct CmaProbeWord {
  std::uint64_t address = 0;
  std::uint64_t value = 0;
};

/// This process's probe word: the address of a static word holding a
/// per-process random value. Calls allow_cma_from_any_process() first.
CmaProbeWord cma_probe_word();

/// Under Yama ptrace_scope 1, lets any process of the same user attach to
/// this one (prctl PR_SET_PTRACER_ANY); a no-op elsewhere. Returns false if
/// the prctl failed.
bool allow_cma_from_any_process();

/// Reads the peer's probe word with process_vm_readv. Never throws.
CmaVerdict cma_probe(pid_t peer, CmaProbeWord word);

/// Copies `local.size()` bytes from `remote` in process `peer` into `local`.
/// Throws SystemError naming the pid, the address and the errno (EPERM,
/// ESRCH when the peer is gone, EFAULT for a bad address).
void cma_read(pid_t peer, std::uint64_t remote, std::span<std::byte> local);
/// Copies `local` into `remote` in process `peer`. Errors as cma_read.
void cma_write(pid_t peer, std::uint64_t remote, std::span<const std::byte> local);

/// The value of /proc/sys/kernel/yama/ptrace_scope, or -1 without Yama.
int yama_ptrace_scope();

}  // namespace braid
