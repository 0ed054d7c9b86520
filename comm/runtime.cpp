#include "comm/runtime.hpp"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "bootstrap/store.hpp"
#include "braid/types.hpp"
#include "comm/comm_impl.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "transport/registry.hpp"
#include "transport/tcp/tcp_context.hpp"

namespace braid {
namespace {

std::mutex g_mutex;
// Never deleted: at exit shutdown() stops it, and objects destroyed later
// (a Comm with static storage) may still ask whether it runs.
Runtime* g_runtime = nullptr;

}  // namespace

std::atomic<Runtime::State> Runtime::state_{Runtime::State::none};
std::atomic<int> Runtime::creator_pid_{0};

Runtime::Runtime() : service_("braid-service") {}

TransportContext& Runtime::context(const TransportKind& kind, const Settings& settings, const SockAddr& bind) {
  ContextSetup setup{.service = &service_, .wake_engine = [this] { engine_.wake(); }, .settings = &settings,
                     .bind = bind};
  std::lock_guard lock(mutex_);
  for (auto& made : contexts_)
    if (made.kind == &kind && made.context->serves(setup)) return *made.context;
  auto context = kind.make(setup);
  TransportContext& made = *context;
  contexts_.push_back(MadeContext{&kind, std::move(context)});
  engine_.add_context(made);
  return made;
}

std::shared_ptr<TcpStoreServer> Runtime::host_store(const SockAddr& address, const Settings& settings,
                                                    std::string job) {
  const TransportKind* tcp = nullptr;
  for (const auto& k : compiled_transports())
    if (k.name == "tcp") tcp = &k;
  TcpContext* listener = nullptr;
  {
    std::lock_guard lock(mutex_);
    bool any = false;
    for (auto& made : contexts_)
      if (made.kind == tcp) {
        any = true;
        auto* t = static_cast<TcpContext*>(made.context.get());
        if (t->listening().to_string() == address.to_string()) listener = t;
      }
    // The first TCP context of the process listens where the store must: one
    // port for both. One made already elsewhere keeps its port.
    if (listener == nullptr && !any) {
      ContextSetup setup{.service = &service_, .wake_engine = [this] { engine_.wake(); }, .settings = &settings,
                         .bind = address};
      auto context = tcp->make(setup);
      listener = static_cast<TcpContext*>(context.get());
      contexts_.push_back(MadeContext{tcp, std::move(context)});
      engine_.add_context(*listener);
    }
  }
  if (listener == nullptr)
    return TcpStoreServer::start(service_, address, settings.auth_key, settings.tls, std::move(job),
                                 settings.port_range);
  std::shared_ptr<TcpStoreServer> server =
      TcpStoreServer::serve_adopted(service_, listener->listening(), settings.auth_key, settings.tls, std::move(job));
  // The listener hands it the connections that open with the store's bytes
  // while it lives; once it is gone they are closed, and a client retries
  // until the next store of this address takes over (a loop that re-creates
  // its communicator).
  std::weak_ptr<TcpStoreServer> weak = server;
  listener->serve_store([weak](Fd fd, SockAddr from, std::unique_ptr<TlsSession> tls) {
    if (auto s = weak.lock()) s->adopt(std::move(fd), from, std::move(tls));
  });
  return server;
}

void Runtime::add(CommImpl& comm) {
  std::lock_guard lock(mutex_);
  comms_.push_back(&comm);
}

void Runtime::remove(CommImpl& comm) {
  std::lock_guard lock(mutex_);
  std::erase(comms_, &comm);
}

Runtime::~Runtime() = default;

Runtime& Runtime::get() {
  if (state_.load(std::memory_order_acquire) == State::running) [[likely]]
    return *g_runtime;
  std::lock_guard lock(g_mutex);
  switch (state_.load()) {
    case State::running:
      return *g_runtime;
    case State::forked:
    case State::shut_down:
      throw_unusable();
    case State::none:
      break;
  }
  g_runtime = new Runtime();
  creator_pid_.store(::getpid());
  state_.store(State::running, std::memory_order_release);
  static bool hooks = [] {
    // The runtime's threads are gone in a forked child: mark it there so
    // that every later call says so instead of waiting on them.
    ::pthread_atfork(nullptr, nullptr, &Runtime::on_fork_child);
    std::atexit(&Runtime::shutdown);
    return true;
  }();
  (void)hooks;
  return *g_runtime;
}

Runtime* Runtime::existing() { return state_.load(std::memory_order_acquire) == State::running ? g_runtime : nullptr; }

void Runtime::on_fork_child() {
  if (state_.load() == State::running) state_.store(State::forked);
}

void Runtime::throw_unusable() {
  switch (state_.load()) {
    case State::forked:
      throw Error(ErrorCode::invalid_argument,
                  cat("this process (pid ", ::getpid(), ") was forked from pid ", creator_pid_.load(),
                      " after braid started there; braid's threads do not survive fork, so braid cannot be used in "
                      "the child: create communicators after forking, or start the child fresh (Python "
                      "multiprocessing's 'spawn' or 'forkserver' start method)"));
    case State::shut_down:
      throw Error(ErrorCode::invalid_argument,
                  "braid's runtime was shut down (the process is exiting, or braid.shutdown() was called): "
                  "no communicator can be used or made any more");
    default:
      throw Error(ErrorCode::internal, "braid's runtime is not running");
  }
}

namespace {
// How often what lingers is looked at.
constexpr Millis kLingerLook{5};
}  // namespace

void Runtime::linger(std::string what, Clock::time_point until, std::function<bool()> done,
                     std::function<void()> finish) {
  service_.run_sync([&] {
    lingering_.push_back(Lingering{std::move(what), until, std::move(done), std::move(finish)});
    if (lingering_ticker_ == 0) lingering_ticker_ = service_.add_ticker([this] { return look_at_lingering(); });
  });
  service_.wake();
}

std::optional<Clock::time_point> Runtime::look_at_lingering() {
  const auto now = Clock::now();
  for (std::size_t i = 0; i < lingering_.size();) {
    Lingering& l = lingering_[i];
    bool over = now >= l.until;
    try {
      over = over || l.done();
    } catch (const std::exception& e) {
      log_info(l.what, ": ", e.what());
      over = true;
    }
    if (!over) {
      ++i;
      continue;
    }
    log_info(l.what, now >= l.until ? ": its linger ran out" : ": nobody needs it any more");
    Lingering gone = std::move(l);
    lingering_.erase(lingering_.begin() + static_cast<std::ptrdiff_t>(i));
    try {
      gone.finish();
    } catch (const std::exception& e) {
      log_info(gone.what, ": ", e.what());
    }
  }
  if (lingering_.empty()) return std::nullopt;
  return now + kLingerLook;
}

void Runtime::shutdown() {
  Runtime* runtime = nullptr;
  {
    std::lock_guard lock(g_mutex);
    if (state_.load() != State::running) return;
    runtime = g_runtime;
    state_.store(State::shut_down);
  }
  runtime->stop();
}

void Runtime::stop() {
  // Every communicator still alive finalizes now (its peers see goodbyes,
  // not failures); the objects stay, and later calls on them say why.
  std::vector<CommImpl*> comms;
  {
    std::lock_guard lock(mutex_);
    comms = comms_;
  }
  for (CommImpl* comm : comms) {
    try {
      comm->finalize();
    } catch (const std::exception& e) {
      log_info("at exit, a communicator finalized with an error: ", e.what());
    }
  }
  // What lingers for slower peers gets its time (the service thread ends
  // each as it is done, or at its deadline).
  while (true) {
    bool any = false;
    service_.run_sync([&] {
      look_at_lingering();
      any = !lingering_.empty();
    });
    if (!any) break;
    std::this_thread::sleep_for(kLingerLook);
  }
  engine_.stop();
  {
    // Their links went with the communicators: what is left is per process.
    std::lock_guard lock(mutex_);
    contexts_.clear();
  }
  service_.stop();
}

}  // namespace braid
