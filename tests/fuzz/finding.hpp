// What counts as a finding in braid's fuzz targets.
//
// A parser of network bytes has one job with bad input: refuse it with a
// braid::Error (ProtocolMismatch, InvalidArgument, PeerLost ...) naming what
// is wrong. Everything else is a finding that libFuzzer saves with its input:
// a crash or sanitizer report, a broken round trip or other property checked
// below, an Error of code `internal` (a BRAID_CHECK that fired: a bug, not a
// refusal), and any other exception, std::bad_alloc from a length taken at
// face value included (those escape the target, and libFuzzer reports the
// abort of std::terminate).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

#include "braid/types.hpp"

namespace braid::fuzz {

[[noreturn]] inline void finding(std::string_view what) {
  std::fprintf(stderr, "\n==braid fuzz finding== %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

/// Call from a `catch (const braid::Error& e)`: the parser refused the input.
inline void expect_refusal(const Error& e) {
  if (e.code() == ErrorCode::internal) finding(e.what());
}

inline bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

inline std::span<const std::byte> input_bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

}  // namespace braid::fuzz

#define BRAID_FUZZ_STR2(x) #x
#define BRAID_FUZZ_STR(x) BRAID_FUZZ_STR2(x)
/// A property of the code under test; its failure is a finding.
#define BRAID_FUZZ_EXPECT(cond)                                                          \
  do {                                                                                   \
    if (!(cond)) ::braid::fuzz::finding(#cond " (" __FILE__ ":" BRAID_FUZZ_STR(__LINE__) ")"); \
  } while (0)
