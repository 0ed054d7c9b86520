// Communicator creation and argument checking, in one process: a 1-rank
// communicator, and 2-3 rank communicators whose ranks are threads.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <stdexcept>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "braid/braid.h"
#include "braid/braid.hpp"
#include "core/settings.hpp"
#include "core/text.hpp"
#include "core/socket.hpp"
#include "comm/flight_recorder.hpp"

using namespace braid;

namespace {

CommOptions quick(int ms = 5000) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(ms);
  return o;
}

// A free loopback port (bound and released; fine for tests on one machine).
std::string free_store_addr() {
  Fd fd = listen_tcp(resolve(HostPort{"127.0.0.1", 0}, "test").front(), "test");
  return "127.0.0.1:" + std::to_string(local_address(fd.get()).port());
}

// Catch2's assertions are not thread-safe, so rank threads check with these
// and throw; run_ranks rethrows on the test's thread, where Catch reports it.
void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}
template <typename Fn>
void expect_throws_with(Fn fn, const std::string& needle) {
  try {
    fn();
  } catch (const Error& e) {
    if (std::string(e.what()).find(needle) != std::string::npos) return;
    throw std::runtime_error("expected an error containing '" + needle + "', got: " + e.what());
  }
  throw std::runtime_error("expected an error containing '" + needle + "', got none");
}

template <typename Body>
void run_ranks(int n, Body body, int timeout_ms = 5000) {
  std::string addr = free_store_addr();
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < n; ++r)
    ranks.push_back(std::async(std::launch::async, [=] {
      Comm comm = Comm::init(addr, r, n, quick(timeout_ms));
      body(comm);
    }));
  for (auto& f : ranks) f.get();
}

}  // namespace

namespace {

// Every collective on a communicator of one rank (made by init, or by a
// split with a color no other rank uses) copies its input: in place, out of
// place, blocking and asynchronous. Runs on a rank thread, hence expect().
void check_single_rank(Comm& comm) {
  expect(comm.rank() == 0 && comm.size() == 1, "a single-rank communicator is rank 0 of 1");
  const std::vector<float> in = {1, 2, 3};
  auto same = [&](const std::vector<float>& out, const std::string& what) { expect(out == in, what + " copies its input"); };
  std::vector<float> out(3), inplace;
  comm.all_reduce(in.data(), out.data(), 3, DataType::f32, ReduceOp::sum);
  same(out, "all_reduce");
  for (ReduceOp op : {ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg}) {
    inplace = in;
    comm.all_reduce(inplace.data(), inplace.data(), 3, DataType::f32, op);
    same(inplace, cat("in-place all_reduce ", name_of(op)));
  }
  out.assign(3, 0);
  comm.broadcast(in.data(), out.data(), 3, DataType::f32, 0);
  same(out, "broadcast");
  out.assign(3, 0);
  comm.reduce(in.data(), out.data(), 3, DataType::f32, ReduceOp::max, 0);
  same(out, "reduce");
  out.assign(3, 0);
  comm.all_gather(in.data(), out.data(), 3, DataType::f32);
  same(out, "all_gather");
  out.assign(3, 0);
  comm.reduce_scatter(in.data(), out.data(), 3, DataType::f32, ReduceOp::sum);
  same(out, "reduce_scatter");
  out.assign(3, 0);
  comm.all_to_all(in.data(), out.data(), 3, DataType::f32);
  same(out, "all_to_all");
  out.assign(3, 0);
  comm.gather(in.data(), out.data(), 3, DataType::f32, 0);
  same(out, "gather");
  out.assign(3, 0);
  comm.scatter(in.data(), out.data(), 3, DataType::f32, 0);
  same(out, "scatter");
  inplace = in;
  comm.all_gather(inplace.data(), inplace.data(), 3, DataType::f32);
  same(inplace, "in-place all_gather");
  comm.all_reduce(nullptr, nullptr, 0, DataType::f32, ReduceOp::sum);
  comm.barrier();
  out.assign(3, 0);
  std::vector<float> out2(3);
  Work w1 = comm.all_reduce_async(in.data(), out.data(), 3, DataType::f32, ReduceOp::sum);
  Work w2 = comm.all_to_all_async(in.data(), out2.data(), 3, DataType::f32);
  Work w3 = comm.barrier_async();
  expect(w3.wait() && w2.wait() && w1.wait(), "async work on one rank completes");
  same(out, "all_reduce_async");
  same(out2, "all_to_all_async");
  expect_throws_with([&] { comm.send(in.data(), 3, DataType::f32, 0); }, "peer 0 is this rank itself");
  expect(comm.describe().find("rank 0 of 1") != std::string::npos, comm.describe());
}

}  // namespace

