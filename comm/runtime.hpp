// Runtime: what braid keeps once per process (docs/architecture.md, "The
// runtime and a communicator's life"). Communicators are views over it.
//
// It owns the service thread (an EventLoop: the TCP listener and the
// handshakes it accepts, the stores this process hosts, sockets and stores
// lingering for peers after their communicator went), the progress engine
// (engine.hpp: its one thread and its one wait over every transport), and
// one context per transport kind (transport.hpp), which every communicator
// and split child of the process shares.
//
// Made on first use; torn down last: at process exit (an atexit handler
// registered when it is made, so before the static objects made earlier are
// destroyed) or when Python's interpreter finalises (python/braid calls
// shutdown() from its atexit hook), after every live communicator has been
// finalized and every lingering store and socket has had its bounded time.
// A process forked from one whose runtime had started cannot use braid: its
// threads did not survive the fork, so every call fails saying so.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/engine.hpp"
#include "core/event_loop.hpp"
#include "core/settings.hpp"
#include "core/socket.hpp"

namespace braid {

class CommImpl;
class TcpStoreServer;
class TransportContext;
struct TransportKind;

class Runtime {
 public:
  /// The process's runtime, made on first use. Throws Error(internal) in a
  /// child forked after the runtime started, or once it was shut down.
  static Runtime& get();
  /// The runtime if one was made and still runs, else null; never makes one.
  static Runtime* existing();
  /// Finalizes every live communicator, lets what lingers finish (bounded),
  /// and stops the threads. Idempotent; called at exit.
  static void shutdown();

  /// The service thread.
  EventLoop& service() { return service_; }
  /// The progress engine.
  Engine& engine() { return engine_; }

  /// The context of `kind` for a communicator with `settings` whose
  /// listeners bind `bind` (tcp; its port 0 lets the context pick): the
  /// first made that serves it, else a new one, whose fd joins the engine.
  TransportContext& context(const TransportKind& kind, const Settings& settings, const SockAddr& bind);
  /// Hosts a rendezvous store at `address` for `job`: on the TCP context's
  /// listener when this process has none yet or one bound there (so one port
  /// serves the store and every link), else on a listener of its own.
  std::shared_ptr<TcpStoreServer> host_store(const SockAddr& address, const Settings& settings, std::string job);

  /// Every live communicator, for shutdown() to finalize.
  void add(CommImpl& comm);
  void remove(CommImpl& comm);

  /// Throws the error that says why braid cannot run here (a forked child,
  /// a runtime shut down); cheap enough for every call.
  static void check_usable() {
    if (state_.load(std::memory_order_relaxed) != State::running) [[unlikely]]
      throw_unusable();
  }

  /// Something kept for slower peers after its communicators went (a store
  /// the others may still read): on the service thread, `done` is asked every
  /// few milliseconds, and once it holds or `until` passes, `finish` runs
  /// (and lets it go). shutdown() waits for what lingers (bounded by each
  /// `until`). Thread-safe.
  void linger(std::string what, Clock::time_point until, std::function<bool()> done, std::function<void()> finish);

 private:
  enum class State { none, running, forked, shut_down };
  Runtime();
  ~Runtime();
  [[noreturn]] static void throw_unusable();
  void stop();
  static void on_fork_child();

  /// The service thread's pass over what lingers; when it wants to look again.
  std::optional<Clock::time_point> look_at_lingering();
  struct Lingering {
    std::string what;
    Clock::time_point until;
    std::function<bool()> done;
    std::function<void()> finish;
  };

  static std::atomic<State> state_;
  static std::atomic<int> creator_pid_;
  EventLoop service_;
  Engine engine_;
  std::mutex mutex_;
  std::vector<Lingering> lingering_;  // the service thread's
  EventLoop::Id lingering_ticker_ = 0;
  struct MadeContext {
    const TransportKind* kind;
    std::unique_ptr<TransportContext> context;
  };
  std::vector<MadeContext> contexts_;
  std::vector<CommImpl*> comms_;
};

}  // namespace braid
