#include "perf_report.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "collectives/registry.hpp"

namespace braid::perf {
namespace {

constexpr CollectiveInfo kCollectives[] = {
    {Kind::all_reduce, "all_reduce", true, false, false},
    {Kind::broadcast, "broadcast", false, true, false},
    {Kind::reduce, "reduce", true, true, false},
    {Kind::all_gather, "all_gather", false, false, true},
    {Kind::reduce_scatter, "reduce_scatter", true, false, true},
    {Kind::all_to_all, "all_to_all", false, false, true},
    {Kind::gather, "gather", false, true, true},
    {Kind::scatter, "scatter", false, true, true},
    {Kind::sendrecv, "sendrecv", false, false, false},
    {Kind::all_to_allv, "all_to_allv", false, false, true},
    {Kind::all_gatherv, "all_gatherv", false, false, true},
    {Kind::reduce_scatterv, "reduce_scatterv", true, false, true},
    {Kind::gatherv, "gatherv", false, true, true},
    {Kind::scatterv, "scatterv", false, true, true},
};

std::string printf_string(const char* format, auto... args) {
  char buffer[512];
  int n = std::snprintf(buffer, sizeof buffer, format, args...);
  return std::string(buffer, static_cast<std::size_t>(std::clamp(n, 0, static_cast<int>(sizeof buffer) - 1)));
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::span<const CollectiveInfo> collectives() { return kCollectives; }

const CollectiveInfo* find_collective(std::string_view name) {
  // nccl-tests' binaries are all_reduce_perf, ...; its docs say allreduce.
  if (name.ends_with("_perf")) name.remove_suffix(5);
  std::string n(name);
  if (n == "allreduce") n = "all_reduce";
  else if (n == "allgather") n = "all_gather";
  else if (n == "reducescatter") n = "reduce_scatter";
  else if (n == "alltoall") n = "all_to_all";
  else if (n == "bcast") n = "broadcast";
  for (const auto& c : kCollectives)
    if (n == c.name) return &c;
  return nullptr;
}

Kind even_form(Kind kind) {
  switch (kind) {
    case Kind::all_to_allv: return Kind::all_to_all;
    case Kind::all_gatherv: return Kind::all_gather;
    case Kind::reduce_scatterv: return Kind::reduce_scatter;
    case Kind::gatherv: return Kind::gather;
    case Kind::scatterv: return Kind::scatter;
    default: return kind;
  }
}

const char* fixed_algorithm(Kind kind) {
  // The registry's entries without a builder are the calls that build their
  // own schedule: one algorithm each. Its names are string literals, so
  // data() ends in a NUL.
  for (const auto& c : kCollectives) {
    if (c.kind != kind) continue;
    const std::string_view name = kind == Kind::sendrecv ? std::string_view("send/recv") : c.name;
    for (const auto& e : algorithm_registry())
      if (e.collective == name && e.build == nullptr) return e.name.data();
  }
  return nullptr;
}

double bus_factor(Kind kind, int ranks) {
  const double n = ranks;
  switch (even_form(kind)) {
    case Kind::all_reduce: return 2.0 * (n - 1) / n;
    case Kind::all_gather:
    case Kind::reduce_scatter:
    case Kind::all_to_all:
    case Kind::gather:
    case Kind::scatter: return (n - 1) / n;
    case Kind::broadcast:
    case Kind::reduce:
    case Kind::sendrecv: return 1.0;
    default: return 1.0;
  }
}

std::vector<std::size_t> sweep_sizes(std::size_t min_bytes, std::size_t max_bytes, std::size_t factor, std::size_t step) {
  std::vector<std::size_t> sizes;
  // Bounded: a factor of at least 2 or a step of at least 1 reaches max.
  if (factor < 2 && step == 0) step = 1;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes;) {
    sizes.push_back(bytes);
    if (factor >= 2) {
      if (bytes == 0) bytes = 1;
      else if (bytes > max_bytes / factor) break;
      else bytes *= factor;
    } else {
      if (bytes > max_bytes - step) break;
      bytes += step;
    }
  }
  return sizes;
}

int auto_iterations(std::size_t size_bytes) {
  constexpr std::size_t kBytesPerRow = std::size_t{256} << 20;
  return static_cast<int>(std::clamp<std::size_t>(kBytesPerRow / std::max<std::size_t>(size_bytes, 1), 5, 200));
}

int auto_warmup(std::size_t size_bytes) { return std::clamp(auto_iterations(size_bytes) / 10, 2, 20); }

double aggregate_time(std::span<const double> per_rank_us, TimeAggregate how) {
  if (per_rank_us.empty()) return 0;
  switch (how) {
    case TimeAggregate::rank0: return per_rank_us[0];
    case TimeAggregate::mean:
      return std::accumulate(per_rank_us.begin(), per_rank_us.end(), 0.0) / static_cast<double>(per_rank_us.size());
    case TimeAggregate::min: return *std::min_element(per_rank_us.begin(), per_rank_us.end());
    case TimeAggregate::max: return *std::max_element(per_rank_us.begin(), per_rank_us.end());
  }
  return 0;
}

std::string_view name_of(TimeAggregate how) {
  switch (how) {
    case TimeAggregate::rank0: return "rank 0";
    case TimeAggregate::mean: return "mean over ranks";
    case TimeAggregate::min: return "fastest rank";
    case TimeAggregate::max: return "slowest rank";
  }
  return "?";
}

Measurement measure(std::size_t size_bytes, double time_us, Kind kind, int ranks, std::optional<long long> wrong) {
  Measurement m;
  m.time_us = time_us;
  m.algbw_gbps = time_us > 0 ? static_cast<double>(size_bytes) / (time_us * 1e3) : 0.0;
  m.busbw_gbps = m.algbw_gbps * bus_factor(kind, ranks);
  m.wrong = wrong;
  return m;
}

void Summary::add(const Measurement& m) {
  busbw_sum_ += m.busbw_gbps;
  ++count_;
  wrong_ += m.wrong.value_or(0);
}

std::string_view nccl_type_name(std::string_view braid_name) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"f16", "half"},   {"bf16", "bfloat16"}, {"f32", "float"},  {"f64", "double"}, {"i8", "int8"},
      {"u8", "uint8"},   {"i32", "int32"},     {"u32", "uint32"}, {"i64", "int64"},  {"u64", "uint64"},
  };
  for (auto [braid, nccl] : kNames)
    if (braid == braid_name) return nccl;
  return braid_name;
}

