// CommImpl: one communicator. It owns the rendezvous store, the transport,
// one Link per connected peer, and the progress engine: the calling thread
// runs each collective's Executor, spinning briefly while bytes move and then
// sleeping in epoll, always under the operation's deadline.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/executor.hpp"
#include "collectives/schedule.hpp"
#include "core/poller.hpp"
#include "core/rank_info.hpp"
#include "core/settings.hpp"
#include "rendezvous.hpp"
#include "topology/plan.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace braid {

class CommImpl {
 public:
  /// Publishes this rank, waits for all others (naming any that never come),
  /// plans, and connects the ring neighbours.
  static std::unique_ptr<CommImpl> create(Rendezvous rendezvous, int rank, int size, Settings settings);
  ~CommImpl();

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string describe() const;

  void all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  void broadcast(const void* send, void* recv, std::size_t count, DataType type, int root);
  void barrier();

 private:
  CommImpl(Rendezvous rendezvous, int rank, int size, Settings settings);
  void join();
  void connect_peers(const std::vector<int>& peers);
  void run(const Schedule& schedule, Buffers buffers, std::string_view what);
  void check_usable(std::string_view op) const;
  CollectiveShape shape(std::size_t count, DataType type, ReduceOp op, int root) const;

  Settings settings_;
  Rendezvous rendezvous_;
  int rank_;
  int size_;
  int spin_us_ = 0;
  std::unique_ptr<TcpTransport> transport_;
  std::vector<RankInfo> infos_;
  std::vector<std::vector<std::byte>> addresses_;
  Plan plan_;
  Poller poller_;
  std::vector<std::unique_ptr<Link>> links_;  // by rank
  std::vector<Link*> link_ptrs_;              // by rank, null where none
  std::uint32_t sequence_ = 0;
  std::string broken_;  // why the communicator is unusable, if it is
};

}  // namespace braid
