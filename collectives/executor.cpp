#include "collectives/executor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.hpp"
#include "core/reduce.hpp"
#include "core/text.hpp"

namespace braid {

std::span<std::byte> ScratchPool::take(std::size_t bytes, MemKind kind, int device_id) {
  if (kind == MemKind::cuda) {
    if (bytes > device_.size() || device_id != device_.id()) {
      device_ = device::Memory();
      device_ = device::Memory(std::max<std::size_t>(bytes, 1), device_id);
    }
    return std::span(device_.data(), bytes);
  }
  if (bytes > size_) {
    data_.reset();
    data_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
    size_ = bytes;
  }
  return std::span(data_.get(), bytes);
}

void Executor::check_kind(MemKind kind) const {
  if (kind == MemKind::host) return;
  if (!device::compiled())
    throw Error(ErrorCode::unsupported, cat("rank ", self_rank_, ": device memory needs a braid built with CUDA"));
  for (const Step& s : schedule_.steps)
    if (s.peer >= 0 && static_cast<std::size_t>(s.peer) < links_.size() && links_[s.peer] &&
        !links_[s.peer]->accepts(kind))
      throw Error(ErrorCode::internal, cat("rank ", self_rank_, ": the link to ", links_[s.peer]->describe_peer(),
                                           " cannot move ", name_of(kind), " memory (the communicator stages it)"));
}

Executor::Executor(const Schedule& schedule, Buffers buffers, std::span<Link* const> links, std::uint32_t sequence,
                   int self_rank, ScratchPool* pool)
    : schedule_(schedule), buffers_(buffers), pool_(pool ? pool : &own_pool_), links_(links), sequence_(sequence),
      context_(schedule.descriptor.encode()), self_rank_(self_rank) {
  check_kind(buffers_.kind);
  const auto n = schedule_.steps.size();
  // A receive-and-reduce over a link that cannot reduce lands in staging of
  // its own (after the schedule's scratch) and is reduced when it completes.
  std::size_t scratch_bytes = schedule_.scratch_bytes;
  staging_.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const Step& s = schedule_.steps[i];
    if (s.kind != StepKind::recv_reduce || s.peer < 0 || static_cast<std::size_t>(s.peer) >= links_.size() ||
        links_[s.peer] == nullptr || links_[s.peer]->can_reduce())
      continue;
    scratch_bytes = (scratch_bytes + 63) / 64 * 64;
    staging_[i] = scratch_bytes;
    scratch_bytes += s.dst.bytes;
  }
  scratch_bytes_ = scratch_bytes;
  scratch_ = pool_->take(scratch_bytes, buffers_.kind, buffers_.device);
  // Without a pool (the schedule tests) scratch starts as garbage on purpose:
  // a schedule that reads scratch before writing it fails there, as it would
  // with a reused pool block.
  if (!pool && buffers_.kind == MemKind::host) std::fill(scratch_.begin(), scratch_.end(), std::byte{0xa5});
  state_.assign(n, State::waiting);
  deps_left_.resize(n);
  requests_.resize(n);
  dependents_begin_.assign(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const Step& s = schedule_.steps[i];
    deps_left_[i] = static_cast<std::uint32_t>(s.deps.size());
    for (auto d : s.deps) ++dependents_begin_[d + 1];
  }
  first_deps_ = deps_left_;
  for (std::size_t i = 0; i < n; ++i) dependents_begin_[i + 1] += dependents_begin_[i];
  dependents_.resize(dependents_begin_[n]);
  std::vector<std::uint32_t> fill(dependents_begin_.begin(), dependents_begin_.end() - 1);
  for (std::size_t i = 0; i < n; ++i)
    for (auto d : schedule_.steps[i].deps) dependents_[fill[d]++] = static_cast<std::uint32_t>(i);