TEST_CASE("a single-rank communicator runs every collective") {
  Comm comm = Comm::init("127.0.0.1:0", 0, 1, quick());
  CHECK(comm.valid());
  check_single_rank(comm);
}

TEST_CASE("bad arguments name what was wrong") {
  Comm comm = Comm::init("127.0.0.1:0", 0, 1, quick());
  std::vector<float> buf(8);
  CHECK_THROWS_WITH(comm.all_reduce(nullptr, buf.data(), 8, DataType::f32, ReduceOp::sum),
                    Catch::Contains("send buffer is null but count is 8"));
  CHECK_THROWS_AS(comm.all_reduce(buf.data(), buf.data(), 8, static_cast<DataType>(42), ReduceOp::sum), InvalidArgument);
  CHECK_THROWS_WITH(comm.all_reduce(buf.data(), buf.data(), 8, DataType::f32, static_cast<ReduceOp>(9)),
                    Catch::Contains("unknown reduction operator"));
  CHECK_THROWS_WITH(comm.all_reduce(buf.data(), buf.data() + 1, 4, DataType::f32, ReduceOp::sum),
                    Catch::Contains("overlap"));
  CHECK_THROWS_WITH(comm.broadcast(buf.data(), buf.data(), 8, DataType::f32, 1), Catch::Contains("root 1 is outside [0, 1)"));
  CHECK_THROWS_WITH(comm.broadcast(buf.data(), nullptr, 8, DataType::f32, 0), Catch::Contains("recv buffer is null"));
  std::vector<float> shorter(4);
  CHECK_THROWS_WITH(comm.all_reduce(std::span<const float>(buf), std::span(shorter), ReduceOp::sum),
                    Catch::Contains("send span has 8 elements but recv span has 4"));
  // Count 0 with null buffers is fine.
  comm.all_reduce(nullptr, nullptr, 0, DataType::f32, ReduceOp::sum);
}

TEST_CASE("creating a communicator rejects bad ranks and addresses") {
  CHECK_THROWS_WITH(Comm::init("127.0.0.1:0", 2, 2, quick()), Catch::Contains("rank 2 is outside [0, 2)"));
  CHECK_THROWS_WITH(Comm::init("127.0.0.1:0", -1, 2, quick()), Catch::Contains("rank -1 is outside"));
  CHECK_THROWS_WITH(Comm::init("no-such-host.invalid:29500", 1, 2, quick(1000)), Catch::Contains("does not resolve"));
  CHECK_THROWS_WITH(Comm::init("127.0.0.1", 0, 1, quick()), Catch::Contains("no port"));
  CHECK_THROWS_WITH(Comm::init("127.0.0.1:0", 0, 2, quick()), Catch::Contains("only works for a single rank"));
}

TEST_CASE("a store port in use is reported by rank 0") {
  Fd holder = listen_tcp(resolve(HostPort{"127.0.0.1", 0}, "test").front(), "test");
  std::string addr = "127.0.0.1:" + std::to_string(local_address(holder.get()).port());
  CHECK_THROWS_WITH(Comm::init(addr, 0, 2, quick(1000)), Catch::Contains("cannot host the braid store") &&
                                                             Catch::Contains("in use"));
}

