// Each algorithm's alpha-beta cost. With n ranks, m bytes and a link of
// latency a, transfer time per byte b and reduction time per byte g, the
// busiest rank's work in one call: the messages on the critical path, the
// bytes it sends, the bytes it receives without reducing them on the way
// (and its local copies), and the bytes it reduces:
//
//                 messages   sent             received        reduced
//   ring          2(n-1)     2(n-1)/n m       (n-1)/n m       (n-1)/n m     pipelined
//   tree          2d         s m              s m / 2         r m           pipelined, + (2d - 2) c b
//                 (d = ceil(log2 n); s = 1, 3/2, 2 and r = 1/2, 1, 1 on
//                 2, 3, 4+ ranks; c one slice of a half: see below)
//   direct        1          (n-1) m          (n-1) m         (n+1) m       (n-1 whole buffers at once
//                                                                         into scratch, 2 copies;
//                                                                         2 ranks to 64 KiB: m, 0, m)
//   recdbl        h          h m              m               (log2 p + f) m  (h hops: log2 p, plus the fold)
//   rabenseifner  2 log2 p   2(p-1)/p m       (p-1)/p m       (p-1)/p m, plus a fold
//   hierarchical  ring reduce-scatter and all-gather inside a host, ring
//                 all-reduce of a host's share (m / ranks per host) across
//
// p is the largest power of two <= n; the n - p ranks above it fold into a
// partner first (recursive_doubling.cpp, rabenseifner.cpp).
//
// Priced (busiest_rank), when every rank of a host has a core to itself:
// messages a + (sent + received) b + reduced g. The byte terms count what the
// busiest RANK does, not what its busiest link carries: every byte it sends
// is a copy its own CPU makes (shm: into the ring slot; tcp: into the
// kernel), every byte it receives one more (out of the slot or the kernel;
// a receive-and-reduce reads the slot as it reduces and is priced as the
// reduction), and the one CPU does them one after the other, so they add up
// even where a schedule pipelines: pipelining overlaps one rank's work with
// its peers', not a rank's copies with its own reductions. That is what
// makes direct, one message but every byte reduced, the best all-reduce on
// 2 ranks up to 64 KiB: the tree and the ring send as much, receive half of
// it again and need two messages. Priced before without the received bytes
// and with a pipelined schedule's transfer and reduction overlapping (the
// slower of the two), the tree took over from 16 KiB, and measured direct
// was 1.5x faster at 16 KiB and 1.4x at 32 KiB (braid-perf -n 0, 15
// interleaved rounds, bench/figures/auto_vs_forced.txt, run 6).
//
// When the ranks of a host outnumber its cores, the old form stays: the
// received bytes are not counted and a pipelined schedule's transfer and
// reduction overlap, priced on the oversubscribed link parameters that were
// fitted with it (link_model.cpp). Priced the new way there, on parameters
// fitted anew, the ring (6 messages) could never beat rabenseifner (4, the
// same bytes on 4 ranks), and measured on 4 ranks on 2 cores it was 1.4-1.7x
// faster from 128 to 512 KiB (run 5): ranks that take turns on a core
// overlap one rank's transfers with another's reductions, which the sum does
// not see.
// That run's ranks were left to the kernel. Bound to a CPU each (braid-run
// binds them round robin on an idle machine: ring neighbours on different
// cores; CostInputs::bound), the schedules that send whole buffers overlap
// as well, as long as no message is larger than a slice (the most the ring
// sends at once, which a link takes in without its receiver running; a
// larger one waits for its receiver's turn on a core as it goes). So on one
// host of bound ranks recdbl, direct and rabenseifner are priced overlapped
// up to that (overlapped() below); unbound ranks keep run 5's pricing. 4
// ranks on 2 cores, bound, medians of 3 interleaved rounds (bench/auto_vs_forced.py,
// bench/figures/oversubscribed_bound/): rabenseifner was the fastest from
// 128 KiB to 1 MiB over shm (57-252 us against the ring's 74-301) and at
// 512 KiB and 1 MiB over tcp (495 and 799 us against 651 and 1364), and
// 1.3x slower than the ring over tcp at 2 MiB, where its first half (1 MiB)
// is two slices.
//
// The double tree (double_tree.cpp) sends each half of the buffer (h = m/2)
// down its own tree. A rank inner in one tree receives 2h from its children,
// sends h up, receives h and sends 2h down; in the other tree it is a leaf
// and sends h and receives h: 4h = 2m each way, and it reduces 2h = m. The
// ring moves 2(n-1)/n m < 2m per rank, so from 4 ranks on the tree costs
// more bytes than the ring and wins only by its 2d against 2(n-1) messages.
// (Priced per link, as before, the tree moved one buffer and undercut the
// ring at every size: on 4 ranks over shm the ring measured 1.8-2.1x faster
// at 16-64 KiB and 1.06-1.3x from 512 KiB, bench/auto_vs_forced.py.) On 2
// ranks each rank is the root of one tree and the leaf of the other: the
// ring's counts exactly, and the registry's order gives the tree the tie
// (measured on 2 ranks over shm: the tree faster from 8 KiB to 2 MiB, the
// ring 1.1-1.3x faster from 4 MiB; a difference of the two schedules' step
// order that this model does not see).
//
// The tree's slices also have to travel: from 4 ranks on, a slice passes
// 2d hops, and the first slice keeps the ranks below the root waiting for
// 2d - 2 of them (up to the root and back, less the rank's own hop each
// way); on 2 ranks both ranks work from the first moment. c is the slice
// of a half as the communicator cuts it (topology's pipeline_slice(): a
// sixteenth of a rank's share, an half when the host's ranks outnumber its
// cores, from the transports' floor (shm's 128 KiB) to BRAID_SLICE_BYTES):
// a half up to the floor is one slice, so there the tree crosses 2d whole
// halves one after the other. The ring
// has no such wait: every rank starts on its own share at once.
//
// The link's rates are those of the call's size (CostInputs::flat(),
// LinkParams::at): a buffer whose working set stays in the rank's cache
// reduces (and, where the link has a cache rate for it, copies) at the
// cache's rates.
//
// Oversubscribed hosts (more local ranks than cores): the ranks take turns
// on the cores, so the time is bounded below by the CPU work of all of them,
// sum over ranks / cores, as well as by the busiest rank. The built-in
// oversubscribed link parameters (link_model.cpp) are already a rank's rates
// while it shares its core, so with them the busiest rank's work is the
// larger bound: the sum over ranks at those rates is at most n times the
// busiest, spread over n ranks' turns. That is why the ring (every rank busy
// alike) beats the tree (4 ranks: two ranks move 2m, two move m) there,
// though both move 2(n-1) m over all ranks together and reduce (n-1) m.
//
// Across hosts (H hosts of up to k ranks, CostInputs::inter the link between
// them), each phase is priced on the link it crosses, and the ranks of a
// host that cross at once share their host's link (a NIC; for hosts that
// are namespaces of one machine, the kernel's copies on its cores), so a
// step in which all k cross moves k times a rank's bytes through it:
//
//   recdbl        round j on the intra link while partners q and q ^ 2^j
//                 share a host (the first CostInputs::local_rounds: log2 k
//                 when each host has 2^k consecutive ranks), else across
//                 with k ranks sending m at once
//   rabenseifner  the same rounds, moving m / 2^(log2 p - j) each way
//   hierarchical  the intra ring's reduce-scatter and all-gather on the
//                 intra link, then k rings at once across, each on m / k:
//                 2(H-1) messages and 2(H-1)/H m through each host's link
//   direct        k - 1 messages inside, n - k across (one after another at
//                 the busiest rank), k (n - k) m through each host's link
//   ring, tree    flat: every step waits for the one across (one rank of a
//                 host crosses at a time)
//
// With a fold (n no power of two) recdbl and rabenseifner keep the flat
// form. This is what picks recursive doubling up to tens of KiB on two hosts
// of two ranks (2 messages, one inside) over hierarchical (4, two inside),
// and hierarchical from there (each host's link carries m against
// recdbl's 2m and the ring's 3m/2).
//
// Broadcast, with the message cut into k slices for the pipelined ones
// (chain, tree; slices as the communicator cuts them, above):
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

