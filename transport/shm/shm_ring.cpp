#include "transport/shm/shm_ring.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <utility>

#include "core/log.hpp"
#include "core/process.hpp"
#include "core/reduce.hpp"
#include "core/text.hpp"
#include "core/ticks.hpp"
#include "transport/message.hpp"
#include "transport/shm/cma.hpp"
#include "transport/shm/nt_copy.hpp"

namespace braid {
namespace {

// "braid_r5": the consumer's cost of mapped messages in the control page
// (r4: mapped messages; r3: single copies; r2: slots published by their own
// seq).
constexpr std::uint64_t kRingMagic = 0x62726169645f7235ull;
constexpr std::size_t kPage = 4096;
constexpr std::uint32_t kMaxSlots = 1024;
// A slot whose message the consumer reads from the producer's memory.
constexpr std::uint32_t kRemoteSlot = 1;
// A slot whose message the consumer reads from the producer's shared
// allocation (inline_data holds a MappedRef).
constexpr std::uint32_t kMappedSlot = 2;
// A slot whose chunk the producer filled with streaming stores (adaptive).
constexpr std::uint32_t kStreamedSlot = 4;
// The first chunk of a trial (adaptive): the change of way costs it what
// neither way costs in the long run, so neither side counts it.
constexpr std::uint32_t kUntimedSlot = 8;
// The consumer's word on mapped messages (Control::mapped).
constexpr std::uint32_t kMapsYes = 1;
constexpr std::uint32_t kMapsNo = 2;
// The block a single-copy reduce reads from the producer before it reduces
// from it: small enough to stay in L1/L2 between the two.
constexpr std::size_t kBounceBytes = 64 * 1024;
// The consumer's verdict on single copies (Control::single_copy).
constexpr std::uint32_t kSingleCopyYes = 1;
constexpr std::uint32_t kSingleCopyNo = 2;

template <typename T>
std::atomic_ref<T> atomic(T& word) {
  return std::atomic_ref<T>(word);
}

// Spins for `spin`, then arms and sleeps until `ready()` or the timeout.
// `side` is a sender or a receiver (arm, wait, and its own bell to disarm).
template <typename Side, typename Ready>
bool spin_then_sleep(Side& side, Ready ready, std::chrono::nanoseconds spin, std::chrono::microseconds timeout,
                     SpinBudget* budget) {
  if (ready()) return true;  // not the spin's merit
  if (spin_until(ready, spin)) {
    if (budget != nullptr && spin.count() > 0) budget->found_while_spinning();
    return true;
  }
  if (budget != nullptr) budget->had_to_sleep();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (!side.arm()) return true;
    auto left = std::chrono::ceil<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      side.own_bell().disarm();
      return ready();
    }
    side.wait(left);
    if (ready()) return true;
  }
}

void copy_chunk(RingCopy how, void* dst, const void* src, std::size_t bytes, std::size_t message_bytes) {
  switch (how) {
    case RingCopy::cached: cached_copy(dst, src, bytes); break;
    case RingCopy::streaming: nt_copy(dst, src, bytes); break;
    case RingCopy::by_size:
    case RingCopy::adaptive: copy_large(dst, src, bytes, message_bytes); break;
  }
}

}  // namespace

// Every field the two sides write is on its own line: tail (consumer),
// each doorbell (its sleeper and its ringer), each closed flag. The
// producer's counter is in the slots (SlotHeader::seq).
struct ShmRing::Control {
  alignas(64) std::uint64_t magic;
  std::uint32_t slot_count;
  std::uint64_t slot_bytes;
  alignas(64) std::uint64_t tail;
  DoorbellWord consumer_bell;  // the consumer sleeps on it, the producer rings it
  DoorbellWord producer_bell;  // the other way round (waiting for a free slot)
  alignas(64) std::uint32_t producer_closed;
  alignas(64) std::uint32_t consumer_closed;
  // Single copies: the producer's probe word (cma.hpp) and pid, published
  // by storing probe_pid last; the consumer's verdict (kSingleCopyYes/No).
  alignas(64) std::uint64_t probe_address;
  std::uint64_t probe_value;
  std::uint32_t probe_pid;
  alignas(64) std::uint32_t single_copy;
  std::uint32_t mapped;  // the consumer's word on mapped messages (kMapsYes/No)
  // The consumer's ticks spent taking chunks filled plainly [kPlainWay] or
  // with streaming stores [kStreamedWay] (adaptive stores) and reading mapped
  // messages [kMappedWay] (adaptive mapped messages), and their bytes.
  alignas(64) std::uint64_t read_ticks[kWays];
  std::uint64_t read_bytes[kWays];
};