  for (std::size_t i = 0; i < n; ++i) {
    const Step& s = schedule_.steps[i];
    if (s.peer < 0) {
      if (deps_left_[i] == 0) local_ready_.push_back(static_cast<std::uint32_t>(i));
      continue;
    }
    BRAID_CHECK(static_cast<std::size_t>(s.peer) < links_.size() && links_[s.peer] != nullptr, "no link to rank ", s.peer);
    auto q = std::find_if(peers_.begin(), peers_.end(), [&](const PeerQueue& p) { return p.peer == s.peer; });
    if (q == peers_.end()) {
      peers_.push_back(PeerQueue{s.peer, {}, {}});
      q = peers_.end() - 1;
    }
    (s.kind == StepKind::send ? q->sends : q->recvs).push_back(static_cast<std::uint32_t>(i));
  }
  first_ready_ = local_ready_;
  short_.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const Step& s = schedule_.steps[i];
    if (s.peer < 0) continue;
    const Link& link = *links_[s.peer];
    const std::size_t bytes = s.kind == StepKind::send ? s.src.bytes : s.dst.bytes;
    // A link without a short path (short_message_bytes() 0) takes none,
    // not even an empty message: its recv_now never receives, so a chain
    // would poll it until the engine slept (50 ms, the edge of the
    // socket's news already taken).
    const std::size_t limit = link.short_message_bytes();
    // recv_now reduces on every link with a short path (transport.hpp).
    short_[i] = limit > 0 && bytes <= limit;
  }
  chain_ = n > 0;
  for (std::size_t i = 0; i < n && chain_; ++i) {
    const Step& s = schedule_.steps[i];
    chain_ = (i == 0 ? s.deps.empty() : s.deps.size() == 1 && s.deps[0] == i - 1) && (s.peer < 0 || short_[i]);
  }
  in_chain_ = chain_ && buffers_.kind == MemKind::host;
}

void Executor::time_steps(bool on) {
  timed_ = on;
  step_times_.assign(on ? schedule_.steps.size() : 0, StepTime{});
}

void Executor::restart(Buffers buffers, std::uint32_t sequence) {
  if (timed_) [[unlikely]] std::fill(step_times_.begin(), step_times_.end(), StepTime{});
  if (buffers.kind != MemKind::host) check_kind(buffers.kind);
  buffers_ = buffers;
  sequence_ = sequence;
  // The pool may have handed a larger block to another operation since.
  if (scratch_bytes_ > 0 || buffers_.kind != MemKind::host)
    scratch_ = pool_->take(scratch_bytes_, buffers_.kind, buffers_.device);
  done_count_ = 0;
  moved_ = false;
  cursor_ = 0;
  in_chain_ = chain_ && buffers_.kind == MemKind::host;
  // A chain resets the general loop's state only if it hands over to it.
  if (!in_chain_) reset_steps();
}

void Executor::reset_steps() {
  std::fill(state_.begin(), state_.end(), State::waiting);
  std::copy(first_deps_.begin(), first_deps_.end(), deps_left_.begin());
  // A finished run reset every request as it completed; only those still in
  // flight (a failed run's) remain.
  for (auto i : in_flight_) requests_[i].reset();
  in_flight_.clear();
  for (auto& q : peers_) {
    q.next_send = q.next_recv = 0;
    q.polling = kNone;
  }
  local_ready_.assign(first_ready_.begin(), first_ready_.end());
}

bool Executor::advance_chain() {
  moved_ = false;
  const auto n = static_cast<std::uint32_t>(schedule_.steps.size());
  while (cursor_ < n) {
    const std::uint32_t i = cursor_;
    const Step& s = schedule_.steps[i];
    step_begins(i);
    if (s.peer < 0) {
      do_local(i);
    } else if (s.kind == StepKind::send) {
      bool sent;
      try {
        sent = links_[s.peer]->send_now(ConstMemView{read_ptr(s.src), s.src.bytes}, tag_of(i));
      } catch (const Error&) {
        explain(i, std::current_exception());
      }
      if (!sent) {  // the link queues sends, or its ring is full: the general loop posts it
        leave_chain();
        return advance();
      }
    } else if (!try_receive(i)) {
      return false;  // polled again by the next advance()
    }
    step_ends(i);
    ++cursor_;
    ++done_count_;
    moved_ = true;
  }
  return true;
}

