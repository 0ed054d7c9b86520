#include "collectives/schedule.hpp"

#include <algorithm>

#include "collectives/registry.hpp"
#include "core/check.hpp"
#include "core/text.hpp"

namespace braid {

std::string_view name_of(StepKind kind) {
  switch (kind) {
    case StepKind::send: return "send";
    case StepKind::recv: return "recv";
    case StepKind::recv_reduce: return "recv_reduce";
    case StepKind::copy: return "copy";
    case StepKind::reduce: return "reduce";
    case StepKind::average: return "average";
  }
  return "?";
}

namespace {

constexpr std::string_view kKindNames[] = {"(unknown)", "all_reduce", "broadcast", "reduce", "all_gather",
                                           "reduce_scatter", "all_to_all", "gather", "scatter", "send/recv", "barrier",
                                           "all_to_allv", "all_gatherv", "reduce_scatterv", "gatherv", "scatterv"};

}  // namespace

std::uint8_t OpDescriptor::algorithm_id(std::string_view name) { return algorithm_wire_id(name); }

std::array<std::byte, 16> OpDescriptor::encode() const {
  std::array<std::byte, 16> out{};
  out[0] = static_cast<std::byte>(kind);
  out[1] = static_cast<std::byte>(type);
  out[2] = static_cast<std::byte>(op);
  out[3] = static_cast<std::byte>(algorithm);
  auto r = static_cast<std::uint32_t>(root);
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<std::byte>((r >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<std::byte>((count >> (8 * i)) & 0xff);
  return out;
}

OpDescriptor OpDescriptor::decode(const std::array<std::byte, 16>& bytes) {
  OpDescriptor d;
  auto kind = std::to_integer<std::uint8_t>(bytes[0]);
  auto type = std::to_integer<std::uint8_t>(bytes[1]);
  auto op = std::to_integer<std::uint8_t>(bytes[2]);
  // Bytes from a peer: out-of-range values describe as unknown, never as UB.
  d.kind = kind < std::size(kKindNames) ? static_cast<Kind>(kind) : Kind::none;
  d.type = type < kDataTypeCount ? static_cast<DataType>(type) : DataType::u8;
  d.op = op < kReduceOpCount ? static_cast<ReduceOp>(op) : ReduceOp::sum;
  d.algorithm = std::to_integer<std::uint8_t>(bytes[3]);
  std::uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= std::to_integer<std::uint32_t>(bytes[4 + i]) << (8 * i);
  d.root = static_cast<std::int32_t>(r);
  for (int i = 0; i < 8; ++i) d.count |= std::to_integer<std::uint64_t>(bytes[8 + i]) << (8 * i);
  return d;
}

std::string_view OpDescriptor::kind_name(Kind kind) {
  const auto k = static_cast<std::size_t>(kind);
  return k < std::size(kKindNames) ? kKindNames[k] : kKindNames[0];
}

std::string OpDescriptor::describe() const {
  std::string out = cat(kKindNames[static_cast<std::size_t>(kind)], "(", name_of(type));
  bool reduces = kind == Kind::all_reduce || kind == Kind::reduce || kind == Kind::reduce_scatter ||
                 kind == Kind::reduce_scatterv;
  if (reduces) out += cat(" ", name_of(op));
  // The uneven collectives carry the total count where every rank knows it
  // (all_gatherv, reduce_scatterv), else none: each rank's counts differ.
  if (kind >= Kind::all_to_allv) out += count > 0 ? cat(", ", count, " elements in all") : std::string(", uneven counts");
  else out += cat(", ", count, " elements");
  if (root >= 0) out += cat(", root ", root);
  if (auto name = algorithm_of_wire_id(algorithm); !name.empty()) out += cat(", ", name);
  return out + ")";
}

Schedule Schedule::for_shape(const CollectiveShape& shape, std::string algorithm) {
  Schedule sched;
  sched.algorithm = std::move(algorithm);
  sched.type = shape.type;
  sched.op = shape.op;
  sched.ranks = shape.ranks;
  return sched;
}

std::uint32_t Schedule::add(Step step) {
  steps.push_back(std::move(step));
  return static_cast<std::uint32_t>(steps.size() - 1);
}

std::vector<int> Schedule::peers() const {
  std::vector<int> out;
  for (const auto& s : steps)
    if (s.peer >= 0) out.push_back(s.peer);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::size_t CollectiveShape::window_between(int a, int b) const {
  if (flow_window == 0 || window_groups.empty() || hosts.empty()) return 0;
  const auto ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
  if (ua >= hosts.size() || ub >= hosts.size() || ua >= window_groups.size() || ub >= window_groups.size()) return 0;
  const bool bounded = hosts[ua] != hosts[ub] && window_groups[ua] >= 0 && window_groups[ua] == window_groups[ub];
  return bounded ? flow_window : 0;
}

std::size_t CollectiveShape::ring_window(std::span<const int> members) const {
  for (std::size_t i = 0; i < members.size() && members.size() > 1; ++i)
    if (window_between(members[i], members[(i + 1) % members.size()]) > 0) return flow_window;
  return 0;
}

int ring_position(std::span<const int> ring, int rank) {
  auto it = std::find(ring.begin(), ring.end(), rank);
  BRAID_CHECK(it != ring.end(), "rank ", rank, " is not in the ring");
  return static_cast<int>(it - ring.begin());
}

void validate(const Schedule& schedule, BufferSizes sizes, int self_rank) {
  auto limit = [&](BufferId id) {
    switch (id) {
      case BufferId::input: return sizes.input;
      case BufferId::output: return sizes.output;
      case BufferId::scratch: return schedule.scratch_bytes;
    }
    return std::size_t{0};
  };
  std::size_t element = size_of(schedule.type);
  for (std::size_t i = 0; i < schedule.steps.size(); ++i) {
    const Step& s = schedule.steps[i];
    auto in_bounds = [&](const Region& r) { return r.offset <= limit(r.buffer) && r.bytes <= limit(r.buffer) - r.offset; };
    bool uses_src = s.kind == StepKind::send || s.kind == StepKind::recv_reduce || s.kind == StepKind::copy ||
                    s.kind == StepKind::reduce;
    bool uses_dst = s.kind != StepKind::send;
    bool talks = s.kind == StepKind::send || s.kind == StepKind::recv || s.kind == StepKind::recv_reduce;
    BRAID_CHECK(!uses_src || in_bounds(s.src), schedule.algorithm, " step ", i, " (", name_of(s.kind), ") reads outside its buffer");
    BRAID_CHECK(!uses_dst || in_bounds(s.dst), schedule.algorithm, " step ", i, " (", name_of(s.kind), ") writes outside its buffer");
    BRAID_CHECK(!talks || (s.peer >= 0 && s.peer < schedule.ranks && s.peer != self_rank), schedule.algorithm, " step ", i,
                " names peer ", s.peer);
    bool reduces = s.kind == StepKind::recv_reduce || s.kind == StepKind::reduce;
    BRAID_CHECK(!reduces || (s.src.bytes == s.dst.bytes && s.dst.bytes % element == 0),
                schedule.algorithm, " step ", i, " reduces regions of different or partial sizes");
    BRAID_CHECK(s.kind != StepKind::copy || s.src.bytes == s.dst.bytes, schedule.algorithm, " step ", i, " copies unequal regions");
    for (auto d : s.deps) BRAID_CHECK(d < i, schedule.algorithm, " step ", i, " depends on a later step ", d);
  }
}

}  // namespace braid
