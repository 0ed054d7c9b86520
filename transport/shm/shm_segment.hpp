// ShmSegment: one POSIX shared-memory mapping, owned RAII-style.
//
// The creator picks a name that cannot collide
// ("/braid-<pid>-<pid namespace inode>-<n>-<random>"),
// opens it with O_CREAT|O_EXCL|O_NOFOLLOW and mode exactly 0600, sizes it
// and maps it; a peer on the same host opens the same name and maps it too,
// after checking with fstat that the file is a regular file of its own user
// with mode 0600. Anything else (a file another local user planted at the
// name) is refused at once with an error naming the file and its owner,
// never waited for. The first page of every segment is a
// small header (magic, size, creator pid, a count of processes that mapped
// it); the caller's bytes start on the next page, so they are page-aligned
// for non-temporal copies and never share a cache line with the header.
//
// Why unlink early: a name in /dev/shm outlives every process that mapped it,
// so a rank killed with SIGKILL would leave its rings behind in a tmpfs that
// is RAM. The creator therefore removes the name as soon as every expected
// peer has attached (wait_attached + unlink); from then on the memory lives
// exactly as long as the last mapping, and a crash leaves nothing. For the
// short window between create and unlink, the creator's pid is part of the
// name and remove_orphans() deletes names whose creator is gone.
//
// Why fallocate: tmpfs accepts ftruncate to any size and only fails when a
// page is first touched, with SIGBUS. create() reserves the pages up front
// with posix_fallocate, so a full /dev/shm is a SystemError naming the path
// and ENOSPC at creation, never a crash later. A missing /dev/shm is
// reported the same way (ENOENT). Nothing falls back silently.
//
// Why MAP_POPULATE: both sides map every page at create and open. Without
// it each process took a page fault the first time it touched each ring
// slot's payload page, in the first operations that used them: the first
// size past the ring's inline bytes (128 B on 2 ranks for direct and
// recursive doubling, 256 B for ring and tree, whose halves are inline up
// to 128 B) measured 4.6-5 us instead of 1.0-1.3 us in braid-perf rows of
// 10 iterations (bench/auto_vs_forced.py's "direct dip at 128 B": it moved
// to 256 B when the sweep started there). A ring pair is 4 MiB, mapped once
// per communicator.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace braid {

class ShmSegment {
 public:
  /// Prefix of every segment name braid creates (as the file /dev/shm/braid-*).
  static constexpr const char* kNamePrefix = "braid-";
  /// The header page in front of the caller's bytes.
  static constexpr std::size_t kHeaderBytes = 4096;

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  /// Unmaps; a creator that has not unlinked yet unlinks first.
  ~ShmSegment();

  /// Creates a new segment with `bytes` usable bytes (zero-filled) and maps
  /// it. Throws SystemError naming /dev/shm/<name> and the errno (ENOSPC when
  /// /dev/shm is full, ENOENT when it is missing, ...).
  static ShmSegment create(std::size_t bytes);
  /// The same under `name`, which a peer can derive (name_for): nullopt if
  /// that name exists already (the peer created it first).
  static std::optional<ShmSegment> try_create(const std::string& name, std::size_t bytes);
  /// "/braid-<pid>-<pid namespace>-<label>": the name create(bytes, label)
  /// gives in process `pid` of this PID namespace.
  static std::string name_for(int pid, std::string_view label);
  /// This process's PID namespace (the inode of /proc/self/ns/pid), as in names.
  static std::string pid_namespace();
  /// Maps the segment another process created and counts this process as
  /// attached. Throws SystemError (name, errno) if it cannot be opened, or
  /// ProtocolMismatch if it is not a braid segment.
  static ShmSegment open(const std::string& name);
  /// The same, but nullopt while the segment is not there or not ready yet
  /// (its creator has not sized it or published its header): for a peer that
  /// polls for a segment being created now.
  static std::optional<ShmSegment> try_open(const std::string& name);

  /// Removes the name from /dev/shm (mappings stay valid). Idempotent; an
  /// already-missing name is not an error.
  void unlink();
  /// This side created the segment: true until unlink() or keep_name().
  bool owns_name() const { return owner_ && linked_; }
  /// Gives up removing the name at release (someone else will, or
  /// ShmContext::leave_name's holder); returns it.
  std::string keep_name();
  /// Waits (polling, bounded) until `peers` other processes have attached;
  /// false on timeout. The creator calls this, then unlink().
  bool wait_attached(int peers, std::chrono::milliseconds timeout) const;
  /// Processes that attached through open() so far.
  int attached() const;

  /// "/braid-123-4026531836-0-9f3c...": what a peer passes to open().
  const std::string& name() const { return name_; }
  /// "/dev/shm/braid-123-4026531836-0-9f3c...": for messages.
  std::string path() const;
  std::span<std::byte> bytes() const { return {base_ + kHeaderBytes, size_}; }
  std::byte* data() const { return base_ + kHeaderBytes; }
  std::size_t size() const { return size_; }
  bool valid() const { return base_ != nullptr; }
  bool linked() const { return linked_; }

  /// Deletes /dev/shm/braid-<pid>-<ns>-* of this PID namespace whose
  /// creating process no longer exists (left by a creator killed before it
  /// could unlink). Returns how many.
  static int remove_orphans();

 private:
  ShmSegment(std::string name, std::byte* base, std::size_t size, bool owner);
  static std::optional<ShmSegment> create_as(std::string name, std::size_t bytes, bool may_exist);
  static std::optional<ShmSegment> open_as(const std::string& name, bool may_be_unready);
  void release() noexcept;

  std::string name_;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;  // usable bytes, after the header page
  bool owner_ = false;    // created it, so unlinks it if nobody did
  bool linked_ = false;   // the name still exists as far as we know
};

}  // namespace braid
