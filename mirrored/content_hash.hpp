// content_hash: XXH3's 64-bit hash of bytes (libxxhash's XXH3_64bits), for
// checking that replicas hold the same variables and that a checkpoint file
// reads back what was written. Not for anything an adversary controls.
//
// XXH3 is xxHash's current algorithm: a standard that other tools compute
// too (`xxhsum -H3` prints content_hash(bytes) with seed 0), fast on every
// size (it reads 64 bytes a step with vector instructions where the CPU has
// them), and the same on every machine. A changed byte changes the hash
// except with probability about 2^-64.
//
// ContentHasher takes the input in pieces (XXH3's streaming state); the
// result never depends on where the input was cut:
// content_hash(b) == [ContentHasher h; h.update(b1); h.update(b2); h.digest()].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

// The header alone, compiled into braid: no run-time dependency on
// libxxhash's shared library.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace braid::mirrored {

class ContentHasher {
 public:
  explicit ContentHasher(std::uint64_t seed = 0) {
    XXH3_INITSTATE(&state_);  // a state on the stack, before a seeded reset
    XXH3_64bits_reset_withSeed(&state_, seed);
  }

  void update(std::span<const std::byte> bytes) {
    if (bytes.empty()) return;  // an empty span's data() may be null
    XXH3_64bits_update(&state_, bytes.data(), bytes.size());
  }

  std::uint64_t digest() const { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

// The hash of `bytes` in one call; equal to feeding them to a ContentHasher
// with the same seed in any number of pieces.
inline std::uint64_t content_hash(std::span<const std::byte> bytes, std::uint64_t seed = 0) {
  return XXH3_64bits_withSeed(bytes.empty() ? nullptr : bytes.data(), bytes.size(), seed);
}

}  // namespace braid::mirrored
