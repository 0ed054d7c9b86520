// One row of braid-perf's sweep on this rank (perf_case.cpp): the buffers
// (host, or GPU memory with --device), the call with its counts and
// placement, and the patterns that fill and check it.
#pragma once

#include <cstddef>
#include <vector>

#include "braid/braid.hpp"
#include "core/device.hpp"
#include "perf_report.hpp"

namespace braid::perf {

// What one row of the sweep runs, besides the size.
struct CaseSpec {
  const CollectiveInfo* collective;
  braid::DataType type;
  braid::ReduceOp op;
  int root;
  bool in_place;
};

// The count argument of the call for a row of `bytes`: whole elements, at
// least one (per rank where there are blocks) unless the row is empty.
std::size_t count_for(const CaseSpec& s, int n, std::size_t bytes);

// A host buffer: heap memory, or (-R 1) braid's shared memory (braid::mem_alloc),
// which the ranks of a host read in place, registered with the communicator.
class HostBuffer {
 public:
  HostBuffer(std::size_t bytes, braid::Comm* registered_with)
      : bytes_(bytes), comm_(registered_with) {
    if (comm_ == nullptr) {
      heap_.resize(bytes);
      data_ = heap_.data();
      return;
    }
    data_ = static_cast<std::byte*>(braid::mem_alloc(std::max<std::size_t>(bytes, 1)));
    handle_ = comm_->register_buffer(data_, bytes);
  }
  ~HostBuffer() {
    if (comm_ == nullptr) return;
    comm_->deregister_buffer(handle_);
    braid::mem_free(data_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  std::byte* data() { return data_; }
  std::size_t size() const { return bytes_; }

 private:
  std::vector<std::byte> heap_;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  braid::Comm* comm_ = nullptr;
  void* handle_ = nullptr;
};

// The send and receive buffers: host buffers, and with --device their
// copies in GPU memory, which the calls use; patterns are written and checked
// in the host buffers and copied across.
struct PerfBuffers {
  HostBuffer send, recv;
  braid::device::Memory device_send, device_recv;

  PerfBuffers(std::size_t bytes, bool device, int local_rank, braid::Comm* registered_with = nullptr)
      : send(bytes, registered_with), recv(bytes, registered_with) {
    if (!device) return;
    if (braid::device::count() == 0)
      throw braid::Error(braid::ErrorCode::unsupported, "--device: " + braid::device::status());
    const int id = local_rank % braid::device::count();
    device_send = braid::device::Memory(bytes, id);
    device_recv = braid::device::Memory(bytes, id);
  }
  bool device() const { return device_send.data() != nullptr; }
  // Where the calls read and write `p`, a pointer into send or recv.
  std::byte* target(std::byte* p) {
    if (!device()) return p;
    if (p >= send.data() && p <= send.data() + send.size()) return device_send.data() + (p - send.data());
    return device_recv.data() + (p - recv.data());
  }
  // The first `bytes` of both buffers, where a row's regions all lie.
  void to_device(std::size_t bytes) {
    if (!device()) return;
    braid::device::copy_on(device_send.id(), device_send.data(), send.data(), bytes);
    braid::device::copy_on(device_recv.id(), device_recv.data(), recv.data(), bytes);
  }
  void to_host(std::size_t bytes) {
    if (!device()) return;
    braid::device::copy_on(device_send.id(), send.data(), device_send.data(), bytes);
    braid::device::copy_on(device_recv.id(), recv.data(), device_recv.data(), bytes);
  }
};

// One size of one collective on this rank: the element counts, the buffers
// the call reads and writes, and how to fill and check them.
class Case {
 public:
  Case(const CaseSpec& o, braid::Comm& comm, PerfBuffers& buffers, std::size_t bytes);

  std::size_t size_bytes() const { return total_ * element_; }
  std::size_t count_bytes() const { return count_ * element_; }

  // The call, blocking.
  void run_once();

  // The same call started in the background (-z 0); the communicator runs
  // its operations in the order they were started.
  void start(std::vector<braid::Work>& works);

  // The uneven call with equal counts (blocks packed in rank order): blocking,
  // or started into `works`.
  void start_uneven(std::vector<braid::Work>* works);

  // Poisons the output, then writes this rank's input (which in place
  // overlaps the output).
  void prepare();

  // Elements of this rank's output that differ from the expected values
  // (only the root's output counts for reduce and gather).
  std::size_t count_wrong() const;

 private:
  int next() const { return (rank_ + 1) % n_; }
  int previous() const { return (rank_ + n_ - 1) % n_; }

  const CaseSpec o_;
  braid::Comm& comm_;
  PerfBuffers& buffers_;
  Kind kind_;  // the even form: sizes, inputs and expected outputs
  Kind call_;  // what is called (kind_, or its uneven form)
  std::vector<std::size_t> counts_;  // count_ for every rank, for the uneven calls
  int rank_, n_;
  std::size_t element_;
  std::size_t count_ = 0;         // the count argument of the call
  std::size_t total_ = 0;         // elements in the whole buffer (the size column)
  std::size_t out_elements_ = 0;  // elements this rank's call writes
  std::byte* in_ = nullptr;   // in the host vectors, for patterns
  std::byte* out_ = nullptr;
  std::byte* call_in_ = nullptr;  // what the calls get (in GPU memory with --device)
  std::byte* call_out_ = nullptr;
};

}  // namespace braid::perf
