// ChecksumV1: the 64-bit hash that checkpoint files of format version 1
// carry, kept to read them (checkpoint_file.cpp); braid writes version 2,
// whose checksum is XXH3 (content_hash.hpp). It is braid's own: xxHash64's
// primes in another arrangement, which no standard tool computes.
//
// How it works: the input is read as little-endian 64-bit words. Each word is
// scrambled on its own (multiply, rotate, multiply) and folded into one
// running state (xor, rotate, multiply, add). The 0..7 bytes left over are
// padded with zeros into one last word, the byte count is folded in after
// them, and a multiply-xorshift finaliser spreads every input bit over the
// whole result. Pieces are joined in an 8-byte buffer, so the result never
// depends on where the input was cut.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace braid::mirrored {

class ChecksumV1 {
 public:
  explicit ChecksumV1(std::uint64_t seed = 0) : state_(seed + kPrime5) {}

  void update(std::span<const std::byte> bytes) {
    if (bytes.empty()) return;  // an empty span's data() may be null, which memcpy must not get
    length_ += bytes.size();
    const std::byte* p = bytes.data();
    std::size_t n = bytes.size();
    if (pending_size_ > 0) {
      const std::size_t take = n < kWord - pending_size_ ? n : kWord - pending_size_;
      std::memcpy(pending_.data() + pending_size_, p, take);
      pending_size_ += take;
      p += take;
      n -= take;
      if (pending_size_ < kWord) return;
      state_ = round(state_, load_le(pending_.data()));
      pending_size_ = 0;
    }
    std::uint64_t state = state_;
    for (; n >= kWord; p += kWord, n -= kWord) state = round(state, load_le(p));
    state_ = state;
    if (n > 0) std::memcpy(pending_.data(), p, n);
    pending_size_ = n;
  }

  std::uint64_t digest() const {
    std::uint64_t h = state_;
    if (pending_size_ > 0) {
      std::array<std::byte, kWord> tail{};
      std::memcpy(tail.data(), pending_.data(), pending_size_);
      h = round(h, load_le(tail.data()));
    }
    h = round(h, length_);
    h ^= h >> 33;
    h *= kPrime2;
    h ^= h >> 29;
    h *= kPrime3;
    h ^= h >> 32;
    return h;
  }

 private:
  static constexpr std::size_t kWord = 8;
  // The 64-bit primes of xxHash64, which are well-tested multipliers.
  static constexpr std::uint64_t kPrime1 = 0x9e3779b185ebca87;
  static constexpr std::uint64_t kPrime2 = 0xc2b2ae3d27d4eb4f;
  static constexpr std::uint64_t kPrime3 = 0x165667b19e3779f9;
  static constexpr std::uint64_t kPrime4 = 0x85ebca77c2b2ae63;
  static constexpr std::uint64_t kPrime5 = 0x27d4eb2f165667c5;

  static std::uint64_t load_le(const std::byte* p) {
    std::uint64_t word = 0;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&word, p, kWord);
    } else {
      for (std::size_t i = 0; i < kWord; ++i) word |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
    }
    return word;
  }

  static std::uint64_t round(std::uint64_t state, std::uint64_t word) {
    const std::uint64_t k = std::rotl(word * kPrime2, 31) * kPrime1;
    return std::rotl(state ^ k, 27) * kPrime1 + kPrime4;
  }

  std::uint64_t state_;
  std::uint64_t length_ = 0;
  std::array<std::byte, kWord> pending_{};
  std::size_t pending_size_ = 0;
};

}  // namespace braid::mirrored