void Executor::leave_chain() {
  in_chain_ = false;
  reset_steps();
  const auto n = static_cast<std::uint32_t>(schedule_.steps.size());
  for (std::uint32_t i = 0; i < cursor_; ++i) state_[i] = State::done;
  local_ready_.clear();
  if (cursor_ >= n) return;
  deps_left_[cursor_] = 0;
  const Step& s = schedule_.steps[cursor_];
  if (s.peer < 0) local_ready_.push_back(cursor_);
  for (auto& q : peers_) {
    while (q.next_send < q.sends.size() && q.sends[q.next_send] < cursor_) ++q.next_send;
    while (q.next_recv < q.recvs.size() && q.recvs[q.next_recv] < cursor_) ++q.next_recv;
    if (q.peer == s.peer && s.kind != StepKind::send) {  // being polled: posted, as post() leaves a receive not there yet
      ++q.next_recv;
      q.polling = cursor_;
      state_[cursor_] = State::polling;
    }
  }
}

void Executor::set_step_tags(std::vector<StepTag> tags) {
  BRAID_CHECK(tags.empty() || tags.size() == schedule_.steps.size(), "step tags for ", tags.size(), " of ",
              schedule_.steps.size(), " steps");
  step_tags_ = std::move(tags);
  step_contexts_.clear();
  for (const StepTag& t : step_tags_) step_contexts_.push_back(t.descriptor.encode());
}

const std::byte* Executor::read_ptr(const Region& r) const {
  switch (r.buffer) {
    case BufferId::input: return buffers_.input + r.offset;
    case BufferId::output: return buffers_.output + r.offset;
    case BufferId::scratch: return scratch_.data() + r.offset;
  }
  return nullptr;
}

std::byte* Executor::write_ptr(const Region& r) {
  switch (r.buffer) {
    case BufferId::input: BRAID_CHECK(false, "a schedule writes to its input buffer");
    case BufferId::output: return buffers_.output + r.offset;
    case BufferId::scratch: return scratch_.data() + r.offset;
  }
  return nullptr;
}

Tag Executor::tag_of(std::uint32_t index) const {
  const Step& s = schedule_.steps[index];
  return step_tags_.empty() ? make_tag(sequence_, s.tag_index, context_)
                            : make_tag(step_tags_[index].sequence, s.tag_index, step_contexts_[index]);
}

void Executor::post(std::uint32_t index) {
  step_begins(index);
  // Small host messages take the link's short path when it has one: a send
  // is in the peer's hands at once, a receive is polled (receive_now) until
  // it arrives or the caller is about to sleep (park). No request, no queue.
  if (short_[index] && buffers_.kind == MemKind::host) {
    const Step& s = schedule_.steps[index];
    if (s.kind == StepKind::send) {
      bool sent;
      try {
        sent = links_[s.peer]->send_now(ConstMemView{read_ptr(s.src), s.src.bytes}, tag_of(index));
      } catch (const Error&) {
        explain(index, std::current_exception());
      }
      if (sent) {
        finish(index);
        posted_done_ = true;
        return;
      }
    } else {
      if (receive_now(index)) {
        posted_done_ = true;
        return;
      }
      state_[index] = State::polling;
      for (auto& q : peers_)
        if (q.peer == s.peer) q.polling = index;
      return;
    }
  }
  post_request(index, tag_of(index));
}

bool Executor::receive_now(std::uint32_t index) {
  const bool done = try_receive(index);
  if (done) finish(index);
  return done;
}

bool Executor::try_receive(std::uint32_t index) {
  const Step& s = schedule_.steps[index];
  const bool reduce = s.kind == StepKind::recv_reduce;
  try {
    return links_[s.peer]->recv_now(MemView{write_ptr(s.dst), s.dst.bytes}, reduce ? read_ptr(s.src) : nullptr,
                                    schedule_.type, schedule_.op, tag_of(index));
  } catch (const Error&) {
    explain(index, std::current_exception());
  }
}

