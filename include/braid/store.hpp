// braid::Store: the key-value store through which the ranks of a job find
// each other at start-up (addresses, rank info, the communicator id).
//
// braid hosts one itself (rank 0's TCP store, or UniqueId::create's), but a
// framework that already runs a store (PyTorch's c10d store, an etcd or Redis
// client) can implement this interface and pass it to Comm::init(store, rank,
// size): then no rank hosts or listens for a store, and the job does not
// depend on rank 0's process for rendezvous. Every key braid writes starts
// with "braid/" (and the job id, when BRAID_JOB_ID is set), so one store can
// serve several jobs and braid's keys stay apart from the framework's.
//
// The contract. Values are bytes; a set replaces the value; get and wait
// block until the keys exist or the timeout passes, then throw
// braid::Timeout naming the keys; add is atomic across every client of the
// store. Calls may come from several threads of one process at once (the
// communicator's own and the user's); an implementation that cannot serve
// them concurrently serialises them. A store that is unreachable throws
// braid::PeerLost (or another braid::Error) naming itself.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/types.hpp"

namespace braid {

class Store {
 public:
  using Bytes = std::vector<std::byte>;
  using Millis = std::chrono::milliseconds;

  virtual ~Store() = default;
  virtual void set(std::string_view key, std::span<const std::byte> value) = 0;
  /// Waits until `key` exists and returns its value; Timeout names the key.
  virtual Bytes get(std::string_view key, Millis timeout) = 0;
  /// Adds delta to the integer at key (absent counts as 0); returns the new value.
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;
  /// True if every key exists now.
  virtual bool check(std::span<const std::string> keys) = 0;
  /// Waits until every key exists; Timeout lists the keys still missing.
  virtual void wait(std::span<const std::string> keys, Millis timeout) = 0;
  /// A set that gives up after `budget` instead of failing (the store may be
  /// gone, or busy with another thread's wait): true when it was stored. For
  /// notices that must not hold up the caller (an abort).
  virtual bool try_set(std::string_view key, std::span<const std::byte> value, Millis budget) {
    (void)budget;
    try {
      set(key, value);
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  /// Reads `key` if it is there now, giving up after `budget`: its value, or
  /// nullopt when it is absent. Timeout when the store is busy past the
  /// budget; PeerLost (or another Error) when it cannot be reached.
  virtual std::optional<Bytes> peek(std::string_view key, Millis budget) {
    (void)budget;
    const std::string k(key);
    if (!check(std::span(&k, 1))) return std::nullopt;
    return get(key, Millis(0));
  }
  /// Which of `keys` are absent now, in their order. The default asks check()
  /// once per key; a store that can answer in one request overrides it (a
  /// start-up that waits for 65536 ranks names the missing ones at once).
  virtual std::vector<std::string> missing(std::span<const std::string> keys) {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (!check(std::span(&k, 1))) out.push_back(k);
    return out;
  }
  /// This client's end of its connection ("127.0.0.1:51234"), for messages
  /// that must tell two clients apart; empty where there is none.
  virtual std::string endpoint() const { return {}; }

  void set(std::string_view key, std::string_view value) {
    set(key, std::span(reinterpret_cast<const std::byte*>(value.data()), value.size()));
  }
  std::string get_string(std::string_view key, Millis timeout) {
    Bytes b = get(key, timeout);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
};

}  // namespace braid
