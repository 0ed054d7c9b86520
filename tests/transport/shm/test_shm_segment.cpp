// ShmSegment between two processes: open by name, unlink once attached, clear
// errors for a missing name and a full /dev/shm, and nothing of braid's left
// in /dev/shm after a kill -9.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "braid/types.hpp"
#include "core/text.hpp"
#include "tests/transport/shm/child_process.hpp"
#include "transport/shm/shm_segment.hpp"

using namespace braid;
using braid::test::ChildProcess;
using braid::test::child_require;

namespace {

std::vector<std::string> shm_names_of(pid_t pid) {
  std::vector<std::string> found;
  std::string prefix = cat("braid-", pid, "-");
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
    ::closedir(dir);
  }
  return found;
}

bool exists_in_dev_shm(const ShmSegment& s) { return ::access(s.path().c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("a segment opened by name in another process shares memory; unlink keeps the mappings", "[shm]") {
  ShmSegment segment = ShmSegment::create(1 << 20);
  REQUIRE(segment.name().rfind("/braid-", 0) == 0);
  REQUIRE(segment.size() == (1u << 20));
  REQUIRE(exists_in_dev_shm(segment));
  std::memset(segment.data(), 0x5a, 4096);
  std::string name = segment.name();

  ChildProcess child([&] {
    ShmSegment mine = ShmSegment::open(name);
    child_require(mine.size() == (1u << 20), "size");
    child_require(mine.data()[4095] == std::byte{0x5a}, "creator's bytes visible");
    // Wait until the creator unlinked, then answer through the mapping.
    auto* flag = reinterpret_cast<volatile int*>(mine.data() + 8192);
    for (int i = 0; i < 20000 && *flag == 0; ++i) ::usleep(100);
    child_require(*flag == 1, "creator's flag");
    mine.data()[(1 << 20) - 1] = std::byte{0x77};
    *reinterpret_cast<volatile int*>(mine.data() + 8192) = 2;
    return 0;
  });

  REQUIRE(segment.wait_attached(1, std::chrono::seconds(10)));
  segment.unlink();
  REQUIRE_FALSE(exists_in_dev_shm(segment));
  *reinterpret_cast<volatile int*>(segment.data() + 8192) = 1;
  REQUIRE(child.join() == 0);
  CHECK(*reinterpret_cast<volatile int*>(segment.data() + 8192) == 2);
  CHECK(segment.data()[(1 << 20) - 1] == std::byte{0x77});
  segment.unlink();  // idempotent
}

TEST_CASE("opening a missing segment names the path and ENOENT", "[shm]") {
  try {
    ShmSegment::open("/braid-0-0-doesnotexist");
    FAIL("open succeeded");
  } catch (const SystemError& e) {
    std::string what = e.what();
    CHECK(what.find("/dev/shm/braid-0-0-doesnotexist") != std::string::npos);
    CHECK(what.find("ENOENT") != std::string::npos);
  }
}

TEST_CASE("a segment larger than /dev/shm fails at creation with ENOSPC and leaves no file", "[shm]") {
  // 64 TiB exceeds any tmpfs here; fallocate refuses instead of a later SIGBUS.
  auto before = shm_names_of(::getpid());
  try {
    ShmSegment::create(std::size_t{64} << 40);
    FAIL("create succeeded");
  } catch (const SystemError& e) {
    std::string what = e.what();
    INFO(what);
    CHECK(what.find("/dev/shm/braid-") != std::string::npos);
    CHECK((what.find("ENOSPC") != std::string::npos || what.find("EFBIG") != std::string::npos));
  }
  CHECK(shm_names_of(::getpid()) == before);
}

TEST_CASE("a non-braid file in /dev/shm is refused", "[shm]") {
  std::string name = cat("/braid-", ::getpid(), "-x-foreign");
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 8192) == 0);
  ::close(fd);
  CHECK_THROWS_AS(ShmSegment::open(name), ProtocolMismatch);
  ::shm_unlink(name.c_str());
}