// What the busiest rank does in one call (the header says how it is priced).
struct Work {
  double messages = 0;  // on the critical path
  double sent = 0;      // bytes it sends
  double received = 0;  // bytes it receives without reducing them on the way, and local copies
  double reduced = 0;   // bytes it reduces (a receive-and-reduce counts here only)
  /// Its transfers and reductions overlap where ranks take turns on cores:
  /// a pipelined schedule, or one whose messages fit a slice (overlapped()).
  bool overlaps = false;
};

double busiest_rank(const CostInputs& in, const LinkParams& l, const Work& w) {
  if (!in.oversubscribed) return price(l, w.messages, w.sent + w.received, w.reduced);
  if (!w.overlaps) return price(l, w.messages, w.sent, w.reduced);
  return w.messages * l.latency_us + std::max(l.transfer_us(w.sent), l.reduce_us(w.reduced));
}

// Whether a schedule whose largest message is `largest` bytes overlaps as a
// pipelined one does, on one host whose ranks, bound to a CPU each, take
// turns on its cores (the header says why and what was measured).
bool overlapped(const CostInputs& in, double largest) {
  return in.oversubscribed && in.bound && in.hosts == 1 && largest <= static_cast<double>(in.slice_limit);
}

// The link between hosts for a schedule made of ring pieces, which keep a
// flow window there (CostInputs::inter_window, ring_pieces.hpp), where a
// round would put `in_flight` bytes on the link at once: with the window,
// above 256 KiB, the link's rates times kWindowGain. Measured over a veth
// pair between two namespace hosts (2 x 1 ranks, the ring, medians of 3
// interleaved rounds, bench/auto_vs_forced.py --hosts 2x1 against
// bench/figures/auto_vs_forced_2x1.txt): 1 MiB 504 -> 281 us, 2 MiB 993 ->
// 543, 4 MiB 1989 -> 1156, 16 MiB 8698 -> 5606, 64 MiB 34.0 -> 24.9 ms
// (1.8x falling to 1.4x); at 512 KiB (256 KiB in flight) no gain. The
// schedules without a window (tree, rabenseifner, recdbl, direct) keep the
// streaming rates.
constexpr double kWindowGain = 1.5;
constexpr double kWindowFreeBytes = 256 * 1024;

