// Multi-process check of groups (braid::group, group_start/end, sendrecv),
// the uneven collectives and Work::then; run by the test suite under
// braid-run with 2 to 5 ranks:
//
//   braid-run -n 5 group_uneven_check
//
// Groups: a ring exchange in which every rank receives before it sends (which
// deadlocks until the timeout without a group), blocking and async calls in
// one group, nested groups, an all-to-all made of grouped sends and receives,
// grouped on some ranks and not on others, sendrecv. Uneven collectives:
// every one with random counts (zeros included, the same random matrix on
// every rank), displacements with gaps and out of rank order, in place where
// the call allows it, blocking and async. Bad arguments throw InvalidArgument
// naming what was wrong; counts that disagree between two ranks fail the
// rank that receives the odd message, naming both sizes (on a split-off
// communicator, last).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "braid/braid.hpp"
#include "tally.hpp"

namespace {

using braid::DataType;
using braid::ReduceOp;
using Counts = std::vector<std::size_t>;

using Tally = braid::check::Tally;

// The value element i of what rank `from` sends rank `to` carries: exact in
// every type used here.
double value(int from, int to, std::size_t i) { return static_cast<double>(from * 1000 + to * 37 + static_cast<int>(i % 97)); }

// value() as a T: integers wrap (a double out of a narrow integer's range
// converts with undefined behaviour; an integer converts modulo 2^bits).
template <typename T>
T value_as(int from, int to, std::size_t i) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<std::int64_t>(value(from, to, i)));
  else return static_cast<T>(value(from, to, i));
}

template <typename T>
std::vector<T> message(int from, int to, std::size_t count) {
  std::vector<T> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = value_as<T>(from, to, i);
  return out;
}

template <typename T>
bool is_message(const T* p, int from, int to, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    if (p[i] != value_as<T>(from, to, i)) return false;
  return true;
}

class Checker {
 public:
  Checker(braid::Comm& comm, Tally& tally) : comm_(comm), tally_(tally), me_(comm.rank()), n_(comm.size()) {}

  // Every rank receives from its left neighbour before sending to its right
  // one: without the group each would wait for the other until the timeout.
  void ring(std::size_t count, bool blocking) {
    const int left = (me_ + n_ - 1) % n_, right = (me_ + 1) % n_;
    std::vector<float> in(count, -1.f), out = message<float>(me_, right, count);
    std::vector<double> in2(count + 3, -1.), out2 = message<double>(me_, right, count + 3);
    std::vector<braid::Work> works;
    braid::group([&] {
      if (blocking) {
        comm_.recv(in.data(), count, DataType::f32, left);
        comm_.recv(in2.data(), count + 3, DataType::f64, left);
        comm_.send(out.data(), count, DataType::f32, right);
        comm_.send(out2.data(), count + 3, DataType::f64, right);
      } else {
        works.push_back(comm_.recv_async(in.data(), count, DataType::f32, left));
        works.push_back(comm_.recv_async(in2.data(), count + 3, DataType::f64, left));
        works.push_back(comm_.send_async(out.data(), count, DataType::f32, right));
        works.push_back(comm_.send_async(out2.data(), count + 3, DataType::f64, right));
      }
    });
    for (auto& w : works) w.wait();
    tally_.record(is_message(in.data(), left, me_, count) && is_message(in2.data(), left, me_, count + 3),
                  "grouped ring exchange, count " + std::to_string(count) + (blocking ? ", blocking" : ", async"));
  }

  // An all-to-all of grouped sends and receives, posted in an order that
  // deadlocks ungrouped (everyone receives from everyone first), inside a
  // nested group with a collective after it.
  void grouped_all_to_all(std::size_t count) {
    std::vector<std::vector<std::int32_t>> in(n_), out(n_);
    for (int p = 0; p < n_; ++p) {
      in[p].assign(count, -1);
      out[p] = message<std::int32_t>(me_, p, count);
    }
    std::int64_t sum = me_ + 1;
    braid::group_start();
    for (int p = 0; p < n_; ++p)
      if (p != me_) comm_.recv(in[p].data(), count, DataType::i32, p);
    braid::group([&] {
      for (int p = 0; p < n_; ++p)
        if (p != me_) comm_.send(out[p].data(), count, DataType::i32, p);
    });
    comm_.all_reduce(&sum, &sum, 1, DataType::i64, ReduceOp::sum);
    braid::group_end();
    bool ok = sum == static_cast<std::int64_t>(n_) * (n_ + 1) / 2;
    for (int p = 0; p < n_; ++p)
      if (p != me_) ok = ok && is_message(in[p].data(), p, me_, count);
    tally_.record(ok, "all-to-all of grouped sends and receives, count " + std::to_string(count));
  }

