// ShmRing: a single-producer single-consumer ring of fixed-size slots in
// shared memory, carrying braid messages from one process to another.
//
// Layout (one region of a ShmSegment, page-aligned):
//
//   page 0    Control: geometry, then `tail` (slots consumed, written only
//             by the consumer), two DoorbellWords and the closed flags, each
//             on its own 64-byte line so the two sides never write one line.
//             Then one 128-byte SlotHeader per slot.
//   page 1..  the slots' payloads, slot_bytes each, page-aligned.
//
// A message is braid's MessageHeader (transport/message.hpp: tag, size,
// 16-byte descriptor) and its payload cut into slot-sized chunks; every
// slot's header repeats the message header with the chunk's offset and
// length (as every TCP part does), so a slot can be checked on its own
// (check_match, the rule of every link) and a message of 0 bytes is one slot
// of 0 bytes. The producer fills slot k % count (a chunk of at most
// kInlineBytes inside the header itself), then publishes it by storing k + 1
// in the slot header's `seq`; the consumer waits for that value in the slot
// it reads next, uses the slot, then frees it with a store of tail + 1. The
// producer caches tail and reads its line only when the cache says full. So
// a small message costs one line the producer writes and the consumer reads
// (the slot header's first line); with a separate head counter and payload
// it was three, and an 8-byte all-reduce on 2 ranks took 1.2 us instead of
// 0.9 us.
// While the consumer works on chunk k the producer fills chunk k+1: the two
// copies of a ring transfer overlap.
//
// The consumer serves one receive at a time: it checks the first slot's tag
// and size against the receive before it writes a byte of the destination
// and throws TagMismatch otherwise (the slot stays in the ring; the link is
// broken anyway). It either copies the chunk out, or reduces straight from
// the slot, dst[i] = local[i] op slot[i], with the kernels of core/reduce.hpp:
// no intermediate buffer, and the chunk is read once.
//
// Sizes: 8 slots of 256 KiB (2 MiB per direction, 4 MiB per peer pair).
// `shm_pingpong slots` (GB/s per CPU second of the busier side, which the
// load of this shared 2-core machine does not distort the way it does the
// wall clock; median of 3, one launch):
//
//   slots         1 MiB  16 MiB  64 MiB
//   8 x 64 KiB     6.7     7.9     8.3   per-chunk handoffs start to show
//   4 x 256 KiB   14.6     9.0     9.4
//   8 x 256 KiB   17.3     8.5     9.8   chosen
//   16 x 256 KiB  16.5     9.6     9.8   no better, twice the memory
//   8 x 1 MiB      9.5     7.5     7.0   the ring no longer stays in cache
//   16 x 1 MiB     5.8     5.7     5.7
//
// A second launch (median of 5) ranked them the same at 1 MiB and put every
// 8-slot ring within 10% of each other at 64 MiB (6.8-7.2), 16 x 1 MiB last.
// A slot must be large enough that the per-chunk costs (two counter
// handoffs, a doorbell check) vanish next to its copy, and small enough
// that the ring stays in the cache, so the consumer reads what the producer
// just wrote from L2/L3 instead of memory, and that producer and consumer
// overlap within one message.
//
// Single copy (cross-memory attach, cma.hpp): through the slots every byte
// is copied twice, by the producer into a slot and by the consumer out of
// it. A message of at least `single_copy_bytes` (BRAID_SHM_SINGLE_COPY) and
// above kEagerSendBytes (core/eager.hpp: what every link sends without the
// receiver, which schedules rely on) goes
// instead as one slot that says where the producer's buffer is; the
// consumer reads it straight from there with process_vm_readv (into the
// destination, or block by block into a small buffer it then reduces from)
// and frees the slot; the producer's send completes when it sees the slot
// freed, so its buffer stays untouched until then, as a rendezvous send of
// UCX or MPI. One copy instead of two, by the consumer alone. The kernel
// allows it only where the consumer may ptrace the producer, so the
// producer publishes a probe word in the control page, the consumer reads it
// through CMA once and publishes its verdict, and the producer offers single
// copies only after a yes; until then, and after a no, everything goes
// through the slots.
//
// Mapped messages (shared_memory.hpp): a message above kEagerSendBytes
// whose source lies in memory from braid_mem_alloc goes as one slot naming
// the allocation (its memfd, number and size) and the offset; the consumer
// maps the allocation once (PeerMappings, kept for later messages) and
// copies or reduces straight from it in one pass, then frees the slot, and
// the send completes then, as a single copy's. No system call per message,
// no bounce buffer, and the producer copies nothing. The consumer says at
// attach whether it maps (Control::mapped); a producer offers mapped slots
// only after that yes (BRAID_SHM_MAPPED=0 says no).
//
// Adaptive stores (RingCopy::adaptive): whether a slot should be filled with
// plain stores (the consumer then reads the lines from the producer's cache)
// or streaming ones (from memory) depends on where the two processes run,
// and on this VM that changes by itself for minutes at a time. With both on
// one L3, plain stores win: `shm_pingpong bandwidth` at 1 MiB, 51 GB/s
// against 17 streaming; at other times (the vCPUs apart, every line crossing
// between caches) the same command measured 9.5 against 28, and a 1 MiB
// all-reduce on 2 ranks took 205 us instead of 63. So each side times its
// part of every chunk of at least kAdaptiveBytes (ticks and bytes per way of
// filling; the consumer publishes its totals in the control page), and the
// producer runs trials of kTrialChunks chunks each way every kKeepChunks
// chunks and keeps the way whose two sides added up to less per byte, by
// 10% to change. The first chunk of a trial is counted by neither side
// (kUntimedSlot: the change of way costs it what neither way costs in the
// long run), and the first trials wait for 4 x kTrialChunks chunks.
//
// Adaptive mapped messages (with RingCopy::adaptive): a mapped message costs
// the consumer one pass over the producer's buffer and the producer nothing;
// through the slots both sides copy once. Which costs less per byte follows
// the same two states: 2 ranks, 1 MiB all-reduce on braid_mem_alloc buffers
// took 29-33 us mapped against 48-52 through the slots with both vCPUs on
// one L3, and 90-100 against 72-78 with them apart (reading lines out of
// the other's cache is what is slow then). So the consumer also times its
// mapped reads (and publishes them), and the producer sends one message in
// kMappedProbeEvery that could go mapped the way it does not keep, then
// keeps the way whose ticks per byte since the last verdict were lower, by
// 10% to change (the slots' cost: the kept stores' fill and take, both
// sides added, of every timed chunk).
//
// Waiting: the engine first calls try_push/try_pop; when nothing moves it
// spins for a SpinBudget (doorbell.hpp: 20 us while spinning has been
// paying, 0.5 us otherwise), then arm() + wait(). Both sides
// ring the other's Doorbell after every publish; see doorbell.hpp for the
// no-lost-wakeup argument. A side that closes (close()) sets its flag and
// rings; the other side's calls then throw PeerLost once the ring is empty.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "braid/types.hpp"
#include "transport/shm/doorbell.hpp"
#include "transport/shm/shared_memory.hpp"
#include "transport/transport.hpp"

