// braid-perf's arithmetic and output forms (bench/perf_report.hpp), its
// command line (bench/perf_options.hpp) and the parser every tool shares
// (tools/command_line.hpp), without a communicator.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "perf_options.hpp"
#include "perf_report.hpp"

using namespace braid::perf;

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string field; std::getline(in, field, sep);) out.push_back(field);
  return out;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

Options parse(std::vector<std::string_view> args) { return parse_options(args).options; }

Row sample_row() {
  Row row;
  row.collective = "all_reduce";
  row.algorithm = "ring";
  row.transport = "tcp";
  row.ranks = 4;
  row.hosts = 1;
  row.size = 1 << 20;
  row.count = row.size / 4;
  row.type = "f32";
  row.redop = "sum";
  row.root = -1;
  row.out_of_place = measure(row.size, 1000.0, Kind::all_reduce, 4, 0);
  row.in_place = measure(row.size, 500.0, Kind::all_reduce, 4, 0);
  return row;
}

}  // namespace

TEST_CASE("busbw factors are nccl-tests' per collective") {
  for (int n : {1, 2, 3, 4, 8}) {
    const double ring = static_cast<double>(n - 1) / n;
    CHECK(bus_factor(Kind::all_reduce, n) == Approx(2 * ring));
    for (Kind k : {Kind::all_gather, Kind::reduce_scatter, Kind::all_to_all, Kind::gather, Kind::scatter})
      CHECK(bus_factor(k, n) == Approx(ring));
    for (Kind k : {Kind::broadcast, Kind::reduce, Kind::sendrecv}) CHECK(bus_factor(k, n) == 1.0);
  }
  // 1 MiB in 1000 us on 4 ranks: algbw 1.048576 GB/s, busbw x 1.5.
  Measurement m = measure(1 << 20, 1000.0, Kind::all_reduce, 4, std::nullopt);
  CHECK(m.algbw_gbps == Approx(1.048576));
  CHECK(m.busbw_gbps == Approx(1.572864));
  CHECK_FALSE(m.wrong.has_value());
}

TEST_CASE("collectives go by braid's and nccl-tests' names") {
  CHECK(find_collective("all_reduce")->kind == Kind::all_reduce);
  CHECK(find_collective("allreduce")->kind == Kind::all_reduce);
  CHECK(find_collective("all_reduce_perf")->kind == Kind::all_reduce);
  CHECK(find_collective("alltoall")->kind == Kind::all_to_all);
  CHECK(find_collective("bcast")->kind == Kind::broadcast);
  CHECK(find_collective("sendrecv_perf")->kind == Kind::sendrecv);
  CHECK(find_collective("allfoo") == nullptr);
}

TEST_CASE("sweeps multiply by -f or add -i, and stop at -e") {
  CHECK(sweep_sizes(8, 64, 2, 0) == std::vector<std::size_t>{8, 16, 32, 64});
  CHECK(sweep_sizes(8, 100, 4, 0) == std::vector<std::size_t>{8, 32});
  CHECK(sweep_sizes(0, 4, 2, 0) == std::vector<std::size_t>{0, 1, 2, 4});
  CHECK(sweep_sizes(1024, 4096, 1, 1024) == std::vector<std::size_t>{1024, 2048, 3072, 4096});
  CHECK(sweep_sizes(5, 5, 2, 0) == std::vector<std::size_t>{5});
  CHECK(sweep_sizes(SIZE_MAX - 1, SIZE_MAX, 2, 0).size() == 1);  // no overflow
  CHECK(sweep_sizes(SIZE_MAX - 3, SIZE_MAX, 1, 2).size() == 2);
}

TEST_CASE("-n 0 scales the iterations to the size") {
  CHECK(auto_iterations(8) == 200);
  CHECK(auto_iterations(1 << 20) == 200);
  CHECK(auto_iterations(16 << 20) == 16);
  CHECK(auto_iterations(std::size_t{64} << 20) == 5);
  CHECK(auto_iterations(std::size_t{1} << 30) == 5);
  CHECK(auto_warmup(8) == 20);
  CHECK(auto_warmup(std::size_t{64} << 20) == 2);
}

TEST_CASE("-a turns the ranks' times into the row's time as nccl-tests does") {
  const std::vector<double> t{30, 10, 20, 40};
  CHECK(aggregate_time(t, TimeAggregate::rank0) == 30);
  CHECK(aggregate_time(t, TimeAggregate::mean) == 25);
  CHECK(aggregate_time(t, TimeAggregate::min) == 10);
  CHECK(aggregate_time(t, TimeAggregate::max) == 40);
  CHECK(parse({"all_reduce"}).average == TimeAggregate::mean);  // the default, as nccl-tests
  CHECK(parse({"all_reduce", "-a", "3"}).average == TimeAggregate::max);
  CHECK_THROWS_AS(parse({"all_reduce", "-a", "4"}), braid::UsageError);
}

