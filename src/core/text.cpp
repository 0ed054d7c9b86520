#include "core/text.hpp"

#include <cstdio>
#include <cstring>

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

}  // namespace braid