  // Even ranks group; odd ranks send then receive one call at a time.
  void half_grouped(std::size_t count) {
    if (n_ % 2 != 0) return;
    const int partner = me_ ^ 1;
    std::vector<std::uint8_t> in(count, 0), out = message<std::uint8_t>(me_, partner, count);
    if (me_ % 2 == 0) {
      braid::group([&] {
        comm_.recv(in.data(), count, DataType::u8, partner);
        comm_.send(out.data(), count, DataType::u8, partner);
      });
    } else {
      comm_.send(out.data(), count, DataType::u8, partner);
      comm_.recv(in.data(), count, DataType::u8, partner);
    }
    tally_.record(is_message(in.data(), partner, me_, count), "grouped on even ranks only, count " + std::to_string(count));
  }

  void sendrecv(std::size_t count) {
    const int left = (me_ + n_ - 1) % n_, right = (me_ + 1) % n_;
    std::vector<std::int64_t> in(count, -1), out = message<std::int64_t>(me_, left, count);
    comm_.sendrecv(out.data(), count, left, in.data(), count, right, DataType::i64);
    tally_.record(is_message(in.data(), right, me_, count), "sendrecv shift, count " + std::to_string(count));
  }

  // counts[a][b]: what rank a sends rank b. The same matrix on every rank.
  std::vector<Counts> random_counts(std::mt19937& rng, std::size_t max) {
    std::vector<Counts> c(n_, Counts(n_));
    for (auto& row : c)
      for (auto& x : row) x = rng() % 3 == 0 ? 0 : rng() % (max + 1);
    return c;
  }

