// Replica consistency: a content hash of every mirrored variable on every
// replica, gathered everywhere and compared with the majority. A replica that
// drifted (a bad update, a missed step, memory corruption) is named with its
// variables, rather than discovered as a slowly diverging loss.
#include <algorithm>
#include <map>

#include "braid/mirrored.hpp"
#include "content_hash.hpp"

namespace braid::mirrored {
namespace {

std::uint64_t hash_of(const Variable& v, int local_replica) {
  return content_hash(v.replica_bytes(local_replica), static_cast<std::uint64_t>(v.index()));
}

}  // namespace

std::string ReplicaReport::describe() const {
  if (divergences.empty()) return "replicas consistent (" + std::to_string(variables_checked) + " variables)";
  std::string text = std::to_string(divergences.size()) + " of " + std::to_string(variables_checked) +
                     " variables diverged:";
  for (const auto& d : divergences) {
    text += "\n  '" + d.variable + "' differs on replica";
    text += d.replicas.size() > 1 ? "s" : "";
    for (std::size_t i = 0; i < d.replicas.size(); ++i)
      text += (i ? ", " : " ") + std::to_string(d.replicas[i]) + " (rank " + std::to_string(d.ranks[i]) + ")";
  }
  return text;
}

std::uint64_t Strategy::replica_hash(int local_replica) const {
  ContentHasher hasher;
  for (const Variable* v : variable_list_)
    if (v->mirrored()) hasher.update(v->replica_bytes(local_replica));
  return hasher.digest();
}

ReplicaReport Strategy::verify_replicas() {
  check_cross_replica("verify_replicas");
  std::vector<const Variable*> checked;
  for (const Variable* v : variable_list_)
    if (v->mirrored()) checked.push_back(v);
  const std::size_t count = checked.size();
  const std::size_t locals = static_cast<std::size_t>(local_replicas_);
  Comm* c = replica_comm();
  const int processes = c ? c->size() : 1;
  const int my_rank = c ? c->rank() : 0;
  // Every process must check the same number of variables before hashes line up.
  std::vector<std::int64_t> counts(static_cast<std::size_t>(processes), static_cast<std::int64_t>(count));
  if (processes > 1) {
    std::int64_t mine = static_cast<std::int64_t>(count);
    std::lock_guard lock(comm_mutex_);
    c->all_gather(&mine, counts.data(), 1, DataType::i64);
  }
  for (int p = 0; p < processes; ++p)
    if (counts[static_cast<std::size_t>(p)] != counts[0])
      throw InvalidArgument("rank " + std::to_string(my_rank) + ": verify_replicas: rank " + std::to_string(p) +
                            " holds " + std::to_string(counts[static_cast<std::size_t>(p)]) +
                            " mirrored variables, rank 0 holds " + std::to_string(counts[0]));
  std::vector<std::uint64_t> mine(locals * count);
  for (std::size_t r = 0; r < locals; ++r)
    for (std::size_t i = 0; i < count; ++i) mine[r * count + i] = hash_of(*checked[i], static_cast<int>(r));
  std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(processes));
  if (processes > 1) {
    std::lock_guard lock(comm_mutex_);
    c->all_gather(mine.data(), all.data(), mine.size(), DataType::u64);
  } else {
    all = mine;
  }
  ReplicaReport report;
  report.variables_checked = count;
  const std::size_t replicas = locals * static_cast<std::size_t>(processes);
  for (std::size_t i = 0; i < count; ++i) {
    std::map<std::uint64_t, std::size_t> votes;
    for (std::size_t id = 0; id < replicas; ++id) ++votes[all[id * count + i]];
    // The majority wins; on a tie, replica 0's value.
    std::uint64_t agreed = all[i];
    for (auto [hash, n] : votes)
      if (n > votes[agreed]) agreed = hash;
    ReplicaReport::Divergence d;
    d.variable = checked[i]->name();
    for (std::size_t id = 0; id < replicas; ++id) {
      if (all[id * count + i] == agreed) continue;
      d.replicas.push_back(static_cast<int>(id));
      d.ranks.push_back(static_cast<int>(id / locals));
    }
    if (!d.replicas.empty()) report.divergences.push_back(std::move(d));
  }
  return report;
}

}  // namespace braid::mirrored