TEST_CASE("the average line is the mean busbw over every row and placement") {
  Summary s;
  Row row = sample_row();
  s.add(*row.out_of_place);
  s.add(*row.in_place);
  CHECK(s.average_busbw() == Approx((1.572864 + 3.145728) / 2));
  const std::string footer = table_footer(s);
  CHECK(footer == "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 2.3593 \n#\n");
  s.add(measure(8, 10.0, Kind::all_reduce, 4, 3));
  CHECK(table_footer(s).starts_with("# Out of bounds values : 3 FAILED\n"));
  CHECK(Summary().average_busbw() == 0);
}

TEST_CASE("table rows have nccl-tests' 13 columns in its order") {
  Row row = sample_row();
  auto w = words(table_row(row));
  REQUIRE(w.size() == 13);
  CHECK(w[0] == "1048576");
  CHECK(w[1] == "262144");
  CHECK(w[2] == "float");  // nccl-tests' name in the table
  CHECK(w[3] == "sum");
  CHECK(w[4] == "-1");
  CHECK(w[5] == "1000.00");
  CHECK(w[6] == "1.05");
  CHECK(w[7] == "1.57");
  CHECK(w[8] == "0");
  CHECK(w[9] == "500.00");
  CHECK(w[11] == "3.15");
  auto header = split(table_header(), '\n');
  REQUIRE(header.size() == 3);
  CHECK(words(header[1]).size() == 14);  // "#" and 13 titles
  row.in_place.reset();
  row.out_of_place->wrong.reset();
  w = words(table_row(row));
  REQUIRE(w.size() == 13);
  CHECK(w[8] == "N/A");
  CHECK(w[9] == "N/A");
  CHECK(format_time(12345.678) == "12345.7");
  CHECK(nccl_type_name("bf16") == "bfloat16");
  CHECK(nccl_type_name("u64") == "uint64");
  CHECK(format_time(2e6) == "2000000");
}

TEST_CASE("CSV and JSON give one record per placement with the same fields") {
  Row row = sample_row();
  const auto header = split(csv_header().substr(0, csv_header().size() - 1), ',');
  CHECK(header.size() == 15);
  const auto lines = split(csv_lines(row), '\n');
  REQUIRE(lines.size() == 2);
  for (const auto& line : lines) CHECK(split(line, ',').size() == header.size());
  CHECK(split(lines[0], ',')[10] == "false");
  CHECK(split(lines[1], ',')[10] == "true");
  const auto json = split(json_lines(row), '\n');
  REQUIRE(json.size() == 2);
  for (const auto& field : header) CHECK(json[0].find("\"" + field + "\":") != std::string::npos);
  CHECK(json[1].find("\"in_place\":true") != std::string::npos);
  row.in_place.reset();
  row.out_of_place->wrong.reset();
  CHECK(split(csv_lines(row), '\n').size() == 1);
  CHECK(csv_lines(row).ends_with(",\n"));  // unchecked: empty wrong field
  CHECK(json_lines(row).find("\"wrong\":null") != std::string::npos);
  row.algorithm = "a,\"b\"";
  CHECK(csv_lines(row).find(",\"a,\"\"b\"\"\",") != std::string::npos);
}