  // Displacements for `counts`: blocks in a shuffled order with random gaps.
  static Counts displacements(const Counts& counts, std::mt19937& rng, std::size_t* extent) {
    std::vector<std::size_t> order(counts.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    Counts displs(counts.size());
    std::size_t at = 0;
    for (std::size_t p : order) {
      at += rng() % 3;
      displs[p] = at;
      at += counts[p];
    }
    *extent = at + 1;
    return displs;
  }

  template <typename T>
  void all_to_allv(std::mt19937& rng, DataType type, std::size_t max, bool async) {
    const auto counts = random_counts(rng, max);
    Counts sc(n_), rc(n_);
    for (int p = 0; p < n_; ++p) {
      sc[p] = counts[me_][p];
      rc[p] = counts[p][me_];
    }
    std::size_t send_extent = 0, recv_extent = 0;
    const Counts sd = displacements(sc, rng, &send_extent), rd = displacements(rc, rng, &recv_extent);
    std::vector<T> send(send_extent, T(-5)), recv(recv_extent, T(-7));
    for (int p = 0; p < n_; ++p) {
      auto m = message<T>(me_, p, sc[p]);
      std::copy(m.begin(), m.end(), send.begin() + static_cast<std::ptrdiff_t>(sd[p]));
    }
    if (async) {
      braid::Work w = comm_.all_to_allv_async(send.data(), sc, sd, recv.data(), rc, rd, type);
      std::atomic<int> called{0};
      w.then([&](std::exception_ptr e) { called += e ? 100 : 1; });
      w.wait();
      // The callback runs on the thread that completed the operation, which
      // may still be on its way to it when wait() returns.
      for (int i = 0; i < 5000 && called.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      tally_.record(called.load() == 1, "Work::then after all_to_allv_async ran once without error");
      int late = 0;
      w.then([&](std::exception_ptr e) { late += e ? 100 : 1; });  // done already: runs here, now
      tally_.record(late == 1, "Work::then on a finished operation runs at once");
    } else {
      comm_.all_to_allv(send.data(), sc, sd, recv.data(), rc, rd, type);
    }
    bool ok = true;
    std::vector<bool> written(recv_extent, false);
    for (int p = 0; p < n_; ++p) {
      ok = ok && is_message(recv.data() + rd[p], p, me_, rc[p]);
      for (std::size_t i = 0; i < rc[p]; ++i) written[rd[p] + i] = true;
    }
    for (std::size_t i = 0; i < recv_extent; ++i) ok = ok && (written[i] || recv[i] == T(-7));  // gaps untouched
    tally_.record(ok, std::string("all_to_allv ") + std::string(braid::name_of(type)) + " max " + std::to_string(max) +
                          (async ? " async" : ""));
  }

  void all_gatherv(std::mt19937& rng, std::size_t max, bool in_place) {
    Counts rc(n_);
    for (auto& c : rc) c = rng() % 3 == 0 ? 0 : rng() % (max + 1);
    std::size_t extent = 0;
    const Counts rd = displacements(rc, rng, &extent);
    std::vector<float> recv(extent, -1.f), mine = message<float>(me_, 0, rc[me_]);
    const float* send = mine.data();
    if (in_place) {
      std::copy(mine.begin(), mine.end(), recv.begin() + static_cast<std::ptrdiff_t>(rd[me_]));
      send = recv.data() + rd[me_];
    }
    comm_.all_gatherv(send, rc[me_], recv.data(), rc, rd, DataType::f32);
    bool ok = true;
    for (int p = 0; p < n_; ++p) ok = ok && is_message(recv.data() + rd[p], p, 0, rc[p]);
    tally_.record(ok, std::string("all_gatherv") + (in_place ? " in place" : ""));
  }

  void reduce_scatterv(std::mt19937& rng, std::size_t max, ReduceOp op, bool in_place) {
    Counts rc(n_);
    for (auto& c : rc) c = rng() % 3 == 0 ? 0 : rng() % (max + 1);
    const std::size_t total = std::accumulate(rc.begin(), rc.end(), std::size_t{0});
    const std::size_t before = std::accumulate(rc.begin(), rc.begin() + me_, std::size_t{0});
    // Element i of every rank's input is (rank + 1) * (i % 5 + 1): sums are exact.
    std::vector<double> send(total);
    for (std::size_t i = 0; i < total; ++i) send[i] = (me_ + 1) * static_cast<double>(i % 5 + 1);
    std::vector<double> recv(rc[me_], -1.);
    double* out = in_place ? send.data() + before : recv.data();
    comm_.reduce_scatterv(send.data(), out, rc, DataType::f64, op);
    const double ranks_sum = n_ * (n_ + 1) / 2.0;
    bool ok = true;
    for (std::size_t i = 0; i < rc[me_]; ++i) {
      const double unit = static_cast<double>((before + i) % 5 + 1);
      const double want = op == ReduceOp::avg ? unit * ranks_sum / n_ : op == ReduceOp::max ? unit * n_ : unit * ranks_sum;
      ok = ok && out[i] == want;
    }
    tally_.record(ok, std::string("reduce_scatterv ") + std::string(braid::name_of(op)) + (in_place ? " in place" : ""));
  }

  void gatherv_scatterv(std::mt19937& rng, std::size_t max, int root) {
    Counts c(n_);
    for (auto& x : c) x = rng() % 3 == 0 ? 0 : rng() % (max + 1);
    std::size_t extent = 0;
    const Counts d = displacements(c, rng, &extent);
    // gatherv: rank p contributes message(p, root).
    std::vector<std::int32_t> all(extent, -1);
    auto mine = message<std::int32_t>(me_, root, c[me_]);
    comm_.gatherv(mine.data(), c[me_], me_ == root ? all.data() : nullptr, me_ == root ? c : Counts{},
                  me_ == root ? d : Counts{}, DataType::i32, root);
    bool ok = true;
    if (me_ == root)
      for (int p = 0; p < n_; ++p) ok = ok && is_message(all.data() + d[p], p, root, c[p]);
    tally_.record(ok, "gatherv root " + std::to_string(root));
    // scatterv back: rank p gets message(root, p).
    std::vector<std::int32_t> source(extent, -1), back(c[me_], -1);
    if (me_ == root)
      for (int p = 0; p < n_; ++p) {
        auto m = message<std::int32_t>(root, p, c[p]);
        std::copy(m.begin(), m.end(), source.begin() + static_cast<std::ptrdiff_t>(d[p]));
      }
    braid::Work w = comm_.scatterv_async(me_ == root ? source.data() : nullptr, me_ == root ? c : Counts{},
                                         me_ == root ? d : Counts{}, back.data(), c[me_], DataType::i32, root);
    w.wait();
    tally_.record(is_message(back.data(), root, me_, c[me_]), "scatterv_async root " + std::to_string(root));
  }

  template <typename Call>
  void expect_invalid(const std::string& what, const std::string& must_say, Call&& call) {
    try {
      call();
      tally_.record(false, what + ": no error");
    } catch (const braid::InvalidArgument& e) {
      const bool says = std::string(e.what()).find(must_say) != std::string::npos;
      if (!says) std::fprintf(stderr, "rank %d: %s: message was: %s\n", me_, what.c_str(), e.what());
      tally_.record(says, what);
    }
  }

  void bad_arguments() {
    std::vector<float> a(64), b(64);
    Counts ones(n_, 1), wrong(n_ + 1, 1), overlapping(n_, 0);
    // Two blocks at one place.
    expect_invalid("all_to_allv with overlapping recv blocks", "overlap", [&] {
      comm_.all_to_allv(a.data(), ones, {}, b.data(), ones, overlapping, DataType::f32);
    });
    expect_invalid("all_to_allv with counts for the wrong rank count", "entries", [&] {
      comm_.all_to_allv(a.data(), wrong, {}, b.data(), ones, {}, DataType::f32);
    });
    expect_invalid("all_to_allv with a negative count cast to size_t", "too large", [&] {
      Counts negative(n_, 1);
      negative[0] = static_cast<std::size_t>(-1);
      comm_.all_to_allv(a.data(), negative, {}, b.data(), ones, {}, DataType::f32);
    });
    expect_invalid("all_gatherv whose send_count disagrees with recv_counts", "send_count", [&] {
      comm_.all_gatherv(a.data(), 2, b.data(), ones, {}, DataType::f32);
    });
    expect_invalid("group_end without group_start", "without a matching", [] { braid::group_end(); });
    if (n_ > 1) {
      const int right = (me_ + 1) % n_, left = (me_ + n_ - 1) % n_;
      expect_invalid("waiting inside an open group", "still open", [&] {
        braid::group([&] {
          braid::Work w = comm_.recv_async(a.data(), 4, DataType::f32, left);
          comm_.send(b.data(), 4, DataType::f32, right);
          w.wait();
        });
      });
      expect_invalid("a group receiving twice into the same bytes", "overlap", [&] {
        braid::group([&] {
          comm_.recv(a.data(), 8, DataType::f32, left);
          comm_.recv(a.data() + 4, 8, DataType::f32, left);
        });
      });
      // The calls of the failed group were never issued on any rank, and every
      // rank failed the same way, so the point-to-point numbering moved in step:
      // the communicator still works.
      ring(5, true);
    }
  }

 private:
  braid::Comm& comm_;
  Tally& tally_;
  int me_, n_;
};

}  // namespace

int main() {
  try {
    braid::Comm comm = braid::Comm::from_env();
    const int n = comm.size();
    Tally tally;
    tally.rank = comm.rank();
    Checker c(comm, tally);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{300000}}) {
      c.ring(count, true);
      c.ring(count, false);
    }
    c.grouped_all_to_all(0);
    c.grouped_all_to_all(1001);
    c.half_grouped(77);
    c.sendrecv(3);
    c.sendrecv(100000);
    std::mt19937 rng(1234);  // the same sequence on every rank
    for (int round = 0; round < 6; ++round) {
      c.all_to_allv<float>(rng, DataType::f32, 50, round % 2 == 1);
      c.all_to_allv<std::int64_t>(rng, DataType::i64, 3, false);
      c.all_gatherv(rng, 40, round % 2 == 0);
      c.reduce_scatterv(rng, 30, round % 3 == 0 ? ReduceOp::sum : round % 3 == 1 ? ReduceOp::max : ReduceOp::avg,
                        round % 2 == 1);
      c.gatherv_scatterv(rng, 20, round % n);
    }
    c.all_to_allv<std::uint8_t>(rng, DataType::u8, 400000, false);  // blocks of several hundred KiB
    c.bad_arguments();

