#include "core/text.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace braid {

std::string human_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0) std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else std::snprintf(buf, sizeof buf, "%.4g %s", value, kUnits[unit]);
  return buf;
}

// Damerau-Levenshtein distance (optimal string alignment), one row at a
// time plus the two before it for the swap.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t m = b.size();
  std::vector<std::size_t> before(m + 1), previous(m + 1), current(m + 1);
  for (std::size_t j = 0; j <= m; ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        current[j] = std::min(current[j], before[j - 2] + 1);
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[m];
}

std::string to_hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    out += kDigits[std::to_integer<int>(b) >> 4];
    out += kDigits[std::to_integer<int>(b) & 15];
  }
  return out;
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message, which may not live in buf.
  const char* text = strerror_r(err, buf, sizeof buf);
  return text;
}

std::string describe_ranks(std::span<const int> ranks, std::size_t max_runs) {
  if (ranks.empty()) return "no rank";
  if (ranks.size() == 1) return cat("rank ", ranks[0]);
  std::string out = "ranks ";
  std::size_t runs = 0, shown = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (runs == max_runs) {
      out += cat(" and ", ranks.size() - shown, " more");
      break;
    }
    out += cat(runs ? ", " : "", ranks[i]);
    if (j > i) out += cat(j == i + 1 ? ", " : "-", ranks[j]);
    shown += j - i + 1;
    ++runs;
    i = j + 1;
  }
  if (runs > 2 || shown < ranks.size() || ranks.size() > 3) out += cat(" (", ranks.size(), " ranks)");
  return out;
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> pieces;
  for (std::size_t at = 0;;) {
    const std::size_t end = std::min(text.find(separator, at), text.size());
    pieces.emplace_back(text.substr(at, end - at));
    if (end == text.size()) return pieces;
    at = end + 1;
  }
}

}  // namespace braid
