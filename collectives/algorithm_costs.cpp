// Each algorithm's alpha-beta cost. With n ranks, m bytes and a link of
// latency a, transfer time per byte b and reduction time per byte g:
//
//   ring          2(n-1) a + max(2(n-1)/n m b, (n-1)/n m g)
//   tree          2 d a + max(m b, m/2 g)               (d = ceil(log2 n))
//   direct        a + (n-1) m b + (n+1) m g             (n-1 whole buffers at once, 2 copies;
//                                                        2 ranks to 64 KiB: a + m b + m g)
//   recdbl        h a + h m b + (log2 p + f) m g        (h hops: log2 p, plus the fold)
//   rabenseifner  2 log2 p a + 2(p-1)/p m b + (p-1)/p m g, plus a fold
//   hierarchical  ring reduce-scatter and all-gather inside a host, ring
//                 all-reduce of a host's share (m / ranks per host) across
//
// p is the largest power of two <= n; the n - p ranks above it fold into a
// partner first (recursive_doubling.cpp, rabenseifner.cpp).
//
// The pipelined schedules (ring, tree) reduce one slice while the next is in
// flight, so their transfer and reduction overlap: the slower of the two is
// on the critical path, not their sum. The double tree (double_tree.cpp)
// sends each half of the buffer down its own tree, both trees at once, and
// the reduction up and the broadcast down of successive slices overlap too:
// a rank's busiest link direction carries about one buffer, and it reduces
// half of it. On 2 ranks the ring and the tree have the same counts; the
// registry lists the tree first, so it wins the tie (measured on 2 ranks
// over shm: the tree 1.5-2.5x faster from 4 KiB to 2 MiB, the ring 1.1-1.3x
// faster from 4 MiB; bench/auto_vs_forced.py).
//
// Broadcast, with the message cut into k slices for the pipelined ones
// (chain, tree; slices as the communicator cuts them: a sixteenth of a rank's
// share, 32 KiB to 512 KiB):
//
//   binomial  ceil(log2 n) (a + m b)
//   chain     (n - 2 + k)(a + m/k b)
//   tree      (d - 1 + k)(a + m/k b)
#include "collectives/algorithm_costs.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace braid::cost {
namespace {

constexpr double kCannot = std::numeric_limits<double>::infinity();

int log2_floor(int n) { return std::bit_width(static_cast<unsigned>(n)) - 1; }
int log2_ceil(int n) { return n <= 1 ? 0 : std::bit_width(static_cast<unsigned>(n - 1)); }

// Messages, bytes moved and bytes reduced on the critical path, priced on `l`.
double price(const LinkParams& l, double messages, double bytes, double reduced) {
  return messages * l.latency_us + l.transfer_us(bytes) + l.reduce_us(reduced);
}

// A pipelined schedule: transfer and reduction overlap.
double pipelined(const LinkParams& l, double messages, double bytes, double reduced) {
  return messages * l.latency_us + std::max(l.transfer_us(bytes), l.reduce_us(reduced));
}

double ring_on(const LinkParams& l, int n, double m) {
  if (n <= 1) return 0;
  const double share = (n - 1.0) / n;
  return pipelined(l, 2.0 * (n - 1), 2 * share * m, share * m);
}

// How the communicator slices a pipelined broadcast (comm_impl.cpp's shape()).
double broadcast_slices(const CostInputs& in) {
  const double m = static_cast<double>(in.bytes);
  const double slice = std::clamp(m / (16.0 * in.ranks), 32.0 * 1024, 512.0 * 1024);
  return std::max(1.0, std::ceil(m / slice));
}

}  // namespace

double ring_all_reduce(const CostInputs& in) { return ring_on(in.flat(), in.ranks, static_cast<double>(in.bytes)); }

double direct_all_reduce(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double m = static_cast<double>(in.bytes);
  // 2 ranks up to 64 KiB: send and receive-and-reduce. Else the scratch
  // form adds two local copies (the input into scratch, the first
  // contribution into the output), priced as reductions: memory-bound alike.
  const double copies = in.ranks == 2 && in.bytes <= 64 * 1024 ? 0 : 2 * m;
  return price(in.flat(), 1, (in.ranks - 1) * m, (in.ranks - 1) * m + copies);
}

double recursive_doubling_all_reduce(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double m = static_cast<double>(in.bytes);
  const int k = log2_floor(in.ranks), p = 1 << k, r = in.ranks - p;
  // The fold overlaps the first round unless more than half the participants folded.
  const double hops = k + (r == 0 ? 0 : r > p / 2 ? 2 : 1);
  return price(in.flat(), hops, hops * m, (k + (r > 0 ? 1 : 0)) * m);
}

double rabenseifner_all_reduce(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double m = static_cast<double>(in.bytes);
  const int k = log2_floor(in.ranks), p = 1 << k, r = in.ranks - p;
  const double share = (p - 1.0) / p;
  const double fold = r > 0 ? price(in.flat(), 2, 2 * m, m) : 0;
  return price(in.flat(), 2.0 * k, 2 * share * m, share * m) + fold;
}

double tree_all_reduce(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double m = static_cast<double>(in.bytes);
  return pipelined(in.flat(), 2.0 * log2_ceil(in.ranks), m, m / 2);
}

double hierarchical_all_reduce(const CostInputs& in) {
  const int k = in.uniform_ranks_per_host;
  if (in.hosts < 2 || k < 2) return kCannot;  // hierarchical.cpp runs the ring then
  const double m = static_cast<double>(in.bytes);
  const double share = (k - 1.0) / k;
  // Reduce-scatter and all-gather inside the host: a ring all-reduce's messages and bytes.
  const double inside = pipelined(in.intra, 2.0 * (k - 1), 2 * share * m, share * m);
  return inside + ring_on(in.inter, in.hosts, m / k);
}

double binomial_broadcast(const CostInputs& in) {
  const double m = static_cast<double>(in.bytes);
  return log2_ceil(in.ranks) * price(in.flat(), 1, m, 0);
}

double chain_broadcast(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double k = broadcast_slices(in);
  return (in.ranks - 2 + k) * price(in.flat(), 1, static_cast<double>(in.bytes) / k, 0);
}

double tree_broadcast(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double k = broadcast_slices(in);
  return (log2_ceil(in.ranks) - 1 + k) * price(in.flat(), 1, static_cast<double>(in.bytes) / k, 0);
}

}  // namespace braid::cost
