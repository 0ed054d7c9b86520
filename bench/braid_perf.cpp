// braid-perf: an nccl-tests style benchmark. Run it under braid-run:
//
//   braid-run -n 4 braid-perf all_reduce -b 8 -e 64M -f 4 --check
//
// For each size it times `iters` back-to-back operations after `warmup`
// untimed ones, takes the slowest rank's average, and prints nccl-tests'
// columns. The size is nccl-tests' too: the whole buffer of the collective,
// which for all_gather and gather is the (n x block) output, for
// reduce_scatter the (n x block) input, for all_to_all each rank's n blocks,
// for scatter the root's n blocks. algbw = size / time. busbw scales algbw by
// the share of the buffer each rank must move over its links, so it is
// comparable across rank counts and with the link's bandwidth:
//   all_reduce                                            2(n-1)/n
//   all_gather, reduce_scatter, all_to_all, gather, scatter  (n-1)/n
//   broadcast, reduce, sendrecv                           1
//
// --algo NAME forces the collective's algorithm by adding
// "collective:NAME" to BRAID_ALGO before joining (settings come from the
// environment; a BRAID_ALGO already set for other collectives is kept).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/braid.hpp"
#include "core/settings.hpp"
#include "expected_values.hpp"
#include "topology/plan.hpp"

namespace {

enum class Kind { all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter, sendrecv };

struct CollectiveInfo {
  Kind kind;
  const char* name;
  bool reduces;  // takes -o
  bool rooted;   // takes -r
  bool blocked;  // the size is n blocks of a per-rank count
};

constexpr CollectiveInfo kCollectives[] = {
    {Kind::all_reduce, "all_reduce", true, false, false},   {Kind::broadcast, "broadcast", false, true, false},
    {Kind::reduce, "reduce", true, true, false},            {Kind::all_gather, "all_gather", false, false, true},
    {Kind::reduce_scatter, "reduce_scatter", true, false, true}, {Kind::all_to_all, "all_to_all", false, false, true},
    {Kind::gather, "gather", false, true, true},            {Kind::scatter, "scatter", false, true, true},
    {Kind::sendrecv, "sendrecv", false, false, false},
};

double bus_factor(Kind kind, int n) {
  switch (kind) {
    case Kind::all_reduce: return 2.0 * (n - 1) / n;
    case Kind::all_gather:
    case Kind::reduce_scatter:
    case Kind::all_to_all:
    case Kind::gather:
    case Kind::scatter: return static_cast<double>(n - 1) / n;
    case Kind::broadcast:
    case Kind::reduce:
    case Kind::sendrecv: return 1.0;
  }
  return 1.0;
}

struct Options {
  const CollectiveInfo* collective = nullptr;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = 64 << 20;
  std::size_t factor = 2;
  braid::DataType type = braid::DataType::f32;
  braid::ReduceOp op = braid::ReduceOp::sum;
  int root = 0;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  bool json = false;
  bool in_place = false;
  std::string algo;
};

const char* kUsage =
    "usage: braid-perf COLLECTIVE [-b MIN] [-e MAX] [-f FACTOR] [-d TYPE] [-o OP] [-r ROOT]\n"
    "                  [-n ITERS] [-w WARMUP] [--algo NAME] [--inplace] [--check] [--json]\n"
    "  COLLECTIVE  all_reduce broadcast reduce all_gather reduce_scatter all_to_all gather\n"
    "              scatter sendrecv (each rank sends to the next rank, receives from the previous)\n"
    "  -b, -e   smallest and largest size in bytes (8, 1K, 64M); default 8 .. 64M. The size is\n"
    "           the whole buffer, as in nccl-tests: n x the per-rank block for all_gather,\n"
    "           gather (output), reduce_scatter (input), all_to_all and scatter (root's input)\n"
    "  -f       multiply the size by FACTOR each row; default 2\n"
    "  -d       f16 bf16 f32 f64 i8 u8 i32 u32 i64 u64; default f32\n"
    "  -o       sum prod min max avg (all_reduce, reduce, reduce_scatter); default sum\n"
    "  -r       root rank (broadcast, reduce, gather, scatter); default 0\n"
    "  -n, -w   timed and warm-up iterations per size; default 20 and 5\n"
    "  --algo   force the collective's algorithm (adds COLLECTIVE:NAME to BRAID_ALGO); known:\n"
    "%s"
    "  --inplace  output aliases input as the API defines in-place for each collective\n"
    "  --check  verify every result against independently computed values (#wrong)\n"
    "  --json   one JSON object per size instead of the table\n"
    "busbw = algbw x 2(n-1)/n (all_reduce), x (n-1)/n (all_gather, reduce_scatter,\n"
    "all_to_all, gather, scatter), x 1 (broadcast, reduce, sendrecv).\n"
    "Run under braid-run (braid-run -n 4 braid-perf all_reduce) or with BRAID_RANK,\n"
    "BRAID_WORLD_SIZE and BRAID_STORE_ADDR set.\n";

// The usage text with the algorithms each collective has, as the plan lists them.
std::string usage() {
  std::string algorithms;
  for (const auto& c : kCollectives) {
    if (c.kind == Kind::sendrecv) continue;
    algorithms.append("           ").append(c.name).append(":");
    for (auto a : braid::algorithms_of(c.name)) algorithms.append(" ").append(a);
    algorithms.append("\n");
  }
  std::vector<char> text(std::strlen(kUsage) + algorithms.size() + 1);
  std::snprintf(text.data(), text.size(), kUsage, algorithms.c_str());
  return text.data();
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "braid-perf: %s\n%s", message.c_str(), usage().c_str());
  std::exit(2);
}