namespace braid {

struct RingGeometry {
  std::uint32_t slot_count = 8;
  std::size_t slot_bytes = 256 * 1024;  // a multiple of 4096
};

/// How the producer fills slots and the consumer empties them: `cached`
/// (memcpy), `streaming` (nt_copy), or `by_size`: the producer always
/// memcpys into the slot (the ring is small and hot, and streaming stores
/// would make the consumer read it back from memory), the consumer streams
/// into a destination of at least kNtCopyMinBytes (copy_large). Measured with
/// `shm_pingpong bandwidth` (GB/s per busier side's CPU second, 64 MiB):
/// memcpy both sides 2.3, streaming out of the slot 9.4, streaming both 7.3.
/// `adaptive`: the consumer as by_size; the producer fills each chunk of at
/// least kAdaptiveBytes the way that has cost the two sides less time
/// (see "Adaptive stores" above), smaller ones with memcpy.
enum class RingCopy : std::uint8_t { cached, streaming, by_size, adaptive };

/// One message being sent; the ring advances `pushed` as chunks go in.
struct OutgoingMessage {
  Tag tag;
  ConstMemView src;
  std::size_t pushed = 0;
  bool started = false;  // the first chunk (carrying the header) is in
  /// Sent by one copy (ShmRingSender's single copy): the slot index + 1 of
  /// the slot that says where src is; done once the consumer freed it.
  std::uint64_t remote_until = 0;
  bool done() const { return started && pushed == src.bytes && remote_until == 0; }
};

/// One receive being served: copy into dst (local == nullptr) or reduce
/// dst = local op incoming. `received` advances as chunks come out.
struct IncomingMessage {
  Tag tag;
  MemView dst;
  const std::byte* local = nullptr;
  DataType type = DataType::u8;
  ReduceOp op = ReduceOp::sum;
  std::size_t received = 0;
  bool started = false;  // the first chunk's header was checked
  bool done() const { return started && received == dst.bytes; }
};

class ShmRing {
 public:
  /// Bytes a ring of this geometry needs (a multiple of 4096).
  static std::size_t bytes_needed(RingGeometry geometry);
  /// Writes an empty ring into `region` (zero-filled, page-aligned, at least
  /// bytes_needed). Done once by the segment's creator before it publishes
  /// the segment's name.
  static void format(std::span<std::byte> region, RingGeometry geometry);
  /// Throws InvalidArgument for a geometry that is not usable.
  static void check(RingGeometry geometry);

  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;