TEST_CASE("braid-perf's command line: nccl-tests' flags, units and --opt=value") {
  Options o = parse({"all_reduce", "-b", "1K", "-e", "64M", "-f", "4", "-n", "7", "-w", "3", "-c", "0"});
  CHECK(o.collective->kind == Kind::all_reduce);
  CHECK(o.min_bytes == 1024);
  CHECK(o.max_bytes == std::size_t{64} << 20);
  CHECK(o.factor == 4);
  CHECK(o.iters == 7);
  CHECK(o.warmup == 3);
  CHECK_FALSE(o.check);
  CHECK(parse({"all_reduce"}).check);  // -c 1 by default, as nccl-tests
  CHECK(parse({"all_reduce", "--check"}).check);
  CHECK_FALSE(parse({"all_reduce", "--check=0"}).check);
  CHECK(parse({"all_reduce", "-c1"}).check);
  o = parse({"--minbytes=8", "--maxbytes=2G", "--stepbytes", "1M", "allreduce", "--datatype=float", "--op=max"});
  CHECK(o.min_bytes == 8);
  CHECK(o.max_bytes == std::size_t{2} << 30);
  CHECK(o.step == std::size_t{1} << 20);
  CHECK(o.factor == 1);  // -i without -f steps linearly
  CHECK(o.types == std::vector<braid::DataType>{braid::DataType::f32});
  CHECK(o.ops == std::vector<braid::ReduceOp>{braid::ReduceOp::max});
  CHECK(parse({"all_reduce", "-b8", "-e8"}).max_bytes == 8);
  CHECK(parse({"all_reduce", "-d", "all"}).types.size() == 10);
  CHECK(parse({"all_reduce", "-o", "all"}).ops.size() == 5);
  CHECK(parse({"broadcast", "-o", "all"}).ops.size() == 1);  // not reducing: one pass
  CHECK(parse({"broadcast", "-r", "all"}).all_roots);
  CHECK(parse({"broadcast", "-r", "2"}).root == 2);
  CHECK_FALSE(parse({"all_reduce", "-z", "0"}).blocking);
  CHECK(parse({"all_reduce", "--csv"}).output == Output::csv);
  CHECK(parse({"all_reduce", "--json"}).output == Output::json);
  CHECK(parse({"all_reduce", "--transport=tcp"}).transport == "tcp");
  CHECK(parse({"all_reduce", "--algo", "ring"}).algo == "ring");
  CHECK(parse({"all_reduce", "-g", "1", "-t", "1"}).collective != nullptr);
  o = parse({"all_reduce", "-m", "4", "-N", "0", "-C", "1", "-T", "30", "-M", "1", "-p", "0", "-G", "0", "-R", "0"});
  CHECK(o.agg_iters == 4);
  CHECK(o.cycles == 0);
  CHECK(o.cpu_time);
  CHECK(o.timeout_s == 30);
  CHECK(o.memory_report);
  o = parse({"all_reduce", "--agg_iters=2", "--run_cycles", "3", "--report_cputime=0", "--memory_report", "0"});
  CHECK((o.agg_iters == 2 && o.cycles == 3 && !o.cpu_time && !o.memory_report));
  // Run as nccl-tests' binaries, the name says the collective.
  CHECK(parse_options({"-b", "8"}, "/opt/bin/all_reduce_perf").options.collective->kind == Kind::all_reduce);
  CHECK(parse_options({}, "alltoall_perf").options.collective->kind == Kind::all_to_all);
  CHECK(parse_options({"-h"}).help);
  for (std::vector<std::string_view> bad : std::vector<std::vector<std::string_view>>{
           {},                                  // no collective
           {"all_foo"},                         // unknown collective
           {"all_reduce", "-b", "1X"},          // unit
           {"all_reduce", "-b", "64", "-e", "8"},
           {"all_reduce", "-c", "2"},
           {"all_reduce", "-f", "1"},
           {"all_reduce", "-g", "2"},
           {"all_reduce", "-d", "f128"},
           {"all_reduce", "--algo", "chain"},
           {"sendrecv", "--algo", "ring"},
           {"all_reduce", "--bogus"},
           {"all_reduce", "-n"},
           {"all_reduce", "--json=1"},
           {"all_reduce", "broadcast"},
           {"all_reduce", "-m", "0"},
           {"all_reduce", "-C", "2"},
           {"all_reduce", "-p", "1"},   // no parallel init: one rank per process
           {"all_reduce", "-G", "1"},   // no CUDA graphs to launch
           {"all_reduce", "-R", "2"},   // no symmetric memory (-R 1: braid_mem_alloc's buffers)
           {"all_reduce", "-T", "-1"},
       })
    CHECK_THROWS_AS(parse_options(bad), braid::UsageError);
  CHECK_THROWS_WITH(parse_options({"all_reduce", "-G", "2"}), Catch::Contains("use -G 0"));
  CHECK_THROWS_WITH(parse_options({"all_reduce", "-R", "2"}), Catch::Contains("use -R 1"));
  CHECK(parse({"all_reduce", "-R", "1"}).local_register);
  CHECK_FALSE(parse({"all_reduce", "-R", "0"}).local_register);
  CHECK_FALSE(parse({"all_reduce"}).local_register);
  CHECK_THROWS_AS(parse_options({"all_reduce"}, "all_reduce_perf"), braid::UsageError);  // the name says it
  CHECK_THROWS_AS(parse_options({}, "hypercube_perf"), braid::UsageError);
}

TEST_CASE("the shared parser: options end at the program for braid-run") {
  int ranks = 0;
  bool flag = false;
  braid::CommandLine cli;
  cli.option({"-n", "--ranks"}, [&](std::string_view, std::string_view v) { ranks = std::stoi(std::string(v)); })
      .flag({"--no-prefix"}, [&] { flag = true; });
  using P = braid::CommandLine::Positionals;
  CHECK(cli.parse({"-n4", "prog", "-n", "9"}, P::end_options) == std::vector<std::string>{"prog", "-n", "9"});
  CHECK(ranks == 4);
  CHECK(cli.parse({"--ranks=3", "--no-prefix", "--", "--prog"}, P::end_options) == std::vector<std::string>{"--prog"});
  CHECK(ranks == 3);
  CHECK(flag);
  CHECK(cli.parse({"-n", "2"}, P::end_options).empty());
  try {
    cli.parse({"--bogus"}, P::end_options);
    FAIL("no error");
  } catch (const braid::UsageError& e) {
    CHECK(std::string(e.what()) == "unknown option '--bogus'");
  }
  CHECK_THROWS_WITH(cli.parse({"-n"}, P::end_options), "-n needs a value");
  CHECK_THROWS_WITH(cli.parse({"--no-prefix=1"}, P::end_options), "--no-prefix takes no value");
  CHECK_THROWS_WITH(cli.parse({"x"}, P::interleaved), "unexpected argument 'x'");
}