TEST_CASE("a file of another mode or another user at a segment's name is refused at once, naming its owner",
          "[shm]") {
  // A local user who plants a file where a job's segment will be must not
  // make a rank wait for it (it never becomes a segment) or use it.
  std::string name = cat("/braid-", ::getpid(), "-x-planted");
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::fchmod(fd, 0644) == 0);
  const std::string path = cat("/dev/shm", name);
  auto refused = [&] {
    try {
      (void)ShmSegment::try_open(name);  // would be nullopt (not ready yet) before the check
    } catch (const ProtocolMismatch& e) {
      return std::string(e.what());
    }
    return std::string("(not refused)");
  };
  CHECK_FALSE(ShmSegment::try_create(name, 4096).has_value());  // the name is taken: the creator goes to open it
  std::string what = refused();
  CHECK_THAT(what, Catch::Contains(path) && Catch::Contains("mode 0644") && Catch::Contains("refusing it"));
  REQUIRE(::fchmod(fd, 0600) == 0);
  if (::geteuid() == 0) {
    REQUIRE(::fchown(fd, 65534, 65534) == 0);  // nobody's, as another user would plant it
    what = refused();
    CHECK_THAT(what, Catch::Contains(path) && Catch::Contains("owned by uid 65534") &&
                         Catch::Contains("(this job's user) with mode 0600"));
  } else {
    WARN("not root: the case of a file another user owns is not run");
  }
  ::close(fd);
  ::shm_unlink(name.c_str());
}

TEST_CASE("another user can neither open nor replace a segment braid made", "[shm]") {
  if (::geteuid() != 0) {
    WARN("not root: cannot act as another user here");
    return;
  }
  ShmSegment mine = ShmSegment::create(4096);
  const std::string name = mine.name();
  ChildProcess child([&] {
    child_require(::setgid(65534) == 0 && ::setuid(65534) == 0, "setuid(nobody)");
    int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    child_require(fd < 0 && errno == EACCES, "another user opened the segment");
    fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    child_require(fd < 0 && errno == EACCES, "another user opened the segment to read");
    child_require(::shm_unlink(name.c_str()) != 0, "another user removed the segment's name");
    return 0;
  });
  CHECK(child.join() == 0);
  CHECK(exists_in_dev_shm(mine));
}

TEST_CASE("kill -9 of a process holding segments leaves nothing in /dev/shm", "[shm]") {
  // The child creates a segment, the parent attaches, the child unlinks (as
  // the transport does once every peer mapped it) and is killed mid-use.
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  ChildProcess child([&] {
    ::close(pipe_fds[0]);
    ShmSegment segment = ShmSegment::create(1 << 20);
    char name[128] = {};
    std::snprintf(name, sizeof(name), "%s", segment.name().c_str());
    child_require(::write(pipe_fds[1], name, sizeof(name)) == sizeof(name), "write name");
    child_require(segment.wait_attached(1, std::chrono::seconds(10)), "parent attached");
    segment.unlink();
    auto* counter = reinterpret_cast<volatile std::uint64_t*>(segment.data());
    for (;;) *counter = *counter + 1;  // busy, as a rank in a transfer
    return 0;
  });
  ::close(pipe_fds[1]);
  char name[128] = {};
  REQUIRE(::read(pipe_fds[0], name, sizeof(name)) == sizeof(name));
  ::close(pipe_fds[0]);
  ShmSegment mine = ShmSegment::open(name);
  auto* counter = reinterpret_cast<volatile std::uint64_t*>(mine.data());
  for (int i = 0; i < 10000 && *counter == 0; ++i) ::usleep(100);
  REQUIRE(*counter > 0);
  for (int i = 0; i < 100000 && !shm_names_of(child.pid()).empty(); ++i) ::usleep(100);  // the child unlinks
  child.kill_now();
  CHECK(child.join() == -SIGKILL);
  CHECK(shm_names_of(child.pid()).empty());
  std::uint64_t seen = *counter;  // our mapping outlives the killed creator
  CHECK(seen > 0);
}

TEST_CASE("a creator killed before anyone attached leaves a name that remove_orphans deletes", "[shm]") {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  ChildProcess child([&] {
    ShmSegment segment = ShmSegment::create(4096);
    char ok = 1;
    child_require(::write(pipe_fds[1], &ok, 1) == 1, "write");
    for (;;) ::pause();
    return 0;
  });
  char ok = 0;
  REQUIRE(::read(pipe_fds[0], &ok, 1) == 1);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  REQUIRE(shm_names_of(child.pid()).size() == 1);

  ShmSegment alive = ShmSegment::create(4096);  // ours: its creator lives
  child.kill_now();
  REQUIRE(child.join() == -SIGKILL);
  CHECK(shm_names_of(child.pid()).size() == 1);  // a kill -9 before unlink leaves the name...
  CHECK(ShmSegment::remove_orphans() >= 1);       // ...which the sweep removes
  CHECK(shm_names_of(child.pid()).empty());
  CHECK(exists_in_dev_shm(alive));
}