  RingGeometry geometry() const { return geometry_; }
  /// Marks this side closed and wakes the other; the peer's later calls
  /// throw PeerLost once the ring is empty. Idempotent.
  void close();
  /// True once the other side called close().
  bool peer_closed() const;
  /// The doorbell this side sleeps on (to share with other rings).
  Doorbell& own_bell() { return own_bell_; }
  /// Rings the peer by writing into `fd` (its doorbell's pipe) instead of
  /// FUTEX_WAKE (doorbell.hpp); -1 for none: a peer that exited sleeps no more.
  void wake_peer_through(int fd) { peer_bell_.wake_through(fd); }
  /// FUTEX_WAKE calls this side made (tests, benchmarks).
  std::uint64_t wakes_sent() const { return peer_bell_.wake_calls(); }

  /// The shared layout (defined in shm_ring.cpp): the control page and
  /// the per-slot headers.
  struct Control;
  struct SlotHeader;
  /// Chunks up to this size travel inside their slot header, so a small
  /// message moves in the header's line instead of in a second line.
  static constexpr std::size_t kInlineBytes = 72;
  /// The short path's largest message (push_small, pop_small): one chunk,
  /// inside the slot header up to kInlineBytes, else in its payload slot.
  static constexpr std::size_t kShortBytes = 32 * 1024;
  /// The ways a consumer times its reads (Control::read_ticks): chunks stored
  /// plain, chunks stored streaming, mapped messages.
  static constexpr int kPlainWay = 0, kStreamedWay = 1, kMappedWay = 2, kWays = 3;
  std::size_t short_bytes() const { return std::min(kShortBytes, geometry_.slot_bytes); }

 protected:
  // `own`/`peer`: the doorbells this side sleeps on and rings; null means
  // the ones inside the ring (the consumer's and producer's words).
  ShmRing(std::span<std::byte> region, std::string description, bool producer, DoorbellWord* own, DoorbellWord* peer);
  SlotHeader& slot_header(std::uint64_t index) const;
  std::byte* slot_data(std::uint64_t index) const;
  /// index modulo the slot count: a mask when the count is a power of two
  /// (the default 8), as a 64-bit division on every poll of a small message
  /// cost more than the rest of the poll.
  std::uint64_t slot_of(std::uint64_t index) const { return slot_mask_ ? index & slot_mask_ : index % geometry_.slot_count; }
  /// The consumer's tail, as the producer reads it (seq_cst: doorbell.hpp).
  std::uint64_t load_tail() const;
  /// Where the chunk of `slot` (slot index `index`) is: inline or in its payload slot.
  const std::byte* chunk_of(const SlotHeader& slot, std::uint64_t index) const;

  Control* control_;
  std::byte* slots_;
  RingGeometry geometry_;
  std::uint64_t slot_mask_ = 0;  // slot count - 1 when a power of two, else 0
  std::string description_;  // "shm ring /braid-...: to rank 1", for errors
  bool producer_;
  Doorbell own_bell_;
  Doorbell peer_bell_;
};

class ShmRingSender : public ShmRing {
 public:
  /// `single_copy_bytes`: messages of at least this size go by one copy when
  /// the consumer may read this process (0: never; see the file's comment).
  ShmRingSender(std::span<std::byte> region, std::string description, RingCopy copy = RingCopy::by_size,
                DoorbellWord* own = nullptr, DoorbellWord* peer = nullptr, std::size_t single_copy_bytes = 0);
  /// Puts as many chunks of `message` into free slots as there are; true
  /// once all of it is in the ring (src may then be reused), or, sent by one
  /// copy, once the consumer has read it. Throws PeerLost if the consumer
  /// closed.
  bool try_push(OutgoingMessage& message);
  /// Whether try_push(message) could move now: a free slot, or (one copy)
  /// the consumer done with it.
  bool can_move(const OutgoingMessage& message);
  /// Whether the consumer said it reads this process's messages directly
  /// (until then, and after a no, every message goes through the slots).
  bool consumer_reads_directly() const;
  /// Whether the consumer said it maps this process's shared allocations
  /// (mapped messages; until then every message goes through the slots).
  bool consumer_maps() const;
  /// Messages this side sent as mapped slots (tests, benchmarks).
  std::uint64_t mapped_sent() const { return mapped_sent_; }
  /// Messages that could have gone mapped and went through the slots
  /// (adaptive mapped messages; tests, benchmarks).
  std::uint64_t mapped_through_slots() const { return mapped_through_slots_; }
  /// Every this many messages that could go mapped, one goes the way not
  /// kept (after a verdict on both ways' costs since the last one).
  static constexpr std::uint32_t kMappedProbeEvery = 32;
  /// Chunks of at least kAdaptiveBytes filled with streaming stores, and
  /// all of them (RingCopy::adaptive; tests, benchmarks).
  std::uint64_t streamed_chunks() const { return streamed_chunks_; }
  std::uint64_t adaptive_chunks() const { return adaptive_chunks_; }