TEST_CASE("ranks that never arrive are named, within the timeout") {
  std::string addr = free_store_addr();
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(Comm::init(addr, 0, 3, quick(800)), Catch::Contains("ranks 1, 2 of 3 did not join"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("a rank whose store never comes up times out naming the store") {
  std::string addr = free_store_addr();
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(Comm::init(addr, 1, 2, quick(800)), Catch::Contains(addr));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("ranks as threads all-reduce, broadcast and barrier") {
  for (int n : {2, 3}) {
    run_ranks(n, [n](Comm& comm) {
      std::vector<std::int32_t> v(1000);
      std::iota(v.begin(), v.end(), comm.rank());
      comm.all_reduce(std::span(v), ReduceOp::sum);
      for (int i = 0; i < 1000; ++i) expect(v[i] == n * i + n * (n - 1) / 2, "v[i] == n * i + n * (n - 1) / 2");
      std::vector<double> w(100, comm.rank() == n - 1 ? 2.5 : 0.0);
      comm.broadcast(std::span(w), n - 1);
      for (double x : w) expect(x == 2.5, "x == 2.5");
      comm.barrier();
    });
  }
}

// ncclResult_t's numbers (nccl.h) for the meanings braid shares, so that a
// port casting NCCL's codes compares them rightly; braid's own from 16.
TEST_CASE("braid_result_t carries NCCL's numbers, and ErrorCode braid_result_t's") {
  static_assert(braid_success == 0);           // ncclSuccess
  static_assert(braid_system_error == 2);      // ncclSystemError
  static_assert(braid_internal_error == 3);    // ncclInternalError
  static_assert(braid_invalid_argument == 4);  // ncclInvalidArgument
  static_assert(braid_invalid_usage == 5);     // ncclInvalidUsage
  static_assert(braid_remote_error == 6);      // ncclRemoteError
  static_assert(braid_peer_lost == braid_remote_error);
  static_assert(braid_in_progress == 7);       // ncclInProgress
  for (braid_result_t own : {braid_timeout, braid_protocol_error, braid_aborted, braid_unsupported}) CHECK(own >= 16);
  const std::pair<ErrorCode, braid_result_t> same[] = {
      {ErrorCode::system, braid_system_error},     {ErrorCode::internal, braid_internal_error},
      {ErrorCode::invalid_argument, braid_invalid_argument}, {ErrorCode::invalid_usage, braid_invalid_usage},
      {ErrorCode::peer_lost, braid_peer_lost},     {ErrorCode::timeout, braid_timeout},
      {ErrorCode::protocol, braid_protocol_error}, {ErrorCode::aborted, braid_aborted},
      {ErrorCode::unsupported, braid_unsupported}};
  for (auto [code, result] : same) {
    CHECK(static_cast<int>(code) == static_cast<int>(result));
    CHECK(std::string(braid_get_error_string(result)) == std::string(name_of(code)));
  }
  // Misuse is its own code, and still an InvalidArgument to a C++ handler.
  CHECK(braid_group_end() == braid_invalid_usage);
  CHECK_THROWS_AS(Comm().barrier(), InvalidArgument);
  try {
    Comm().barrier();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_usage);
  }
}

TEST_CASE("the C ABI reports errors as codes with a message") {
  braid_comm_t comm = nullptr;
  CHECK(braid_all_reduce(nullptr, nullptr, 1, braid_f32, braid_sum, nullptr) == braid_invalid_argument);
  CHECK(std::string(braid_last_error()).find("NULL") != std::string::npos);
  CHECK(std::string(braid_get_error_string(braid_timeout)) == "timeout");
  braid_unique_id_t id;
  REQUIRE(braid_get_unique_id(&id) == braid_success);
  REQUIRE(braid_comm_init_rank(&comm, 1, id, 0) == braid_success);
  int rank = -1, count = -1;
  CHECK(braid_comm_rank(comm, &rank) == braid_success);
  CHECK(braid_comm_count(comm, &count) == braid_success);
  CHECK(rank == 0);
  CHECK(count == 1);
  float x[4] = {1, 2, 3, 4};
  CHECK(braid_all_reduce(x, x, 4, braid_f32, braid_max, comm) == braid_success);
  CHECK(braid_all_reduce(x, x, 4, static_cast<braid_datatype_t>(77), braid_max, comm) == braid_invalid_argument);
  CHECK(std::string(braid_last_error()).find("77") != std::string::npos);
  CHECK(braid_broadcast(x, x, 4, braid_f32, 3, comm) == braid_invalid_argument);
  char state[2048];
  CHECK(braid_comm_dump_state(comm, state, sizeof state) == braid_success);
  CHECK(std::string(state).find("all_reduce(f32 max, 4 elements): done") != std::string::npos);
  CHECK(braid_comm_dump_state(comm, state, 0) == braid_invalid_argument);
  braid_result_t async = braid_internal_error;
  CHECK(braid_comm_get_async_error(comm, &async) == braid_success);
  CHECK(async == braid_success);
  CHECK(braid_comm_abort(comm) == braid_success);
  CHECK(braid_comm_get_async_error(comm, &async) == braid_success);
  CHECK(async == braid_aborted);
  CHECK(std::string(braid_last_error()).find("aborted by the application") != std::string::npos);
  CHECK(braid_all_reduce(x, x, 4, braid_f32, braid_max, comm) == braid_aborted);
  CHECK(braid_comm_destroy(comm) == braid_success);
  braid_unique_id_t junk;
  std::memset(&junk, 0x5a, sizeof junk);
  braid_comm_t none = nullptr;
  CHECK(braid_comm_init_rank(&none, 2, junk, 0) == braid_invalid_argument);
  CHECK(none == nullptr);
}

TEST_CASE("async operations complete in issue order and overlap the caller") {
  run_ranks(3, [](Comm& comm) {
    const int n = comm.size();
    std::vector<std::vector<std::int64_t>> bufs(6, std::vector<std::int64_t>(50000));
    std::vector<Work> works;
    for (std::size_t k = 0; k < bufs.size(); ++k) {
      std::fill(bufs[k].begin(), bufs[k].end(), static_cast<std::int64_t>(k + 1) * (comm.rank() + 1));
      works.push_back(comm.all_reduce_async(std::span(bufs[k]), ReduceOp::sum));
    }
    // Wait in reverse order; a Work dropped unwaited still completes.
    for (std::size_t k = works.size(); k-- > 1;) expect(works[k].wait(), "works[k].wait()");
    works.front() = Work();
    comm.barrier();  // runs after everything queued before it
    for (std::size_t k = 0; k < bufs.size(); ++k)
      for (auto v : bufs[k]) expect(v == static_cast<std::int64_t>(k + 1) * n * (n + 1) / 2, "v == static_cast<std::int64_t>(k + 1) * n * (n + 1) / 2");
    Work b = comm.barrier_async();
    while (!b.test()) std::this_thread::yield();
    expect(b.error() == nullptr, "b.error() == nullptr");
  });
}

TEST_CASE("point-to-point messages match in issue order; self and out-of-range peers are refused") {
  run_ranks(2, [](Comm& comm) {
    std::vector<float> a(1000), b(1000);
    if (comm.rank() == 0) {
      std::fill(a.begin(), a.end(), 1.f);
      std::fill(b.begin(), b.end(), 2.f);
      Work w = comm.send_async(a.data(), a.size(), DataType::f32, 1);
      comm.send(b.data(), b.size(), DataType::f32, 1);
      expect(w.wait(), "w.wait()");
      expect_throws_with([&] { comm.send(a.data(), 1, DataType::f32, 0); }, "peer 0 is this rank itself");
      expect_throws_with([&] { comm.recv(a.data(), 1, DataType::f32, 5); }, "peer 5 is outside [0, 2)");
    } else {
      comm.recv(a.data(), a.size(), DataType::f32, 0);
      comm.recv(b.data(), b.size(), DataType::f32, 0);
      expect(a[999] == 1.f, "a[999] == 1.f");
      expect(b[0] == 2.f, "b[0] == 2.f");
    }
    comm.barrier();
  });
}

TEST_CASE("point-to-point messages match per direction: both sides may send first") {
  run_ranks(2, [](Comm& comm) {
    const int peer = 1 - comm.rank();
    for (int round = 0; round < 3; ++round) {
      std::int32_t mine = comm.rank() * 100 + round, theirs = -1;
      comm.send(&mine, 1, DataType::i32, peer);
      comm.recv(&theirs, 1, DataType::i32, peer);
      expect(theirs == peer * 100 + round, cat("round ", round, ": got ", theirs));
    }
    // Asynchronous, two messages each way in flight, after an uneven count
    // of sends and receives on each side.
    std::vector<float> a(5000, static_cast<float>(comm.rank())), b(7, 2.f), ra(5000), rb(7);
    Work s1 = comm.send_async(a.data(), a.size(), DataType::f32, peer);
    Work s2 = comm.send_async(b.data(), b.size(), DataType::f32, peer);
    Work r1 = comm.recv_async(ra.data(), ra.size(), DataType::f32, peer);
    Work r2 = comm.recv_async(rb.data(), rb.size(), DataType::f32, peer);
    expect(r2.wait() && r1.wait() && s2.wait() && s1.wait(), "the exchange completes");
    expect(ra[4999] == static_cast<float>(peer) && rb[0] == 2.f, "each message arrived in order");
  });
}

TEST_CASE("split makes independent sub-communicators ordered by key") {
  run_ranks(4, [](Comm& comm) {
    const int r = comm.rank();
    Comm half = comm.split(r % 2, -r);  // keys reverse the order inside each half
    expect(half.size() == 2, "half.size() == 2");
    expect(half.rank() == (r < 2 ? 1 : 0), "half.rank() == (r < 2 ? 1 : 0)");
    std::vector<std::int32_t> v(10, r);
    half.all_reduce(std::span(v), ReduceOp::sum);
    expect(v[0] == (r % 2 == 0 ? 0 + 2 : 1 + 3), "v[0] == (r % 2 == 0 ? 0 + 2 : 1 + 3)");
    // The parent still works, and so does the child afterwards.
    std::vector<std::int32_t> w(3, 1);
    comm.all_reduce(std::span(w), ReduceOp::sum);
    expect(w[2] == 4, "w[2] == 4");
    half.barrier();
    // A color nobody else uses makes a communicator of one, as in MPI and NCCL.
    Comm group = comm.split(r == 3 ? 7 : 0, r);
    if (r == 3) {
      check_single_rank(group);
    } else {
      expect(group.size() == 3 && group.rank() == r, "the other three form a group");
      group.barrier();
    }
    // Negative colors other than kNoColor fail on the ranks that passed them,
    // after the exchange, so the others neither wait nor fail.
    if (r == 1) {
      expect_throws_with([&] { comm.split(-2, 0); }, "color -2 must be non-negative or Comm::kNoColor (-1)");
    } else {
      Comm rest = comm.split(1, r);
      expect(rest.size() == 3, "the ranks with a good color form a group");
      rest.barrier();
    }
    comm.barrier();
  });
}

TEST_CASE("split with kNoColor: the rank takes part but joins nothing, and gets an empty Comm") {
  run_ranks(3, [](Comm& comm) {
    const int r = comm.rank();
    Comm child = comm.split(r == 1 ? Comm::kNoColor : 5, -r);
    if (r == 1) {
      expect(!child.valid(), "kNoColor gives an empty Comm");
      std::vector<float> v(4);
      const std::string why = "not a member of any communicator";
      expect_throws_with([&] { (void)child.rank(); }, why);
      expect_throws_with([&] { (void)child.size(); }, why);
      expect_throws_with([&] { (void)child.describe(); }, why);
      expect_throws_with([&] { child.all_reduce(std::span(v), ReduceOp::sum); }, why);
      expect_throws_with([&] { child.barrier_async(); }, why);
      expect_throws_with([&] { child.send(v.data(), 1, DataType::f32, 0); }, why);
      expect_throws_with([&] { child.split(0, 0); }, "kNoColor");
      expect_throws_with([&] { child.abort(); }, why);
      try {
        child.barrier();
        expect(false, "barrier on an empty Comm did not throw");
      } catch (const InvalidArgument&) {
      }
    } else {
      expect(child.valid() && child.size() == 2, "the others form a group of 2");
      expect(child.rank() == (r == 2 ? 0 : 1), "ordered by key");
      std::vector<std::int32_t> v(5, r);
      child.all_reduce(std::span(v), ReduceOp::sum);
      expect(v[4] == 2, "the group of 2 all-reduces");
    }
    // Every rank with kNoColor: everyone gets an empty Comm.
    Comm none = comm.split(Comm::kNoColor, 0);
    expect(!none.valid(), "all kNoColor: all empty");
    // The parent is unaffected, and a moved-from Comm is empty too.
    comm.barrier();
    Comm moved = std::move(comm);
    expect(!comm.valid() && moved.valid(), "moved from: empty");
    expect_throws_with([&] { comm.barrier(); }, "moved from");
    comm = std::move(moved);
    comm.barrier();
  });
  Comm empty;
  CHECK_FALSE(empty.valid());
  CHECK_THROWS_AS(empty.size(), InvalidArgument);
}

TEST_CASE("a parameter server makes one 2-rank communicator per worker by repeated splits") {
  // Rank 0 serves ranks 1-3. Pair p is made by a split that every rank calls:
  // color 0 for the server and worker p, kNoColor for the others. Each pair
  // talks at once on its own communicator while the others go on to the next
  // split, and again at the end, in another order.
  run_ranks(4, [](Comm& comm) {
    const int r = comm.rank(), n = comm.size();
    std::vector<Comm> pairs;  // by worker; the server holds all, a worker its own
    for (int worker = 1; worker < n; ++worker) {
      const bool member = r == 0 || r == worker;
      Comm pair = comm.split(member ? 0 : Comm::kNoColor, r);
      expect(pair.valid() == member, cat("rank ", r, ": pair with worker ", worker, " valid() is ", pair.valid()));
      if (!member) continue;
      expect(pair.size() == 2 && pair.rank() == (r == 0 ? 0 : 1), "the server is rank 0 of each pair");
      std::vector<std::int32_t> msg(1000);
      if (r == 0) {
        std::iota(msg.begin(), msg.end(), worker * 10000);
        pair.send(msg.data(), msg.size(), DataType::i32, 1);
      } else {
        pair.recv(msg.data(), msg.size(), DataType::i32, 0);
        expect(msg[999] == worker * 10000 + 999, "the worker got the server's message");
      }
      pairs.push_back(std::move(pair));
    }
    expect(static_cast<int>(pairs.size()) == (r == 0 ? n - 1 : 1), "one pair per worker");
    // Workers push, the server pulls in reverse order, then answers each.
    std::vector<double> grad(4096, r);
    if (r == 0) {
      for (int worker = n - 1; worker >= 1; --worker) {
        Comm& pair = pairs[static_cast<std::size_t>(worker - 1)];
        pair.recv(grad.data(), grad.size(), DataType::f64, 1);
        expect(grad[4095] == worker, "the server got this worker's gradient");
        std::vector<double> reply(4096, worker + 0.5);
        pair.send(reply.data(), reply.size(), DataType::f64, 1);
      }
    } else {
      pairs[0].send(grad.data(), grad.size(), DataType::f64, 0);
      pairs[0].recv(grad.data(), grad.size(), DataType::f64, 0);
      expect(grad[0] == r + 0.5, "the worker got its answer");
      std::vector<float> both = {static_cast<float>(r)};
      pairs[0].all_reduce(std::span(both), ReduceOp::sum);
      expect(both[0] == static_cast<float>(r), "the pair all-reduces: server 0 + worker r");
    }
    if (r == 0)
      for (auto& pair : pairs) {
        std::vector<float> both = {0};
        pair.all_reduce(std::span(both), ReduceOp::sum);
      }
    comm.barrier();
  }, 20000);
}

TEST_CASE("abort fails the peers promptly, naming the rank that gave up") {
  const auto start = std::chrono::steady_clock::now();
  run_ranks(3, [](Comm& comm) {
    std::vector<float> v(1 << 16, 1.f);
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      comm.abort();
      expect_throws_with([&] { comm.barrier(); }, "unusable");
    } else {
      // These wait for rank 0; its abort must reach them as PeerLost well
      // before their 20 s timeout.
      expect_throws_with([&] { comm.all_reduce(std::span(v), ReduceOp::sum); }, "rank 0");
    }
  }, 20000);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  // A new communicator works after an aborted one.
  run_ranks(2, [](Comm& comm) { comm.barrier(); });
}

TEST_CASE("abort from another thread unblocks a waiting operation") {
  run_ranks(2, [](Comm& comm) {
    std::vector<float> v(16);
    if (comm.rank() == 0) {
      std::jthread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        comm.abort();
      });
      // Rank 1 never sends: only the abort ends this wait.
      expect_throws_with([&] { comm.recv(v.data(), v.size(), DataType::f32, 1); }, "aborted by the application");
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));  // rank 0 has aborted by now
      expect_throws_with([&] { comm.barrier(); }, "rank 0");
    }
  }, 20000);
}