LinkParams windowed(const CostInputs& in, LinkParams l, double in_flight) {
  if (!in.inter_window || in_flight <= kWindowFreeBytes) return l;
  l.bandwidth_gbps *= kWindowGain;
  l.cache_bandwidth_gbps *= kWindowGain;
  return l;
}

double ring_on(const CostInputs& in, const LinkParams& l, int n, double m) {
  if (n <= 1) return 0;
  const double share = (n - 1.0) / n;
  return busiest_rank(in, l, {.messages = 2.0 * (n - 1), .sent = 2 * share * m, .received = share * m,
                              .reduced = share * m, .overlaps = true});
}

// The slice of a pipelined schedule as the communicator cuts it
// (topology's pipeline_slice, above the transports' floor: shm's and ucx's,
// Plan::slice_floor).
double slice_bytes(const CostInputs& in) {
  return static_cast<double>(pipeline_slice(in.bytes, in.ranks, in.oversubscribed, in.slice_floor, in.slice_limit));
}

double broadcast_slices(const CostInputs& in) {
  return std::max(1.0, std::ceil(static_cast<double>(in.bytes) / slice_bytes(in)));
}

// A step that crosses between hosts in which `crossing` ranks of a host
// each send `w.sent` bytes to other hosts at once: they share the host's
// link (CostInputs::inter), so its bytes are theirs together.
double across(const CostInputs& in, const LinkParams& l, Work w, int crossing) {
  w.sent *= crossing;
  return busiest_rank(in, l, w);
}

