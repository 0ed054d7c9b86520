// Building messages from parts: cat("rank ", r, " lost peer ", p).
#pragma once

#include <cstddef>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

/// "1.5 MiB", "64 B": sizes as people read them in logs and errors.
std::string human_bytes(std::size_t bytes);

/// Lower-case hex digits of `bytes`.
std::string to_hex(std::span<const std::byte> bytes);

/// The fewest single-character edits (insert, delete, replace, or swap two
/// neighbours) that turn `a` into `b`: how far a misspelt name is from one.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The text of errno value `err` ("Connection refused").
std::string errno_text(int err);

/// A set of ranks (ascending) as short text: "rank 3", "ranks 1, 4-7, 9",
/// "ranks 3-65535 (65533 ranks)"; past `max_runs` runs of consecutive ranks
/// the rest is counted ("ranks 0, 2, 4 and 97 more (100 ranks)").
std::string describe_ranks(std::span<const int> ranks, std::size_t max_runs = 8);

/// The pieces of `text` between the separators, empty ones included
/// ("a,,b" is "a", "", "b"; "" is one empty piece).
std::vector<std::string> split(std::string_view text, char separator);

}  // namespace braid