int parse_int(const char* text, const char* what) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < 0 || v > 1000000000) usage_error(std::string(what) + " '" + text + "' is not a count");
  return static_cast<int>(v);
}

const CollectiveInfo* find_collective(std::string name) {
  if (name == "allreduce") name = "all_reduce";
  else if (name == "allgather") name = "all_gather";
  else if (name == "reducescatter") name = "reduce_scatter";
  else if (name == "alltoall") name = "all_to_all";
  else if (name == "bcast") name = "broadcast";
  for (const auto& c : kCollectives)
    if (name == c.name) return &c;
  return nullptr;
}

Options parse(int argc, char** argv) {
  Options o;
  std::string collective;
  if (argc < 2) usage_error("missing the collective");
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "-h" || a == "--help") {
        std::fputs(usage().c_str(), stdout);
        std::exit(0);
      } else if (a == "-b") o.min_bytes = braid::parse_bytes(value(), "-b");
      else if (a == "-e") o.max_bytes = braid::parse_bytes(value(), "-e");
      else if (a == "-f") o.factor = static_cast<std::size_t>(parse_int(value(), "-f"));
      else if (a == "-d") o.type = braid::parse_data_type(value());
      else if (a == "-o") o.op = braid::parse_reduce_op(value());
      else if (a == "-r") o.root = parse_int(value(), "-r");
      else if (a == "-n") o.iters = parse_int(value(), "-n");
      else if (a == "-w") o.warmup = parse_int(value(), "-w");
      else if (a == "--algo") o.algo = value();
      else if (a == "-c" || a == "--check") o.check = true;
      else if (a == "--json") o.json = true;
      else if (a == "--inplace") o.in_place = true;
      else if (!a.empty() && a[0] != '-' && collective.empty()) collective = a;
      else usage_error("unknown argument '" + a + "'");
    } catch (const braid::Error& e) {
      usage_error(e.what());
    }
  }
  if (collective.empty()) usage_error("missing the collective");
  o.collective = find_collective(collective);
  if (o.collective == nullptr) usage_error("unknown collective '" + collective + "'");
  if (o.factor < 2) usage_error("-f must be at least 2");
  if (o.iters < 1) usage_error("-n must be at least 1");
  if (o.min_bytes > o.max_bytes) usage_error("-b is larger than -e");
  if (o.collective->kind == Kind::sendrecv) {
    if (o.in_place) usage_error("sendrecv has no in-place form");
    if (!o.algo.empty()) usage_error("sendrecv has no algorithms to choose from");
  }
  if (!o.algo.empty()) {
    auto known = braid::algorithms_of(o.collective->name);
    if (std::find(known.begin(), known.end(), o.algo) == known.end()) {
      std::string list;
      for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      usage_error("--algo: " + std::string(o.collective->name) + " has no algorithm '" + o.algo + "' (known: " + list + ")");
    }
  }
  return o;
}