  /// The smallest chunk RingCopy::adaptive decides for (and times).
  static constexpr std::size_t kAdaptiveBytes = 8 * 1024;
  /// The short path (Link::send_now): a whole message of at most
  /// short_bytes() into the next slot if one is free (inside its header up
  /// to kInlineBytes); false otherwise (nothing written). The caller has no
  /// message half pushed.
  /// Throws PeerLost as try_push.
  bool push_small(ConstMemView src, const Tag& tag);
  /// True if a slot is free.
  bool has_space();
  /// True once the consumer took everything published.
  bool drained() const;
  /// Sleep protocol (doorbell.hpp): false if a slot freed meanwhile or the
  /// peer closed (do not wait then); true means wait() may sleep.
  bool arm();
  /// After arm() returned true: sleeps until the consumer frees a slot or
  /// `timeout`; false on timeout.
  bool wait(std::chrono::microseconds timeout);
  /// Spins for `spin`, then sleeps, until a slot is free; false at the timeout.
  bool wait_for_space(std::chrono::nanoseconds spin, std::chrono::microseconds timeout);
  /// The same, spinning for budget.next_spin() and telling the budget
  /// whether the spin found a slot.
  bool wait_for_space(SpinBudget& budget, std::chrono::microseconds timeout);

 private:
  // Whether `message` goes by one copy: large enough, and the consumer said
  // it may read this process.
  bool single_copy(const OutgoingMessage& message) const;
  // Publishes `message` as one slot of `flags` whose inline bytes are
  // `reference` (where the consumer reads it: a single copy's address, a
  // mapped message's allocation); false (nothing written) without a free slot.
  bool push_reference(OutgoingMessage& message, std::uint32_t flags, const void* reference,
                      std::size_t reference_bytes);
  // Fills `chunk` bytes of slot `index` from src (timing it when adaptive);
  // returns the slot flags that say how.
  std::uint32_t fill(std::uint64_t index, const std::byte* src, std::size_t chunk, std::size_t message_bytes);

  // Adaptive mapped messages (shm_ring.hpp, "Adaptive mapped messages"):
  // whether this message, which could go mapped, does; the verdict; a push
  // that found no slot gives its turn back.
  bool take_mapped_way();
  void decide_mapped_way();
  void undo_mapped_way();

