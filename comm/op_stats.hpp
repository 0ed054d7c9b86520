// OpStatsTable: a communicator's statistics, one row per collective, size
// band and algorithm: how many operations completed, their bytes, and their
// times (sum, min, max, and p50/p99 from a histogram). Comm::stats,
// braid_comm_get_stats and Python's comm.stats() read it; BRAID_STATS=1
// prints it at finalize.
//
// Recording is cheap enough to be always on: an operation's plan keeps a
// pointer to its row (looked up once per plan), and add() is a few integer
// updates. The caller serializes: the communicator records and reads under
// its engine's mutex, which finishing an operation takes anyway.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "braid/braid.hpp"

namespace braid {

class OpStatsTable {
 public:
  /// 16 buckets per power of two of ticks: a percentile is known to
  /// within 1/16 of its value (reported at the bucket's middle).
  static constexpr int kSubBuckets = 16;
  static constexpr int kBuckets = 64 * kSubBuckets;

  struct Row {
    std::string collective;
    std::string algorithm;
    int band = 0;  // sizes in [2^(band-1), 2^band - 1]; band 0 holds size 0
    std::uint64_t count = 0;
    std::uint64_t bytes = 0;
    std::int64_t total = 0, min = 0, max = 0;  // ticks (core/ticks.hpp)
    std::array<std::uint32_t, kBuckets> histogram{};
  };

  /// The row of (collective, algorithm, band of `bytes`), made when new.
  /// Rows never move, so a caller may keep the pointer.
  Row* row(std::string_view collective, std::string_view algorithm, std::size_t bytes);
  static void add(Row& row, std::size_t bytes, std::int64_t ticks);

  /// The rows, their times turned from ticks into microseconds.
  std::vector<OpStats> snapshot(double ns_per_tick) const;
  /// A table for people: one line per row, after a header naming `owner`.
  static std::string format(const std::vector<OpStats>& rows, std::string_view owner);

  static int band_of(std::size_t bytes);
  static int bucket_of(std::int64_t ticks);
  /// The middle of bucket `b`, in ticks.
  static double bucket_value(int b);

 private:
  std::deque<Row> rows_;
};

}  // namespace braid
