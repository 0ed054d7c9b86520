// ParameterServer: asynchronous training with bounded staleness.
//
// The last `servers` ranks hold the trainable variables, each split
// element-wise into one contiguous shard per server; the other ranks are
// workers with a cached copy. Every (worker, server) pair gets a 2-rank
// communicator of its own (split from the job's), so a server answers each
// worker on its own thread and queue, and no worker waits for another's
// message. A worker's step: push its gradient shards to every server, get
// back the shards' new values. A server applies a push at once unless the
// worker is more than `staleness` updates ahead of the slowest unfinished
// worker (stale-synchronous parallel), in which case the reply waits, bounded
// by the timeout. Non-trainable variables stay with the workers, mirrored
// over a workers-only communicator.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "braid/mirrored.hpp"
#include "checkpoint_file.hpp"
#include "gradient_buckets.hpp"

namespace braid::mirrored {
namespace {

enum class Request : std::int64_t { pull = 1, push = 2, stop = 3 };

struct Shard {
  std::size_t begin = 0, end = 0;  // elements
};

Shard shard_of(std::size_t count, int server, int servers) {
  auto s = static_cast<std::size_t>(server), n = static_cast<std::size_t>(servers);
  return Shard{count * s / n, count * (s + 1) / n};
}

}  // namespace

class ParameterServer::Impl {
 public:
  ParameterServerOptions options;
  int servers = 0, workers = 0;
  int my_server = -1;      // index among servers, or -1 on a worker
  Comm worker_comm;        // workers only (empty on servers)
  std::vector<Comm> pairs; // worker: one per server; server: one per worker

  // Server state.
  struct Held {
    Variable* variable;
    Shard shard;
    std::vector<std::byte> value;
    std::vector<std::vector<std::byte>> slots;
  };
  std::vector<Held> held;  // trainable variables' shards, in creation order
  std::mutex mutex;
  std::condition_variable clock_moved;
  std::vector<std::int64_t> clocks;  // pushes applied per worker
  std::vector<bool> finished;
  std::int64_t updates = 0;
  int max_staleness = 0;

  std::size_t payload_bytes() const {
    std::size_t bytes = 0;
    for (const Held& h : held) bytes += (h.shard.end - h.shard.begin) * size_of(h.variable->type());
    return bytes;
  }
  std::int64_t slowest() const {
    std::int64_t low = INT64_MAX;
    for (std::size_t w = 0; w < clocks.size(); ++w)
      if (!finished[w]) low = std::min(low, clocks[w]);
    return low;
  }
};

ParameterServer::ParameterServer(Comm comm, ParameterServerOptions options)
    : Strategy(std::move(comm), 1, options.strategy), impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = std::move(options);
  Comm& c = *this->comm();
  m.servers = m.options.servers;
  m.workers = c.size() - m.servers;
  if (!m.options.optimizer) throw InvalidArgument("ParameterServer: ParameterServerOptions::optimizer is not set");
  if (m.servers < 1 || m.workers < 1)
    throw InvalidArgument("ParameterServer: " + std::to_string(c.size()) + " ranks cannot hold " +
                          std::to_string(m.servers) + " server(s) and at least one worker");
  if (m.options.staleness < 0)
    throw InvalidArgument("ParameterServer: staleness " + std::to_string(m.options.staleness) + " must be >= 0");
  if (c.rank() >= m.workers) m.my_server = c.rank() - m.workers;
  m.worker_comm = c.split(m.my_server < 0 ? 0 : Comm::kNoColor, c.rank());
  // One 2-rank communicator per (worker, server): the worker is rank 0 in it.
  for (int s = 0; s < m.servers; ++s) {
    for (int w = 0; w < m.workers; ++w) {
      const int server_rank = m.workers + s;
      const bool member = c.rank() == w || c.rank() == server_rank;
      Comm pair = c.split(member ? 0 : Comm::kNoColor, c.rank() == w ? 0 : 1);
      if (member) m.pairs.push_back(std::move(pair));
    }
  }
}

ParameterServer::~ParameterServer() = default;

std::unique_ptr<ParameterServer> ParameterServer::from_env(ParameterServerOptions options) {
  if (auto cluster = ClusterSpec::from_env(); cluster && cluster->count("ps") > 0) options.servers = cluster->count("ps");
  return std::make_unique<ParameterServer>(Comm::from_env(), std::move(options));
}

bool ParameterServer::is_server() const { return impl_->my_server >= 0; }
int ParameterServer::workers() const { return impl_->workers; }
int ParameterServer::max_staleness_seen() const { return impl_->max_staleness; }
std::int64_t ParameterServer::updates_applied() const { return impl_->updates; }

Comm* ParameterServer::replica_comm() {
  // During construction (before the split) and on servers there is none.
  if (!impl_ || !impl_->worker_comm.valid()) return nullptr;
  return &impl_->worker_comm;
}

