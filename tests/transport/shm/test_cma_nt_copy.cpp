// Cross-memory attach between two processes (the probe, single-copy reads and
// writes, clear refusals) and the non-temporal copy's correctness at every
// alignment.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "tests/transport/shm/child_process.hpp"
#include "tests/transport/shm/ring_fixture.hpp"
#include "transport/shm/cma.hpp"
#include "transport/shm/nt_copy.hpp"

using namespace braid;
using namespace braid::test;

namespace {

// What the child publishes to the parent through a pipe.
struct Published {
  CmaProbeWord probe;
  std::uint64_t buffer = 0;
};

constexpr std::size_t kBytes = (16u << 20) + 13;

}  // namespace

TEST_CASE("CMA: the probe passes, and a peer's buffer is read and written in one copy", "[shm]") {
  int to_parent[2], to_child[2];
  REQUIRE(::pipe(to_parent) == 0);
  REQUIRE(::pipe(to_child) == 0);
  ChildProcess child([&] {
    std::vector<std::byte> buffer(kBytes);
    fill_pattern(buffer, 21);
    Published mine{cma_probe_word(), reinterpret_cast<std::uint64_t>(buffer.data())};
    child_require(::write(to_parent[1], &mine, sizeof(mine)) == sizeof(mine), "publish");
    char done = 0;  // the parent has read, then written the buffer
    child_require(::read(to_child[0], &done, 1) == 1, "parent's word");
    child_require(has_pattern(buffer, 22), "the parent's process_vm_writev landed");
    return 0;
  });
  Published theirs{};
  REQUIRE(::read(to_parent[0], &theirs, sizeof(theirs)) == sizeof(theirs));

  CmaVerdict verdict = cma_probe(child.pid(), theirs.probe);
  INFO(verdict.reason);
  REQUIRE(verdict.allowed);
  CHECK(verdict.reason.empty());

  std::vector<std::byte> copy(kBytes);
  cma_read(child.pid(), theirs.buffer, copy);
  CHECK(has_pattern(copy, 21));
  fill_pattern(copy, 22);
  cma_write(child.pid(), theirs.buffer, copy);
  char done = 1;
  REQUIRE(::write(to_child[1], &done, 1) == 1);
  CHECK(child.join() == 0);

  // The peer is gone now: the probe says so, and a read is a SystemError.
  CmaVerdict gone = cma_probe(child.pid(), theirs.probe);
  CHECK_FALSE(gone.allowed);
  CHECK(gone.reason.find("does not exist") != std::string::npos);
  try {
    cma_read(child.pid(), theirs.buffer, copy);
    FAIL("read from a dead process");
  } catch (const SystemError& e) {
    CHECK(std::string(e.what()).find(std::to_string(child.pid())) != std::string::npos);
  }
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
}

TEST_CASE("CMA: a probe value the peer does not hold is refused with a reason", "[shm]") {
  CmaProbeWord word = cma_probe_word();
  CHECK(cma_probe(::getpid(), word).allowed);
  word.value ^= 1;
  CmaVerdict verdict = cma_probe(::getpid(), word);
  CHECK_FALSE(verdict.allowed);
  CHECK(verdict.reason.find("probe value") != std::string::npos);
  CmaVerdict nowhere = cma_probe(::getpid(), CmaProbeWord{8, 1});  // unmapped address
  CHECK_FALSE(nowhere.allowed);
  CHECK_FALSE(nowhere.reason.empty());
}

TEST_CASE("nt_copy copies exactly, at every alignment and length around its vector widths", "[shm]") {
  INFO("kernel " << nt_copy_kernel());
  CHECK_FALSE(nt_copy_kernel().empty());
  std::vector<std::byte> src(5000), dst(5200);
  fill_pattern(src, 3);
  for (std::size_t src_offset : {0, 1, 31}) {
    for (std::size_t dst_offset : {0, 3, 16, 33}) {
      for (std::size_t bytes : {0, 1, 255, 256, 257, 300, 1023, 4096, 4900}) {
        std::fill(dst.begin(), dst.end(), std::byte{0xaa});
        nt_copy(dst.data() + dst_offset, src.data() + src_offset, bytes);
        bool same = std::memcmp(dst.data() + dst_offset, src.data() + src_offset, bytes) == 0;
        bool before = dst_offset == 0 || dst[dst_offset - 1] == std::byte{0xaa};
        bool after = dst[dst_offset + bytes] == std::byte{0xaa};
        INFO(src_offset << " " << dst_offset << " " << bytes);
        REQUIRE(same);
        REQUIRE(before);
        REQUIRE(after);
      }
    }
  }
  std::vector<std::byte> big(kNtCopyMinBytes + 77), out(kNtCopyMinBytes + 77);
  fill_pattern(big, 8);
  copy_large(out.data(), big.data(), big.size(), big.size());
  CHECK(has_pattern(out, 8));
}
