// TcpRegistry: what the TCP acceptor (on the service thread) and the
// communicators (on the engine's thread) share: the ranks of communicators
// this process enrolled (several ranks of one communicator when they are
// threads of this process), those that went and how, and the connections
// accepted for them and not taken yet. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/comm_id.hpp"
#include "core/socket.hpp"
#include "core/tls.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/transport.hpp"

namespace braid {

class TcpRegistry {
 public:
  /// `filed` runs (outside the lock) after each filing: it wakes the engine.
  explicit TcpRegistry(std::function<void()> filed = {}) : filed_hook_(std::move(filed)) {}

  /// enrolled: that rank of that communicator is here; counting: a split
  /// child of that id is here, its rank not known yet.
  enum class Status { enrolled, counting, finalized, gave_up, unknown };
  /// The connections one peer made for one communicator, all its streams.
  struct Taken {
    std::vector<Socket> sockets;  // by stream
    SockAddr from;                // where stream 0 came from
    Hello hello;                  // stream 0's
  };
  /// How many communicators that went are remembered, to refuse their late
  /// dialers with the reason.
  static constexpr std::size_t kRemembered = 4096;

  /// Rank owner.rank of owner.comm_id is here (-1: a split child, counted
  /// later; its enrollment with its rank then takes that place).
  void enroll(const LinkOwner& owner);
  /// Forgets that rank (closing what was filed for it); its later dialers
  /// are refused as finalized, or as having given up.
  /// Gives back the sockets filed for it and never taken, for the caller
  /// to close.
  /// `why`: its notice when it failed, told to a dialer whose connection
  /// the listener accepts just after (file()).
  std::vector<Socket> withdraw(const LinkOwner& owner, bool failed, std::string why = {});
  /// What this process knows of rank `rank` of `id`; `owner` receives it
  /// when enrolled.
  Status lookup(const CommId& id, int rank, LinkOwner* owner = nullptr) const;
  /// Whether any rank of `id` is here or went.
  bool knows(const CommId& id) const;

  /// A connection accepted for a rank that withdrew meanwhile, given back
  /// for the caller to tell the dialer why (the dialer holds it as a link
  /// already, and a bare close would read as that rank's process dying).
  struct Withdrawn {
    Socket socket;
    bool failed = false;  // else it finalized
    std::string why;      // its notice when it failed
  };
  /// Files an accepted connection (its hello passed the checks), or gives
  /// it back when the rank it is for withdrew meanwhile.
  std::optional<Withdrawn> file(const Hello& hello, Socket socket, const SockAddr& from);
  /// Every stream `peer` opened to rank `self` of `id`, once all `streams`
  /// are there.
  std::optional<Taken> take(const CommId& id, int self, int peer, int streams);
  /// Bumped whenever something is filed or withdrawn: a communicator waiting
  /// for a dialer looks again only when it moved.
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  /// Remembers why a connection claiming to be `rank` of `id` was refused
  /// (`id` null: of a communicator unknown here, which may be a rank of this
  /// job that was given another id; `rank` -1: before it named any), for
  /// the timeout message of whoever waits for that rank.
  void note_refusal(const CommId* id, int rank, std::string why);
  std::string refusal(const CommId& id, int rank) const;

 private:
  using Rank = std::pair<CommId, int>;
  using Key = std::tuple<CommId, int, int, int>;  // communicator, accepting rank, dialing rank, stream
  struct Filed {
    Socket socket;
    SockAddr from;
    Hello hello;
  };
  mutable std::mutex mutex_;
  std::map<Rank, LinkOwner> enrolled_;
  std::map<CommId, int> counting_;  // split children enrolled before their rank is known
  struct Gone {
    bool failed = false;  // it gave up (else it finalized)
    std::string why;      // its notice
  };
  std::map<Rank, Gone> gone_;
  std::deque<Rank> gone_order_;
  std::map<Key, Filed> filed_;
  std::map<std::pair<CommId, int>, std::string> refusals_;
  std::map<int, std::string> unknown_refusals_;  // by the rank claimed for an unknown communicator
  std::string unnamed_refusal_;
  std::atomic<std::uint64_t> generation_{0};
  std::function<void()> filed_hook_;
};

}  // namespace braid
