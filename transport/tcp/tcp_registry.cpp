#include "transport/tcp/tcp_registry.hpp"

#include "core/text.hpp"

namespace braid {

void TcpRegistry::enroll(const LinkOwner& owner) {
  std::lock_guard lock(mutex_);
  if (owner.rank < 0) {
    ++counting_[owner.comm_id];
  } else {
    if (auto it = counting_.find(owner.comm_id); it != counting_.end() && --it->second == 0) counting_.erase(it);
    enrolled_[{owner.comm_id, owner.rank}] = owner;
    gone_.erase({owner.comm_id, owner.rank});
  }
  generation_.fetch_add(1, std::memory_order_release);
}

std::vector<Socket> TcpRegistry::withdraw(const LinkOwner& owner, bool failed, std::string why) {
  std::vector<Socket> closing;  // closed outside the lock
  {
    std::lock_guard lock(mutex_);
    const CommId& id = owner.comm_id;
    if (owner.rank < 0) {
      if (auto it = counting_.find(id); it != counting_.end() && --it->second == 0) counting_.erase(it);
      return closing;
    }
    const Rank rank{id, owner.rank};
    if (enrolled_.erase(rank) == 0 && gone_.contains(rank)) return closing;
    gone_[rank] = Gone{failed, std::move(why)};
    gone_order_.push_back(rank);
    while (gone_order_.size() > kRemembered) {
      gone_.erase(gone_order_.front());
      gone_order_.pop_front();
    }
    for (auto it = filed_.lower_bound({id, owner.rank, -1, -1});
         it != filed_.end() && std::get<0>(it->first) == id && std::get<1>(it->first) == owner.rank;) {
      closing.push_back(std::move(it->second.socket));
      it = filed_.erase(it);
    }
    std::erase_if(refusals_, [&](const auto& r) { return r.first.first == id; });
    generation_.fetch_add(1, std::memory_order_release);
  }
  return closing;
}

TcpRegistry::Status TcpRegistry::lookup(const CommId& id, int rank, LinkOwner* owner) const {
  std::lock_guard lock(mutex_);
  if (auto it = enrolled_.find({id, rank}); it != enrolled_.end()) {
    if (owner) *owner = it->second;
    return Status::enrolled;
  }
  if (counting_.contains(id)) return Status::counting;
  if (auto it = gone_.find({id, rank}); it != gone_.end()) return it->second.failed ? Status::gave_up : Status::finalized;
  return Status::unknown;
}

bool TcpRegistry::knows(const CommId& id) const {
  std::lock_guard lock(mutex_);
  if (counting_.contains(id)) return true;
  auto enrolled = enrolled_.lower_bound({id, -1});
  if (enrolled != enrolled_.end() && enrolled->first.first == id) return true;
  auto gone = gone_.lower_bound({id, -1});
  return gone != gone_.end() && gone->first.first == id;
}

std::optional<TcpRegistry::Withdrawn> TcpRegistry::file(const Hello& hello, Socket socket, const SockAddr& from) {
  {
    std::lock_guard lock(mutex_);
    const Rank to{hello.comm_id, static_cast<int>(hello.to_rank)};
    if (!enrolled_.contains(to) && !counting_.contains(hello.comm_id)) {
      // Withdrawn meanwhile: the caller tells the dialer why, when it is
      // remembered; else the socket closes here.
      auto gone = gone_.find(to);
      if (gone == gone_.end()) return std::nullopt;
      return Withdrawn{std::move(socket), gone->second.failed, gone->second.why};
    }
    filed_.insert_or_assign(
        Key{hello.comm_id, static_cast<int>(hello.to_rank), static_cast<int>(hello.from_rank), hello.stream},
        Filed{std::move(socket), from, hello});
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (filed_hook_) filed_hook_();
  return std::nullopt;
}

std::optional<TcpRegistry::Taken> TcpRegistry::take(const CommId& id, int self, int peer, int streams) {
  std::lock_guard lock(mutex_);
  for (int s = 0; s < streams; ++s)
    if (!filed_.contains(Key{id, self, peer, s})) return std::nullopt;
  Taken taken;
  for (int s = 0; s < streams; ++s) {
    auto it = filed_.find(Key{id, self, peer, s});
    if (s == 0) {
      taken.from = it->second.from;
      taken.hello = it->second.hello;
    }
    taken.sockets.push_back(std::move(it->second.socket));
    filed_.erase(it);
  }
  return taken;
}

void TcpRegistry::note_refusal(const CommId* id, int rank, std::string why) {
  std::lock_guard lock(mutex_);
  if (id != nullptr && rank >= 0) refusals_[{*id, rank}] = std::move(why);
  else if (rank >= 0) unknown_refusals_[rank] = std::move(why);
  else unnamed_refusal_ = std::move(why);
}

std::string TcpRegistry::refusal(const CommId& id, int rank) const {
  std::lock_guard lock(mutex_);
  if (auto it = refusals_.find({id, rank}); it != refusals_.end()) return it->second;
  if (auto it = unknown_refusals_.find(rank); it != unknown_refusals_.end()) return it->second;
  return unnamed_refusal_;
}

}  // namespace braid