// Two lines: the first holds what the consumer checks (the publish mark, the
// message header, where the chunk goes) and the start of a small chunk, so
// an 8-byte message moves in one line.
struct alignas(64) ShmRing::SlotHeader {
  std::uint64_t seq;             // index + 1 once the slot of message index `index` is published
  MessageHeader message;         // the message's tag, size and descriptor (transport/message.hpp)
  std::uint64_t offset;          // of this chunk in the message
  std::uint32_t chunk_bytes;
  std::uint32_t flags;                  // kRemoteSlot: inline_data holds the producer's address of the message
  std::byte inline_data[kInlineBytes];  // the chunk, when it is at most kInlineBytes
};
static_assert(sizeof(ShmRing::SlotHeader) == 128 && offsetof(ShmRing::SlotHeader, inline_data) % 8 == 0,
              "a slot header is two lines, its inline chunk aligned for every element type");

namespace {

// What a mapped slot's inline_data holds: the allocation and the offset of
// the message in it (shared_memory.hpp's SharedRange).
struct MappedRef {
  std::uint64_t serial;
  std::uint64_t allocation_bytes;
  std::uint64_t offset;
  std::uint32_t fd;
  std::uint32_t unused;
};
static_assert(sizeof(MappedRef) <= ShmRing::kInlineBytes, "a mapped reference fits a slot header");

std::size_t control_bytes(std::uint32_t slots) {
  std::size_t raw = sizeof(ShmRing::Control) + slots * sizeof(ShmRing::SlotHeader);
  return (raw + kPage - 1) / kPage * kPage;
}
}  // namespace

void ShmRing::check(RingGeometry g) {
  if (g.slot_count < 2 || g.slot_count > kMaxSlots || g.slot_bytes == 0 || g.slot_bytes % kPage != 0)
    throw InvalidArgument(cat("shm ring: ", g.slot_count, " slots of ", g.slot_bytes,
                              " bytes: need 2-", kMaxSlots, " slots of a non-zero multiple of ", kPage, " bytes"));
}

std::size_t ShmRing::bytes_needed(RingGeometry g) {
  check(g);
  return control_bytes(g.slot_count) + g.slot_count * g.slot_bytes;
}

void ShmRing::format(std::span<std::byte> region, RingGeometry g) {
  if (region.size() < bytes_needed(g) || reinterpret_cast<std::uintptr_t>(region.data()) % kPage != 0)
    throw InvalidArgument(cat("shm ring: a region of ", region.size(), " bytes cannot hold a ring of ", g.slot_count,
                              " x ", g.slot_bytes, " bytes (needs ", bytes_needed(g), ", page-aligned)"));
  auto* control = reinterpret_cast<Control*>(region.data());
  std::memset(static_cast<void*>(control), 0, control_bytes(g.slot_count));
  control->slot_count = g.slot_count;
  control->slot_bytes = g.slot_bytes;
  atomic(control->magic).store(kRingMagic, std::memory_order_release);
}

ShmRing::ShmRing(std::span<std::byte> region, std::string description, bool producer, DoorbellWord* own,
                 DoorbellWord* peer)
    : control_(reinterpret_cast<Control*>(region.data())), description_(std::move(description)),
      producer_(producer) {
  if (region.size() < sizeof(Control) || atomic(control_->magic).load(std::memory_order_acquire) != kRingMagic)
    throw ProtocolMismatch(cat(description_, ": the region holds no formatted ring"));
  geometry_ = RingGeometry{control_->slot_count, control_->slot_bytes};
  check(geometry_);
  if (region.size() < bytes_needed(geometry_))
    throw ProtocolMismatch(cat(description_, ": the ring's geometry (", geometry_.slot_count, " x ",
                               geometry_.slot_bytes, " bytes) does not fit its region of ", region.size(), " bytes"));
  slots_ = region.data() + control_bytes(geometry_.slot_count);
  if ((geometry_.slot_count & (geometry_.slot_count - 1)) == 0) slot_mask_ = geometry_.slot_count - 1;
  DoorbellWord* consumer_word = &control_->consumer_bell;
  DoorbellWord* producer_word = &control_->producer_bell;
  own_bell_ = Doorbell(own ? own : (producer ? producer_word : consumer_word));
  peer_bell_ = Doorbell(peer ? peer : (producer ? consumer_word : producer_word));
}

