// The uneven collectives' schedules (collectives/uneven.cpp), N ranks against
// each other in one process: random counts with zeros, displacements with
// gaps and out of rank order, every kind of send completion (eager, lazy,
// rendezvous) and links that cannot reduce, on 1 to 9 ranks.
#include <catch2/catch.hpp>

#include <numeric>
#include <random>

#include "collectives/algorithms.hpp"
#include "schedule_runner.hpp"

namespace braid::test {
namespace {

constexpr SendCompletion kSends[] = {SendCompletion::eager, SendCompletion::lazy, SendCompletion::rendezvous};

std::uint32_t value(int from, int to, std::size_t i) { return static_cast<std::uint32_t>(from * 100000 + to * 1000 + i); }

// Blocks of `bytes` (multiples of 4) in a shuffled order with gaps.
BlockLayout scattered(const std::vector<std::size_t>& bytes, std::mt19937& rng) {
  BlockLayout l{std::vector<std::size_t>(bytes.size()), bytes};
  std::vector<std::size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  std::size_t at = 0;
  for (std::size_t p : order) {
    at += 4 * (rng() % 3);
    l.offset[p] = at;
    at += bytes[p];
  }
  return l;
}

CollectiveShape shape_of(int rank, int n, const std::vector<int>& ring, ReduceOp op = ReduceOp::sum, int root = 0) {
  return CollectiveShape{.rank = rank, .ranks = n, .ring = ring, .count = 0, .type = DataType::u32, .op = op, .root = root};
}

}  // namespace

TEST_CASE("uneven all-to-all and all-gather: every block lands in place on 1 to 9 ranks", "[uneven]") {
  std::mt19937 rng(7);
  for (int n = 1; n <= 9; ++n)
    for (SendCompletion sends : kSends) {
      std::vector<int> ring(n);
      std::iota(ring.begin(), ring.end(), 0);
      std::vector<std::vector<std::size_t>> count(n, std::vector<std::size_t>(n));
      for (auto& row : count)
        for (auto& c : row) c = rng() % 3 == 0 ? 0 : rng() % 40;
      std::vector<BlockLayout> send(n), recv(n);
      std::vector<std::vector<std::uint32_t>> in(n), out(n);
      std::vector<Schedule> schedules;
      std::vector<Buffers> buffers;
      for (int r = 0; r < n; ++r) {
        std::vector<std::size_t> sb(n), rb(n);
        for (int p = 0; p < n; ++p) {
          sb[p] = 4 * count[r][p];
          rb[p] = 4 * count[p][r];
        }
        send[r] = scattered(sb, rng);
        recv[r] = scattered(rb, rng);
        in[r].assign(send[r].extent() / 4 + 1, 0xdead);
        out[r].assign(recv[r].extent() / 4 + 1, 0xbeef);
        for (int p = 0; p < n; ++p)
          for (std::size_t i = 0; i < count[r][p]; ++i) in[r][send[r].offset[p] / 4 + i] = value(r, p, i);
        schedules.push_back(pairwise_all_to_allv(shape_of(r, n, ring), send[r], recv[r]));
        buffers.push_back(Buffers{reinterpret_cast<const std::byte*>(in[r].data()),
                                  reinterpret_cast<std::byte*>(out[r].data()), in[r].size() * 4, out[r].size() * 4});
      }
      MemoryFabric fabric(n, {.sends = sends});
      const RunOutcome outcome = run_schedules(fabric, schedules, buffers);
      INFO(n << " ranks, " << name_of(sends) << " sends: " << outcome.describe());
      REQUIRE(outcome.all_finished());
      for (int r = 0; r < n; ++r)
        for (int p = 0; p < n; ++p)
          for (std::size_t i = 0; i < count[p][r]; ++i) REQUIRE(out[r][recv[r].offset[p] / 4 + i] == value(p, r, i));
    }
}

TEST_CASE("uneven reduce-scatter: sums and averages of random blocks, links that reduce or not", "[uneven]") {
  std::mt19937 rng(11);
  for (int n = 1; n <= 9; ++n)
    for (bool reduces : {true, false})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        std::vector<int> ring(n);
        std::iota(ring.begin(), ring.end(), 0);
        std::vector<std::size_t> counts(n);
        for (auto& c : counts) c = rng() % 3 == 0 ? 0 : rng() % 30;
        std::vector<std::size_t> bytes(n);
        for (int p = 0; p < n; ++p) bytes[p] = 4 * counts[p];
        BlockLayout packed{std::vector<std::size_t>(n), bytes};
        for (int p = 1; p < n; ++p) packed.offset[p] = packed.offset[p - 1] + bytes[p - 1];
        const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
        std::vector<std::vector<std::uint32_t>> in(n, std::vector<std::uint32_t>(total)), out(n);
        std::vector<Schedule> schedules;
        std::vector<Buffers> buffers;
        for (int r = 0; r < n; ++r) {
          for (std::size_t i = 0; i < total; ++i) in[r][i] = static_cast<std::uint32_t>(n * (r + 1) * (i + 1));
          out[r].assign(counts[r], 0xbeef);
          schedules.push_back(pairwise_reduce_scatterv(shape_of(r, n, ring, op), packed));
          buffers.push_back(Buffers{reinterpret_cast<const std::byte*>(in[r].data()),
                                    reinterpret_cast<std::byte*>(out[r].data()), total * 4, counts[r] * 4});
        }
        MemoryFabric fabric(n, {.reduces = reduces});
        const RunOutcome outcome = run_schedules(fabric, schedules, buffers);
        INFO(n << " ranks, " << name_of(op) << (reduces ? "" : ", links that cannot reduce") << ": "
               << outcome.describe());
        REQUIRE(outcome.all_finished());
        const std::uint32_t ranks_sum = static_cast<std::uint32_t>(n * (n + 1) / 2);
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < counts[r]; ++i) {
            const std::size_t at = packed.offset[r] / 4 + i;
            const std::uint32_t sum = static_cast<std::uint32_t>(n * (at + 1)) * ranks_sum;
            REQUIRE(out[r][i] == (op == ReduceOp::avg ? sum / static_cast<std::uint32_t>(n) : sum));
          }
      }
}

