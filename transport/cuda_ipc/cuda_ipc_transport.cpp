#include "transport/cuda_ipc/cuda_ipc_transport.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <vector>

#include "core/device.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// One control message: a notice (the sender's buffer is ready to be read)
// or an acknowledgement (the receiver has read it).
struct Record {
  static constexpr std::uint32_t kMagic = 0x42435544;  // "DUCB"
  enum Type : std::uint32_t { notice = 1, ack = 2 };
  std::uint32_t magic = kMagic;
  std::uint32_t type = notice;
  std::uint64_t seq = 0;  // device messages of this direction, from 0
  std::uint64_t tag_id = 0;
  std::array<std::byte, 16> context{};
  std::uint64_t bytes = 0;
  std::uint64_t offset = 0;
  std::array<std::byte, device::kIpcHandleBytes> handle{};
};

// Every control message of an operation carries the operation's sequence
// and descriptor, with a step index no schedule uses.
Tag control_tag(const Tag& message) {
  return Tag{(message.id & ~std::uint64_t{0xffffffff}) | 0xffffffffu, message.context};
}

class CudaIpcLink final : public Link {
 public:
  explicit CudaIpcLink(std::unique_ptr<Link> shm) : shm_(std::move(shm)) {}

  int peer() const override { return shm_->peer(); }
  std::string describe_peer() const override { return shm_->describe_peer(); }
  bool accepts(MemKind) const override { return true; }
  bool can_reduce() const override { return true; }
  void attach(Poller& poller) override { shm_->attach(poller); }
  void detach(Poller& poller) override { shm_->detach(poller); }
  void goodbye() override { shm_->goodbye(); }
  void abort(std::string_view reason) override { shm_->abort(reason); }
  std::optional<std::string> departed() override { return shm_->departed(); }
  std::optional<Tag> waiting_tag() override { return shm_->waiting_tag(); }
  bool one_sided() override { return shm_->one_sided(); }
  bool busy() const override { return shm_->busy() || !sends_.empty() || !recvs_.empty(); }

  Request send(ConstMemView src, Tag tag) override {
    if (src.kind == MemKind::host) return shm_->send(src, tag);
    Request done = pool_.take();
    if (broken_) {
      done->fail(broken_);
      return done;
    }
    try {
      // Eager, as every link: the bytes are copied into a staging buffer of
      // this link, which the peer reads, and the send completes once the
      // notice is in the ring. (Reading the caller's buffer in place would
      // make the send wait for the peer's receive, and schedules post a
      // receive only after the send it depends on completes.)
      auto record = std::make_unique<Record>();
      record->type = Record::notice;
      record->seq = sent_;
      record->tag_id = tag.id;
      record->context = tag.context;
      record->bytes = src.bytes;
      Staging* staging = nullptr;
      if (src.bytes > 0) {
        staging = &take_staging(src.bytes, device::locate(src.data).device);
        device::copy_on(staging->device, staging->memory.data(), src.data, src.bytes);
        record->handle = staging->region.handle;
        record->offset = staging->region.offset;
      }
      send_control(std::move(record), tag, done);
      sends_.push_back(Send{sent_++, staging});
      expect_control(tag);
    } catch (...) {
      if (!done->done()) done->fail(std::current_exception());
    }
    return done;
  }

  Request recv(MemView dst, Tag tag) override {
    if (dst.kind == MemKind::host) return shm_->recv(dst, tag);
    return post_recv(Receive{pool_.take(), tag, dst, {}, DataType::u8, ReduceOp::sum, false});
  }

  Request recv_reduce(MemView dst, ConstMemView local, DataType type, ReduceOp op, Tag tag) override {
    if (dst.kind == MemKind::host) return shm_->recv_reduce(dst, local, type, op, tag);
    return post_recv(Receive{pool_.take(), tag, dst, local, type, op, true});
  }

  bool progress() override {
    bool moved = shm_->progress();
    if (broken_) return moved;
    moved |= take_arrived();
    if (broken_) return true;
    try {
      moved |= serve_notices();
    } catch (...) {
      fail_all(std::current_exception());
      return true;
    }
    if (!outgoing_.empty()) moved |= shm_->progress();  // push what serve_notices queued
    while (!outgoing_.empty() && outgoing_.front().request->done()) {
      Control& sent = outgoing_.front();
      if (sent.request->failed()) {
        if (sent.then) sent.then->fail(sent.request->error());
        fail_all(sent.request->error());
        return true;
      }
      if (sent.then) sent.then->complete();
      outgoing_.pop_front();
      moved = true;
    }
    return moved;
  }

