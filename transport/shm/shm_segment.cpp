#include "transport/shm/shm_segment.hpp"

#include <dirent.h>
#include <pwd.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "braid/types.hpp"
#include "core/process.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

constexpr std::uint64_t kMagic = 0x62726169645f7367ull;  // "braid_sg" read as big-endian text

// Lives at offset 0 of every segment; the rest of the first page is unused.
struct SegmentHeader {
  std::uint64_t magic;
  std::uint64_t bytes;  // usable bytes after the header page
  std::int32_t creator;
  std::int32_t attached;  // accessed through std::atomic_ref
};
static_assert(sizeof(SegmentHeader) <= ShmSegment::kHeaderBytes);

std::string path_of(const std::string& name) { return cat("/dev/shm", name); }

std::string errno_name(int err) {
  switch (err) {
    case ENOSPC: return "ENOSPC";
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case EEXIST: return "EEXIST";
    case ENOMEM: return "ENOMEM";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case EFBIG: return "EFBIG";
    case EINVAL: return "EINVAL";
    case EPERM: return "EPERM";
    default: return cat("errno ", err);
  }
}

[[noreturn]] void fail(std::string_view action, const std::string& name, int err, std::string_view hint = "") {
  throw SystemError(cat("shared memory: cannot ", action, " ", path_of(name), ": ", errno_text(err), " (",
                        errno_name(err), ")", hint.empty() ? "" : "; ", hint));
}

std::string hint_for(int err) {
  if (err == ENOSPC) {
    struct statvfs fs {};
    std::string free_text = ::statvfs("/dev/shm", &fs) == 0
                                ? cat(human_bytes(static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize), " free of ",
                                      human_bytes(static_cast<std::size_t>(fs.f_blocks) * fs.f_frsize))
                                : std::string("its free space is unknown");
    return cat("/dev/shm has ", free_text,
               ": free space there or make it larger (mount -o remount,size=...), or use fewer ranks per host");
  }
  if (err == ENOENT) return "is /dev/shm mounted (a tmpfs)?";
  if (err == EACCES) return "check the permissions of /dev/shm";
  return "";
}

// The inode of this process's PID namespace: part of every name, so that
// remove_orphans() judges only names whose pid means what it thinks (a
// container sharing /dev/shm with another PID namespace has other pids).
std::string unique_name() {
  static std::atomic<std::uint64_t> counter{0};
  std::uint64_t random = 0;
  if (getrandom(&random, sizeof(random), 0) != sizeof(random))
    random = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return ShmSegment::name_for(getpid(), cat(counter.fetch_add(1), "-", to_hex(std::as_bytes(std::span(&random, 1)))));
}

SegmentHeader* header_of(std::byte* base) { return reinterpret_cast<SegmentHeader*>(base); }

std::string user_name(uid_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  std::array<char, 1024> buffer{};
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr)
    return cat("uid ", uid, " (", found->pw_name, ")");
  return cat("uid ", uid);
}

// braid makes every segment 0600 under a name only the job knows (a hash of
// secrets its ranks exchanged through the store), so a file at that name that
// another user owns, with another mode or of another type, was planted:
// refused at once, naming the file and its owner.
[[noreturn]] void refuse_foreign(const std::string& name, const struct stat& st) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  throw ProtocolMismatch(cat("shared memory: ", path_of(name), " is owned by ", user_name(st.st_uid), " with mode ",
                             mode, S_ISREG(st.st_mode) ? "" : " and is not a regular file", ", not by ",
                             user_name(::geteuid()), " (this job's user) with mode 0600 as braid makes its segments: "
                             "refusing it (another user or program made it; remove it, or set BRAID_TRANSPORT=tcp)"));
}

}  // namespace