TEST_CASE("ranks that call different collectives are told what each side called") {
  std::vector<std::string> errors(2);
  std::mutex m;
  run_ranks(2, [&](Comm& comm) {
    std::vector<float> v(1024, 1.f);
    try {
      if (comm.rank() == 0) comm.all_reduce(std::span(v), ReduceOp::sum);
      else comm.broadcast(std::span(v), 1);  // the root only sends: it may finish
      comm.barrier();                         // ...and then learn of the mismatch here
    } catch (const ProtocolMismatch& e) {
      std::lock_guard lock(m);
      errors[static_cast<std::size_t>(comm.rank())] = e.what();
    } catch (const PeerLost& e) {  // told by the other rank, which saw the mismatch first
      std::lock_guard lock(m);
      errors[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  }, 10000);
  // The receiving side explains the mismatch in full; the other learns it from
  // the abort notice, which carries the same explanation.
  std::string both = errors[0] + "\n" + errors[1];
  INFO(both);
  CHECK(both.find("called broadcast(f32, 1024 elements, root 1") != std::string::npos);
  CHECK(both.find("this rank called all_reduce(f32 sum, 1024 elements") != std::string::npos);
  CHECK(!errors[0].empty());
  CHECK(!errors[1].empty());
}

TEST_CASE("the flight recorder says what ran and whom a stuck operation waits on") {
  run_ranks(2, [](Comm& comm) {
    std::vector<float> v(64, 1.f);
    comm.all_reduce(std::span(v), ReduceOp::sum);
    comm.barrier();
    std::string after = comm.dump_state();
    expect(after.find("all_reduce(f32 sum, 64 elements): done") != std::string::npos, after);
    expect(after.find("barrier: done") != std::string::npos, after);
    expect(comm.async_error() == nullptr, "no error yet");
    if (comm.rank() == 0) {
      // Rank 1 never answers this receive: the dump names the wait.
      Work w = comm.recv_async(v.data(), v.size(), DataType::f32, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      std::string stuck = comm.dump_state();
      expect(stuck.find("recv(f32 from rank 1, 64 elements): running for") != std::string::npos, stuck);
      expect(stuck.find("waiting on recv from rank 1") != std::string::npos, stuck);
      comm.abort();
      expect_throws_with([&] { w.wait(); }, "aborted");
      expect(comm.async_error() != nullptr, "the abort is the communicator's error");
      expect(comm.dump_state().find("FAILED") != std::string::npos, comm.dump_state());
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));  // stay connected while rank 0 looks
    }
  }, 10000);
}

TEST_CASE("BRAID_DUMP_ON_SIGNAL names a usable signal") {
  CHECK(parse_signal("USR1") == SIGUSR1);
  CHECK(parse_signal("SIGUSR2") == SIGUSR2);
  CHECK(parse_signal("10") == 10);
  CHECK_THROWS_WITH(parse_signal("KILL"), Catch::Contains("BRAID_DUMP_ON_SIGNAL='KILL'"));
  CHECK_THROWS_AS(parse_signal("9"), InvalidArgument);
}

// ---- a communicator's life --------------------------------------------------------

TEST_CASE("aborting or breaking a split child leaves its parent and siblings working") {
  run_ranks(3, [](Comm& comm) {
    const int r = comm.rank();
    {
      Comm child = comm.split(0, r);
      Comm sibling = comm.split(0, -r);
      int one = 1, sum = 0;
      child.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum);
      child.abort();
      expect_throws_with([&] { child.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum); }, "");
      sum = 0;
      sibling.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum);
      expect(sum == 3, cat("the sibling's sum after the child's abort: ", sum));
    }
    {
      // Ranks that call different collectives on a child: it fails with a
      // protocol mismatch, on that child only.
      Comm child = comm.split(0, r);
      std::vector<float> v(64, 1.0f);
      try {
        if (r == 0) child.broadcast(v.data(), v.data(), v.size(), DataType::f32, 0);
        else child.all_reduce(v.data(), v.data(), v.size(), DataType::f32, ReduceOp::sum);
      } catch (const Error&) {
      }
    }
    int one = 1, sum = 0;
    comm.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum);
    expect(sum == 3, cat("the parent's sum after its children failed: ", sum));
    Comm again = comm.split(r % 2, r);
    again.barrier();
  }, 10000);
}

