// Multi-process check of every collective that collective_check.cpp does not
// cover, of point-to-point, of asynchronous work and of split; run by the
// test suite under braid-run with 2 to 5 ranks over real TCP sockets:
//
//   braid-run -n 4 collectives_all_check [--large-mib 4] [--shared-memory]
//
// reduce, reduce_scatter: every type x op; all_gather, all_to_all, gather,
// scatter: every type. Counts 0, 1, odd, not divisible by the rank count and
// (for a few types) several pipeline slices, in place and out of place, roots
// rotating over the ranks; then one large buffer (--large-mib) of each.
// Every rank checks its own output against independently computed values
// (bench/expected_values.hpp), that an out-of-place input was left alone,
// and that nothing was written past the end of any buffer.
// send/recv: ring exchanges, several messages in a row, every pair.
// Async: every kind of operation in flight at once, waited in reverse order
// or polled with test(), and a Work dropped unwaited. Errors: bad arguments
// throw InvalidArgument and leave the communicator usable.
// split: halves, one group in reverse key order, a lone color (a group of
// one), a bad color, kNoColor, and one 2-rank communicator per pair of rank 0
// with another rank, made by one split per pair (a parameter server's links).
// With --exclude, all of it (and all-reduce and broadcast of every type and
// op) runs on a communicator shrunk without the listed ranks, which left or
// were killed (shrunk() below).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.hpp"
#include "tally.hpp"
#include "expected_values.hpp"
#include "host_bytes.hpp"

