// Shared allocations: memory a rank's peers on this host read in place.
//
// braid_mem_alloc (braid::mem_alloc) hands out memory backed by a memfd of
// its own, mapped shared. A peer process of the same user opens that memfd
// through /proc/<pid>/fd/<fd> (as it opens the doorbell, shm_context.hpp)
// and maps it too; from then on a message whose source lies in such memory
// needs no copy into the shared ring: its slot says which allocation and
// where (shm_ring.hpp, "Mapped messages"), and the receiver copies or
// reduces straight from the sender's buffer, in one pass, with no system
// call per message. Through the ring every byte is copied twice (into a
// slot, out of it); through cross-memory attach (cma.hpp) once, by the
// kernel, which pins the pages on every call; here once, by plain loads.
//
// This file keeps the process's table of allocations (the sender's side)
// and, per peer process, the mappings of the peer's allocations this
// process made (the receiver's side, PeerMappings).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace braid {

/// Where a range of shared memory is: the allocation's memfd in the owning
/// process, the allocation's unique number there, its size, and the range's
/// offset in it.
struct SharedRange {
  int fd = -1;
  std::uint64_t serial = 0;
  std::uint64_t allocation_bytes = 0;
  std::uint64_t offset = 0;
};

/// Allocates `bytes` (rounded up to whole pages) of zeroed shared memory.
/// Throws InvalidArgument for 0 bytes, SystemError (naming the size and
/// errno) when the kernel refuses the memfd or the mapping.
void* shared_alloc(std::size_t bytes);
/// Frees what shared_alloc returned; nullptr is accepted. Throws
/// InvalidArgument for a pointer that is not the start of a live allocation.
void shared_free(void* pointer);
/// Where [pointer, pointer + bytes) lies, if wholly inside one live
/// allocation of this process. Lock-free while the process has none.
std::optional<SharedRange> shared_find(const void* pointer, std::size_t bytes);
/// The size of the live allocation that starts at `pointer` (0 if none).
std::size_t shared_size(const void* pointer);

/// Registrations (braid_comm_register): `owner` (a communicator) says that
/// [pointer, pointer + bytes), inside one shared allocation, takes part in
/// its operations; until deregistered the allocation cannot be freed
/// (shared_free refuses). Returns the handle. InvalidArgument, beginning
/// with `who`, for a range outside braid's shared memory.
void* shared_register(const void* owner, const void* pointer, std::size_t bytes, const std::string& who);
/// Ends a registration of `owner`; InvalidArgument for a handle that is not one.
void shared_deregister(const void* owner, void* handle, const std::string& who);
/// Ends every registration of `owner` (its communicator is gone); how many.
std::size_t shared_deregister_all(const void* owner);

/// The mappings this process made of one peer process's allocations. A
/// mapping outlives the peer's free (the pages stay until unmapped); each
/// miss drops those whose memfd the peer no longer holds, and at most
/// kMaxMappings stay (the least recently used go first).
class PeerMappings {
 public:
  static constexpr std::size_t kMaxMappings = 64;

  explicit PeerMappings(pid_t pid) : pid_(pid) {}
  ~PeerMappings();
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;

  /// The start of `range`'s allocation in this process, mapped read-only.
  /// Throws PeerLost when the peer exited, SystemError when the memfd
  /// cannot be opened or mapped, ProtocolMismatch when it is smaller than
  /// the range says.
  const std::byte* map(const SharedRange& range);
  /// Mappings held now (tests).
  std::size_t held() const;

 private:
  struct Mapping {
    std::uint64_t serial;
    int fd;
    std::size_t bytes;
    const std::byte* base;
    dev_t device;
    ino_t inode;
    std::uint64_t used;  // the use counter's value at the last use
  };
  void drop_stale();

  pid_t pid_;
  mutable std::mutex mutex_;
  std::vector<Mapping> mappings_;
  std::uint64_t uses_ = 0;
};

}  // namespace braid
