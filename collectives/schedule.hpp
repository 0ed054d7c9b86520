// A collective is a Schedule: plain data listing, for one rank, the steps it
// takes (send a region to a peer, receive into a region, receive and reduce,
// copy, finish an average) and which earlier steps each one waits for. An
// algorithm is a function that builds the schedule; the Executor runs any
// schedule over Links. Because a schedule is data, tests run the schedules
// of N ranks against each other in one process without a network.
//
// Matching: a rank's sends to peer p are posted in schedule order, and so are
// its receives from p, so the k-th send of rank a to b meets the k-th receive
// of b from a. Their tag_index must agree; the transports check it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "braid/types.hpp"

namespace braid {

enum class BufferId : std::uint8_t { input, output, scratch };

struct Region {
  BufferId buffer = BufferId::output;
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

enum class StepKind : std::uint8_t {
  send,         // send src to peer
  recv,         // receive from peer into dst
  recv_reduce,  // receive from peer; dst = src (op) incoming
  copy,         // dst = src (skipped when they are the same memory)
  reduce,       // dst = dst (op) src, locally
  average,      // dst /= ranks (the last step of avg)
};
std::string_view name_of(StepKind kind);

struct Step {
  StepKind kind = StepKind::copy;
  int peer = -1;
  Region src;
  Region dst;
  std::uint32_t tag_index = 0;
  std::vector<std::uint32_t> deps;  // indices of earlier steps
};

/// What every rank of an operation must agree on. It travels in every
/// message's tag context (16 bytes), so a rank that receives from a peer
/// running something else can say exactly what each side called.
struct OpDescriptor {
  enum class Kind : std::uint8_t {
    none, all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter, point_to_point, barrier,
    all_to_allv, all_gatherv, reduce_scatterv, gatherv, scatterv
  };
  Kind kind = Kind::none;
  DataType type = DataType::u8;
  ReduceOp op = ReduceOp::sum;
  std::uint8_t algorithm = 0;  // algorithm_id() of the schedule's algorithm
  std::int32_t root = -1;
  std::uint64_t count = 0;

  std::array<std::byte, 16> encode() const;
  static OpDescriptor decode(const std::array<std::byte, 16>& bytes);
  /// "all_reduce", "broadcast", ...; "send/recv" for point_to_point.
  static std::string_view kind_name(Kind kind);
  /// "all_reduce(f32 sum, 1024 elements, ring)".
  std::string describe() const;
  /// The algorithm registry's wire id of `name` (0 for names braid does not have).
  static std::uint8_t algorithm_id(std::string_view name);
  bool operator==(const OpDescriptor&) const = default;
};

struct Schedule {
  std::string algorithm;  // "ring", "chain", ...
  OpDescriptor descriptor;  // set by the communicator; zero in schedule tests
  DataType type = DataType::u8;
  ReduceOp op = ReduceOp::sum;
  int ranks = 1;
  std::size_t scratch_bytes = 0;
  std::vector<Step> steps;

  /// An empty schedule of `algorithm` for `shape`'s type, operator and ranks.
  static Schedule for_shape(const struct CollectiveShape& shape, std::string algorithm);

  std::uint32_t add(Step step);
  /// Peers this schedule talks to, sorted, without repeats.
  std::vector<int> peers() const;
};

/// Sizes of the caller's buffers, for validate().
struct BufferSizes {
  std::size_t input = 0;
  std::size_t output = 0;
};
/// Checks that every region lies inside its buffer, every dependency points
/// backwards, peers are valid ranks and reductions cover whole elements.
/// Throws Error(internal) naming the step: a failure is a bug in an algorithm.
void validate(const Schedule& schedule, BufferSizes sizes, int self_rank);

/// What every algorithm builder needs to know.
struct CollectiveShape {
  int rank = 0;
  int ranks = 1;
  std::span<const int> ring;  // ranks in ring order (a permutation of [0, ranks))
  std::span<const int> hosts;  // the host number of each rank (empty: not known)
  std::size_t count = 0;      // elements
  DataType type = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  std::size_t slice_bytes = 512 * 1024;
  // The flow window of links between hosts (BRAID_FLOW_WINDOW): a link
  // between ranks of different hosts whose window groups are equal (and not
  // negative) gets flow_window; the plan puts the ranks of one kernel in one
  // group (topology/plan.hpp's FlowWindow; ring_pieces.hpp says why). Empty
  // or 0: none.
  std::span<const int> window_groups;
  std::size_t flow_window = 0;

  /// The window of the link from rank a to rank b (0: unbounded).
  std::size_t window_between(int a, int b) const;
  /// The window of a ring over `members` (in ring order): flow_window if any
  /// of its links has one.
  std::size_t ring_window(std::span<const int> members) const;
};

/// Index of `rank` in `ring`; throws Error(internal) if absent.
int ring_position(std::span<const int> ring, int rank);

/// Splits `count` elements into `parts` nearly equal pieces: piece i starts at
/// begin(i) and the first count % parts pieces have one element more.
struct Partition {
  std::size_t count;
  std::size_t parts;
  std::size_t begin(std::size_t i) const {
    return i * (count / parts) + std::min(i, count % parts);
  }
  std::size_t size(std::size_t i) const { return count / parts + (i < count % parts ? 1 : 0); }
};

}  // namespace braid