// Forces --algo through the environment, which is where Comm reads its
// settings from; entries for other collectives already in BRAID_ALGO stay.
void force_algorithm(const Options& o) {
  if (o.algo.empty()) return;
  std::string spec = braid::Settings::raw("BRAID_ALGO").value_or("");
  spec += (spec.empty() ? "" : ",") + std::string(o.collective->name) + ":" + o.algo;
  if (setenv("BRAID_ALGO", spec.c_str(), 1) != 0) usage_error("cannot set BRAID_ALGO");
}

// The count argument of the call for a row of `bytes`: whole elements, at
// least one (per rank where there are blocks) unless the row is empty.
std::size_t count_for(const Options& o, int n, std::size_t bytes) {
  const std::size_t blocks = o.collective->blocked ? static_cast<std::size_t>(n) : 1;
  return bytes == 0 ? 0 : std::max<std::size_t>(1, bytes / braid::size_of(o.type) / blocks);
}

// One size of one collective on this rank: the element counts, the buffers
// the call reads and writes, and how to fill and check them.
class Case {
 public:
  Case(const Options& o, braid::Comm& comm, std::vector<std::byte>& send, std::vector<std::byte>& recv, std::size_t bytes)
      : o_(o), comm_(comm), kind_(o.collective->kind), rank_(comm.rank()), n_(comm.size()),
        element_(braid::size_of(o.type)) {
    const std::size_t blocks = o.collective->blocked ? static_cast<std::size_t>(n_) : 1;
    count_ = count_for(o, n_, bytes);
    total_ = count_ * blocks;
    const std::size_t block_bytes = count_ * element_;
    const std::size_t mine = block_bytes * static_cast<std::size_t>(rank_);
    in_ = send.data();
    out_ = o.in_place ? send.data() : recv.data();
    switch (kind_) {
      case Kind::all_gather:
      case Kind::gather:
        out_ = recv.data();
        in_ = o.in_place ? recv.data() + mine : send.data();
        out_elements_ = total_;
        break;
      case Kind::reduce_scatter:
      case Kind::scatter:
        out_ = o.in_place ? send.data() + mine : recv.data();
        out_elements_ = count_;
        break;
      case Kind::all_to_all: out_elements_ = total_; break;
      default: out_elements_ = count_; break;
    }
  }

  std::size_t size_bytes() const { return total_ * element_; }
  std::size_t count_bytes() const { return count_ * element_; }

  void run_once() {
    const auto t = o_.type;
    const auto op = o_.op;
    const int root = o_.root;
    switch (kind_) {
      case Kind::all_reduce: comm_.all_reduce(in_, out_, count_, t, op); break;
      case Kind::broadcast: comm_.broadcast(in_, out_, count_, t, root); break;
      case Kind::reduce: comm_.reduce(in_, out_, count_, t, op, root); break;
      case Kind::all_gather: comm_.all_gather(in_, out_, count_, t); break;
      case Kind::reduce_scatter: comm_.reduce_scatter(in_, out_, count_, t, op); break;
      case Kind::all_to_all: comm_.all_to_all(in_, out_, count_, t); break;
      case Kind::gather: comm_.gather(in_, out_, count_, t, root); break;
      case Kind::scatter: comm_.scatter(in_, out_, count_, t, root); break;
      case Kind::sendrecv:
        // A communicator runs its operations one at a time in the order they
        // were started, and a receive posted first holds up a send posted
        // after it: even ranks send first, odd ranks receive first, so the
        // ring never waits on itself (for any n >= 2).
        if (rank_ % 2 == 0) {
          comm_.send(in_, count_, t, next());
          comm_.recv(out_, count_, t, previous());
        } else {
          comm_.recv(out_, count_, t, previous());
          comm_.send(in_, count_, t, next());
        }
        break;
    }
  }

  // Poisons the output, then writes this rank's input (which in place
  // overlaps the output).
  void prepare() {
    namespace check = braid::check;
    std::memset(out_, 0xcd, out_elements_ * element_);
    const auto t = o_.type;
    switch (kind_) {
      case Kind::all_reduce:
      case Kind::reduce: check::fill_reduce_input(t, o_.op, rank_, in_, count_); break;
      case Kind::reduce_scatter: check::fill_reduce_input(t, o_.op, rank_, in_, total_); break;
      case Kind::broadcast:
        if (rank_ == o_.root) check::fill_broadcast_input(t, o_.root, in_, count_);
        break;
      case Kind::all_gather:
      case Kind::gather: check::fill_block(t, rank_, rank_, in_, count_); break;
      case Kind::all_to_all: check::fill_all_to_all_input(t, rank_, n_, in_, count_); break;
      case Kind::scatter:
        if (rank_ == o_.root) check::fill_all_to_all_input(t, o_.root, n_, in_, count_);
        break;
      case Kind::sendrecv: check::fill_block(t, rank_, next(), in_, count_); break;
    }
  }