const std::byte* ShmRing::chunk_of(const SlotHeader& slot, std::uint64_t index) const {
  return slot.chunk_bytes <= kInlineBytes ? slot.inline_data : slot_data(index);
}

ShmRing::SlotHeader& ShmRing::slot_header(std::uint64_t index) const {
  auto* headers = reinterpret_cast<SlotHeader*>(reinterpret_cast<std::byte*>(control_) + sizeof(Control));
  return headers[slot_of(index)];
}

std::byte* ShmRing::slot_data(std::uint64_t index) const {
  return slots_ + slot_of(index) * geometry_.slot_bytes;
}

std::uint64_t ShmRing::load_tail() const { return atomic(control_->tail).load(std::memory_order_seq_cst); }

void ShmRing::close() {
  atomic(producer_ ? control_->producer_closed : control_->consumer_closed).store(1, std::memory_order_seq_cst);
  peer_bell_.ring();
}

bool ShmRing::peer_closed() const {
  return atomic(producer_ ? control_->consumer_closed : control_->producer_closed).load(std::memory_order_seq_cst) != 0;
}

// ---- producer ----

ShmRingSender::ShmRingSender(std::span<std::byte> region, std::string description, RingCopy copy, DoorbellWord* own,
                             DoorbellWord* peer, std::size_t single_copy_bytes)
    : ShmRing(region, std::move(description), true, own, peer), copy_(copy), single_copy_bytes_(single_copy_bytes) {
  // A ring is formatted before its sides attach, so nothing is in flight:
  // the next slot to fill is the next the consumer will read.
  cached_tail_ = atomic(control_->tail).load(std::memory_order_acquire);
  head_ = cached_tail_;
  if (single_copy_bytes_ > 0) {
    const CmaProbeWord word = cma_probe_word();
    control_->probe_address = word.address;
    control_->probe_value = word.value;
    atomic(control_->probe_pid).store(static_cast<std::uint32_t>(::getpid()), std::memory_order_release);
  }
}

bool ShmRingSender::single_copy(const OutgoingMessage& m) const {
  // Never at or below kEagerSendBytes, which every link sends without the
  // receiver (core/eager.hpp).
  return single_copy_bytes_ > 0 && m.src.bytes >= single_copy_bytes_ && m.src.bytes > kEagerSendBytes &&
         m.src.kind == MemKind::host && consumer_reads_directly();
}

bool ShmRingSender::consumer_maps() const {
  return atomic(control_->mapped).load(std::memory_order_acquire) == kMapsYes;
}

bool ShmRingSender::consumer_reads_directly() const {
  return atomic(control_->single_copy).load(std::memory_order_acquire) == kSingleCopyYes;
}

bool ShmRingSender::can_move(const OutgoingMessage& m) {
  if (m.remote_until != 0) return load_tail() >= m.remote_until;
  return has_space();
}

bool ShmRingSender::has_space() {
  if (head_ - cached_tail_ < geometry_.slot_count) return true;
  cached_tail_ = atomic(control_->tail).load(std::memory_order_seq_cst);
  return head_ - cached_tail_ < geometry_.slot_count;
}

bool ShmRingSender::drained() const { return atomic(control_->tail).load(std::memory_order_seq_cst) == head_; }

