// Elastic membership (docs/elastic.md): survivors agree on who is gone and go
// on without them (shrink_lost), and processes that arrive later are admitted
// at a point every member reaches (grow, join_job).
//
// Everything is agreed through the job's store, under <scope>elastic/:
//   arrivals             counter: processes that called Comm::join so far
//   arrival/<n>          "host pid P": the n-th of them (from 1)
//   admitted             counter: how many of them a grow admitted
//   generation           counter: grows so far (each makes keys g<g>/ for its
//                        communicator's rendezvous)
//   admit/<n>            "g rank size store_host": where the n-th one joins
//   lost/<id>/<k>/...    the k-th shrink_lost of the communicator <id>:
//                        alive/<rank> for each member that came forward,
//                        proposer (counter: the first one decides) and
//                        decision ("r,r,..." the ranks excluded)
// The store itself may go with its host (node 0's machine). A job given
// standby stores (BRAID_STORE_STANDBY; braid-run --elastic with a --master
// list hosts one on each node) moves to the next one that answers, in the
// list's order, when the survivors of a loss cannot reach the one in use;
// they write <scope>formed there, where a returning process's probe finds
// the job. Since two sides of a cut network cannot tell a partition from
// the other side's end, a side that moved goes on only when it holds at
// least half of the members: of two laptops each goes on, of three hosts
// only the two that still see each other.
// One member decides each question (rank 0 for grow, the first to come
// forward for shrink_lost), and every other reads its decision, so that all
// make the same communicator; a member that comes too late is told so and may
// join again.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "comm_impl.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// How often shrink_lost's first survivor looks whether the missing members'
// processes on this host are gone.
constexpr Millis kShrinkLostPoll{20};

std::string elastic_keys(const std::string& scope) { return scope + "elastic/"; }

// The keys of the communicator that a grow's generation makes.
std::string generation_scope(const std::string& job_scope, long long generation) {
  return cat(job_scope, "g", generation, "/");
}

// The rank at the end of a key ".../alive/3".
int rank_of(const std::string& key) { return std::stoi(key.substr(key.rfind('/') + 1)); }

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> ranks;
  for (const std::string& rank : split(text, ','))
    if (!rank.empty()) ranks.push_back(std::stoi(rank));
  return ranks;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += cat(text.empty() ? "" : ",", r);
  return text;
}

}  // namespace