  // Elements of this rank's output that differ from the expected values
  // (only the root's output counts for reduce and gather).
  std::size_t count_wrong() const {
    namespace check = braid::check;
    const auto t = o_.type;
    const bool root = rank_ == o_.root;
    switch (kind_) {
      case Kind::all_reduce: return check::count_wrong_reduce(t, o_.op, n_, out_, count_);
      case Kind::reduce: return root ? check::count_wrong_reduce(t, o_.op, n_, out_, count_) : 0;
      case Kind::broadcast: return check::count_wrong_broadcast(t, o_.root, out_, count_);
      case Kind::all_gather: return check::count_wrong_gather(t, n_, out_, count_);
      case Kind::gather: return root ? check::count_wrong_gather(t, n_, out_, count_) : 0;
      case Kind::reduce_scatter: return check::count_wrong_reduce_scatter(t, o_.op, rank_, n_, out_, count_);
      case Kind::all_to_all: return check::count_wrong_all_to_all(t, rank_, n_, out_, count_);
      case Kind::scatter: return check::count_wrong_block(t, o_.root, rank_, out_, count_);
      case Kind::sendrecv: return check::count_wrong_block(t, previous(), rank_, out_, count_);
    }
    return 0;
  }

 private:
  int next() const { return (rank_ + 1) % n_; }
  int previous() const { return (rank_ + n_ - 1) % n_; }

  const Options& o_;
  braid::Comm& comm_;
  Kind kind_;
  int rank_, n_;
  std::size_t element_;
  std::size_t count_ = 0;         // the count argument of the call
  std::size_t total_ = 0;         // elements in the whole buffer (the size column)
  std::size_t out_elements_ = 0;  // elements this rank's call writes
  std::byte* in_ = nullptr;
  std::byte* out_ = nullptr;
};

// The sizes of the rows: MIN, MIN x FACTOR, ... up to MAX (0, then 1, ...).
std::vector<std::size_t> sizes_of(const Options& o) {
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
    sizes.push_back(bytes);
    if (bytes == 0) bytes = 1;
    else if (bytes > o.max_bytes / o.factor) break;
    else bytes *= o.factor;
  }
  return sizes;
}

std::string algorithm_at(const Options& o, const braid::Plan& plan, std::size_t bytes, int n) {
  if (o.collective->kind == Kind::sendrecv) return "p2p";
  return std::string(plan.algorithm_for(o.collective->name, bytes, n));
}