bool ShmRingSender::try_push(OutgoingMessage& m) {
  if (m.remote_until != 0) {
    // Sent by one copy: done once the consumer freed its slot (it has read
    // src then). A consumer that closed first never will.
    cached_tail_ = load_tail();
    if (cached_tail_ >= m.remote_until) {
      m.remote_until = 0;
      return true;
    }
    if (peer_closed())
      throw PeerLost(cat(description_, ": the receiving side closed the ring before it read ",
                         describe_tag(m.tag), " (", m.src.bytes, " bytes, single copy)"));
    return false;
  }
  if (peer_closed()) throw PeerLost(cat(description_, ": the receiving side closed the ring"));
  // Mapped: above kEagerSendBytes (which every link sends without the
  // receiver, core/eager.hpp) from memory braid_mem_alloc gave.
  bool mapped_way_declined = false;  // this could go mapped, and goes through the slots
  if (!m.started && m.src.bytes > kEagerSendBytes && m.src.kind == MemKind::host && consumer_maps()) {
    if (auto range = shared_find(m.src.data, m.src.bytes)) {
      if (take_mapped_way()) {
        const MappedRef ref{range->serial, range->allocation_bytes, range->offset,
                            static_cast<std::uint32_t>(range->fd), 0};
        if (push_reference(m, kMappedSlot, &ref, sizeof ref)) ++mapped_sent_;
        else undo_mapped_way();  // no free slot: asked again at the next try
        return false;  // done when the consumer has read it
      }
      mapped_way_declined = true;
    }
  }
  if (!m.started && single_copy(m)) {
    const auto address = reinterpret_cast<std::uint64_t>(m.src.data);
    push_reference(m, kRemoteSlot, &address, sizeof address);
    return false;  // done when the consumer has read it
  }
  while (!m.done() && has_space()) {
    SlotHeader& slot = slot_header(head_);
    std::size_t chunk = std::min(geometry_.slot_bytes, m.src.bytes - m.pushed);
    slot.message = header_for(m.tag, m.src.bytes);
    slot.offset = m.pushed;
    slot.chunk_bytes = static_cast<std::uint32_t>(chunk);
    slot.flags = 0;
    if (chunk > kInlineBytes) {
      slot.flags = fill(head_, m.src.data + m.pushed, chunk, m.src.bytes);
    } else if (chunk > 0) {
      std::memcpy(slot.inline_data, m.src.data + m.pushed, chunk);
    }
    ++head_;
    atomic(slot.seq).store(head_, std::memory_order_seq_cst);  // publishes; seq_cst: see doorbell.hpp
    m.pushed += chunk;
    m.started = true;
    peer_bell_.ring();
  }
  if (mapped_way_declined) {
    if (m.started) ++mapped_through_slots_;
    else undo_mapped_way();  // no free slot: asked again at the next try
  }
  return m.done();
}

ShmRingSender::Spent ShmRingSender::consumer_spent() const {
  Spent spent;
  for (int way = 0; way < kWays; ++way) {
    spent.ticks[way] = atomic(control_->read_ticks[way]).load(std::memory_order_relaxed);
    spent.bytes[way] = atomic(control_->read_bytes[way]).load(std::memory_order_relaxed);
  }
  return spent;
}

void ShmRingSender::next_phase() {
  switch (phase_) {
    case Phase::keep:
      phase_ = Phase::first_trial;
      left_ = kTrialChunks + 1;  // the first untimed
      stream_first_ = !stream_first_;
      own_at_trial_ = own_;
      consumer_at_trial_ = consumer_spent();
      return;
    case Phase::first_trial:
      phase_ = Phase::second_trial;
      left_ = kTrialChunks + 1;
      return;
    case Phase::second_trial: break;
  }
  // Ticks per byte of each way over the trials, both sides added; the
  // consumer may not have taken the last chunks yet, so each side's rate
  // comes from what it did. A way without bytes on either side: no verdict.
  const Spent theirs = consumer_spent();
  const auto plain = slots_cost(kPlainWay, own_at_trial_, consumer_at_trial_, theirs);
  const auto streamed = slots_cost(kStreamedWay, own_at_trial_, consumer_at_trial_, theirs);
  // Plain stays unless streaming costs 10% less; streaming stays unless plain does.
  if (plain && streamed) streaming_ = streaming_ ? !(*plain < 0.9 * *streamed) : *streamed < 0.9 * *plain;
  phase_ = Phase::keep;
  left_ = kKeepChunks;
}

bool ShmRingSender::take_mapped_way() {
  if (copy_ != RingCopy::adaptive) return true;
  if (++mapped_eligible_ < kMappedProbeEvery) return mapped_kept_;
  // A verdict on what both ways cost since the last one, then one message
  // the other way, so that its cost stays known.
  mapped_eligible_ = 0;
  decide_mapped_way();
  return !mapped_kept_;
}

void ShmRingSender::undo_mapped_way() {
  if (copy_ != RingCopy::adaptive) return;
  if (mapped_eligible_ > 0) --mapped_eligible_;
  else mapped_eligible_ = kMappedProbeEvery - 1;  // the probe is asked again
}