// Recursive doubling's or halving's rounds priced each on its link: round j
// pairs rank q with q ^ 2^j, inside a host for j < local_rounds (over the
// intra link), else across (every rank of a host at once, sharing its link).
// `bytes_of(j)` and `reduces` say what one round moves and reduces.
template <typename BytesOf>
double rounds(const CostInputs& in, int count, BytesOf bytes_of, bool reduces, bool received) {
  const LinkParams intra = in.intra_at(), inter = in.inter_at();
  double t = 0;
  for (int j = 0; j < count; ++j) {
    const double x = bytes_of(j);
    const Work w{.messages = 1, .sent = x, .received = received ? x : 0, .reduced = reduces ? x : 0};
    t += j < in.local_rounds ? busiest_rank(in, intra, w) : across(in, inter, w, in.ranks_per_host());
  }
  return t;
}

}  // namespace

double ring_all_reduce(const CostInputs& in) {
  const double m = static_cast<double>(in.bytes);
  // The window pays where every hop crosses between hosts (one rank per
  // host); with several ranks per host the flat ring measured no faster.
  const LinkParams l = in.hosts > 1 && in.hosts == in.ranks ? windowed(in, in.flat(), m / in.ranks) : in.flat();
  return ring_on(in, l, in.ranks, m);
}

double direct_all_reduce(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double m = static_cast<double>(in.bytes);
  const double others = in.ranks - 1.0;
  // 2 ranks up to 64 KiB: send and receive-and-reduce. Else every buffer
  // comes into scratch and the scratch form adds two local copies (the input
  // into scratch, the first contribution into the output), priced as
  // reductions: memory-bound alike.
  if (in.ranks == 2 && in.bytes <= 64 * 1024)
    return busiest_rank(in, in.flat(), {.messages = 1, .sent = m, .reduced = m, .overlaps = overlapped(in, m)});
  // Across hosts a rank's n - 1 messages go out one after another through
  // its sockets (one latency each), the ranks of its host send theirs to
  // other hosts over the host's one link at once, and the reductions and
  // scratch copies stay the flat form's.
  if (in.hosts > 1) {
    const int local = std::min(in.ranks_per_host(), in.ranks) - 1, remote = in.ranks - 1 - local;
    const Work inside{.messages = static_cast<double>(local), .sent = local * m, .received = local * m};
    return busiest_rank(in, in.intra_at(), inside) +
           across(in, in.inter_at(),
                  {.messages = static_cast<double>(remote), .sent = remote * m, .received = remote * m,
                   .reduced = others * m + 2 * m},
                  in.ranks_per_host());
  }
  // The n - 1 messages each way leave and arrive at once, one latency; over
  // sockets each still takes its system calls on the rank's core in turn
  // (message_us), 2 (n - 2) beyond the pair the latency stands for. On 4
  // ranks over tcp on 2 cores direct took 33 us and recdbl, two latencies
  // of one message each way, 24 us from 8 B to 32 KiB.
  const LinkParams l = in.flat();
  return busiest_rank(in, l, {.messages = 1, .sent = others * m, .received = others * m, .reduced = others * m + 2 * m,
                              .overlaps = overlapped(in, m)}) +
         2 * (in.ranks - 2) * l.message_us;
}