std::unique_ptr<CommImpl> CommImpl::shrink_lost(bool abort_parent) {
  check_open();
  if (!store_)
    throw InvalidArgument(cat("rank ", rank_, ": shrink_lost: this communicator has no store to agree through"));
  settle_before_shrink(abort_parent);
  // The grace counts from here, so that looking for a live store takes
  // none of the others' time.
  const Deadline grace = Deadline::after(settings_.elastic_grace);
  const bool moved = reach_live_store();
  const std::string keys = cat(elastic_keys(job_scope_), "lost/", comm_id_.to_hex().substr(0, 16), "/", ++recoveries_, "/");
  const std::string where = cat("the braid store at ", store_name_);
  std::vector<int> excluded;
  try {
    Store& store = *store_;
    store.set(cat(keys, "alive/", rank_), std::string_view("1"));
    if (store.add(keys + "proposer", 1) == 1) {
      // The first to come forward waits for the others, each member that is
      // still alive coming as soon as its own operation failed, for the
      // grace at most; whoever has not come by then is left out. A member
      // of this host whose process is gone is not waited for.
      std::vector<std::string> alive;
      for (int r = 0; r < size_; ++r) alive.push_back(cat(keys, "alive/", r));
      std::vector<std::string> absent;
      while (true) {
        try {
          store.wait(alive, std::chrono::duration_cast<Millis>(
                                std::min<Clock::duration>(grace.remaining(), kShrinkLostPoll)));
        } catch (const Timeout&) {
        }
        absent = store.missing(alive);
        const bool all_dead_here = std::all_of(absent.begin(), absent.end(), [&](const std::string& key) {
          const auto r = static_cast<std::size_t>(rank_of(key));
          return infos_[r].kernel_id == infos_[static_cast<std::size_t>(rank_)].kernel_id && process_gone(infos_[r].pid);
        });
        if (absent.empty() || all_dead_here || grace.expired()) break;
      }
      for (const std::string& key : absent) excluded.push_back(rank_of(key));
      store.set(keys + "decision", join_ranks(excluded));
      log_info("rank ", rank_, ": shrink_lost: decided to go on without ",
               excluded.empty() ? std::string("nobody") : describe_ranks(excluded));
    } else {
      excluded = parse_ranks(store.get_string(keys + "decision", settings_.timeout + settings_.elastic_grace));
    }
  } catch (const Timeout& e) {
    throw Timeout(cat("rank ", rank_, ": shrink_lost: no decision on who is gone reached this rank through ", where,
                      " within ", seconds_of(settings_.timeout + settings_.elastic_grace), " s: ", e.what()));
  } catch (const PeerLost& e) {
    throw PeerLost(cat("rank ", rank_, ": shrink_lost: the survivors agree on who is gone through ", where, ", ",
                       store_host_ >= 0 ? cat("hosted by rank ", store_host_) : std::string("hosted outside the ranks"),
                       ", which is unreachable now (its process or host went too, or this host lost the network): ",
                       e.what()));
  }
  if (std::binary_search(excluded.begin(), excluded.end(), rank_))
    throw PeerLost(cat("rank ", rank_, ": shrink_lost: the other ranks went on without this one, which came forward "
                       "more than BRAID_ELASTIC_GRACE (", seconds_of(settings_.elastic_grace),
                       " s) after the first; it may join the job again (Comm::join)"));
  if (moved && 2 * excluded.size() > static_cast<std::size_t>(size_))
    throw PeerLost(cat("rank ", rank_, ": shrink_lost: the job's store moved to ", store_name_, ", where only ",
                       size_ - excluded.size(), " of ", size_, " ranks came forward: fewer than half, so these stop "
                       "rather than go on as a second job beside the others (a network cut in two); start this "
                       "process again to join the job"));
  if (moved) {
    // A process that comes back looks for its job here (Comm::from_env).
    store_->set(job_scope_ + "formed", std::string_view("1"));
  }
  if (!excluded.empty()) {
    int chief = 0;  // the first rank left becomes rank 0
    while (std::binary_search(excluded.begin(), excluded.end(), chief)) ++chief;
    log_warn("rank ", rank_, ": going on without ", describe_ranks(excluded), ": ", size_ - excluded.size(), " of ",
             size_, " ranks left", chief > 0 ? cat("; rank ", chief, " is rank 0 (the chief) now") : std::string());
  }
  return shrink(excluded, false);
}

bool CommImpl::reach_live_store() {
  if (settings_.store_standby.empty() || settings_.store_addr.empty()) return false;
  const std::vector<std::string> stores = job_stores(settings_);
  const auto in_use = std::find(stores.begin(), stores.end(), store_addr_);
  const std::size_t first = in_use == stores.end() ? 0 : static_cast<std::size_t>(in_use - stores.begin());
  std::vector<std::string> tried;
  for (std::size_t k = 0; k < stores.size(); ++k) {
    const std::string& at = stores[(first + k) % stores.size()];
    Rendezvous rv;
    try {
      rv = rendezvous_to_join(at, settings_, kStoreProbe);
    } catch (const Error& e) {
      tried.push_back(cat(at, " (", e.what(), ")"));
      continue;
    }
    if (at == store_addr_) return false;  // the one in use answers
    log_warn("rank ", rank_, ": the job's store at ", store_addr_, " does not answer within ", seconds_of(kStoreProbe),
             " s; going on with the standby store at ", at);
    store_ = std::move(rv.store);
    store_name_ = at;
    store_addr_ = at;
    store_host_ = -1;
    return true;
  }
  std::string why;
  for (const std::string& t : tried) why += cat(why.empty() ? "" : "; ", t);
  throw PeerLost(cat("rank ", rank_, ": shrink_lost: none of the job's stores answers within ", seconds_of(kStoreProbe),
                     " s, so the survivors cannot agree on who is gone (this host may have lost the network): ", why));
}

