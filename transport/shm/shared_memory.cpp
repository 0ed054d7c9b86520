#include "transport/shm/shared_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <memory>
#include <set>
#include <shared_mutex>
#include <string>

#include "braid/types.hpp"
#include "core/process.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

constexpr std::size_t kPage = 4096;

struct Allocation {
  std::size_t bytes;  // mapped: whole pages
  int fd;
  std::uint64_t serial;
  std::size_t registrations = 0;
};

struct Registration {
  const void* owner;
  std::uintptr_t allocation;  // its start
  std::uint64_t serial;
};

// The process's live allocations by start address. `count` lets shared_find
// skip the lock in a process that has none (the common case: every send of
// more than 64K asks).
struct Table {
  std::shared_mutex mutex;
  std::map<std::uintptr_t, Allocation> by_start;
  std::set<Registration*> registrations;
  std::atomic<std::size_t> count{0};
  std::uint64_t next_serial = 1;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: frees may come from static destructors
  return *t;
}

// The allocation holding [start, start + bytes) wholly, or by_start's end.
// The caller holds the table's mutex.
std::map<std::uintptr_t, Allocation>::iterator holding(Table& t, std::uintptr_t start, std::size_t bytes) {
  auto it = t.by_start.upper_bound(start);
  if (it == t.by_start.begin()) return t.by_start.end();
  --it;
  const std::uintptr_t offset = start - it->first;
  return offset <= it->second.bytes && bytes <= it->second.bytes - offset ? it : t.by_start.end();
}

// Ends `registration` (taken out of t.registrations): its allocation, if
// still the one it registered, may be freed once none is left. The caller
// holds the table's mutex.
void release(Table& t, std::unique_ptr<Registration> registration) {
  auto allocation = t.by_start.find(registration->allocation);
  if (allocation != t.by_start.end() && allocation->second.serial == registration->serial)
    --allocation->second.registrations;
}

}  // namespace

void* shared_alloc(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument("braid_mem_alloc: a size of 0 bytes (ask for at least one)");
  const std::size_t whole = (bytes + kPage - 1) / kPage * kPage;
  if (whole < bytes) throw InvalidArgument(cat("braid_mem_alloc: ", bytes, " bytes is more than any mapping holds"));
  const int fd = ::memfd_create("braid-mem", MFD_CLOEXEC);
  if (fd < 0) throw SystemError(cat("braid_mem_alloc: memfd_create for ", bytes, " bytes: ", errno_text(errno)));
  if (::ftruncate(fd, static_cast<off_t>(whole)) != 0) {
    const int err = errno;
    ::close(fd);
    throw SystemError(cat("braid_mem_alloc: sizing a memfd to ", whole, " bytes: ", errno_text(err)));
  }
  void* p = ::mmap(nullptr, whole, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    throw SystemError(cat("braid_mem_alloc: mapping ", whole, " bytes of shared memory: ", errno_text(err)));
  }
  Table& t = table();
  std::unique_lock lock(t.mutex);
  t.by_start.emplace(reinterpret_cast<std::uintptr_t>(p), Allocation{whole, fd, t.next_serial++});
  t.count.store(t.by_start.size(), std::memory_order_release);
  return p;
}

void shared_free(void* pointer) {
  if (pointer == nullptr) return;
  Table& t = table();
  Allocation a{};
  {
    std::unique_lock lock(t.mutex);
    auto it = t.by_start.find(reinterpret_cast<std::uintptr_t>(pointer));
    if (it == t.by_start.end())
      throw InvalidArgument(cat("braid_mem_free: ", pointer, " is not the start of memory braid_mem_alloc returned "
                                "(or it was freed already)"));
    a = it->second;
    if (a.registrations > 0)
      throw InvalidArgument(cat("braid_mem_free: ", pointer, " is registered with a communicator (", a.registrations,
                                " registration(s)): deregister it first (braid_comm_deregister)"));
    t.by_start.erase(it);
    t.count.store(t.by_start.size(), std::memory_order_release);
  }
  ::munmap(pointer, a.bytes);
  ::close(a.fd);
}

std::optional<SharedRange> shared_find(const void* pointer, std::size_t bytes) {
  Table& t = table();
  if (t.count.load(std::memory_order_acquire) == 0) return std::nullopt;
  const auto start = reinterpret_cast<std::uintptr_t>(pointer);
  std::shared_lock lock(t.mutex);
  auto it = holding(t, start, bytes);
  if (it == t.by_start.end()) return std::nullopt;
  return SharedRange{it->second.fd, it->second.serial, it->second.bytes, start - it->first};
}