namespace {

using braid::DataType;
using braid::ReduceOp;
namespace check = braid::check;

constexpr DataType kTypes[] = {DataType::f16, DataType::bf16, DataType::f32, DataType::f64, DataType::i8,
                               DataType::u8,  DataType::i32,  DataType::u32, DataType::i64, DataType::u64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
// Types also run at a count of several pipeline slices.
constexpr DataType kSliceTypes[] = {DataType::bf16, DataType::f64, DataType::i8};
constexpr std::byte kPoison{0xcd};
constexpr std::size_t kGuard = 64;  // poisoned bytes after every buffer

using Tally = braid::check::Tally;

// A poisoned buffer of `bytes` plus a guard; reports writes past the end.
struct Buffer {
  explicit Buffer(std::size_t size) : bytes(size), storage(size + kGuard, kPoison) {}
  std::byte* data() { return storage.data(); }
  bool guard_intact() const {
    for (std::size_t i = bytes; i < storage.size(); ++i)
      if (storage[i] != kPoison) return false;
    return true;
  }
  std::size_t bytes;
  braid::check::HostBytes storage;  // the heap, or --shared-memory: braid::mem_alloc's
};

std::string name(DataType t) { return std::string(braid::name_of(t)); }
std::string name(ReduceOp op) { return std::string(braid::name_of(op)); }

std::string label(const char* op, const std::string& detail, std::size_t count, bool in_place) {
  return std::string(op) + "(" + detail + ", count " + std::to_string(count) + (in_place ? ", in place)" : ")");
}

class Checker {
 public:
  Checker(braid::Comm& comm, Tally& tally) : comm_(comm), tally_(tally), rank_(comm.rank()), n_(comm.size()) {}

  void reduce(DataType t, ReduceOp op, std::size_t count, int root, bool in_place) {
    const std::size_t bytes = count * braid::size_of(t);
    const bool is_root = rank_ == root;
    Buffer send(bytes), recv(bytes), original(bytes);
    check::fill_reduce_input(t, op, rank_, send.data(), count);
    check::fill_reduce_input(t, op, rank_, original.data(), count);
    std::byte* out = in_place ? send.data() : is_root ? recv.data() : nullptr;  // ignored off the root
    comm_.reduce(send.data(), out, count, t, op, root);
    std::size_t wrong = is_root ? check::count_wrong_reduce(t, op, n_, out, count) : 0;
    if (!(in_place && is_root)) wrong += std::memcmp(send.data(), original.data(), bytes) != 0;
    finish(wrong, send.guard_intact() && recv.guard_intact(),
           label("reduce", name(t) + " " + name(op) + ", root " + std::to_string(root), count, in_place));
  }

  void all_reduce(DataType t, ReduceOp op, std::size_t count, bool in_place) {
    const std::size_t bytes = count * braid::size_of(t);
    Buffer send(bytes), recv(bytes), original(bytes);
    check::fill_reduce_input(t, op, rank_, send.data(), count);
    check::fill_reduce_input(t, op, rank_, original.data(), count);
    std::byte* out = in_place ? send.data() : recv.data();
    comm_.all_reduce(send.data(), out, count, t, op);
    std::size_t wrong = check::count_wrong_reduce(t, op, n_, out, count);
    if (!in_place) wrong += std::memcmp(send.data(), original.data(), bytes) != 0;
    finish(wrong, send.guard_intact() && recv.guard_intact(),
           label("all_reduce", name(t) + " " + name(op), count, in_place));
  }

  void broadcast(DataType t, std::size_t count, int root, bool in_place) {
    const std::size_t bytes = count * braid::size_of(t);
    Buffer send(bytes), recv(bytes);
    if (rank_ == root) check::fill_block(t, root, root, send.data(), count);
    std::byte* out = in_place ? send.data() : recv.data();
    comm_.broadcast(send.data(), out, count, t, root);
    std::size_t wrong = check::count_wrong_block(t, root, root, out, count) != 0;
    finish(wrong, send.guard_intact() && recv.guard_intact(),
           label("broadcast", name(t) + ", root " + std::to_string(root), count, in_place));
  }

  void all_gather(DataType t, std::size_t count, bool in_place) {
    const std::size_t block = count * braid::size_of(t);
    Buffer send(block), recv(block * n_);
    std::byte* in = in_place ? recv.data() + block * rank_ : send.data();
    check::fill_block(t, rank_, rank_, in, count);
    comm_.all_gather(in, recv.data(), count, t);
    std::size_t wrong = check::count_wrong_gather(t, n_, recv.data(), count);
    if (!in_place) wrong += check::count_wrong_block(t, rank_, rank_, send.data(), count) != 0;
    finish(wrong, send.guard_intact() && recv.guard_intact(), label("all_gather", name(t), count, in_place));
  }

  void reduce_scatter(DataType t, ReduceOp op, std::size_t count, bool in_place) {
    const std::size_t block = count * braid::size_of(t);
    Buffer send(block * n_), recv(block), original(block * n_);
    check::fill_reduce_input(t, op, rank_, send.data(), count * n_);
    check::fill_reduce_input(t, op, rank_, original.data(), count * n_);
    std::byte* out = in_place ? send.data() + block * rank_ : recv.data();
    comm_.reduce_scatter(send.data(), out, count, t, op);
    std::size_t wrong = check::count_wrong_reduce_scatter(t, op, rank_, n_, out, count);
    if (!in_place) wrong += std::memcmp(send.data(), original.data(), block * n_) != 0;
    finish(wrong, send.guard_intact() && recv.guard_intact(),
           label("reduce_scatter", name(t) + " " + name(op), count, in_place));
  }

  void all_to_all(DataType t, std::size_t count, bool in_place) {
    const std::size_t total = count * braid::size_of(t) * n_;
    Buffer send(total), recv(total), original(total);
    check::fill_all_to_all_input(t, rank_, n_, send.data(), count);
    check::fill_all_to_all_input(t, rank_, n_, original.data(), count);
    std::byte* out = in_place ? send.data() : recv.data();
    comm_.all_to_all(send.data(), out, count, t);
    std::size_t wrong = check::count_wrong_all_to_all(t, rank_, n_, out, count);
    if (!in_place) wrong += std::memcmp(send.data(), original.data(), total) != 0;
    finish(wrong, send.guard_intact() && recv.guard_intact(), label("all_to_all", name(t), count, in_place));
  }

  void gather(DataType t, std::size_t count, int root, bool in_place) {
    const std::size_t block = count * braid::size_of(t);
    const bool is_root = rank_ == root;
    Buffer send(block), recv(block * n_);
    std::byte* in = in_place ? recv.data() + block * rank_ : send.data();
    check::fill_block(t, rank_, rank_, in, count);
    comm_.gather(in, is_root || in_place ? recv.data() : nullptr, count, t, root);
    std::size_t wrong = is_root ? check::count_wrong_gather(t, n_, recv.data(), count) : 0;
    wrong += check::count_wrong_block(t, rank_, rank_, in, count) != 0;  // the input stays as it was
    finish(wrong, send.guard_intact() && recv.guard_intact(),
           label("gather", name(t) + ", root " + std::to_string(root), count, in_place));
  }

  void scatter(DataType t, std::size_t count, int root, bool in_place) {
    const std::size_t block = count * braid::size_of(t);
    const bool is_root = rank_ == root;
    Buffer send(block * n_), recv(block), original(block * n_);
    if (is_root) check::fill_all_to_all_input(t, root, n_, send.data(), count);
    if (is_root) check::fill_all_to_all_input(t, root, n_, original.data(), count);
    std::byte* out = in_place ? send.data() + block * rank_ : recv.data();
    comm_.scatter(is_root || in_place ? send.data() : nullptr, out, count, t, root);
    std::size_t wrong = check::count_wrong_block(t, root, rank_, out, count);
    if (is_root) wrong += std::memcmp(send.data(), original.data(), block * n_) != 0;
    finish(wrong, send.guard_intact() && recv.guard_intact(),
           label("scatter", name(t) + ", root " + std::to_string(root), count, in_place));
  }

  // Each rank sends to the next and receives from the previous. A
  // communicator runs its operations in the order they were started, so even
  // ranks send first and odd ranks receive first (deadlock-free for n >= 2).
  void ring_exchange(DataType t, std::size_t count, bool async) {
    const std::size_t bytes = count * braid::size_of(t);
    const int next = (rank_ + 1) % n_, previous = (rank_ + n_ - 1) % n_;
    Buffer send(bytes), recv(bytes);
    check::fill_block(t, rank_, next, send.data(), count);
    auto do_send = [&] { return comm_.send_async(send.data(), count, t, next); };
    auto do_recv = [&] { return comm_.recv_async(recv.data(), count, t, previous); };
    if (async) {
      std::vector<braid::Work> works;
      works.push_back(rank_ % 2 == 0 ? do_send() : do_recv());
      works.push_back(rank_ % 2 == 0 ? do_recv() : do_send());
      for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
    } else if (rank_ % 2 == 0) {
      comm_.send(send.data(), count, t, next);
      comm_.recv(recv.data(), count, t, previous);
    } else {
      comm_.recv(recv.data(), count, t, previous);
      comm_.send(send.data(), count, t, next);
    }
    finish(check::count_wrong_block(t, previous, rank_, recv.data(), count), send.guard_intact() && recv.guard_intact(),
           label(async ? "ring send_async/recv_async" : "ring send/recv", name(t), count, false));
  }

  // Several messages in a row to the same peer match in the order issued.
  void message_train() {
    const std::size_t counts[] = {5, 0, 1001, 3};
    const int next = (rank_ + 1) % n_, previous = (rank_ + n_ - 1) % n_;
    std::vector<std::vector<std::uint32_t>> out, in;
    for (std::size_t i = 0; i < std::size(counts); ++i) {
      out.emplace_back(counts[i]);
      in.emplace_back(counts[i], 0xcdcdcdcd);
      check::fill_block(DataType::u32, rank_ * 16 + static_cast<int>(i), next, out[i].data(), counts[i]);
    }
    auto sends = [&] {
      for (std::size_t i = 0; i < out.size(); ++i) comm_.send(out[i].data(), out[i].size(), DataType::u32, next);
    };
    auto recvs = [&] {
      for (std::size_t i = 0; i < in.size(); ++i) comm_.recv(in[i].data(), in[i].size(), DataType::u32, previous);
    };
    if (rank_ % 2 == 0) {
      sends();
      recvs();
    } else {
      recvs();
      sends();
    }
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
      wrong += check::count_wrong_block(DataType::u32, previous * 16 + static_cast<int>(i), rank_, in[i].data(), counts[i]);
    finish(wrong, true, "send/recv train of 4 messages");
  }

  // Every pair exchanges once, pairs in one global order (no cycles).
  void all_pairs(std::size_t count) {
    std::size_t wrong = 0;
    for (int a = 0; a < n_; ++a)
      for (int b = a + 1; b < n_; ++b) {
        if (rank_ != a && rank_ != b) continue;
        const int peer = rank_ == a ? b : a;
        std::vector<std::int64_t> out(count), in(count, -1);
        check::fill_block(DataType::i64, rank_, peer, out.data(), count);
        if (rank_ == a) {
          comm_.send(out.data(), count, DataType::i64, peer);
          comm_.recv(in.data(), count, DataType::i64, peer);
        } else {
          comm_.recv(in.data(), count, DataType::i64, peer);
          comm_.send(out.data(), count, DataType::i64, peer);
        }
        wrong += check::count_wrong_block(DataType::i64, peer, rank_, in.data(), count);
      }
    finish(wrong, true, "send/recv between every pair, count " + std::to_string(count));
  }

  // One operation of every kind in flight at once; `poll` waits with test()
  // round-robin instead of wait() in reverse order.
  void async_all_kinds(std::size_t count, bool poll) {
    const std::size_t nc = count * n_;
    const int last = n_ - 1, next = (rank_ + 1) % n_, previous = (rank_ + n_ - 1) % n_;
    std::vector<float> ar(count);
    std::vector<std::int32_t> bc(count, -7);
    std::vector<double> rd(count), rd_out(count, -1);
    std::vector<std::uint8_t> ag(count), ag_out(nc);
    std::vector<braid::BFloat16> rs(nc), rs_out(count);
    std::vector<std::int64_t> a2a(nc), a2a_out(nc);
    std::vector<braid::Float16> ga(count), ga_out(nc);
    std::vector<std::uint32_t> sc(nc), sc_out(count), p2p_out(count), p2p_in(count);
    check::fill_reduce_input(DataType::f32, ReduceOp::sum, rank_, ar.data(), count);
    if (rank_ == last) check::fill_broadcast_input(DataType::i32, last, bc.data(), count);
    check::fill_reduce_input(DataType::f64, ReduceOp::max, rank_, rd.data(), count);
    check::fill_block(DataType::u8, rank_, rank_, ag.data(), count);
    check::fill_reduce_input(DataType::bf16, ReduceOp::sum, rank_, rs.data(), nc);
    check::fill_all_to_all_input(DataType::i64, rank_, n_, a2a.data(), count);
    check::fill_block(DataType::f16, rank_, rank_, ga.data(), count);
    if (rank_ == last) check::fill_all_to_all_input(DataType::u32, last, n_, sc.data(), count);
    check::fill_block(DataType::u32, rank_, next, p2p_out.data(), count);

    std::vector<braid::Work> works;
    works.push_back(comm_.all_reduce_async(std::span(ar), ReduceOp::sum));
    works.push_back(comm_.broadcast_async(bc.data(), bc.data(), count, DataType::i32, last));
    works.push_back(comm_.reduce_async(rd.data(), rd_out.data(), count, DataType::f64, ReduceOp::max, 0));
    if (rank_ % 2 == 0) works.push_back(comm_.send_async(p2p_out.data(), count, DataType::u32, next));
    works.push_back(comm_.recv_async(p2p_in.data(), count, DataType::u32, previous));
    if (rank_ % 2 == 1) works.push_back(comm_.send_async(p2p_out.data(), count, DataType::u32, next));
    works.push_back(comm_.all_gather_async(ag.data(), ag_out.data(), count, DataType::u8));
    works.push_back(comm_.reduce_scatter_async(rs.data(), rs_out.data(), count, DataType::bf16, ReduceOp::sum));
    works.push_back(comm_.all_to_all_async(a2a.data(), a2a_out.data(), count, DataType::i64));
    works.push_back(comm_.gather_async(ga.data(), ga_out.data(), count, DataType::f16, n_ / 2));
    works.push_back(comm_.scatter_async(sc.data(), sc_out.data(), count, DataType::u32, last));
    works.push_back(comm_.barrier_async());
    if (poll) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      std::vector<bool> done(works.size(), false);
      for (std::size_t left = works.size(); left > 0 && std::chrono::steady_clock::now() < give_up;)
        for (std::size_t i = 0; i < works.size(); ++i)
          if (!done[i] && works[i].test()) done[i] = true, --left;
      for (auto& w : works) tally_.record(w.wait(std::chrono::milliseconds(0)), "async: polled work is done");
    } else {
      for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
    }
    std::size_t wrong = check::count_wrong_reduce(DataType::f32, ReduceOp::sum, n_, ar.data(), count);
    wrong += check::count_wrong_broadcast(DataType::i32, last, bc.data(), count);
    if (rank_ == 0) wrong += check::count_wrong_reduce(DataType::f64, ReduceOp::max, n_, rd_out.data(), count);
    wrong += check::count_wrong_block(DataType::u32, previous, rank_, p2p_in.data(), count);
    wrong += check::count_wrong_gather(DataType::u8, n_, ag_out.data(), count);
    wrong += check::count_wrong_reduce_scatter(DataType::bf16, ReduceOp::sum, rank_, n_, rs_out.data(), count);
    wrong += check::count_wrong_all_to_all(DataType::i64, rank_, n_, a2a_out.data(), count);
    if (rank_ == n_ / 2) wrong += check::count_wrong_gather(DataType::f16, n_, ga_out.data(), count);
    wrong += check::count_wrong_block(DataType::u32, last, rank_, sc_out.data(), count);
    finish(wrong, true, std::string("async, every kind in flight, ") + (poll ? "polled" : "waited in reverse") +
                            ", count " + std::to_string(count));
  }

  // A Work destroyed unwaited still completes (operations run in order, so a
  // later blocking one finishing proves it).
  void async_dropped() {
    std::vector<std::int32_t> a(1001), b(17);
    check::fill_reduce_input(DataType::i32, ReduceOp::min, rank_, a.data(), a.size());
    check::fill_reduce_input(DataType::i32, ReduceOp::sum, rank_, b.data(), b.size());
    { braid::Work dropped = comm_.all_reduce_async(std::span(a), ReduceOp::min); }
    comm_.all_reduce(std::span(b), ReduceOp::sum);
    std::size_t wrong = check::count_wrong_reduce(DataType::i32, ReduceOp::min, n_, a.data(), a.size());
    wrong += check::count_wrong_reduce(DataType::i32, ReduceOp::sum, n_, b.data(), b.size());
    finish(wrong, true, "async: a Work dropped unwaited completes");
  }

  // Bad arguments throw InvalidArgument on the spot (every rank passes the
  // same ones) and leave the communicator usable.
  void argument_errors() {
    std::vector<float> v(8);
    expect_invalid([&] { comm_.reduce(v.data(), v.data(), 8, DataType::f32, ReduceOp::sum, n_); }, "reduce root n");
    expect_invalid([&] { comm_.gather(v.data(), v.data(), 1, DataType::f32, -1); }, "gather root -1");
    expect_invalid([&] { comm_.all_gather_async(v.data(), nullptr, 1, DataType::f32); }, "all_gather_async recv NULL");
    expect_invalid([&] { comm_.send(v.data(), 1, DataType::f32, rank_); }, "send to self");
    expect_invalid([&] { comm_.recv_async(v.data(), 1, DataType::f32, n_); }, "recv_async from rank n");
    // Overlapping, but not at this rank's block: no rank's call is in place.
    auto* misaligned = reinterpret_cast<std::byte*>(v.data()) + 2;
    expect_invalid([&] { comm_.reduce_scatter(v.data(), misaligned, 1, DataType::f32, ReduceOp::sum); },
                   "reduce_scatter overlapping buffers");
    expect_invalid([&] { (void)comm_.split(-2, 0); }, "split color -2");
    comm_.barrier();
    all_gather(DataType::f32, 3, false);
    root_refusal();
  }

  // What only the root reads (its send buffer), the others cannot check: the
  // root's refusal fails the communicator on every rank at once, naming the
  // buffer (not a timeout on the others). On a child, so that the parent
  // goes on.
  void root_refusal() {
    std::vector<float> v(8);
    const int root = n_ - 1;
    {
      braid::Comm child = comm_.split(0, rank_);
      const void* send = rank_ == root ? nullptr : v.data();  // ignored off the root
      std::string error;
      try {
        child.scatter_async(send, v.data(), 1, DataType::f32, root).wait();
      } catch (const braid::Error& e) {
        error = e.what();
      }
      tally_.record(error.find("the root's send buffer is null") != std::string::npos,
                    "scatter with the root's send buffer null: every rank fails naming it (got \"" + error + "\")");
    }
    all_gather(DataType::f32, 3, false);  // on the parent
  }

  void split() {
    // Everyone in one group, in reverse key order.
    {
      braid::Comm child = comm_.split(7, -rank_);
      split_group(child, n_, n_ - 1 - rank_, true);
    }
    // Halves; the parent stays usable in between.
    if (n_ >= 4) {
      const int half = n_ / 2;
      const bool upper = rank_ >= half;
      braid::Comm child = comm_.split(upper ? 1 : 0, rank_);
      all_gather(DataType::f32, 5, true);  // on the parent
      split_group(child, upper ? n_ - half : half, upper ? rank_ - half : rank_, false);
    }
    // A lone color makes a communicator of one; the others form a group of
    // n - 1 (with 2 ranks both colors are lone).
    {
      const bool lone = rank_ == n_ - 1 || n_ == 2;
      braid::Comm child = comm_.split(rank_ == n_ - 1 ? 1 : 0, 0);
      split_group(child, lone ? 1 : n_ - 1, lone ? 0 : rank_, false);
    }
    // kNoColor: rank 0 joins nothing, the others form a group.
    {
      braid::Comm child = comm_.split(rank_ == 0 ? braid::Comm::kNoColor : 2, rank_);
      tally_.record(child.valid() == (rank_ != 0), "split: kNoColor gives an empty Comm, a color a member");
      if (rank_ == 0) {
        try {
          child.barrier();
          tally_.record(false, "split: an empty Comm accepted a barrier");
        } catch (const braid::InvalidArgument&) {
          tally_.record(true, "split: an empty Comm refuses work");
        }
      } else {
        split_group(child, n_ - 1, rank_ - 1, false);
      }
    }
    // One communicator per pair (0, p): every rank calls split once per pair,
    // the two members with color 0 and the rest with kNoColor. Each pair talks
    // at once, while the others go on to the next split.
    std::vector<braid::Comm> pairs;
    for (int p = 1; p < n_; ++p) {
      const bool member = rank_ == 0 || rank_ == p;
      braid::Comm pair = comm_.split(member ? 0 : braid::Comm::kNoColor, rank_);
      tally_.record(pair.valid() == member, "split: pair (0, " + std::to_string(p) + ") has exactly its members");
      if (!member || !pair.valid()) continue;
      const int peer = 1 - pair.rank();
      std::vector<std::int64_t> out(3001), in(3001, -1);
      check::fill_block(DataType::i64, rank_, rank_ == 0 ? p : 0, out.data(), out.size());
      braid::Work sent = pair.send_async(out.data(), out.size(), DataType::i64, peer);
      pair.recv(in.data(), in.size(), DataType::i64, peer);
      sent.wait();
      finish(check::count_wrong_block(DataType::i64, rank_ == 0 ? p : 0, rank_, in.data(), in.size()), true,
             "split: send/recv on pair (0, " + std::to_string(p) + ")");
      pairs.push_back(std::move(pair));
    }
    // Then every pair at once, from rank 0's side in reverse order.
    if (rank_ == 0) {
      for (auto it = pairs.rbegin(); it != pairs.rend(); ++it) {
        std::int32_t token = 0;
        it->recv(&token, 1, DataType::i32, 1);
        it->send(&token, 1, DataType::i32, 1);
      }
    } else if (!pairs.empty()) {
      std::int32_t token = rank_, back = -1;
      pairs[0].send(&token, 1, DataType::i32, 0);
      pairs[0].recv(&back, 1, DataType::i32, 0);
      tally_.record(back == rank_, "split: pair echo");
    }
    tally_.record(static_cast<int>(pairs.size()) == (rank_ == 0 ? n_ - 1 : 1), "split: one pair per non-zero rank");
    comm_.barrier();
  }

  int failed() const { return tally_.failed; }

 private:
  void finish(std::size_t wrong, bool guards, const std::string& what) {
    tally_.record(wrong == 0 && guards,
                  what + ": " + std::to_string(wrong) + " wrong" + (guards ? "" : ", wrote past the end of a buffer"));
  }

  void expect_invalid(const std::function<void()>& body, const std::string& what) {
    try {
      body();
      tally_.record(false, what + ": no error");
    } catch (const braid::InvalidArgument&) {
      tally_.record(true, what);
    }
  }

  void split_group(braid::Comm& child, int size, int rank, bool reversed) {
    tally_.record(child.size() == size && child.rank() == rank,
                  "split: rank " + std::to_string(child.rank()) + " of " + std::to_string(child.size()) + ", expected " +
                      std::to_string(rank) + " of " + std::to_string(size));
    Checker inside(child, tally_);
    inside.reduce(DataType::i64, ReduceOp::sum, 1001, size - 1, false);
    std::vector<float> v(4099);
    check::fill_reduce_input(DataType::f32, ReduceOp::avg, child.rank(), v.data(), v.size());
    child.all_reduce(std::span(v), ReduceOp::avg);
    finish(check::count_wrong_reduce(DataType::f32, ReduceOp::avg, size, v.data(), v.size()), true, "split: all_reduce");
    // Parent ranks in child order: ascending, or descending when reversed.
    std::int32_t me = rank_;
    std::vector<std::int32_t> parents(static_cast<std::size_t>(size));
    child.all_gather(&me, parents.data(), 1, DataType::i32);
    bool ordered = true;
    for (std::size_t i = 1; i < parents.size(); ++i)
      ordered &= reversed ? parents[i] < parents[i - 1] : parents[i] > parents[i - 1];
    tally_.record(ordered, "split: members in key order");
  }

  braid::Comm& comm_;
  Tally& tally_;
  int rank_, n_;
};

// --exclude R,R,...: the listed ranks leave (exit 0 after a barrier, or with
// --exclude-how kill, SIGKILL themselves in the middle of an all-reduce), the
// others shrink the communicator without them (after the all-reduce failed,
// with Shrink::abort) and run every check on the shrunk one.
std::vector<int> parse_ranks(const char* text) {
  std::vector<int> out;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    out.push_back(static_cast<int>(std::strtol(p, &end, 10)));
    if (end == p) break;
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

braid::Comm shrunk(braid::Comm& world, const std::vector<int>& excluded, bool kill) {
  const bool leaving = std::find(excluded.begin(), excluded.end(), world.rank()) != excluded.end();
  int first = 0;  // the lowest rank that stays: it shrinks 0.3 s after the others, which dial it first
  while (std::find(excluded.begin(), excluded.end(), first) != excluded.end()) ++first;
  auto shrink = [&](braid::Comm::Shrink mode) {
    if (world.rank() == first) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return world.shrink(excluded, mode);
  };
  world.barrier();
  if (!kill) {
    if (leaving) {
      const int rank = world.rank(), size = world.size();
      world.finalize();
      std::printf("rank %d of %d: excluded, left\n", rank, size);
      std::exit(0);
    }
    return shrink(braid::Comm::Shrink::finish);
  }
  // The excluded ranks die in the middle of a large all-reduce: the others
  // see it fail, then shrink with abort.
  std::vector<float> buffer(std::size_t{1} << 20, 1.0f);
  if (leaving) {
    world.all_reduce_async(buffer.data(), buffer.data(), buffer.size(), DataType::f32, ReduceOp::sum);
    std::fflush(nullptr);
    ::raise(SIGKILL);
  }
  try {
    for (int i = 0; i < 1000; ++i)
      world.all_reduce(buffer.data(), buffer.data(), buffer.size(), DataType::f32, ReduceOp::sum);
    std::fprintf(stderr, "rank %d: the all-reduces did not fail although ranks were killed\n", world.rank());
    std::exit(1);
  } catch (const braid::PeerLost& e) {
    std::printf("rank %d of %d: the all-reduce failed as expected: %.160s\n", world.rank(), world.size(), e.what());
  }
  return shrink(braid::Comm::Shrink::abort);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t large_mib = 4;
  std::vector<int> excluded;
  bool kill = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--large-mib") == 0 && i + 1 < argc) large_mib = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--exclude") == 0 && i + 1 < argc) excluded = parse_ranks(argv[++i]);
    else if (std::strcmp(argv[i], "--shared-memory") == 0) braid::check::g_shared_memory = true;
    else if (std::strcmp(argv[i], "--exclude-how") == 0 && i + 1 < argc) kill = std::strcmp(argv[++i], "kill") == 0;
    else {
      std::fprintf(stderr, "usage: collectives_all_check [--large-mib N] [--exclude R,R,... [--exclude-how exit|kill]]\n");
      return 2;
    }
  }
  try {
    braid::Comm world = braid::Comm::from_env();
    const int world_rank = world.rank(), world_size = world.size();
    braid::Comm comm = excluded.empty() ? std::move(world) : shrunk(world, excluded, kill);
    if (!excluded.empty())
      std::printf("rank %d of %d: now rank %d of %d after excluding %zu rank(s)\n", world_rank, world_size,
                  comm.rank(), comm.size(), excluded.size());
    const int n = comm.size();
    Tally tally;
    tally.rank = comm.rank();
    Checker c(comm, tally);
    const std::size_t n_sz = static_cast<std::size_t>(n);
    const std::vector<std::size_t> counts = {0, 1, 7, n_sz * 13 + 1, 1001};
    const std::size_t slices = 100003;  // with 8-byte elements, two 512 KiB slices per block
    int root = 0;
    auto next_root = [&] { return root = (root + 1) % n; };
    for (bool in_place : {false, true}) {
      for (auto t : kTypes)
        for (auto count : counts) {
          for (auto op : kOps) {
            if (!excluded.empty()) c.all_reduce(t, op, count, in_place);  // collective_check covers them otherwise
            c.reduce(t, op, count, next_root(), in_place);
            c.reduce_scatter(t, op, count, in_place);
          }
          if (!excluded.empty()) c.broadcast(t, count, next_root(), in_place);
          c.all_gather(t, count, in_place);
          c.all_to_all(t, count, in_place);
          c.gather(t, count, next_root(), in_place);
          c.scatter(t, count, next_root(), in_place);
        }
      for (auto t : kSliceTypes) {
        c.reduce(t, ReduceOp::sum, slices, next_root(), in_place);
        c.reduce_scatter(t, ReduceOp::max, slices, in_place);
        c.all_gather(t, slices, in_place);
        c.all_to_all(t, slices, in_place);
        c.gather(t, slices, next_root(), in_place);
        c.scatter(t, slices, next_root(), in_place);
      }
    }
    if (large_mib > 0) {
      // Each buffer holds large_mib MiB in all (n blocks where there are blocks).
      const std::size_t large = large_mib << 20;
      if (!excluded.empty()) {
        c.all_reduce(DataType::f32, ReduceOp::sum, large / 4 + 1, false);
        c.broadcast(DataType::bf16, large / 2 + 1, n / 2, true);
      }
      c.reduce(DataType::f32, ReduceOp::sum, large / 4 + 1, n - 1, false);
      c.reduce_scatter(DataType::bf16, ReduceOp::avg, large / 2 / n_sz, false);
      c.all_gather(DataType::f32, large / 4 / n_sz + 1, true);
      c.all_to_all(DataType::i64, large / 8 / n_sz, false);
      c.gather(DataType::u8, large / n_sz + 3, n / 2, false);
      c.scatter(DataType::f64, large / 8 / n_sz, n - 1, true);
      if (n > 1) c.ring_exchange(DataType::f32, large / 4 + 1, true);
    }
    if (n > 1) {  // point to point needs a peer (a shrink can leave one rank)
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1001}, std::size_t{300007}})
        for (bool async : {false, true}) c.ring_exchange(count % 2 ? DataType::u8 : DataType::f32, count, async);
      c.message_train();
      c.all_pairs(0);
      c.all_pairs(4099);
    }
    for (int i = 0; i < 3; ++i) {
      comm.barrier();
      comm.barrier_async().wait();
    }
    if (n > 1) {  // these mix in point to point too
      for (std::size_t count : counts) c.async_all_kinds(count, false);
      c.async_all_kinds(n_sz * 13 + 1, true);
      c.async_all_kinds(100003, true);
      c.async_dropped();
      // A refused root argument fails every rank through the links and the
      // store; with the store's host (rank 0) gone, a rank not linked to the
      // root yet hears of it only at its timeout (docs/embedding.md).
      const bool store_gone = std::find(excluded.begin(), excluded.end(), 0) != excluded.end();
      if (!store_gone) c.argument_errors();
      c.split();
    }
    std::printf("rank %d of %d: %d cases right, %d wrong\n", comm.rank(), n, tally.cases - tally.failed, tally.failed);
    return tally.failed == 0 ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "collectives_all_check: %s\n", e.what());
    return 1;
  }
}