std::unique_ptr<CommImpl> CommImpl::grow() {
  check_open();
  if (!settings_.elastic)
    throw InvalidArgument(cat("rank ", rank_, ": grow: the job is not elastic; start every rank with BRAID_ELASTIC=1 "
                              "(braid-run --elastic)"));
  if (!store_) throw InvalidArgument(cat("rank ", rank_, ": grow: this communicator has no store to admit through"));
  const std::string keys = elastic_keys(job_scope_);
  Store& store = *store_;
  // Rank 0 looks who waits and tells the others, so that every member
  // admits the same processes.
  std::int64_t decision[3] = {0, 0, 0};  // arrivals, admitted before, generation
  if (rank_ == 0) {
    decision[0] = store.add(keys + "arrivals", 0);
    decision[1] = store.add(keys + "admitted", 0);
    if (decision[0] > decision[1]) decision[2] = store.add(keys + "generation", 1);
  }
  run(broadcast(decision, decision, 3, DataType::i64, 0));
  const std::int64_t waiting = decision[0] - decision[1];
  if (waiting <= 0) return nullptr;
  const int size = size_ + static_cast<int>(waiting);
  const std::int64_t generation = decision[2];
  if (rank_ == 0) {
    for (std::int64_t n = decision[1] + 1; n <= decision[0]; ++n)
      store.set(cat(keys, "admit/", n),
                cat(generation, " ", size_ + (n - decision[1] - 1), " ", size, " ", store_host_));
    store.add(keys + "admitted", waiting);
    log_info("rank 0: grow: admitting ", waiting, " process", waiting == 1 ? "" : "es", " (ranks ", size_, "..",
             size - 1, ")");
  }
  Rendezvous rv;
  rv.server = store_server_;
  rv.store = store_;
  rv.job_scope = job_scope_;
  rv.scope = generation_scope(job_scope_, generation);
  rv.store_host = store_host_;
  rv.store_name = store_addr_;
  rv.advertise = advertise_;
  share_comm_id(rv, rank_, settings_);
  return create(std::move(rv), rank_, size, settings_);
}

std::unique_ptr<CommImpl> CommImpl::join_job(Rendezvous rv, Settings settings) {
  const std::string keys = elastic_keys(rv.scope);
  Store& store = *rv.store;
  const std::int64_t n = store.add(keys + "arrivals", 1);
  store.set(cat(keys, "arrival/", n), cat(hostname(), " pid ", ::getpid()));
  log_info("joining: arrival ", n, " at ", rv.store_name, "; waiting for the members' next grow");
  const std::string admit = cat(keys, "admit/", n);
  const Deadline deadline = Deadline::after(settings.timeout);
  const auto started = Clock::now();
  std::string text;
  while (true) {
    try {
      text = store.get_string(admit, std::chrono::duration_cast<Millis>(
                                         std::min<Clock::duration>(deadline.remaining(), kJoinProgress)));
      break;
    } catch (const Timeout&) {
      if (deadline.expired())
        throw Timeout(cat("joining: no member of the job at ", rv.store_name, " admitted this process within ",
                          seconds_of(settings.timeout), " s (the members admit at Comm::grow; is the job elastic "
                          "and still running?)"));
      log_info("joining: still waiting to be admitted at ", rv.store_name, " (",
               std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started).count(), " s)");
    }
  }
  long long generation = 0;
  int rank = -1, size = 0, store_host = -1;
  if (std::sscanf(text.c_str(), "%lld %d %d %d", &generation, &rank, &size, &store_host) != 4 || rank < 0 ||
      rank >= size)
    throw ProtocolMismatch(cat("joining: the admission in the braid store at ", rv.store_name, " is malformed (",
                               text, ")"));
  set_log_rank(rank);
  log_info("rank ", rank, ": admitted as rank ", rank, " of ", size);
  rv.job_scope = rv.scope;
  rv.scope = generation_scope(rv.job_scope, generation);
  rv.store_host = store_host;
  share_comm_id(rv, rank, settings);
  std::unique_ptr<CommImpl> comm = create(std::move(rv), rank, size, std::move(settings));
  comm->joined_running_job_ = true;
  return comm;
}

}  // namespace braid