void ShmRingSender::decide_mapped_way() {
  const Spent theirs = consumer_spent();
  // The slots' cost is that of the stores kept, both sides added, over
  // every timed chunk since the last verdict (other messages' too).
  const auto slots = slots_cost(streaming_ ? kStreamedWay : kPlainWay, own_at_verdict_, consumer_at_verdict_, theirs);
  const std::uint64_t read_bytes = theirs.bytes[kMappedWay] - consumer_at_verdict_.bytes[kMappedWay];
  if (!slots || read_bytes == 0) return;  // no verdict yet: gather more
  const double mapped = static_cast<double>(theirs.ticks[kMappedWay] - consumer_at_verdict_.ticks[kMappedWay]) /
                        static_cast<double>(read_bytes);
  // Mapped stays unless the slots cost 10% less; the slots stay unless mapped does.
  mapped_kept_ = mapped_kept_ ? !(*slots < 0.9 * mapped) : mapped < 0.9 * *slots;
  own_at_verdict_ = own_;
  consumer_at_verdict_ = theirs;
}

std::optional<double> ShmRingSender::slots_cost(int way, const Spent& own_then, const Spent& theirs_then,
                                                const Spent& theirs) const {
  const std::uint64_t own_bytes = own_.bytes[way] - own_then.bytes[way];
  const std::uint64_t their_bytes = theirs.bytes[way] - theirs_then.bytes[way];
  if (own_bytes == 0 || their_bytes == 0) return std::nullopt;
  return static_cast<double>(own_.ticks[way] - own_then.ticks[way]) / static_cast<double>(own_bytes) +
         static_cast<double>(theirs.ticks[way] - theirs_then.ticks[way]) / static_cast<double>(their_bytes);
}

std::uint32_t ShmRingSender::fill(std::uint64_t index, const std::byte* src, std::size_t chunk,
                                  std::size_t message_bytes) {
  std::byte* dst = slot_data(index);
  if (copy_ != RingCopy::adaptive || chunk < kAdaptiveBytes) {
    copy_chunk(copy_ == RingCopy::streaming ? RingCopy::streaming : RingCopy::cached, dst, src, chunk, message_bytes);
    return copy_ == RingCopy::streaming ? kStreamedSlot : 0;
  }
  const bool stream = phase_ == Phase::keep           ? streaming_
                      : phase_ == Phase::first_trial ? stream_first_
                                                     : !stream_first_;
  const bool timed = phase_ == Phase::keep || left_ <= kTrialChunks;
  const std::int64_t begin = ticks();
  if (stream) nt_copy(dst, src, chunk);
  else cached_copy(dst, src, chunk);
  const int way = stream ? kStreamedWay : kPlainWay;
  if (timed) {
    own_.ticks[way] += static_cast<std::uint64_t>(std::max<std::int64_t>(ticks() - begin, 0));
    own_.bytes[way] += chunk;
  }
  if (--left_ == 0) next_phase();
  ++adaptive_chunks_;
  streamed_chunks_ += stream ? 1 : 0;
  return (stream ? kStreamedSlot : 0) | (timed ? 0 : kUntimedSlot);
}

bool ShmRingSender::push_reference(OutgoingMessage& m, std::uint32_t flags, const void* reference,
                                   std::size_t reference_bytes) {
  if (!has_space()) return false;
  SlotHeader& slot = slot_header(head_);
  slot.message = header_for(m.tag, m.src.bytes);
  slot.offset = 0;
  slot.chunk_bytes = 0;
  slot.flags = flags;
  std::memcpy(slot.inline_data, reference, reference_bytes);
  ++head_;
  atomic(slot.seq).store(head_, std::memory_order_seq_cst);  // publishes; seq_cst: see doorbell.hpp
  m.pushed = m.src.bytes;
  m.started = true;
  m.remote_until = head_;
  peer_bell_.ring();
  return true;
}

bool ShmRingSender::push_small(ConstMemView src, const Tag& tag) {
  if (!has_space()) return false;
  if (peer_closed()) throw PeerLost(cat(description_, ": the receiving side closed the ring"));
  SlotHeader& slot = slot_header(head_);
  slot.message = header_for(tag, src.bytes);
  slot.offset = 0;
  slot.chunk_bytes = static_cast<std::uint32_t>(src.bytes);
  slot.flags = 0;
  if (src.bytes > kInlineBytes) slot.flags = fill(head_, src.data, src.bytes, src.bytes);
  else if (src.bytes > 0) std::memcpy(slot.inline_data, src.data, src.bytes);
  ++head_;
  atomic(slot.seq).store(head_, std::memory_order_seq_cst);  // publishes; seq_cst: see doorbell.hpp
  peer_bell_.ring();
  return true;
}