double recursive_doubling_all_reduce(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double m = static_cast<double>(in.bytes);
  const int k = log2_floor(in.ranks), p = 1 << k, r = in.ranks - p;
  // Across hosts, without a fold: each round on its own link, the result
  // copied out of scratch once (inside the rank: the intra link's copy).
  if (in.hosts > 1 && std::has_single_bit(static_cast<unsigned>(in.ranks)))
    return rounds(in, k, [&](int) { return m; }, true, false) +
           busiest_rank(in, in.intra_at(), {.received = m});
  // The fold overlaps the first round unless more than half the participants folded.
  const double hops = k + (r == 0 ? 0 : r > p / 2 ? 2 : 1);
  // A partial that ends in scratch is copied to the output, and the upper
  // rank of a pair receives before it reduces: one buffer in all.
  return busiest_rank(in, in.flat(),
                      {.messages = hops, .sent = hops * m, .received = m, .reduced = (k + (r > 0 ? 1 : 0)) * m,
                       .overlaps = overlapped(in, m)});
}

double rabenseifner_all_reduce(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double m = static_cast<double>(in.bytes);
  const int k = log2_floor(in.ranks), p = 1 << k, r = in.ranks - p;
  // Across hosts, without a fold: halving round i pairs q with q ^ p/2^(i+1)
  // over m/2^(i+1) bytes; as recdbl's rounds counted from the last (the
  // partner at distance 2^j moves m/2^(k-j)), reduce-scatter reducing,
  // all-gather receiving.
  if (in.hosts > 1 && std::has_single_bit(static_cast<unsigned>(in.ranks))) {
    auto bytes_of = [&](int j) { return m / static_cast<double>(1 << (k - j)); };
    return rounds(in, k, bytes_of, true, false) + rounds(in, k, bytes_of, false, true);
  }
  const double share = (p - 1.0) / p;
  // The fold: a buffer in and the result out again, one reduction.
  const double fold = r > 0 ? busiest_rank(in, in.flat(), {.messages = 2, .sent = 2 * m, .reduced = m}) : 0;
  // The all-gather half receives its shares without reducing them.
  return busiest_rank(in, in.flat(), {.messages = 2.0 * k, .sent = 2 * share * m, .received = share * m,
                                      .reduced = share * m, .overlaps = overlapped(in, m / 2)}) +
         fold;
}

double tree_all_reduce(const CostInputs& in) {
  if (in.ranks <= 1) return 0;
  const double m = static_cast<double>(in.bytes);
  const int d = log2_ceil(in.ranks);
  // The busiest rank's bytes sent and reduced (the header says why); it
  // receives half as much as it sends without reducing it (the results
  // coming down).
  const double sent = in.ranks == 2 ? m : in.ranks == 3 ? 1.5 * m : 2 * m;
  const double reduced = in.ranks == 2 ? m / 2 : m;
  const double slice = std::min(m / 2, slice_bytes(in));
  const LinkParams l = in.flat();
  const Work work{.messages = 2.0 * d, .sent = sent, .received = sent / 2, .reduced = reduced, .overlaps = true};
  return busiest_rank(in, l, work) + l.transfer_us((2.0 * d - 2) * slice);
}

double hierarchical_all_reduce(const CostInputs& in) {
  const int k = in.uniform_ranks_per_host;
  if (in.hosts < 2 || k < 2) return kCannot;  // hierarchical.cpp runs the ring then
  const double m = static_cast<double>(in.bytes);
  const double share = (k - 1.0) / k;
  // Reduce-scatter and all-gather inside the host: a ring all-reduce's messages and bytes.
  const Work inside{.messages = 2.0 * (k - 1), .sent = 2 * share * m, .received = share * m, .reduced = share * m,
                    .overlaps = true};
  // Across: k rings at once, one per local position, each on a share m / k,
  // all of them through the host's one link.
  const double h = in.hosts, x = m / k, cross = (h - 1) / h;
  const Work between{.messages = 2 * (h - 1), .sent = 2 * cross * x, .received = cross * x, .reduced = cross * x,
                     .overlaps = true};
  return busiest_rank(in, in.intra_at(), inside) + across(in, windowed(in, in.inter_at(), x / h), between, k);
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