void ParameterServer::initialize_variable(Variable& variable, std::span<const std::byte> initial) {
  Strategy::initialize_variable(variable, initial);  // every rank gets the chief's value
  Impl& m = *impl_;
  if (!is_server() || !variable.options().trainable) return;
  Shard shard = shard_of(variable.count(), m.my_server, m.servers);
  const std::size_t element = size_of(variable.type());
  auto all = variable.replica_bytes(0);
  Impl::Held h{&variable, shard,
               std::vector<std::byte>(all.begin() + static_cast<std::ptrdiff_t>(shard.begin * element),
                                      all.begin() + static_cast<std::ptrdiff_t>(shard.end * element)),
               {}};
  for (std::size_t i = 0; i < m.options.optimizer->slot_names().size(); ++i)
    h.slots.emplace_back(h.value.size(), std::byte{0});
  m.held.push_back(std::move(h));
}

// ---- workers -------------------------------------------------------------------

namespace {

void pack_shards(std::span<Variable* const> trainable, int server, int servers,
                 const std::function<std::span<const std::byte>(Variable&)>& source, std::vector<std::byte>& out) {
  out.clear();
  for (Variable* v : trainable) {
    Shard s = shard_of(v->count(), server, servers);
    const std::size_t element = size_of(v->type());
    auto bytes = source(*v).subspan(s.begin * element, (s.end - s.begin) * element);
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
}

std::size_t shard_bytes(std::span<Variable* const> trainable, int server, int servers) {
  std::size_t bytes = 0;
  for (Variable* v : trainable) {
    Shard s = shard_of(v->count(), server, servers);
    bytes += (s.end - s.begin) * size_of(v->type());
  }
  return bytes;
}

void unpack_shards(std::span<Variable* const> trainable, int server, int servers, std::span<const std::byte> in) {
  std::size_t at = 0;
  for (Variable* v : trainable) {
    Shard s = shard_of(v->count(), server, servers);
    const std::size_t element = size_of(v->type());
    const std::size_t bytes = (s.end - s.begin) * element;
    std::memcpy(v->replica_bytes(0).data() + s.begin * element, in.data() + at, bytes);
    at += bytes;
  }
}

// One round with every server at once: the request (for a push, with this
// worker's gradient shards), answered by the shards' current values, which
// replace the worker's cached copy.
void round_trip(std::vector<Comm>& pairs, std::span<Variable* const> trainable, Request request, std::int64_t step,
                Gradients* gradients) {
  const int servers = static_cast<int>(pairs.size());
  const std::vector<std::int64_t> header = {static_cast<std::int64_t>(request), step};
  std::vector<std::vector<std::byte>> payloads(pairs.size()), replies(pairs.size());
  std::vector<Work> works;
  for (int s = 0; s < servers; ++s) {
    Comm& pair = pairs[static_cast<std::size_t>(s)];
    works.push_back(pair.send_async(header.data(), 2, DataType::i64, 1));
    if (gradients != nullptr) {
      auto& payload = payloads[static_cast<std::size_t>(s)];
      pack_shards(trainable, s, servers, [&](Variable& v) { return gradients->bytes_of(v); }, payload);
      works.push_back(pair.send_async(payload.data(), payload.size(), DataType::u8, 1));
    }
    auto& reply = replies[static_cast<std::size_t>(s)];
    reply.resize(shard_bytes(trainable, s, servers));
    works.push_back(pair.recv_async(reply.data(), reply.size(), DataType::u8, 1));
  }
  for (Work& w : works) w.wait();
  for (int s = 0; s < servers; ++s) unpack_shards(trainable, s, servers, replies[static_cast<std::size_t>(s)]);
}

}  // namespace

void ParameterServer::apply_gradients(ReplicaContext& context, Optimizer& optimizer) {
  Impl& m = *impl_;
  if (optimizer.name() != m.options.optimizer->name())
    throw InvalidArgument("ParameterServer::apply_gradients: the servers apply '" + m.options.optimizer->name() +
                          "' (ParameterServerOptions::optimizer), not '" + optimizer.name() + "'");
  // Every server gets its shards of this worker's own gradient (no averaging
  // with other workers: updates are asynchronous), and answers with new values.
  round_trip(m.pairs, trainable_variables(), Request::push, ++optimizer_step(), &context.gradients());
  context.gradients().zero();
}

void ParameterServer::pull() {
  if (is_server()) throw InvalidArgument("ParameterServer::pull: this rank is a server");
  round_trip(impl_->pairs, trainable_variables(), Request::pull, 0, nullptr);
}

void ParameterServer::finish() {
  Impl& m = *impl_;
  if (is_server()) throw InvalidArgument("ParameterServer::finish: this rank is a server; it calls serve()");
  m.worker_comm.barrier();  // every worker's last push is in
  pull();
  std::vector<std::int64_t> header = {static_cast<std::int64_t>(Request::stop), 0};
  for (auto& pair : m.pairs) pair.send(header.data(), 2, DataType::i64, 1);
}

// ---- servers ----------------------------------------------------------------------

void ParameterServer::serve() {
  Impl& m = *impl_;
  if (!is_server()) throw InvalidArgument("ParameterServer::serve: this rank is a worker");
  m.clocks.assign(static_cast<std::size_t>(m.workers), 0);
  m.finished.assign(static_cast<std::size_t>(m.workers), false);
  const auto timeout = options().timeout;
  std::mutex error_mutex;
  std::exception_ptr first_error;
  auto serve_worker = [&](int w) {
    Comm& pair = m.pairs[static_cast<std::size_t>(w)];
    const std::size_t bytes = m.payload_bytes();
    std::vector<std::byte> gradient(bytes), reply(bytes);
    auto snapshot = [&] {
      std::size_t at = 0;
      for (const Impl::Held& h : m.held) {
        std::memcpy(reply.data() + at, h.value.data(), h.value.size());
        at += h.value.size();
      }
    };
    for (;;) {
      std::int64_t header[2] = {0, 0};
      pair.recv(header, 2, DataType::i64, 0);
      const auto request = static_cast<Request>(header[0]);
      if (request == Request::stop) break;
      if (request == Request::pull) {
        {
          std::lock_guard lock(m.mutex);
          snapshot();
        }
        pair.send(reply.data(), reply.size(), DataType::u8, 0);
        continue;
      }
      if (request != Request::push)
        throw ProtocolMismatch("ParameterServer: server " + std::to_string(m.my_server) + " got request " +
                               std::to_string(header[0]) + " from worker " + std::to_string(w));
      pair.recv(gradient.data(), gradient.size(), DataType::u8, 0);
      {
        std::unique_lock lock(m.mutex);
        const std::int64_t mine = m.clocks[static_cast<std::size_t>(w)];
        const bool in_bound = m.clock_moved.wait_for(lock, timeout, [&] {
          return mine - m.slowest() <= m.options.staleness;
        });
        if (!in_bound)
          throw Timeout("ParameterServer: server " + std::to_string(m.my_server) + " held worker " +
                        std::to_string(w) + "'s update " + std::to_string(mine + 1) + " for " +
                        std::to_string(timeout.count()) + " ms: the slowest worker is at update " +
                        std::to_string(m.slowest()) + " and the staleness bound is " +
                        std::to_string(m.options.staleness));
        m.max_staleness = std::max(m.max_staleness, static_cast<int>(mine - m.slowest()));
        const std::int64_t step = ++m.updates;
        std::size_t at = 0;
        for (Impl::Held& h : m.held) {
          std::vector<void*> slots;
          for (auto& s : h.slots) slots.push_back(s.data());
          m.options.optimizer->update(h.variable->type(), h.value.data(), gradient.data() + at, slots,
                                      h.shard.end - h.shard.begin, step);
          at += h.value.size();
        }
        ++m.clocks[static_cast<std::size_t>(w)];
        snapshot();
      }
      m.clock_moved.notify_all();
      pair.send(reply.data(), reply.size(), DataType::u8, 0);
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int w = 0; w < m.workers; ++w) {
      threads.emplace_back([&, w] {
        try {
          serve_worker(w);
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!first_error) first_error = std::current_exception();
        }
        {
          std::lock_guard lock(m.mutex);
          m.finished[static_cast<std::size_t>(w)] = true;  // no one waits for a worker that is gone
        }
        m.clock_moved.notify_all();
      });
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  // The cached copy on this rank follows the shards it served.
  for (const Impl::Held& h : m.held) {
    const std::size_t element = size_of(h.variable->type());
    std::memcpy(h.variable->replica_bytes(0).data() + h.shard.begin * element, h.value.data(), h.value.size());
  }
}

ReplicaReport ParameterServer::verify_replicas() {
  if (is_server()) return {};
  return Strategy::verify_replicas();
}

// ---- checkpoints ------------------------------------------------------------------
// Collective over every rank, after serve()/finish(): the servers send their
// shards (values and slots) to the chief, which writes one file; on restore
// the chief broadcasts every value and each server keeps its shard.

void ParameterServer::save(const std::string& path, const TrainingPosition& position) {
  Impl& m = *impl_;
  Comm& c = *comm();
  const auto slot_names = m.options.optimizer->slot_names();
  CheckpointContents contents = checkpoint_of(position, m.workers);
  std::vector<CheckpointEntry> slot_entries;
  for (Variable* v : variables()) {
    if (v->options().trainable) {
      if (is_server()) {
        for (const Impl::Held& h : m.held) {
          if (h.variable != v) continue;
          c.send(h.value.data(), h.value.size(), DataType::u8, 0);
          for (const auto& s : h.slots) c.send(s.data(), s.size(), DataType::u8, 0);
        }
      } else if (is_chief()) {
        CheckpointEntry value{v->name(), v->type(), v->shape(), std::vector<std::byte>(v->bytes())};
        std::vector<CheckpointEntry> slots;
        for (const auto& name : slot_names)
          slots.push_back(CheckpointEntry{v->name() + "/" + m.options.optimizer->name() + "/" + name, v->type(),
                                          v->shape(), std::vector<std::byte>(v->bytes())});
        const std::size_t element = size_of(v->type());
        for (int s = 0; s < m.servers; ++s) {
          Shard sh = shard_of(v->count(), s, m.servers);
          const std::size_t offset = sh.begin * element, bytes = (sh.end - sh.begin) * element;
          c.recv(value.data.data() + offset, bytes, DataType::u8, m.workers + s);
          for (auto& e : slots) c.recv(e.data.data() + offset, bytes, DataType::u8, m.workers + s);
        }
        contents.entries.push_back(std::move(value));
        for (auto& e : slots) slot_entries.push_back(std::move(e));
      }
    } else if (!is_server()) {
      std::vector<std::byte> value = read(*v);
      if (is_chief()) contents.entries.push_back(CheckpointEntry{v->name(), v->type(), v->shape(), std::move(value)});
    }
  }
  for (auto& e : slot_entries) contents.entries.push_back(std::move(e));
  write_on_chief(path, contents);
}

RestoredCheckpoint ParameterServer::restore(const std::string& path) {
  Impl& m = *impl_;
  Comm& c = *comm();
  const auto slot_names = m.options.optimizer->slot_names();
  auto entry = [](const CheckpointContents& contents, const std::string& name) -> const CheckpointEntry* {
    for (const auto& e : contents.entries)
      if (e.name == name) return &e;
    return nullptr;
  };
  // What this model holds: every variable, and the servers' slots of the trainable ones.
  std::vector<std::pair<std::string, const Variable*>> expected;
  for (Variable* v : variables()) {
    expected.emplace_back(v->name(), v);
    if (v->options().trainable)
      for (const auto& s : slot_names) expected.emplace_back(v->name() + "/" + m.options.optimizer->name() + "/" + s, v);
  }
  CheckpointContents contents = read_on_chief(path, [&](const CheckpointContents& file) {
    std::string failure;
    for (const auto& [name, v] : expected) {
      const CheckpointEntry* e = entry(file, name);
      if (!e) failure += "; it has no variable '" + name + "'";
      else if (e->type != v->type() || e->shape != v->shape())
        failure += "; '" + name + "' is " + std::string(braid::name_of(e->type)) + " " + shape_text(e->shape) +
                   " there and " + std::string(braid::name_of(v->type())) + " " + shape_text(v->shape()) + " here";
    }
    for (const auto& e : file.entries)
      if (std::none_of(expected.begin(), expected.end(), [&](const auto& x) { return x.first == e.name; }))
        failure += "; it holds '" + e.name + "', which this model does not have";
    return failure.empty() ? failure : "checkpoint '" + path + "' does not match this model: " + failure.substr(2);
  });
  auto fetch = [&](const std::string& name, std::size_t bytes) {
    std::vector<std::byte> value(bytes);
    if (is_chief()) {
      const CheckpointEntry* e = entry(contents, name);
      if (e == nullptr) throw Error(ErrorCode::internal, "restore: checked checkpoint lost entry '" + name + "'");
      value = e->data;
    }
    if (bytes) c.broadcast(value.data(), value.data(), bytes, DataType::u8, 0);
    return value;
  };
  for (Variable* v : variables()) {
    std::vector<std::byte> value = fetch(v->name(), v->bytes());
    std::memcpy(v->replica_bytes(0).data(), value.data(), value.size());
    if (!v->options().trainable) continue;
    for (std::size_t i = 0; i < slot_names.size(); ++i) {
      std::vector<std::byte> slot = fetch(v->name() + "/" + m.options.optimizer->name() + "/" + slot_names[i], v->bytes());
      for (Impl::Held& h : m.held)
        if (h.variable == v) {
          const std::size_t element = size_of(v->type());
          std::memcpy(h.slots[i].data(), slot.data() + h.shard.begin * element, h.slots[i].size());
        }
    }
    for (Impl::Held& h : m.held)
      if (h.variable == v) {
        const std::size_t element = size_of(v->type());
        std::memcpy(h.value.data(), value.data() + h.shard.begin * element, h.value.size());
      }
  }
  return finish_restore(contents);
}

}  // namespace braid::mirrored