// "ring (--algo)", or "direct 8..2048 B, ring 8192..67108864 B (auto)"
// when the size decides.
std::string algorithm_text(const Options& o, const braid::Plan& plan, int n) {
  if (o.collective->kind == Kind::sendrecv) return "point to point (send and recv, ordered by rank parity)";
  const std::string name = o.collective->name;
  if (plan.forced.count(name)) return plan.forced.at(name) + (o.algo.empty() ? " (forced by BRAID_ALGO)" : " (--algo)");
  struct Run {
    std::string algo;
    std::size_t first, last;
  };
  std::vector<Run> runs;
  for (std::size_t requested : sizes_of(o)) {
    const std::size_t bytes = count_for(o, n, requested) * braid::size_of(o.type);  // what the call moves
    std::string algo = algorithm_at(o, plan, bytes, n);
    if (!runs.empty() && runs.back().algo == algo) runs.back().last = bytes;
    else runs.push_back({algo, bytes, bytes});
  }
  if (runs.size() == 1) return runs[0].algo + " (auto)";
  std::string text;
  for (const auto& r : runs) {
    text.append(text.empty() ? "" : ", ").append(r.algo).append(" ").append(std::to_string(r.first));
    if (r.last != r.first) text.append("..").append(std::to_string(r.last));
    text.append(" B");
  }
  return text + " (auto)";
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  force_algorithm(o);
  try {
    braid::Comm comm = braid::Comm::from_env();
    const int rank = comm.rank(), n = comm.size();
    const Kind kind = o.collective->kind;
    if (o.root < 0 || o.root >= n) usage_error("-r " + std::to_string(o.root) + " is not a rank of " + std::to_string(n));
    if (kind == Kind::sendrecv && n < 2) usage_error("sendrecv needs at least 2 ranks");
    const std::size_t element = braid::size_of(o.type);
    const std::size_t blocks = o.collective->blocked ? static_cast<std::size_t>(n) : 1;
    const std::size_t max_elements = std::max<std::size_t>(1, o.max_bytes / element / blocks) * blocks;
    std::vector<std::byte> send(max_elements * element), recv(max_elements * element);
    const std::string name = o.collective->name;
    // The same plan rules the communicator applies (topology/plan.hpp), for
    // naming the algorithm of each row.
    const braid::Plan plan = braid::make_plan({}, braid::Settings::from_env());
    const std::string algorithm = algorithm_text(o, plan, n);

    if (rank == 0 && !o.json) {
      std::printf("# braid-perf %s: %d ranks, %s%s%s%s, iters %d, warmup %d, %s\n", name.c_str(), n,
                  std::string(braid::name_of(o.type)).c_str(), o.collective->reduces ? " " : "",
                  o.collective->reduces ? std::string(braid::name_of(o.op)).c_str() : "",
                  o.in_place ? ", in place" : ", out of place", o.iters, o.warmup, o.check ? "checked" : "unchecked");
      std::printf("# algorithm: %s\n", algorithm.c_str());
      std::printf("# %s\n#\n", comm.describe().c_str());
      std::printf("# %12s %12s %6s %6s %6s %12s %10s %10s %8s\n", "size(B)", "count", "type", "redop", "root", "time(us)",
                  "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    long long total_wrong = 0;
    std::size_t previous_size = SIZE_MAX;
    for (std::size_t bytes : sizes_of(o)) {
      Case one(o, comm, send, recv, bytes);
      if (one.size_bytes() == previous_size) continue;  // sizes below one element per rank
      previous_size = one.size_bytes();
      one.prepare();
      for (int i = 0; i < o.warmup; ++i) {
        one.run_once();
        if (o.in_place) one.prepare();
      }
      // In place, every iteration works on the previous result: correct data
      // only matters for the checked run below.
      comm.barrier();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iters; ++i) one.run_once();
      double local_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / o.iters;
      double slowest_us = local_us;
      comm.all_reduce(&local_us, &slowest_us, 1, braid::DataType::f64, braid::ReduceOp::max);

      long long wrong = 0;
      if (o.check) {
        one.prepare();
        one.run_once();
        long long mine = static_cast<long long>(one.count_wrong());
        comm.all_reduce(&mine, &wrong, 1, braid::DataType::i64, braid::ReduceOp::sum);
      }
      total_wrong += wrong;
      const std::size_t size = one.size_bytes();
      const std::size_t count = size / element;
      double algbw = static_cast<double>(size) / (slowest_us * 1e3);
      double busbw = algbw * bus_factor(kind, n);
      if (rank == 0) {
        const std::string type(braid::name_of(o.type));
        const std::string op = o.collective->reduces ? std::string(braid::name_of(o.op)) : "none";
        const int root = o.collective->rooted ? o.root : -1;
        if (o.json)
          std::printf("{\"collective\":\"%s\",\"algorithm\":\"%s\",\"ranks\":%d,\"size\":%zu,\"count\":%zu,\"type\":\"%s\","
                      "\"redop\":\"%s\",\"root\":%d,\"in_place\":%s,\"time_us\":%.3f,\"algbw_gbps\":%.4f,"
                      "\"busbw_gbps\":%.4f,\"wrong\":%s}\n",
                      name.c_str(), algorithm_at(o, plan, one.count_bytes(), n).c_str(), n, size, count, type.c_str(),
                      op.c_str(), root, o.in_place ? "true" : "false", slowest_us, algbw, busbw,
                      o.check ? std::to_string(wrong).c_str() : "null");
        else
          std::printf("  %12zu %12zu %6s %6s %6d %12.2f %10.3f %10.3f %8s\n", size, count, type.c_str(), op.c_str(), root,
                      slowest_us, algbw, busbw, o.check ? std::to_string(wrong).c_str() : "N/A");
        std::fflush(stdout);
      }
    }
    if (rank == 0 && !o.json) std::printf("# %s: %lld wrong elements in total\n", o.check ? "checked" : "unchecked", total_wrong);
    return total_wrong == 0 ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid-perf: %s\n", e.what());
    return 1;
  }
}
