// The content hash of checkpoints and replica checks (mirrored/content_hash.hpp,
// XXH3) and the format-1 checksum kept for old checkpoints
// (mirrored/checksum_v1.hpp): values a standard tool gives (xxhsum -H3),
// pieces hash like the whole wherever the input is cut, one flipped bit
// anywhere changes the hash, lengths and seeds are told apart.
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <span>
#include <vector>

#include "byte_patterns.hpp"
#include "checksum_v1.hpp"
#include "content_hash.hpp"

namespace braid::mirrored {

// ----------------------------------------------------------------- content hash

TEST_CASE("content_hash is XXH3's 64-bit hash: xxhsum -H3's values", "[content_hash]") {
  CHECK(content_hash({}) == 0x2d06800538d394c2);
  CHECK(content_hash(text_bytes("braid")) == 0x70739bd24350a473);
  const auto fox = text_bytes("The quick brown fox jumps over the lazy dog");
  CHECK(content_hash(fox) == 0xce7d19a5418fb365);
  CHECK(content_hash(fox, 42) != content_hash(fox));
}

// Format-1 checkpoints carry ChecksumV1; these values pinned it when it was
// the content hash (from a separate Python transcription).
TEST_CASE("ChecksumV1: golden values, and pieces hash like the whole", "[content_hash]") {
  auto v1 = [](std::span<const std::byte> bytes, std::uint64_t seed = 0) {
    ChecksumV1 h(seed);
    h.update(bytes);
    return h.digest();
  };
  CHECK(v1({}) == 0xb992b056e7d8a844);
  CHECK(v1({}, 1) == 0x67fd16694fa93afe);
  CHECK(v1(text_bytes("braid")) == 0xd8437624d5fea1aa);
  const auto fox = text_bytes("The quick brown fox jumps over the lazy dog");
  CHECK(v1(fox) == 0x8639ca60ee4ce8f4);
  CHECK(v1(fox, 42) == 0xddfefa18eebf53fd);
  const Bytes data = pattern(67, 1);
  for (std::size_t cut = 0; cut <= data.size(); ++cut) {
    ChecksumV1 h;
    h.update(std::span(data).first(cut));
    h.update(std::span(data).subspan(cut));
    CHECK(h.digest() == v1(data));
  }
}

TEST_CASE("content_hash: pieces hash like the whole, wherever the cuts are", "[content_hash]") {
  const Bytes data = pattern(67, 1);
  const std::span<const std::byte> all(data);
  const std::uint64_t whole = content_hash(all, 9);
  int mismatches = 0;
  for (std::size_t i = 0; i <= data.size(); ++i) {
    for (std::size_t j = i; j <= data.size(); ++j) {
      ContentHasher hasher(9);
      hasher.update(all.subspan(0, i));
      hasher.update(all.subspan(i, j - i));
      hasher.update(all.subspan(j));
      if (hasher.digest() != whole) ++mismatches;
    }
  }
  CHECK(mismatches == 0);

  // 1 MiB + 3 in pieces of 1..97 bytes; digest() in between leaves the state alone.
  const Bytes big = pattern((1 << 20) + 3, 2);
  ContentHasher hasher;
  std::size_t at = 0;
  for (std::size_t step = 1; at < big.size(); step = step % 97 + 1) {
    const std::size_t n = std::min(step, big.size() - at);
    hasher.update(std::span(big).subspan(at, n));
    at += n;
    if (step == 50) (void)hasher.digest();
  }
  CHECK(hasher.digest() == content_hash(big));
  CHECK(hasher.digest() == hasher.digest());
  CHECK(ContentHasher().digest() == content_hash({}));
}

TEST_CASE("content_hash: one flipped bit anywhere changes the hash", "[content_hash]") {
  Bytes data = pattern(1 << 20, 3);
  const std::uint64_t base = content_hash(data);
  std::vector<std::size_t> positions = {0, 1, 7, 8, 9, 4095, 4096, data.size() - 9, data.size() - 8, data.size() - 1};
  std::uint64_t x = 12345;
  for (int i = 0; i < 300; ++i) {
    x = x * 6364136223846793005 + 1442695040888963407;
    positions.push_back((x >> 20) % data.size());
  }
  std::set<std::uint64_t> seen = {base};
  int unchanged = 0;
  for (std::size_t k = 0; k < positions.size(); ++k) {
    const auto bit = static_cast<std::byte>(1u << (k % 8));
    data[positions[k]] ^= bit;
    const std::uint64_t flipped = content_hash(data);
    if (flipped == base) ++unchanged;
    seen.insert(flipped);
    data[positions[k]] ^= bit;
  }
  CHECK(unchanged == 0);
  CHECK(content_hash(data) == base);

  // Every bit of a short input with a tail: all 8 * 37 variants differ from
  // the original and from each other.
  Bytes small = pattern(37, 4);
  std::set<std::uint64_t> small_seen = {content_hash(small)};
  for (std::size_t i = 0; i < small.size() * 8; ++i) {
    small[i / 8] ^= static_cast<std::byte>(1u << (i % 8));
    small_seen.insert(content_hash(small));
    small[i / 8] ^= static_cast<std::byte>(1u << (i % 8));
  }
  CHECK(small_seen.size() == 1 + small.size() * 8);
}

TEST_CASE("content_hash: empty input, lengths of zeros and seeds are told apart", "[content_hash]") {
  std::set<std::uint64_t> seen;
  for (std::size_t n = 0; n <= 100; ++n) seen.insert(content_hash(Bytes(n)));
  CHECK(seen.size() == 101);
  CHECK(content_hash({}) == content_hash({}));
  CHECK(content_hash({}) != content_hash({}, 1));
  CHECK(content_hash(Bytes(16)) != content_hash(Bytes(16), 1));
  CHECK(content_hash(Bytes(8)) != content_hash(Bytes(7)));
}

}  // namespace braid::mirrored