    // Counts that disagree: rank 0 sends rank 1 one element more than rank 1
    // expects. Both fail naming the other; the rest hear of it. On a split-off
    // communicator, so a failure cannot leave the world one stuck.
    if (n > 1) {
      braid::Comm child = comm.split(0, comm.rank());
      Counts sc(n, 2), rc(n, 2);
      if (comm.rank() == 0) sc[1] = 3;
      std::vector<float> a(4 * n), b(4 * n);
      // Rank 1 receives the odd message and must say so; the others may have
      // had all they needed from rank 1 before it gave up.
      try {
        child.all_to_allv(a.data(), sc, {}, b.data(), rc, {}, DataType::f32);
        tally.record(comm.rank() != 1, "all_to_allv with disagreeing counts: no error");
      } catch (const braid::Error& e) {
        const std::string what = e.what();
        const bool names = comm.rank() != 1 || what.find("12 bytes") != std::string::npos;
        if (!names) std::fprintf(stderr, "rank %d: mismatch message: %s\n", comm.rank(), e.what());
        tally.record(names, "all_to_allv with disagreeing counts fails");
      }
    }
    std::printf("rank %d: %d group and uneven cases, %d failed\n", tally.rank, tally.cases, tally.failed);
    return tally.failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "group_uneven_check: %s\n", e.what());
    return 1;
  }
}