bool ShmRingSender::arm() {
  ticket_ = own_bell_.arm();
  if (has_space() || peer_closed()) {
    own_bell_.disarm();
    return false;
  }
  return true;
}

bool ShmRingSender::wait(std::chrono::microseconds timeout) { return own_bell_.wait(ticket_, timeout); }

bool ShmRingSender::wait_for_space(std::chrono::nanoseconds spin, std::chrono::microseconds timeout) {
  return spin_then_sleep(*this, [&] { return has_space() || peer_closed(); }, spin, timeout, nullptr);
}

bool ShmRingSender::wait_for_space(SpinBudget& budget, std::chrono::microseconds timeout) {
  return spin_then_sleep(*this, [&] { return has_space() || peer_closed(); }, budget.next_spin(), timeout, &budget);
}

// ---- consumer ----

ShmRingReceiver::ShmRingReceiver(std::span<std::byte> region, std::string description, RingCopy copy,
                                 DoorbellWord* own, DoorbellWord* peer, bool single_copy, PeerMappings* mappings)
    : ShmRing(region, std::move(description), false, own, peer), copy_(copy),
      single_copy_(single_copy ? SingleCopy::undecided : SingleCopy::off), mappings_(mappings) {
  tail_ = atomic(control_->tail).load(std::memory_order_acquire);
  atomic(control_->mapped).store(mappings != nullptr ? kMapsYes : kMapsNo, std::memory_order_release);
  if (!single_copy) atomic(control_->single_copy).store(kSingleCopyNo, std::memory_order_release);
  decide_single_copy();
}

void ShmRingReceiver::decide_single_copy() {
  if (single_copy_ != SingleCopy::undecided) return;
  const std::uint32_t pid = atomic(control_->probe_pid).load(std::memory_order_acquire);
  if (pid == 0) return;  // the producer has not attached (or offers none)
  const CmaVerdict verdict =
      cma_probe(static_cast<pid_t>(pid), CmaProbeWord{control_->probe_address, control_->probe_value});
  single_copy_ = verdict.allowed ? SingleCopy::on : SingleCopy::off;
  if (!verdict.allowed) {
    single_copy_refused_ = verdict.reason;
    log_info(description_, ": messages go through the ring only, as the kernel refuses single copies: ",
             verdict.reason);
  }
  atomic(control_->single_copy).store(verdict.allowed ? kSingleCopyYes : kSingleCopyNo, std::memory_order_release);
}

void ShmRingReceiver::release_slot() {
  ++tail_;
  atomic(control_->tail).store(tail_, std::memory_order_seq_cst);  // seq_cst: see doorbell.hpp
  peer_bell_.ring();
}

void ShmRingReceiver::read_remote(const SlotHeader& slot, IncomingMessage& m) {
  check_match(slot.message, m.tag, m.dst.bytes, [&] { return cat(description_, ": received"); });
  if (single_copy_ != SingleCopy::on || m.received != 0 || slot.offset != 0 || m.dst.bytes <= kInlineBytes)
    throw ProtocolMismatch(cat(description_, ": ", describe_tag(slot.message.as_tag()),
                               " came as a single copy this side did not agree to (or midway through a message): "
                               "the ring is corrupt"));
  std::uint64_t address = 0;
  std::memcpy(&address, slot.inline_data, sizeof(address));
  const auto pid = static_cast<pid_t>(atomic(control_->probe_pid).load(std::memory_order_acquire));
  try {
    if (m.local == nullptr) {
      cma_read(pid, address, {m.dst.data, m.dst.bytes});
    } else {
      const std::size_t element = size_of(m.type);
      const std::size_t block = kBounceBytes / element * element;
      if (bounce_.size() < block) bounce_.resize(block);
      for (std::size_t at = 0; at < m.dst.bytes; at += block) {
        const std::size_t n = std::min(block, m.dst.bytes - at);
        cma_read(pid, address + at, {bounce_.data(), n});
        reduce(m.type, m.op, m.dst.data + at, m.local + at, bounce_.data(), n / element);
      }
    }
  } catch (const SystemError& e) {
    // The producer's send waits for this read, so it still runs unless it
    // died: then its buffer is gone with it.
    if (process_gone(pid))
      throw PeerLost(cat(description_, ": the sending process exited while ", describe_tag(m.tag),
                         " was being read from it (single copy): ", e.what()));
    throw;
  }
  m.received = m.dst.bytes;
  m.started = true;
  release_slot();
}