void Executor::post_request(std::uint32_t index, const Tag& tag) {
  const Step& s = schedule_.steps[index];
  Link& link = *links_[s.peer];
  switch (s.kind) {
    case StepKind::send:
      requests_[index] = link.send(ConstMemView{read_ptr(s.src), s.src.bytes, buffers_.kind}, tag);
      break;
    case StepKind::recv:
      requests_[index] = link.recv(MemView{write_ptr(s.dst), s.dst.bytes, buffers_.kind}, tag);
      break;
    case StepKind::recv_reduce:
      if (link.can_reduce())
        requests_[index] = link.recv_reduce(MemView{write_ptr(s.dst), s.dst.bytes, buffers_.kind},
                                            ConstMemView{read_ptr(s.src), s.src.bytes, buffers_.kind}, schedule_.type,
                                            schedule_.op, tag);
      else
        requests_[index] = link.recv(MemView{scratch_.data() + staging_[index], s.dst.bytes, buffers_.kind}, tag);
      break;
    default: BRAID_CHECK(false, "local step posted to a link");
  }
  state_[index] = State::posted;
  in_flight_.push_back(index);
}

void Executor::park() {
  if (in_chain_) leave_chain();
  for (auto& q : peers_)
    if (q.polling != kNone) {
      post_request(q.polling, tag_of(q.polling));
      q.polling = kNone;
    }
}

void Executor::run_local(std::uint32_t index) {
  step_begins(index);
  do_local(index);
  finish(index);
}

void Executor::do_local(std::uint32_t index) {
  const Step& s = schedule_.steps[index];
  if (s.kind == StepKind::copy) {
    const std::byte* from = read_ptr(s.src);
    std::byte* to = write_ptr(s.dst);
    if (from != to && s.dst.bytes > 0) {
      if (buffers_.kind == MemKind::host) std::memcpy(to, from, s.dst.bytes);
      else device::copy_on(buffers_.device, to, from, s.dst.bytes);
    }
  } else if (s.kind == StepKind::reduce) {
    std::byte* to = write_ptr(s.dst);
    combine(to, to, read_ptr(s.src), s.dst.bytes);
  } else if (s.kind == StepKind::average) {
    const std::size_t count = s.dst.bytes / size_of(schedule_.type);
    if (buffers_.kind == MemKind::host) finish_average(schedule_.type, write_ptr(s.dst), count, schedule_.ranks);
    else device::finish_average(schedule_.type, write_ptr(s.dst), count, schedule_.ranks);
  } else {
    BRAID_CHECK(false, "transfer step run locally");
  }
}

void Executor::combine(std::byte* dst, const std::byte* a, const std::byte* b, std::size_t bytes) {
  const std::size_t count = bytes / size_of(schedule_.type);
  if (buffers_.kind == MemKind::host) reduce(schedule_.type, schedule_.op, dst, a, b, count);
  else device::reduce(schedule_.type, schedule_.op, dst, a, b, count);
}

void Executor::finish(std::uint32_t index) {
  state_[index] = State::done;
  step_ends(index);
  ++done_count_;
  moved_ = true;
  for (auto k = dependents_begin_[index]; k < dependents_begin_[index + 1]; ++k) {
    std::uint32_t d = dependents_[k];
    if (--deps_left_[d] == 0 && schedule_.steps[d].peer < 0) local_ready_.push_back(d);
  }
}