std::size_t shared_size(const void* pointer) {
  Table& t = table();
  std::shared_lock lock(t.mutex);
  auto it = t.by_start.find(reinterpret_cast<std::uintptr_t>(pointer));
  return it == t.by_start.end() ? 0 : it->second.bytes;
}

void* shared_register(const void* owner, const void* pointer, std::size_t bytes, const std::string& who) {
  Table& t = table();
  const auto start = reinterpret_cast<std::uintptr_t>(pointer);
  std::unique_lock lock(t.mutex);
  auto it = holding(t, start, bytes);
  if (pointer == nullptr || it == t.by_start.end())
    throw InvalidArgument(cat(who, ": the ", bytes, " bytes at ", pointer, " are not inside memory from "
                              "braid_mem_alloc: only braid's shared allocations are read in place by the ranks of a "
                              "host (allocate the buffer with braid_mem_alloc, braid::mem_alloc or braid.mem_alloc)"));
  auto registration = std::make_unique<Registration>(Registration{owner, it->first, it->second.serial});
  ++it->second.registrations;
  t.registrations.insert(registration.get());
  return registration.release();
}

void shared_deregister(const void* owner, void* handle, const std::string& who) {
  Table& t = table();
  std::unique_lock lock(t.mutex);
  auto it = t.registrations.find(static_cast<Registration*>(handle));
  if (it == t.registrations.end() || (*it)->owner != owner)
    throw InvalidArgument(cat(who, ": ", handle, " is not a registration of this communicator (one that "
                              "braid_comm_register returned to it and that was not deregistered yet)"));
  std::unique_ptr<Registration> registration(*it);
  t.registrations.erase(it);
  release(t, std::move(registration));
}

std::size_t shared_deregister_all(const void* owner) {
  Table& t = table();
  std::unique_lock lock(t.mutex);
  std::size_t n = 0;
  for (auto it = t.registrations.begin(); it != t.registrations.end();) {
    if ((*it)->owner != owner) {
      ++it;
      continue;
    }
    std::unique_ptr<Registration> registration(*it);
    it = t.registrations.erase(it);
    release(t, std::move(registration));
    ++n;
  }
  return n;
}

// ---- a peer's allocations, mapped here ----

PeerMappings::~PeerMappings() {
  for (const Mapping& m : mappings_) ::munmap(const_cast<std::byte*>(m.base), m.bytes);
}

std::size_t PeerMappings::held() const {
  std::lock_guard lock(mutex_);
  return mappings_.size();
}

void PeerMappings::drop_stale() {
  // The peer's fd of each mapping still names the same file, or the peer
  // freed the allocation: then nothing will name it again.
  std::erase_if(mappings_, [&](const Mapping& m) {
    struct stat now{};
    const std::string path = cat("/proc/", pid_, "/fd/", m.fd);
    if (::stat(path.c_str(), &now) == 0 && now.st_dev == m.device && now.st_ino == m.inode) return false;
    ::munmap(const_cast<std::byte*>(m.base), m.bytes);
    return true;
  });
}

const std::byte* PeerMappings::map(const SharedRange& range) {
  std::lock_guard lock(mutex_);
  ++uses_;
  for (Mapping& m : mappings_) {
    if (m.serial == range.serial) {
      m.used = uses_;
      return m.base;
    }
  }
  drop_stale();
  if (mappings_.size() >= kMaxMappings) {
    auto oldest = std::min_element(mappings_.begin(), mappings_.end(),
                                   [](const Mapping& a, const Mapping& b) { return a.used < b.used; });
    ::munmap(const_cast<std::byte*>(oldest->base), oldest->bytes);
    mappings_.erase(oldest);
  }
  // The sender's send waits for this read, so the allocation is live and
  // its fd names it.
  const std::string path = cat("/proc/", pid_, "/fd/", range.fd);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT && process_gone(pid_)) throw PeerLost(cat("shm: pid ", pid_, " exited"));
    throw SystemError(cat("shm: cannot open the shared allocation ", range.serial, " of pid ", pid_, " (", path,
                          "): ", errno_text(err)));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < range.allocation_bytes) {
    ::close(fd);
    throw ProtocolMismatch(cat("shm: the shared allocation ", range.serial, " of pid ", pid_, " (", path,
                               ") holds ", st.st_size, " bytes, not the ", range.allocation_bytes, " its message says"));
  }
  void* p = ::mmap(nullptr, range.allocation_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    throw SystemError(cat("shm: cannot map the shared allocation ", range.serial, " of pid ", pid_, " (",
                          range.allocation_bytes, " bytes): ", errno_text(err)));
  const auto* base = static_cast<const std::byte*>(p);
  mappings_.push_back(Mapping{range.serial, range.fd, range.allocation_bytes, base, st.st_dev, st.st_ino, uses_});
  return base;
}

}  // namespace braid