void ShmRingReceiver::read_mapped(const SlotHeader& slot, IncomingMessage& m) {
  check_match(slot.message, m.tag, m.dst.bytes, [&] { return cat(description_, ": received"); });
  MappedRef ref{};
  std::memcpy(&ref, slot.inline_data, sizeof(ref));
  if (mappings_ == nullptr || m.received != 0 || slot.offset != 0 || m.dst.bytes <= kEagerSendBytes ||
      ref.offset > ref.allocation_bytes || m.dst.bytes > ref.allocation_bytes - ref.offset)
    throw ProtocolMismatch(cat(description_, ": ", describe_tag(slot.message.as_tag()), " came as a mapped message ",
                               "this side did not agree to, midway through a message or outside its allocation (",
                               m.dst.bytes, " bytes at ", ref.offset, " of ", ref.allocation_bytes,
                               "): the ring is corrupt"));
  const std::byte* base = mappings_->map(
      SharedRange{static_cast<int>(ref.fd), ref.serial, ref.allocation_bytes, ref.offset});
  const std::byte* src = base + ref.offset;
  // Timed for the producer's choice between mapped messages and the slots.
  const std::int64_t begin = ticks();
  if (m.local == nullptr) copy_chunk(copy_, m.dst.data, src, m.dst.bytes, m.dst.bytes);
  else reduce(m.type, m.op, m.dst.data, m.local, src, m.dst.bytes / size_of(m.type));
  tally(kMappedWay, begin, m.dst.bytes);
  m.received = m.dst.bytes;
  m.started = true;
  release_slot();
}

bool ShmRingReceiver::has_data() {
  // The slot at tail is published once its seq is tail + 1 (seq_cst: see
  // doorbell.hpp). One line, which the producer writes once per message.
  return atomic(slot_header(tail_).seq).load(std::memory_order_seq_cst) == tail_ + 1;
}

std::optional<Tag> ShmRingReceiver::waiting_tag() {
  if (!has_data()) return std::nullopt;
  const SlotHeader& slot = slot_header(tail_);
  if (slot.offset != 0) return std::nullopt;
  return slot.message.as_tag();
}

void ShmRingReceiver::check_slot(const SlotHeader& slot, const IncomingMessage& m) const {
  check_match(slot.message, m.tag, m.dst.bytes, [&] { return cat(description_, ": received"); });
  if (slot.offset != m.received || slot.chunk_bytes > geometry_.slot_bytes ||
      slot.chunk_bytes > m.dst.bytes - m.received || (slot.chunk_bytes == 0 && m.dst.bytes != 0))
    throw ProtocolMismatch(cat(description_, ": a chunk of ", slot.chunk_bytes, " bytes at offset ", slot.offset,
                               " of ", describe_tag(slot.message.as_tag()), " does not continue the ", m.received,
                               " bytes received so far: the ring is corrupt"));
}

bool ShmRingReceiver::try_pop(IncomingMessage& m) {
  if (!m.started && m.local != nullptr && m.dst.bytes % size_of(m.type) != 0)
    throw InvalidArgument(cat(description_, ": a reduce of ", m.dst.bytes, " bytes is not a whole number of ",
                              name_of(m.type), " elements"));
  while (!m.done()) {
    if (!has_data()) {
      // The producer sets its flag after its last publish: look at the flag,
      // then once more at head, so a final message is never cut off.
      if (peer_closed() && !has_data())
        throw PeerLost(cat(description_, ": the sending side closed the ring before ", describe_tag(m.tag),
                           " arrived (", m.received, " of ", m.dst.bytes, " bytes received)"));
      if (!has_data()) break;
    }
    const SlotHeader& slot = slot_header(tail_);
    if (slot.flags & kMappedSlot) {
      read_mapped(slot, m);
      break;
    }
    if (slot.flags & kRemoteSlot) {
      decide_single_copy();  // a producer offers one only after this side said yes
      read_remote(slot, m);
      break;
    }
    check_slot(slot, m);
    const std::size_t chunk = slot.chunk_bytes;
    take_chunk(slot, m.dst.data + m.received, m.local != nullptr ? m.local + m.received : nullptr, m.type, m.op,
               m.dst.bytes);
    m.received += chunk;
    m.started = true;
    release_slot();
  }
  if (single_copy_ == SingleCopy::undecided) decide_single_copy();
  return m.done();
}

