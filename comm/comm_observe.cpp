// What a communicator tells about its operations: the statistics every
// finished operation adds to (op_stats.hpp), and the BRAID_TRACE timeline
// (trace_file.hpp) with the clock offset its ranks measure at start-up.
#include <cmath>
#include <cstdio>
#include <string>

#include "comm_impl.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// The clock exchange: round trips per rank (the shortest one is kept), and
// how long a rank waits for its partner before it traces without an offset
// (a rank whose BRAID_TRACE differs from rank 0's).
constexpr int kClockRounds = 8;
constexpr Millis kClockWait{5000};

std::string_view collective_of(const OpPlan& plan) {
  if (plan.key.descriptor.kind != OpDescriptor::Kind::point_to_point)
    return OpDescriptor::kind_name(plan.key.descriptor.kind);
  if (plan.schedule.steps.size() != 1) return "group";
  return plan.schedule.steps[0].kind == StepKind::send ? "send" : "recv";
}

std::size_t bytes_of(const OpPlan& plan) {
  const OpDescriptor& d = plan.key.descriptor;
  if (d.kind != OpDescriptor::Kind::point_to_point) return d.count * size_of(d.type);
  std::size_t bytes = 0;
  for (const Step& s : plan.schedule.steps) bytes += s.kind == StepKind::send ? s.src.bytes : s.dst.bytes;
  return bytes;
}

}  // namespace

void CommImpl::account(Operation& op, std::int64_t end_tick) {
  OpPlan& plan = *op.plan;
  if (plan.stats_row == nullptr) [[unlikely]] {
    plan.stats_bytes = bytes_of(plan);
    plan.stats_row = stats_.row(collective_of(plan), plan.schedule.algorithm, plan.stats_bytes);
  }
  OpStatsTable::add(*plan.stats_row, plan.stats_bytes, end_tick - op.begin_tick);
}

std::vector<OpStats> CommImpl::stats() const {
  const double ns_per_tick = TickScale(TickAnchor::origin(), TickAnchor::now()).ns_per_tick();
  std::lock_guard lock(engine_.mutex());
  return stats_.snapshot(ns_per_tick);
}

const std::shared_ptr<const std::string>& CommImpl::trace_args(OpPlan& plan) const {
  if (plan.trace_args) return plan.trace_args;
  const OpDescriptor& d = plan.key.descriptor;
  const std::size_t bytes = bytes_of(plan);
  std::string transports;
  for (int p : plan.peers) {
    const int kind = link_kind_[static_cast<std::size_t>(p)];
    if (kind < 0) continue;
    const std::string_view name = kinds_[static_cast<std::size_t>(kind)]->name;
    if (transports.find(name) == std::string::npos) transports += cat(transports.empty() ? "" : ",", name);
  }
  const bool point_to_point = d.kind == OpDescriptor::Kind::point_to_point;
  std::string peer;
  if (point_to_point && plan.schedule.steps.size() == 1) peer = cat(",\"peer\":", plan.schedule.steps[0].peer);
  plan.trace_args = std::make_shared<const std::string>(
      cat("\"name\":\"", collective_of(plan), " ", human_bytes(bytes), "\",\"args\":{\"collective\":\"",
          collective_of(plan), "\",\"bytes\":", bytes, ",\"count\":", d.count, ",\"type\":\"",
          point_to_point ? "bytes" : name_of(d.type), "\",\"op\":\"", name_of(d.op), "\",\"root\":", d.root,
          ",\"algorithm\":\"", plan.schedule.algorithm, "\",\"transports\":\"", transports, "\"", peer,
          ",\"steps\":", plan.schedule.steps.size()));
  return plan.trace_args;
}

void CommImpl::open_trace() {
  timed_ = settings_.keep_stats || !settings_.trace_file.empty();
  if (settings_.trace_file.empty() || trace_) return;
  trace_ = TraceFile::open(settings_.trace_file, rank_, size_);
  trace_track_ = trace_->add_communicator(cat("comm ", comm_id_.to_hex().substr(0, 8), " (rank ", rank_, " of ", size_, ")"));
}

void CommImpl::measure_clock_offset(Store& store, bool shares_clock) {
  // Cristian's exchange with rank 0 as the time server: a rank writes a
  // ping, rank 0 answers with its clock, and the rank takes rank 0's time
  // to be the middle of its round trip. The answer is off by at most half
  // the round trip (by much less when the two legs take as long), so the
  // shortest of a few rounds is kept, and written beside the offset. A
  // rank on rank 0's kernel reads the very same CLOCK_MONOTONIC: its
  // offset is 0 exactly, and the measured one is kept for comparison.
  auto key = [&](const char* what, int rank, int round) { return rank_key(cat("clock/", what, "/", round), rank); };
  try {
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r)
        for (int k = 0; k < kClockRounds; ++k) {
          store.get(key("ping", r, k), kClockWait);
          store.set(key("pong", r, k), std::to_string(monotonic_ns()));
        }
      trace_->set_clock(0, 0, 0);
      return;
    }
    double best_round_trip = -1, best_offset = 0;
    for (int k = 0; k < kClockRounds; ++k) {
      const std::int64_t sent = monotonic_ns();
      store.set(key("ping", rank_, k), std::string_view("1"));
      const std::int64_t server = std::stoll(store.get_string(key("pong", rank_, k), kClockWait));
      const std::int64_t received = monotonic_ns();
      const double round_trip = static_cast<double>(received - sent);
      if (best_round_trip < 0 || round_trip < best_round_trip) {
        best_round_trip = round_trip;
        best_offset = static_cast<double>(server) - (static_cast<double>(sent) + round_trip / 2);
      }
    }
    trace_->set_clock(shares_clock ? 0 : best_offset / 1e3, best_offset / 1e3, best_round_trip / 1e3);
    log_info("rank ", rank_, ": clock offset to rank 0 ", best_offset / 1e3, " us (round trip ", best_round_trip / 1e3,
             " us)", shares_clock ? "; on rank 0's kernel, its clock is rank 0's" : "");
  } catch (const Timeout&) {
    log_warn("rank ", rank_, ": BRAID_TRACE: could not measure the clock offset to rank 0 through the store (does "
             "every rank set BRAID_TRACE?); its trace keeps its own clock");
  }
}

}  // namespace braid
