// Groups (braid_group_start/end, braid::group): NCCL's semantics. Between the
// outermost start and its end, the calling thread's operations are deferred:
// on each communicator its sends and receives become one operation whose
// transfers progress concurrently, so a ring of receive-then-send or an
// all-to-all of grouped pairs cannot deadlock, and its collectives follow it
// in call order. The end issues them all, then waits for those started by
// blocking calls; the *_async ones complete through their Work.
//
// Each send and receive of a group keeps the tag and descriptor it would have
// had alone (StepTag), so a grouped call matches a peer's ungrouped one.
#include <algorithm>

#include "comm_impl.hpp"
#include "core/log.hpp"
#include "group.hpp"
#include "make_op.hpp"

namespace braid {
namespace {

struct Deferred {
  CommImpl* comm = nullptr;
  std::shared_ptr<Operation> fused;                 // the shell the sends and receives become
  std::vector<std::shared_ptr<Operation>> members;  // the sends and receives, in call order
  bool wait_fused = false;                          // a blocking send or receive is among them
  std::vector<std::shared_ptr<Operation>> collectives;  // in call order
  std::vector<bool> wait_collective;
};

struct GroupState {
  int depth = 0;
  std::vector<Deferred> comms;  // in order of first use
  std::exception_ptr failed;    // the first call of the group that failed its checks
};

thread_local GroupState t_group;

Deferred& deferred_for(CommImpl& comm) {
  auto it = std::find_if(t_group.comms.begin(), t_group.comms.end(), [&](const Deferred& d) { return d.comm == &comm; });
  if (it != t_group.comms.end()) return *it;
  t_group.comms.push_back(Deferred{.comm = &comm});
  return t_group.comms.back();
}

void fail(Operation& op, const Failure& error) {
  op.error = error;
  op.done = true;
  op.run_callbacks();
}

}  // namespace

bool group_open() { return t_group.depth > 0; }

std::shared_ptr<Operation> group_defer(CommImpl& comm, std::shared_ptr<Operation> op, bool blocking) {
  Deferred& d = deferred_for(comm);
  op->comm = nullptr;  // not started: Work::wait refuses it until the group ends
  if (op->plan->key.descriptor.kind == OpDescriptor::Kind::point_to_point) {
    if (op->buffers.kind != MemKind::host)
      throw InvalidArgument(cat("rank ", comm.rank(), ": ", op->what(),
                                ": device buffers cannot be grouped yet; issue this send or receive outside the group"));
    if (!d.fused) d.fused = std::make_shared<Operation>();
    d.members.push_back(std::move(op));
    d.wait_fused = d.wait_fused || blocking;
    return d.fused;
  }
  d.collectives.push_back(op);
  d.wait_collective.push_back(blocking);
  return op;
}

void group_forget(CommImpl& comm) {
  auto it = std::find_if(t_group.comms.begin(), t_group.comms.end(), [&](const Deferred& d) { return d.comm == &comm; });
  if (it == t_group.comms.end()) return;
  const std::string why = cat("rank ", comm.rank(), ": the communicator was destroyed inside an open group (",
                              it->members.size() + it->collectives.size(),
                              " calls on it were never issued): end the group before destroying it");
  log_warn(why);
  const Failure error{ErrorCode::invalid_argument, why};
  if (it->fused) fail(*it->fused, error);
  for (auto& op : it->collectives) fail(*op, error);
  t_group.comms.erase(it);
}

void group_start() { ++t_group.depth; }

void group_fail(std::exception_ptr error) {
  if (!t_group.failed) t_group.failed = std::move(error);
}

void group_end_failed() noexcept {
  if (!t_group.failed)
    t_group.failed = std::make_exception_ptr(InvalidUsage("a call of the group failed, so none of it was issued"));
  try {
    group_end();
  } catch (...) {
  }
}

namespace {

// The group whose call failed its checks: nothing of it is issued, and every
// communicator gets back the numbers its calls took, so that the next call
// matches its peers (who, with the same calls, failed the same way).
void drop(std::vector<Deferred>& comms, const std::exception_ptr& why) {
  std::string text = "a call of the group failed";
  try {
    std::rethrow_exception(why);
  } catch (const std::exception& e) {
    text = e.what();
  }
  const Failure error{ErrorCode::invalid_argument,
                      cat("not issued: another call of its group failed its checks (", text, ")")};
  for (Deferred& d : comms) {
    d.comm->unnumber(d.members);
    d.comm->unnumber_collectives(d.collectives.size());
    if (d.fused) fail(*d.fused, error);
    for (auto& op : d.collectives) fail(*op, error);
  }
}

}  // namespace

void group_end() {
  if (t_group.depth == 0)
    throw InvalidUsage("group_end without a matching group_start on this thread (braid_group_start/end pair per "
                          "thread, as ncclGroupStart/End)");
  if (--t_group.depth > 0) return;
  std::vector<Deferred> comms = std::move(t_group.comms);
  t_group.comms.clear();
  std::exception_ptr failed = std::exchange(t_group.failed, nullptr);
  // Every communicator's sends and receives become one operation, checked as
  // a whole (a receive into bytes another call uses) before anything goes.
  for (Deferred& d : comms) {
    if (!d.fused || failed) continue;
    try {
      d.comm->fuse(*d.fused, d.members);
    } catch (const Error&) {
      failed = std::current_exception();
    }
  }
  if (failed) {
    drop(comms, failed);
    std::rethrow_exception(failed);
  }
  std::exception_ptr first;
  auto note = [&](std::exception_ptr e) {
    if (!first) first = e;
  };
  // Issue everything (every communicator's operations in the background, so
  // that they progress together), then wait for what blocking calls started.
  for (Deferred& d : comms) {
    if (d.fused) d.comm->submit(d.fused, true);
    for (auto& op : d.collectives) {
      op->comm = d.comm;
      d.comm->submit(op, true);
    }
  }
  for (Deferred& d : comms) {
    auto wait = [&](const std::shared_ptr<Operation>& op) {
      try {
        if (op->comm) op->comm->wait(op, Deadline::never());
        else if (op->error) op->error.raise();
      } catch (const Error&) {
        note(std::current_exception());
      }
    };
    if (d.fused && d.wait_fused) wait(d.fused);
    for (std::size_t i = 0; i < d.collectives.size(); ++i)
      if (d.wait_collective[i]) wait(d.collectives[i]);
  }
  if (first) std::rethrow_exception(first);
}

void CommImpl::unnumber(std::span<const std::shared_ptr<Operation>> members) {
  for (const auto& m : members) --(m->plan->key.sends ? p2p_sent_ : p2p_received_)[m->plan->key.peer];
}

void CommImpl::unnumber_collectives(std::size_t count) {
  collective_sequence_ -= static_cast<std::uint32_t>(count);
}

void CommImpl::fuse(Operation& shell, std::span<const std::shared_ptr<Operation>> members) {
  // One address range covers every buffer of the group: the schedule's
  // regions are offsets from its lowest address, in the input for sends and
  // the output for receives.
  struct Piece {
    std::uintptr_t at;
    std::size_t bytes;
    bool writes;
    std::size_t call;
  };
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const Operation& m = *members[i];
    const bool sends = m.plan->key.sends;
    const std::byte* p = sends ? m.buffers.input : m.buffers.output;
    const std::size_t bytes = sends ? m.buffers.input_bytes : m.buffers.output_bytes;
    pieces.push_back(Piece{reinterpret_cast<std::uintptr_t>(p), bytes, !sends, i});
  }
  // A receive into bytes another call of the group reads or writes races with it.
  std::vector<Piece> sorted;
  for (const Piece& p : pieces)
    if (p.bytes > 0) sorted.push_back(p);
  std::sort(sorted.begin(), sorted.end(), [](const Piece& a, const Piece& b) { return a.at < b.at; });
  const Piece* furthest = nullptr;        // of every piece so far, the one reaching furthest
  const Piece* furthest_write = nullptr;  // of the receives so far
  for (const Piece& p : sorted) {
    const Piece* clash = furthest_write && furthest_write->at + furthest_write->bytes > p.at ? furthest_write
                         : p.writes && furthest && furthest->at + furthest->bytes > p.at ? furthest
                                                                                           : nullptr;
    if (clash) {
      // group_end issues nothing of the group then, and gives back the numbers.
      throw InvalidArgument(cat("rank ", rank_, ": group: the buffers of ", members[clash->call]->what(), " and ",
                                members[p.call]->what(), " overlap, and one of them receives into them"));
    }
    if (!furthest || p.at + p.bytes > furthest->at + furthest->bytes) furthest = &p;
    if (p.writes && (!furthest_write || p.at + p.bytes > furthest_write->at + furthest_write->bytes)) furthest_write = &p;
  }
  std::uintptr_t base = sorted.empty() ? 0 : sorted.front().at;
  std::size_t extent = 0;
  for (const Piece& p : sorted) extent = std::max<std::size_t>(extent, p.at + p.bytes - base);
  std::vector<StepTag> tags;
  auto fused = make_op(
      {.descriptor = descriptor_of(OpDescriptor::Kind::point_to_point, DataType::u8, ReduceOp::sum, -1,
                                   members.size(), "p2p")},
      Buffers{reinterpret_cast<const std::byte*>(base), reinterpret_cast<std::byte*>(base), extent, extent},
      members.front()->sequence,
      [&] {
        Schedule schedule;
        schedule.algorithm = "p2p";
        schedule.ranks = size_;
        for (std::size_t i = 0; i < members.size(); ++i) {
          const Operation& m = *members[i];
          Step step = m.plan->schedule.steps.at(0);
          Region& r = step.kind == StepKind::send ? step.src : step.dst;
          r.offset = pieces[i].bytes > 0 ? pieces[i].at - base : 0;
          schedule.add(std::move(step));
          tags.push_back(StepTag{m.sequence, m.plan->schedule.descriptor});
        }
        return schedule;
      },
      [&] {
        std::size_t sends = 0;
        for (const auto& m : members) sends += m->plan->key.sends ? 1 : 0;
        return cat("group(", sends, " sends, ", members.size() - sends, " receives; first ", members.front()->what(), ")");
      },
      false);
  fused->plan->step_tags = std::move(tags);
  shell.plan = fused->plan;
  shell.buffers = fused->buffers;
  shell.sequence = fused->sequence;
  shell.comm = this;
}

}  // namespace braid