 private:
  // A device buffer of this link that peers map: sent bytes wait in it
  // until the peer acknowledges them.
  struct Staging {
    device::Memory memory;
    device::IpcRegion region;
    int device = 0;
    bool busy = false;
  };
  struct Send {
    std::uint64_t seq;
    Staging* staging;  // released when acknowledged (null for 0 bytes)
  };
  struct Receive {
    Request request;
    Tag tag;
    MemView dst;
    ConstMemView local;
    DataType type;
    ReduceOp op;
    bool reduce;
  };
  struct Control {  // a control message being sent or expected
    Request request;
    Tag tag;
    std::unique_ptr<Record> record;
    Request then;  // completes when this one is sent
  };
  using Incoming = Control;

  Request post_recv(Receive r) {
    Request done = r.request;
    if (broken_) {
      done->fail(broken_);
      return done;
    }
    const Tag tag = r.tag;
    recvs_.push_back(std::move(r));
    expect_control(tag);
    return done;
  }

  // Queues a control message; `then` (a receive) completes once it is sent.
  void send_control(std::unique_ptr<Record> record, const Tag& tag, Request then = nullptr) {
    const ConstMemView view{reinterpret_cast<const std::byte*>(record.get()), sizeof(Record), MemKind::host};
    Request r = shm_->send(view, control_tag(tag));
    outgoing_.push_back(Control{std::move(r), tag, std::move(record), std::move(then)});
  }

  // Each device send expects an acknowledgement and each device receive a
  // notice; they come in the peer's order, so these receives take whichever
  // is next.
  void expect_control(const Tag& tag) {
    auto record = std::make_unique<Record>();
    const MemView view{reinterpret_cast<std::byte*>(record.get()), sizeof(Record), MemKind::host};
    Request r = shm_->recv(view, control_tag(tag));
    incoming_.push_back(Control{std::move(r), tag, std::move(record), nullptr});
  }

  void take(const Record& record) {
    if (record.magic != Record::kMagic || (record.type != Record::notice && record.type != Record::ack))
      throw ProtocolMismatch(cat(describe_peer(), " sent a cuda_ipc control message that is not one"));
    if (record.type == Record::notice) {
      // The peer may send before this rank posts the matching receive.
      notices_.push_back(record);
      return;
    }
    if (sends_.empty() || record.seq != sends_.front().seq)
      throw ProtocolMismatch(cat(describe_peer(), " acknowledged device message ", record.seq,
                                 sends_.empty() ? std::string(" that was never sent")
                                                : cat(" while ", sends_.front().seq, " is the oldest pending")));
    if (sends_.front().staging) sends_.front().staging->busy = false;
    sends_.pop_front();
  }

  // A free staging buffer of at least `bytes` on `id`, made (and exported
  // once) when none is free: sizes are powers of two from 64 KiB, so a
  // repeated operation reuses the same few buffers, which the peer has
  // mapped already.
  Staging& take_staging(std::size_t bytes, int id) {
    // Acknowledgements that arrived since free their buffers.
    shm_->progress();
    take_arrived();
    if (broken_) std::rethrow_exception(broken_);
    for (auto& s : staging_)
      if (!s->busy && s->device == id && s->memory.size() >= bytes) {
        s->busy = true;
        return *s;
      }
    auto s = std::make_unique<Staging>();
    s->memory = device::Memory(std::bit_ceil(std::max<std::size_t>(bytes, std::size_t{64} << 10)), id);
    s->region = device::export_region(s->memory.data());
    s->device = id;
    s->busy = true;
    staging_.push_back(std::move(s));
    return *staging_.back();
  }

  // Takes the control messages that have arrived, in order (notices wait
  // for serve_notices); true if any did. One that failed, or that is not a
  // control message, breaks the link.
  bool take_arrived() {
    bool moved = false;
    try {
      while (!incoming_.empty() && incoming_.front().request->done()) {
        Incoming in = std::move(incoming_.front());
        incoming_.pop_front();
        if (in.request->failed()) {
          fail_all(explain_control_failure(in.request->error(), in.tag));
          return true;
        }
        take(*in.record);
        moved = true;
      }
    } catch (...) {
      fail_all(std::current_exception());
      return true;
    }
    return moved;
  }

