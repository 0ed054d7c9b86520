// WireWriter / WireReader: little-endian encoding for everything braid sends
// on a socket or stores at rendezvous. The reader checks every length against
// what is left and throws ProtocolMismatch naming the message, so parsers of
// untrusted bytes cannot read out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {

class WireWriter {
 public:
  void u8(std::uint8_t v) { put(&v, 1); }
  void u16(std::uint16_t v) { le(v); }
  void u32(std::uint32_t v) { le(v); }
  void u64(std::uint64_t v) { le(v); }
  void bytes(std::span<const std::byte> b) { put(b.data(), b.size()); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    put(s.data(), s.size());
  }
  std::vector<std::byte> take() { return std::move(out_); }
  std::size_t size() const { return out_.size(); }

 private:
  template <typename T>
  void le(T v) {
    std::byte b[sizeof(T)];
    for (std::size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
    put(b, sizeof(T));
  }
  void put(const void* p, std::size_t n) {
    auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<std::byte> out_;
};

class WireReader {
 public:
  WireReader(std::span<const std::byte> in, std::string_view what) : in_(in), what_(what) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(le<std::uint8_t>()); }
  std::uint16_t u16() { return le<std::uint16_t>(); }
  std::uint32_t u32() { return le<std::uint32_t>(); }
  std::uint64_t u64() { return le<std::uint64_t>(); }
  std::span<const std::byte> bytes(std::size_t n) {
    need(n);
    auto out = in_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::string str(std::size_t max_length) {
    std::uint32_t n = u32();
    if (n > max_length) throw ProtocolMismatch(cat("malformed ", what_, ": string of ", n, " bytes exceeds ", max_length));
    auto b = bytes(n);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  std::size_t left() const { return in_.size() - pos_; }
  void expect_end() const {
    if (left() != 0) throw ProtocolMismatch(cat("malformed ", what_, ": ", left(), " unexpected trailing bytes"));
  }

 private:
  void need(std::size_t n) const {
    if (n > left()) throw ProtocolMismatch(cat("malformed ", what_, ": needs ", n, " more bytes, has ", left()));
  }
  template <typename T>
  T le() {
    need(sizeof(T));
    T v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v = static_cast<T>(v | (static_cast<T>(in_[pos_ + i]) << (8 * i)));
    pos_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  std::string_view what_;
};

}  // namespace braid