TEST_CASE("uneven gather and scatter: from every root, empty blocks included", "[uneven]") {
  std::mt19937 rng(13);
  for (int n = 1; n <= 7; ++n)
    for (int root = 0; root < n; ++root) {
      std::vector<int> ring(n);
      std::iota(ring.begin(), ring.end(), 0);
      std::vector<std::size_t> bytes(n);
      for (auto& b : bytes) b = 4 * (rng() % 3 == 0 ? 0 : rng() % 20);
      const BlockLayout at_root = scattered(bytes, rng);
      std::vector<std::vector<std::uint32_t>> mine(n), gathered(n), back(n);
      std::vector<Schedule> gathers, scatters;
      std::vector<Buffers> gather_buffers, scatter_buffers;
      for (int r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < bytes[r] / 4; ++i) mine[r].push_back(value(r, root, i));
        gathered[r].assign(r == root ? at_root.extent() / 4 + 1 : 0, 0xbeef);
        back[r].assign(bytes[r] / 4, 0xbeef);
        gathers.push_back(direct_gatherv(shape_of(r, n, ring, ReduceOp::sum, root), bytes[r], r == root ? at_root : BlockLayout{}));
        gather_buffers.push_back(Buffers{reinterpret_cast<const std::byte*>(mine[r].data()),
                                         reinterpret_cast<std::byte*>(gathered[r].data()), bytes[r],
                                         gathered[r].size() * 4});
      }
      MemoryFabric fabric(n);
      RunOutcome outcome = run_schedules(fabric, gathers, gather_buffers);
      INFO(n << " ranks, root " << root << ": " << outcome.describe());
      REQUIRE(outcome.all_finished());
      for (int p = 0; p < n; ++p)
        for (std::size_t i = 0; i < bytes[p] / 4; ++i) REQUIRE(gathered[root][at_root.offset[p] / 4 + i] == value(p, root, i));
      // And back out again.
      for (int r = 0; r < n; ++r) {
        scatters.push_back(direct_scatterv(shape_of(r, n, ring, ReduceOp::sum, root), r == root ? at_root : BlockLayout{}, bytes[r]));
        scatter_buffers.push_back(Buffers{reinterpret_cast<const std::byte*>(gathered[r].data()),
                                          reinterpret_cast<std::byte*>(back[r].data()), gathered[r].size() * 4,
                                          bytes[r]});
      }
      MemoryFabric again(n);
      outcome = run_schedules(again, scatters, scatter_buffers);
      REQUIRE(outcome.all_finished());
      for (int r = 0; r < n; ++r) REQUIRE(back[r] == mine[r]);
    }
}

}  // namespace braid::test
