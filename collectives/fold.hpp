// The non-power-of-two fold shared by recursive doubling and Rabenseifner.
//
// n ranks fold onto p, the largest power of two <= n, with r = n - p: of the
// first 2r ranks, each even rank 2i sends its whole buffer to rank 2i+1 and
// sits out; rank 2i+1 reduces it (the sender's buffer as the first operand)
// and takes part for both, and at the end sends the whole result back to 2i.
// The p participants are numbered 0..p-1 in rank order: rank 2i+1 is
// participant i for i < r, and rank q >= 2r is participant q - r. The fold
// uses its own tags (the fold and the result), which each algorithm picks.
#pragma once

#include <bit>
#include <cstdint>

#include "collectives/schedule.hpp"

namespace braid {

struct Fold {
  int ranks;
  int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(ranks)));
  int extra = ranks - p;  // r: the number of pairs that fold

  /// Even rank of a folding pair: sends to rank + 1, gets the result back.
  bool sits_out(int rank) const { return rank < 2 * extra && rank % 2 == 0; }
  /// Odd rank of a folding pair: receives from rank - 1, takes part for both.
  bool folded(int rank) const { return rank < 2 * extra && rank % 2 == 1; }
  /// Participant index (0..p-1) of a rank that takes part.
  int participant(int rank) const { return rank < 2 * extra ? rank / 2 : rank - extra; }
  /// The rank of participant `participant`.
  int rank_of(int participant) const { return participant < extra ? 2 * participant + 1 : participant + extra; }

  /// The whole schedule of a rank that sits out: send the input to rank + 1,
  /// receive the result into the output. The receive waits for the send,
  /// since in place the output is the input being sent.
  static void sit_out(Schedule& sched, int rank, const Region& input, const Region& output, std::uint32_t fold_tag,
                      std::uint32_t result_tag) {
    const int partner = rank + 1;
    const std::uint32_t sent =
        sched.add(Step{.kind = StepKind::send, .peer = partner, .src = input, .tag_index = fold_tag});
    sched.add(Step{.kind = StepKind::recv, .peer = partner, .dst = output, .tag_index = result_tag, .deps = {sent}});
  }
};

}  // namespace braid