ShmSegment::ShmSegment(std::string name, std::byte* base, std::size_t size, bool owner)
    : name_(std::move(name)), base_(base), size_(size), owner_(owner), linked_(true) {}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)), base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)),
      owner_(std::exchange(other.owner_, false)), linked_(std::exchange(other.linked_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, false);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() noexcept {
  if (owner_ && linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
  if (base_ != nullptr) ::munmap(base_, kHeaderBytes + size_);
  base_ = nullptr;
}

std::string ShmSegment::pid_namespace() { return braid::pid_namespace(); }

std::string ShmSegment::name_for(int pid, std::string_view label) {
  return cat("/", kNamePrefix, pid, "-", braid::pid_namespace(), "-", label);
}

ShmSegment ShmSegment::create(std::size_t bytes) { return *create_as(unique_name(), bytes, false); }

std::optional<ShmSegment> ShmSegment::try_create(const std::string& name, std::size_t bytes) {
  return create_as(name, bytes, true);
}

std::optional<ShmSegment> ShmSegment::create_as(std::string name, std::size_t bytes, bool may_exist) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    if (err == EEXIST && may_exist) return std::nullopt;
    fail("create", name, err, hint_for(err));
  }
  // Exactly 0600 whatever the umask: the opener refuses any other mode.
  ::fchmod(fd, 0600);
  std::size_t total = kHeaderBytes + bytes;
  // Reserve every page now: on tmpfs a plain ftruncate succeeds even when the
  // space is not there, and the first write to a missing page is a SIGBUS.
  int err = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
  void* base = MAP_FAILED;
  if (err == 0) {
    base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED) err = errno;
  }
  ::close(fd);
  if (err != 0) {
    ::shm_unlink(name.c_str());
    fail(cat("reserve ", human_bytes(total), " for"), name, err, hint_for(err));
  }
  auto* header = header_of(static_cast<std::byte*>(base));
  header->bytes = bytes;
  header->creator = static_cast<std::int32_t>(getpid());
  std::atomic_ref<std::int32_t>(header->attached).store(0, std::memory_order_relaxed);
  // Publish the magic last: a peer that sees it sees the rest.
  std::atomic_ref<std::uint64_t>(header->magic).store(kMagic, std::memory_order_release);
  return ShmSegment(std::move(name), static_cast<std::byte*>(base), bytes, true);
}

ShmSegment ShmSegment::open(const std::string& name) { return *open_as(name, false); }

std::optional<ShmSegment> ShmSegment::try_open(const std::string& name) { return open_as(name, true); }

std::optional<ShmSegment> ShmSegment::open_as(const std::string& name, bool may_be_unready) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT && may_be_unready) return std::nullopt;
    if (err == EACCES || err == ELOOP) {
      // Made by someone else: say whose it is now, instead of waiting for it.
      struct stat st {};
      if (::lstat(path_of(name).c_str(), &st) == 0) refuse_foreign(name, st);
    }
    fail("open", name, err,
         err == ENOENT ? "the creator unlinked it already, exited, or /dev/shm is not mounted" : hint_for(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("stat", name, err);
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 07777) != 0600 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse_foreign(name, st);
  }
  auto total = static_cast<std::size_t>(st.st_size);
  if (total < kHeaderBytes) {
    ::close(fd);
    if (may_be_unready) return std::nullopt;  // its creator has not sized it yet
    throw ProtocolMismatch(cat("shared memory: ", path_of(name), " holds ", total,
                               " bytes, less than a braid segment header: not a braid segment"));
  }
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) fail("map", name, err);
  auto* header = header_of(static_cast<std::byte*>(base));
  std::uint64_t magic = std::atomic_ref<std::uint64_t>(header->magic).load(std::memory_order_acquire);
  if (magic != kMagic || header->bytes != total - kHeaderBytes) {
    ::munmap(base, total);
    if (may_be_unready && magic == 0) return std::nullopt;  // its creator has not published the header yet
    throw ProtocolMismatch(cat("shared memory: ", path_of(name), " is not a braid segment (or not initialised yet)"));
  }
  std::atomic_ref<std::int32_t>(header->attached).fetch_add(1, std::memory_order_acq_rel);
  return ShmSegment(name, static_cast<std::byte*>(base), total - kHeaderBytes, false);
}

void ShmSegment::unlink() {
  if (!linked_) return;
  linked_ = false;
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT) fail("unlink", name_, errno);
}

std::string ShmSegment::keep_name() {
  linked_ = false;
  return name_;
}

int ShmSegment::attached() const {
  return std::atomic_ref<std::int32_t>(header_of(base_)->attached).load(std::memory_order_acquire);
}

bool ShmSegment::wait_attached(int peers, std::chrono::milliseconds timeout) const {
  // Attaching happens once per segment at connection time, so a short sleep
  // between looks costs nothing that matters and needs no futex.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (attached() < peers) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

std::string ShmSegment::path() const { return path_of(name_); }

int ShmSegment::remove_orphans() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  std::string prefix = kNamePrefix;
  std::string ns = braid::pid_namespace();
  while (dirent* entry = ::readdir(dir)) {
    std::string file = entry->d_name;
    if (file.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(file.c_str() + prefix.size(), &end, 10);
    if (end == file.c_str() + prefix.size() || *end != '-' || pid <= 0) continue;
    if (std::string_view(end + 1).substr(0, ns.size() + 1) != ns + "-") continue;  // another PID namespace
    // kill(pid, 0) fails with ESRCH only when no such process exists; EPERM
    // means it exists under another user, so its segment is left alone.
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      if (::shm_unlink(("/" + file).c_str()) == 0) ++removed;
    }
  }
  ::closedir(dir);
  return removed;
}

}  // namespace braid
