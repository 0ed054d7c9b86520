#include "op_stats.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>

#include "core/text.hpp"

namespace braid {

int OpStatsTable::band_of(std::size_t bytes) { return static_cast<int>(std::bit_width(bytes)); }

int OpStatsTable::bucket_of(std::int64_t ticks) {
  // Bucket = 16 x the power of two below the value, plus its next 4 bits.
  const auto v = static_cast<std::uint64_t>(std::max<std::int64_t>(ticks, 1));
  const int octave = static_cast<int>(std::bit_width(v)) - 1;
  const int sub = octave >= 4 ? static_cast<int>((v >> (octave - 4)) & (kSubBuckets - 1))
                              : static_cast<int>((v << (4 - octave)) & (kSubBuckets - 1));
  return octave * kSubBuckets + sub;
}

double OpStatsTable::bucket_value(int b) {
  const int octave = b / kSubBuckets, sub = b % kSubBuckets;
  const double low = static_cast<double>(std::uint64_t{1} << octave) * (1.0 + sub / double(kSubBuckets));
  const double width = static_cast<double>(std::uint64_t{1} << octave) / kSubBuckets;
  return low + width / 2;
}

OpStatsTable::Row* OpStatsTable::row(std::string_view collective, std::string_view algorithm, std::size_t bytes) {
  const int band = band_of(bytes);
  for (Row& r : rows_)
    if (r.band == band && r.collective == collective && r.algorithm == algorithm) return &r;
  Row& r = rows_.emplace_back();
  r.collective = collective;
  r.algorithm = algorithm;
  r.band = band;
  return &r;
}

void OpStatsTable::add(Row& row, std::size_t bytes, std::int64_t ticks) {
  if (row.count == 0 || ticks < row.min) row.min = ticks;
  if (ticks > row.max) row.max = ticks;
  ++row.count;
  row.bytes += bytes;
  row.total += ticks;
  ++row.histogram[static_cast<std::size_t>(bucket_of(ticks))];
}

std::vector<OpStats> OpStatsTable::snapshot(double ns_per_tick) const {
  const double us_per_tick = ns_per_tick / 1e3;
  std::vector<OpStats> out;
  for (const Row& r : rows_) {
    if (r.count == 0) continue;
    OpStats s;
    s.collective = r.collective;
    s.algorithm = r.algorithm;
    s.band_min_bytes = r.band == 0 ? 0 : std::size_t{1} << (r.band - 1);
    s.band_max_bytes = r.band == 0 ? 0 : (r.band >= 64 ? ~std::size_t{0} : (std::size_t{1} << r.band) - 1);
    s.count = r.count;
    s.bytes = r.bytes;
    s.total_us = static_cast<double>(r.total) * us_per_tick;
    s.min_us = static_cast<double>(r.min) * us_per_tick;
    s.max_us = static_cast<double>(r.max) * us_per_tick;
    // The bucket holding the q-th operation, its middle clamped to [min, max].
    auto percentile = [&](double q) {
      const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(r.count - 1));
      std::uint64_t seen = 0;
      for (int b = 0; b < kBuckets; ++b) {
        seen += r.histogram[static_cast<std::size_t>(b)];
        if (seen > rank)
          return std::clamp(bucket_value(b), static_cast<double>(r.min), static_cast<double>(r.max)) * us_per_tick;
      }
      return s.max_us;
    };
    s.p50_us = percentile(0.5);
    s.p99_us = percentile(0.99);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) {
    return a.collective != b.collective ? a.collective < b.collective
           : a.band_min_bytes != b.band_min_bytes ? a.band_min_bytes < b.band_min_bytes
                                                   : a.algorithm < b.algorithm;
  });
  return out;
}

std::string OpStatsTable::format(const std::vector<OpStats>& rows, std::string_view owner) {
  std::string out = cat("braid statistics for ", owner, " (", rows.size(), " rows; times in us)\n");
  char line[256];
  std::snprintf(line, sizeof line, "  %-16s %-12s %-19s %9s %12s %12s %10s %10s %10s %10s\n", "collective", "algorithm",
                "size band", "count", "bytes", "total", "min", "p50", "p99", "max");
  out += line;
  for (const OpStats& s : rows) {
    const std::string band = s.band_max_bytes == 0 ? std::string("0 B")
                                                   : cat(human_bytes(s.band_min_bytes), "-<", human_bytes(s.band_max_bytes + 1));
    std::snprintf(line, sizeof line, "  %-16s %-12s %-19s %9llu %12llu %12.1f %10.1f %10.1f %10.1f %10.1f\n",
                  s.collective.c_str(), s.algorithm.c_str(), band.c_str(), static_cast<unsigned long long>(s.count),
                  static_cast<unsigned long long>(s.bytes), s.total_us, s.min_us, s.p50_us, s.p99_us, s.max_us);
    out += line;
  }
  return out;
}

}  // namespace braid