  // Reads every announced buffer that a posted receive waits for, in order.
  bool serve_notices() {
    bool moved = false;
    while (!notices_.empty() && !recvs_.empty()) {
      const Record record = notices_.front();
      notices_.pop_front();
      Receive r = std::move(recvs_.front());
      recvs_.pop_front();
      const Tag sent{record.tag_id, record.context};
      if (sent != r.tag || record.bytes != r.dst.bytes || record.seq != received_) {
        r.request->fail(std::make_exception_ptr(
            TagMismatch(cat(describe_peer(), " sent ", describe_tag(sent), " (", record.bytes,
                            " bytes of device memory) where this rank expected ", describe_tag(r.tag), " (",
                            r.dst.bytes, " bytes)"),
                        r.tag, r.dst.bytes, sent, record.bytes)));
        throw ProtocolMismatch(cat(describe_peer(), ": device messages no longer match"));
      }
      ++received_;
      if (record.bytes > 0) {
        const std::byte* from = device::import_region(record.handle) + record.offset;
        if (r.reduce)
          device::reduce(r.type, r.op, r.dst.data, r.local.data, from, r.dst.bytes / size_of(r.type));
        else
          device::copy_on(device::locate(r.dst.data).device, r.dst.data, from, r.dst.bytes);
      }
      // The receive completes once its acknowledgement is in the ring: a
      // finished operation no longer progresses this link, and the peer's
      // send waits for it.
      auto ack = std::make_unique<Record>();
      ack->type = Record::ack;
      ack->seq = record.seq;
      send_control(std::move(ack), r.tag, r.request);
      moved = true;
    }
    return moved;
  }

  // A control receive that failed: the peer gave up (PeerLost), or it sent
  // one of this operation's messages from host memory where this rank
  // expected its device-memory protocol.
  std::exception_ptr explain_control_failure(std::exception_ptr error, const Tag& tag) const {
    try {
      std::rethrow_exception(error);
    } catch (const TagMismatch& m) {
      if (m.received.context == tag.context && m.received != control_tag(tag))
        return std::make_exception_ptr(ProtocolMismatch(
            cat(describe_peer(), " sent ", describe_tag(m.received), " (", m.received_bytes,
                " bytes) from host memory where this rank passed device memory: every rank of an operation passes "
                "device buffers, or every rank host buffers")));
    } catch (...) {
    }
    return error;
  }

  // Fails every pending device request; the link stays broken. Control
  // records stay allocated: the shared-memory link may still hold them.
  void fail_all(std::exception_ptr error) {
    broken_ = error;
    for (auto& r : recvs_)
      if (!r.request->done()) r.request->fail(error);
    for (auto& c : outgoing_)
      if (c.then && !c.then->done()) c.then->fail(error);
    sends_.clear();
    recvs_.clear();
  }

  std::unique_ptr<Link> shm_;
  RequestPool pool_;
  std::exception_ptr broken_;
  std::uint64_t sent_ = 0;      // device messages sent
  std::uint64_t received_ = 0;  // device messages received
  std::vector<std::unique_ptr<Staging>> staging_;
  std::deque<Send> sends_;      // device messages sent and not yet acknowledged
  std::deque<Receive> recvs_;   // device receives waiting for their notice
  std::deque<Record> notices_;  // notices that arrived before their receive
  std::deque<Incoming> incoming_;
  std::deque<Control> outgoing_;
};

}  // namespace

CudaIpcTransport::CudaIpcTransport() {
  if (device::count() > 0) shm_ = std::make_unique<ShmContext>();
}

std::vector<std::unique_ptr<Link>> CudaIpcTransport::connect(const LinkOwner& owner, std::span<const PeerRef> peers,
                                                             Deadline deadline, const PeerWatch& watch) {
  if (!shm_)
    throw InvalidArgument(cat("rank ", owner.rank, ": cuda_ipc was asked to connect ", peers.size(),
                              " peer(s) but this process has no CUDA device"));
  std::vector<std::unique_ptr<Link>> links = shm_->connect(owner, peers, deadline, watch);
  for (auto& link : links) link = std::make_unique<CudaIpcLink>(std::move(link));
  return links;
}

std::string CudaIpcTransport::describe(const LinkOwner& owner) const {
  if (!shm_) return "cuda_ipc (idle: no CUDA device)";
  return cat("cuda_ipc (device buffers mapped GPU to GPU; host buffers over ", shm_->describe(owner), ")");
}

}  // namespace braid
