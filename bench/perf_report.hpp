// braid-perf's arithmetic and output, apart from any communicator so that
// tests can check them: the collectives and their bus-bandwidth factors, the
// sizes of a sweep, how per-rank times become the reported time (-a), and the
// three output forms (nccl-tests' table, CSV, JSON lines) with the table's
// footer lines that scripts grep for.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid::perf {

enum class Kind {
  all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter, sendrecv,
  // The uneven forms, run with equal counts (what the even form moves, through the v call).
  all_to_allv, all_gatherv, reduce_scatterv, gatherv, scatterv
};
/// The even collective a v form with equal counts matches (its sizes, inputs
/// and expected outputs); any other kind itself.
Kind even_form(Kind kind);
/// The one algorithm of a collective that has no choice ("p2p", "pairwise",
/// "direct"), or null when the plan chooses.
const char* fixed_algorithm(Kind kind);

struct CollectiveInfo {
  Kind kind;
  const char* name;
  bool reduces;  // takes -o
  bool rooted;   // takes -r
  bool blocked;  // the size is n blocks of a per-rank count
};

std::span<const CollectiveInfo> collectives();
/// By braid's name (all_reduce) or nccl-tests' (allreduce, all_reduce_perf).
const CollectiveInfo* find_collective(std::string_view name);

/// busbw = algbw x this: the share of the buffer each rank moves over its
/// links, so that busbw compares across rank counts and with a link's speed.
///   all_reduce                                               2(n-1)/n
///   all_gather, reduce_scatter, all_to_all, gather, scatter  (n-1)/n
///   broadcast, reduce, sendrecv                              1
double bus_factor(Kind kind, int ranks);

/// The sizes of the rows: MIN, then x FACTOR (factor > 1) or + STEP, up to
/// MAX; a sweep from 0 goes on with 1 (factor) or STEP.
std::vector<std::size_t> sweep_sizes(std::size_t min_bytes, std::size_t max_bytes, std::size_t factor, std::size_t step);

/// -n 0: timed iterations scaled to the size, so that a large row moves
/// about 256 MiB and a sweep does not spend its time on the small rows: 200
/// up to 1 MiB, 16 at 16 MiB, 5 at 64 MiB (never fewer than 5 nor more than
/// 200). The warm-up is a tenth of that, 2 to 20. The peer harnesses (bench/peers/) use the
/// same rule, so that bench/compare times every library alike.
int auto_iterations(std::size_t size_bytes);
int auto_warmup(std::size_t size_bytes);

/// -a: how the ranks' average iteration times become the row's time, as in
/// nccl-tests: 0 rank 0's, 1 the mean over ranks (the default), 2 the
/// fastest rank's, 3 the slowest rank's.
enum class TimeAggregate { rank0 = 0, mean = 1, min = 2, max = 3 };
double aggregate_time(std::span<const double> per_rank_us, TimeAggregate how);
std::string_view name_of(TimeAggregate how);

/// One measurement: one size, one placement.
struct Measurement {
  double time_us = 0;
  double algbw_gbps = 0;  // size / time
  double busbw_gbps = 0;  // algbw x bus_factor
  std::optional<long long> wrong;  // unset when unchecked
};
Measurement measure(std::size_t size_bytes, double time_us, Kind kind, int ranks, std::optional<long long> wrong);

/// The fields every output form shares for one row.
struct Row {
  std::string collective, algorithm, transport;
  int ranks = 0, hosts = 0;
  std::size_t size = 0, count = 0;
  std::string type, redop;
  int root = -1;
  std::optional<Measurement> out_of_place, in_place;  // unset: not run (sendrecv has no in-place form)
};

/// The running totals behind the footer: busbw averaged over every
/// measurement printed (out of place and in place, as nccl-tests does), and
/// the wrong elements.
class Summary {
 public:
  void add(const Measurement& m);
  double average_busbw() const { return count_ == 0 ? 0.0 : busbw_sum_ / count_; }
  long long wrong() const { return wrong_; }

 private:
  double busbw_sum_ = 0;
  long long count_ = 0;
  long long wrong_ = 0;
};

// nccl-tests' table: two comment lines of column titles, one line per row
// with the out-of-place then the in-place columns, and the footer.
std::string table_header();
std::string table_row(const Row& row);
std::string table_footer(const Summary& summary);
/// The table's type column uses nccl-tests' names (float, half, bfloat16,
/// int32, ...), as scripts written for its logs match them; CSV and JSON
/// keep braid's (f32, f16, bf16, i32, ...).
std::string_view nccl_type_name(std::string_view braid_name);
/// Time in us as nccl-tests prints it: fewer decimals as it grows.
std::string format_time(double us);

// CSV: one header line, then one line per measurement (a row gives two,
// placement out_of_place and in_place). JSON: one object per measurement.
std::string csv_header();
std::string csv_lines(const Row& row);
std::string json_lines(const Row& row);

}  // namespace braid::perf