void Executor::post_ready() {
  // Local steps may unlock transfers and the other way round; loop until calm.
  bool again = true;
  while (again) {
    again = false;
    while (!local_ready_.empty()) {
      std::uint32_t i = local_ready_.back();
      local_ready_.pop_back();
      run_local(i);
    }
    posted_done_ = false;
    for (auto& q : peers_) {
      if (q.polling != kNone && receive_now(q.polling)) {
        q.polling = kNone;
        posted_done_ = true;
      }
      while (q.next_send < q.sends.size() && deps_left_[q.sends[q.next_send]] == 0) post(q.sends[q.next_send++]);
      while (q.polling == kNone && q.next_recv < q.recvs.size() && deps_left_[q.recvs[q.next_recv]] == 0)
        post(q.recvs[q.next_recv++]);
    }
    again = posted_done_;
    // Requests may complete at post time (an in-memory link, or a broken one).
    for (std::size_t k = 0; k < in_flight_.size();) {
      std::uint32_t i = in_flight_[k];
      if (!requests_[i]->done()) {
        ++k;
        continue;
      }
      if (requests_[i]->failed()) explain_failure(i);
      requests_[i].reset();
      const Step& s = schedule_.steps[i];
      if (s.kind == StepKind::recv_reduce && !links_[s.peer]->can_reduce())
        combine(write_ptr(s.dst), read_ptr(s.src), scratch_.data() + staging_[i], s.dst.bytes);
      in_flight_[k] = in_flight_.back();
      in_flight_.pop_back();
      finish(i);
      again = true;
    }
    again = again || !local_ready_.empty();
  }
}

void Executor::explain_failure(std::uint32_t index) const { explain(index, requests_[index]->error()); }

void throw_other_collective(std::string_view peer, const OpDescriptor& theirs, std::uint32_t their_op,
                            const OpDescriptor& mine, std::uint32_t my_op) {
  throw ProtocolMismatch(cat(peer, " called ", theirs.describe(), " as op #", their_op, " while this rank called ",
                             mine.describe(), " as op #", my_op,
                             ": every rank must call the same collectives in the same order"));
}

void Executor::explain(std::uint32_t index, std::exception_ptr error) const {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const TagMismatch& m) {
    const Step& s = schedule_.steps[index];
    OpDescriptor theirs = OpDescriptor::decode(m.received.context);
    const OpDescriptor& mine = step_tags_.empty() ? schedule_.descriptor : step_tags_[index].descriptor;
    const std::uint32_t my_sequence = step_tags_.empty() ? sequence_ : step_tags_[index].sequence;
    std::uint32_t my_op = my_sequence & 0x7fffffffu, their_op = static_cast<std::uint32_t>(m.received.id >> 32) & 0x7fffffffu;
    std::string peer = cat("rank ", self_rank_, ": ", links_[s.peer]->describe_peer());
    if (m.received.context != m.expected.context) throw_other_collective(peer, theirs, their_op, mine, my_op);
    if ((m.received.id >> 32) != (m.expected.id >> 32))
      throw ProtocolMismatch(cat(peer, " is at op #", their_op, " while this rank is at op #", my_op, " (",
                                 mine.describe(),
                                 "): a rank skipped or added an operation"));
    throw;
  }
  BRAID_CHECK(false, "explain called for a step that did not fail");
  std::abort();
}

bool Executor::advance() {
  stamp_ = 0;
  if (in_chain_) return advance_chain();
  moved_ = false;
  post_ready();
  if (finished()) return true;
  for (auto& q : peers_)
    if (links_[q.peer]->busy()) moved_ |= links_[q.peer]->progress();
  stamp_ = 0;
  post_ready();
  return finished();
}

std::string Executor::describe_pending() const {
  std::string out;
  std::size_t listed = 0;
  for (auto i : in_flight_) {
    const Step& s = schedule_.steps[i];
    if (listed++ == 3) {
      out += ", ...";
      break;
    }
    if (!out.empty()) out += ", ";
    out += cat(name_of(s.kind), s.kind == StepKind::send ? " to " : " from ", links_[s.peer]->describe_peer(), " (",
               human_bytes(s.kind == StepKind::send ? s.src.bytes : s.dst.bytes), ", step ", s.tag_index, ")");
  }
  for (const auto& q : peers_) {
    if (q.polling == kNone || listed++ == 3) continue;
    const Step& s = schedule_.steps[q.polling];
    if (!out.empty()) out += ", ";
    out += cat(name_of(s.kind), " from ", links_[s.peer]->describe_peer(), " (", human_bytes(s.dst.bytes), ", step ",
               s.tag_index, ")");
  }
  if (out.empty()) out = "nothing (local work pending)";
  return cat(done_count_, " of ", schedule_.steps.size(), " steps done; waiting on ", out);
}

}  // namespace braid