TEST_CASE("a finalized communicator refuses every later call, naming it") {
  run_ranks(2, [](Comm& comm) {
    int one = 1, sum = 0;
    comm.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum);
    comm.finalize();
    comm.finalize();  // idempotent
    comm.abort();     // nothing to abort
    expect_throws_with([&] { comm.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum); }, "was finalized");
    expect_throws_with([&] { comm.split(0, 0); }, "was finalized");
    expect_throws_with([&] { (void)comm.describe(); }, "was finalized");
  });
}

TEST_CASE("sendrecv with a bad half sends nothing: the next calls still match") {
  run_ranks(2, [](Comm& comm) {
    const int peer = 1 - comm.rank();
    std::int32_t mine = comm.rank(), theirs = -1;
    // The receive half is bad on every rank (a null buffer): neither half goes.
    expect_throws_with([&] { comm.sendrecv(&mine, 1, peer, nullptr, 1, peer, DataType::i32); }, "null");
    comm.sendrecv(&mine, 1, peer, &theirs, 1, peer, DataType::i32);
    expect(theirs == peer, cat("the next sendrecv got ", theirs));
    int one = 1, sum = 0;
    comm.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum);
    expect(sum == 2, "the next collective");
  });
}

TEST_CASE("a bad argument only the root reads fails every rank at once, naming it") {
  // Without the root's word the others would wait for its data until their
  // timeout, and fail with a Timeout that does not name the buffer.
  run_ranks(3, [](Comm& comm) {
    std::vector<float> v(16);
    expect_throws_with([&] { comm.broadcast(nullptr, v.data(), v.size(), DataType::f32, 1); }, "the root's send");
  }, 20000);
}

TEST_CASE("a process forked after braid started there is told so at its first call") {
  Comm comm = Comm::init(free_store_addr(), 0, 1, quick());
  int one = 1, sum = 0;
  comm.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum);
  const pid_t child = ::fork();
  if (child == 0) {
    int status = 1;
    try {
      comm.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum);
    } catch (const Error& e) {
      status = std::string(e.what()).find("was forked from pid") != std::string::npos ? 0 : 2;
    }
    ::_exit(status);
  }
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The parent goes on.
  comm.all_reduce(&one, &sum, 1, DataType::i32, ReduceOp::sum);
  CHECK(sum == 1);
}