void ShmRingReceiver::take_chunk(const SlotHeader& slot, std::byte* dst, const std::byte* local, DataType type,
                                 ReduceOp op, std::size_t message_bytes) {
  const std::size_t chunk = slot.chunk_bytes;
  if (chunk == 0) return;
  const std::byte* data = chunk_of(slot, tail_);
  // Timed for the producer's adaptive stores (shm_ring.hpp).
  const std::int64_t begin = chunk >= ShmRingSender::kAdaptiveBytes && !(slot.flags & kUntimedSlot) ? ticks() : 0;
  if (local == nullptr && chunk <= kInlineBytes) std::memcpy(dst, data, chunk);
  else if (local == nullptr) copy_chunk(copy_, dst, data, chunk, message_bytes);
  else reduce(type, op, dst, local, data, chunk / size_of(type));
  if (begin != 0) tally((slot.flags & kStreamedSlot) ? kStreamedWay : kPlainWay, begin, chunk);
}

void ShmRingReceiver::tally(int way, std::int64_t begin, std::size_t bytes) {
  read_ticks_[way] += static_cast<std::uint64_t>(std::max<std::int64_t>(ticks() - begin, 0));
  read_bytes_[way] += bytes;
  atomic(control_->read_ticks[way]).store(read_ticks_[way], std::memory_order_relaxed);
  atomic(control_->read_bytes[way]).store(read_bytes_[way], std::memory_order_relaxed);
}

bool ShmRingReceiver::pop_small(MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag) {
  if (!has_data()) {
    // As try_pop: the flag, then head once more, so a final message is never cut off.
    if (peer_closed() && !has_data())
      throw PeerLost(cat(description_, ": the sending side closed the ring before ", describe_tag(tag), " arrived"));
    if (!has_data()) return false;
  }
  const SlotHeader& slot = slot_header(tail_);
  const std::size_t element = local != nullptr ? size_of(type) : 1;
  // The whole check of try_pop (check_slot), spelt out for the common case;
  // check_slot says what is wrong otherwise. Every sender puts a small
  // message in one chunk.
  if (slot.message.tag != tag.id || slot.message.bytes != dst.bytes || slot.offset != 0 ||
      slot.chunk_bytes != dst.bytes || std::memcmp(slot.message.context.data(), tag.context.data(), 16) != 0 ||
      dst.bytes % element != 0) [[unlikely]] {
    if (dst.bytes % element != 0)
      throw InvalidArgument(cat(description_, ": a reduce of ", dst.bytes, " bytes is not a whole number of ",
                                name_of(type), " elements"));
    check_slot(slot, IncomingMessage{tag, dst, local, type, op});
    throw ProtocolMismatch(cat(description_, ": ", describe_tag(tag), " of ", dst.bytes, " bytes came in a chunk of ",
                               slot.chunk_bytes, " bytes: the ring is corrupt"));
  }
  take_chunk(slot, dst.data, local, type, op, dst.bytes);
  ++tail_;
  atomic(control_->tail).store(tail_, std::memory_order_seq_cst);  // seq_cst: see doorbell.hpp
  peer_bell_.ring();
  return true;
}

bool ShmRingReceiver::arm() {
  ticket_ = own_bell_.arm();
  if (has_data() || peer_closed()) {
    own_bell_.disarm();
    return false;
  }
  return true;
}

bool ShmRingReceiver::wait(std::chrono::microseconds timeout) { return own_bell_.wait(ticket_, timeout); }

bool ShmRingReceiver::wait_for_data(std::chrono::nanoseconds spin, std::chrono::microseconds timeout) {
  return spin_then_sleep(*this, [&] { return has_data() || peer_closed(); }, spin, timeout, nullptr);
}

bool ShmRingReceiver::wait_for_data(SpinBudget& budget, std::chrono::microseconds timeout) {
  return spin_then_sleep(*this, [&] { return has_data() || peer_closed(); }, budget.next_spin(), timeout, &budget);
}

}  // namespace braid
