// cuda_ipc: ranks of one host that each have a CUDA device. A link moves
// device buffers from GPU to GPU without a host copy: the sender exports the
// allocation holding its buffer (a CUDA IPC handle), the receiver maps it once
// (cached), copies from it or reduces from it with a kernel straight into its
// own buffer, then acknowledges; the send completes on the acknowledgement,
// so the sender's buffer stays untouched until the receiver has read it.
//
// The notices and acknowledgements travel as small messages over a
// shared-memory link (transport/shm/) between the pair, which also carries
// every host-memory message of the pair unchanged, so a cuda_ipc link serves
// host buffers as shm does, sleeps and detects a dead peer as shm does.
// Each device send and each device receive expects exactly one control
// message back (an acknowledgement, a notice), all with the operation's own
// tag, and receives them in order, so the pair's shared-memory ring keeps its
// k-th-send-meets-k-th-receive rule.
//
// Every rank of an operation passes device buffers, or every rank host
// buffers: the communicator runs device buffers over these links only when
// every pair of ranks is connected by cuda_ipc (else it stages them through
// host memory on every rank), and a rank that passed host memory where its
// peer passed device memory fails with a ProtocolMismatch naming both.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/shm/shm_context.hpp"
#include "transport/transport.hpp"

namespace braid {

/// The process's cuda_ipc context: the shm context of its own whose links it
/// wraps (their segments and doorbell apart from plain shm's). A process
/// without a CUDA device makes none: no pair of ranks with a process like it
/// uses cuda_ipc (registry.cpp), so it publishes an empty address.
class CudaIpcTransport final : public TransportContext {
 public:
  CudaIpcTransport();

  std::string_view name() const override { return "cuda_ipc"; }
  std::vector<std::byte> local_address(const SockAddr& advertise) const override {
    return shm_ ? shm_->local_address(advertise) : std::vector<std::byte>{};
  }
  std::vector<std::unique_ptr<Link>> connect(const LinkOwner& owner, std::span<const PeerRef> peers,
                                             Deadline deadline, const PeerWatch& watch) override;
  std::string describe(const LinkOwner& owner) const override;
  int wait_fd() const override { return shm_ ? shm_->wait_fd() : -1; }
  bool arm() override { return shm_ ? shm_->arm() : true; }
  void disarm() override {
    if (shm_) shm_->disarm();
  }

 private:
  std::unique_ptr<ShmContext> shm_;  // the pair's control messages and host-memory messages
};

}  // namespace braid
