// braid — the C++ API.
//
//   braid::Comm comm = braid::Comm::from_env();     // under braid-run, torchrun-style env
//   std::vector<float> grad(n);
//   comm.all_reduce(std::span(grad), braid::ReduceOp::sum);
//
// Every collective is called by all ranks of the communicator with the same
// type, count, operator and root. Calls block until the local part of the
// operation is complete or fail with a braid::Error; no wait is unbounded
// (see CommOptions::timeout and BRAID_TIMEOUT).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "braid/types.hpp"

namespace braid {

/// Opaque bytes that identify one communicator's rendezvous point, in the
/// manner of ncclUniqueId: one process creates it, hands it to every rank by
/// any means (a file, MPI_Bcast, a command line), and each rank passes it to
/// Comm::init. The creating process hosts the rendezvous store until the
/// communicator that uses it is destroyed or the process exits.
struct UniqueId {
  static constexpr std::size_t kBytes = 128;
  std::array<std::byte, kBytes> bytes{};

  /// Starts a rendezvous store in this process and returns its id. The store
  /// listens on the interface named by BRAID_SOCKET_IFNAME, else on the first
  /// non-loopback interface that is up, else on loopback.
  static UniqueId create();
  /// Hex text of the bytes, for command lines and files.
  std::string to_hex() const;
  static UniqueId from_hex(std::string_view hex);
};

/// Options for creating a communicator. Unset fields take their value from
/// the BRAID_* environment (see the README's table).
struct CommOptions {
  std::optional<std::chrono::milliseconds> timeout;  ///< bound on every wait (BRAID_TIMEOUT)
  std::optional<int> tcp_streams;                    ///< sockets per peer (BRAID_TCP_STREAMS)
  std::optional<std::string> socket_ifname;          ///< interface to advertise (BRAID_SOCKET_IFNAME)
};

class CommImpl;

/// A group of ranks that run collectives together. Movable, not copyable.
/// One thread at a time may call into a given communicator.
class Comm {
 public:
  /// Joins the communicator described by the environment: BRAID_RANK,
  /// BRAID_WORLD_SIZE and BRAID_STORE_ADDR (set by braid-run); rank 0 hosts
  /// the store at that address.
  static Comm from_env(const CommOptions& options = {});
  /// Joins through a rendezvous store at host:port; rank 0 hosts it.
  static Comm init(std::string_view store_addr, int rank, int size, const CommOptions& options = {});
  /// Joins through a UniqueId made by UniqueId::create().
  static Comm init(const UniqueId& id, int rank, int size, const CommOptions& options = {});

  Comm(Comm&&) noexcept;
  Comm& operator=(Comm&&) noexcept;
  ~Comm();

  int rank() const;
  int size() const;
  /// One line naming the transport, the algorithms and the settings in use.
  std::string describe() const;

  /// recv[i] = op over ranks of send[i], for i < count. send may equal recv
  /// (in place); otherwise the two must not overlap.
  void all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  /// Copies root's send buffer into every rank's recv buffer. send is read on
  /// the root only and may equal recv.
  void broadcast(const void* send, void* recv, std::size_t count, DataType type, int root);
  /// Returns once every rank has entered the barrier.
  void barrier();

  template <typename T>
  void all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_span_sizes(send.size(), recv.size(), "all_reduce");
    all_reduce(send.data(), recv.data(), recv.size(), data_type_of<T>, op);
  }
  template <typename T>
  void all_reduce(std::span<T> buffer, ReduceOp op) {
    all_reduce(buffer.data(), buffer.data(), buffer.size(), data_type_of<T>, op);
  }
  template <typename T>
  void broadcast(std::span<T> buffer, int root) {
    broadcast(buffer.data(), buffer.data(), buffer.size(), data_type_of<T>, root);
  }

 private:
  explicit Comm(std::unique_ptr<CommImpl> impl);
  static void check_span_sizes(std::size_t send, std::size_t recv, const char* op);
  CommImpl& impl() const;
  std::unique_ptr<CommImpl> impl_;
};

}  // namespace braid