  RingCopy copy_;
  std::size_t single_copy_bytes_ = 0;
  std::uint64_t mapped_sent_ = 0;
  std::uint64_t mapped_through_slots_ = 0;
  // Adaptive stores: trials of kTrialChunks chunks each way, then
  // kKeepChunks chunks the cheaper way (shm_ring.hpp, "Adaptive stores").
  static constexpr std::uint32_t kTrialChunks = 8;
  static constexpr std::uint32_t kKeepChunks = 1024;
  enum class Phase : std::uint8_t { keep, first_trial, second_trial };
  // Ticks and bytes of each way (chunks stored plain, streaming; mapped
  // messages, which only the consumer times) on both sides, as of a moment.
  struct Spent {
    std::uint64_t ticks[kWays] = {};
    std::uint64_t bytes[kWays] = {};
  };
  Spent consumer_spent() const;
  // Ticks per byte of stores `way` since the moments `own_then` and
  // `theirs_then`, both sides added; nullopt while a side has no bytes.
  std::optional<double> slots_cost(int way, const Spent& own_then, const Spent& theirs_then, const Spent& theirs) const;
  void next_phase();
  Phase phase_ = Phase::keep;              // plain, warming up, before the first trials
  std::uint32_t left_ = 4 * kTrialChunks;  // chunks left in this phase
  bool stream_first_ = false;          // the first trial's way (alternates)
  bool streaming_ = false;             // the way kept
  Spent own_;                          // this side's, since the start
  Spent own_at_trial_, consumer_at_trial_;  // both at the start of the trials
  std::uint64_t streamed_chunks_ = 0;
  std::uint64_t adaptive_chunks_ = 0;
  bool mapped_kept_ = true;            // mapped messages, or the slots
  std::uint32_t mapped_eligible_ = 0;  // messages that could go mapped, since the last probe
  Spent own_at_verdict_, consumer_at_verdict_;  // both at the last verdict on mapped messages
  std::uint64_t head_ = 0;         // messages published (the next slot's seq is head_ + 1 once filled)
  std::uint64_t cached_tail_ = 0;  // the consumer's, as last read
  std::uint32_t ticket_ = 0;
};

class ShmRingReceiver : public ShmRing {
 public:
  /// `single_copy`: whether this side reads a producer's messages straight
  /// from its memory when the producer offers it (and the kernel allows it).
  /// `mappings`: the producer process's shared allocations as mapped here;
  /// with them this side takes mapped messages (null: it says no).
  ShmRingReceiver(std::span<std::byte> region, std::string description, RingCopy copy = RingCopy::by_size,
                  DoorbellWord* own = nullptr, DoorbellWord* peer = nullptr, bool single_copy = false,
                  PeerMappings* mappings = nullptr);
  /// Takes as many chunks of the message `message` serves as have arrived,
  /// copying or reducing each into message.dst; true once complete. Throws
  /// TagMismatch (dst untouched) if the next message's tag or size differs,
  /// PeerLost if the producer closed and nothing is left, InvalidArgument for
  /// a reduce whose size is not a multiple of the element.
  bool try_pop(IncomingMessage& message);
  /// The short path (Link::recv_now): takes a whole message of at most
  /// short_bytes() if it has arrived, with try_pop's checks, copying it
  /// (local null) or reducing dst = local op message; false (dst untouched)
  /// if it has not arrived.
  bool pop_small(MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag);
  /// True if a published slot waits.
  bool has_data();
  /// The tag of the message whose first chunk waits at the tail, if one
  /// does (nullopt while none, or midway through a message).
  std::optional<Tag> waiting_tag();
  /// Why single copies do not run on this ring ("" while they do, or while
  /// the producer has not yet said where to probe it).
  const std::string& single_copy_refused() const { return single_copy_refused_; }
  bool arm();
  bool wait(std::chrono::microseconds timeout);
  /// Spins for `spin`, then sleeps, until a slot arrives; false at the timeout.
  bool wait_for_data(std::chrono::nanoseconds spin, std::chrono::microseconds timeout);
  /// The same, spinning for budget.next_spin() and telling the budget
  /// whether the spin found data.
  bool wait_for_data(SpinBudget& budget, std::chrono::microseconds timeout);

 private:
  void check_slot(const SlotHeader& slot, const IncomingMessage& message) const;
  // Once the producer published its probe word: reads it, and tells the
  // producer whether single copies may run.
  void decide_single_copy();
  // Serves the whole of `message` from the producer's memory (the slot at
  // the tail says where), copying or reducing through a small bounce buffer.
  void read_remote(const SlotHeader& slot, IncomingMessage& message);
  // Serves the whole of `message` from the producer's shared allocation
  // the slot at the tail names.
  void read_mapped(const SlotHeader& slot, IncomingMessage& message);
  void release_slot();
  // Copies or reduces the chunk of `slot` (the one at the tail) into dst,
  // timing it for the producer's adaptive stores.
  void take_chunk(const SlotHeader& slot, std::byte* dst, const std::byte* local, DataType type, ReduceOp op,
                  std::size_t message_bytes);
  // Adds what reading `bytes` the way `way` took since `begin` (ticks()) to
  // this side's totals, and publishes them for the producer.
  void tally(int way, std::int64_t begin, std::size_t bytes);

  RingCopy copy_;
  enum class SingleCopy : std::uint8_t { off, undecided, on };
  SingleCopy single_copy_ = SingleCopy::off;
  std::string single_copy_refused_;
  PeerMappings* mappings_ = nullptr;
  // Ticks spent taking chunks stored plain, streaming, and reading mapped
  // messages, and their bytes.
  std::uint64_t read_ticks_[kWays] = {};
  std::uint64_t read_bytes_[kWays] = {};
  std::vector<std::byte> bounce_;  // a reduce's block read from the producer
  std::uint64_t tail_ = 0;
  std::uint32_t ticket_ = 0;
};

}  // namespace braid