std::string format_time(double us) {
  if (us < 1e4) return printf_string("%.2f", us);
  if (us < 1e6) return printf_string("%.1f", us);
  return printf_string("%.0f", us);
}

std::string table_header() {
  return "#                                                              out-of-place                       in-place\n"
         "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
         "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n";
}

std::string table_row(const Row& row) {
  std::string line = printf_string("%12zu  %12zu  %8s  %6s  %6d", row.size, row.count,
                                   std::string(nccl_type_name(row.type)).c_str(),
                                   row.redop.c_str(), row.root);
  for (const auto& m : {row.out_of_place, row.in_place}) {
    if (!m) {
      line += printf_string("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    const std::string wrong = m->wrong ? std::to_string(*m->wrong) : "N/A";
    line += printf_string("  %7s  %6.2f  %6.2f  %5s", format_time(m->time_us).c_str(), m->algbw_gbps, m->busbw_gbps,
                          wrong.c_str());
  }
  return line + "\n";
}

std::string table_footer(const Summary& summary) {
  return printf_string("# Out of bounds values : %lld %s\n", summary.wrong(), summary.wrong() == 0 ? "OK" : "FAILED") +
         printf_string("# Avg bus bandwidth    : %g \n", summary.average_busbw()) + "#\n";
}

std::string csv_header() {
  return "collective,algorithm,transport,ranks,hosts,size,count,type,redop,root,in_place,time_us,algbw_gbps,busbw_gbps,"
         "wrong\n";
}

std::string csv_lines(const Row& row) {
  std::string out;
  for (bool in_place : {false, true}) {
    const auto& m = in_place ? row.in_place : row.out_of_place;
    if (!m) continue;
    out += csv_field(row.collective) + "," + csv_field(row.algorithm) + "," + csv_field(row.transport) + "," +
           printf_string("%d,%d,%zu,%zu,", row.ranks, row.hosts, row.size, row.count) + csv_field(row.type) + "," +
           csv_field(row.redop) + "," +
           printf_string("%d,%s,%.3f,%.6f,%.6f,", row.root, in_place ? "true" : "false", m->time_us, m->algbw_gbps,
                         m->busbw_gbps) +
           (m->wrong ? std::to_string(*m->wrong) : "") + "\n";
  }
  return out;
}

std::string json_lines(const Row& row) {
  std::string out;
  for (bool in_place : {false, true}) {
    const auto& m = in_place ? row.in_place : row.out_of_place;
    if (!m) continue;
    out += "{\"collective\":" + json_string(row.collective) + ",\"algorithm\":" + json_string(row.algorithm) +
           ",\"transport\":" + json_string(row.transport) +
           printf_string(",\"ranks\":%d,\"hosts\":%d,\"size\":%zu,\"count\":%zu,", row.ranks, row.hosts, row.size,
                         row.count) +
           "\"type\":" + json_string(row.type) + ",\"redop\":" + json_string(row.redop) +
           printf_string(",\"root\":%d,\"in_place\":%s,\"time_us\":%.3f,\"algbw_gbps\":%.6f,\"busbw_gbps\":%.6f,", row.root,
                         in_place ? "true" : "false", m->time_us, m->algbw_gbps, m->busbw_gbps) +
           "\"wrong\":" + (m->wrong ? std::to_string(*m->wrong) : "null") + "}\n";
  }
  return out;
}

}  // namespace braid::perf
