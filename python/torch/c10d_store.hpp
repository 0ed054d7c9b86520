// C10dStore: the c10d store that torch.distributed hands a backend (a
// PrefixStore over the TCPStore or FileStore of init_process_group), seen
// through braid's public Store interface, so that Comm::init(store, ...) finds
// its peers there and no braid store is hosted or listened for.
//
// Only calls that the store answers at once go to c10d: set, add, check, and
// a get of a key that check has just seen. braid's waits (wait, and get with
// a timeout) poll check with a short backoff instead of calling c10d's
// wait(keys, timeout). In torch's TCPStore (1.13 and others) a wait that
// times out leaves the server's reply for later, so the next call on that
// client socket reads the wrong reply ("Stop_waiting response is expected")
// and the socket breaks; braid's join loop waits 200 ms at a time and reads
// Timeout as "not yet", which made one start-up in about fifteen fail that
// way. Polling costs a few small requests per wait and works the same on
// every c10d store.
//
// Every value is stored behind one marker byte, so none is empty: TCPStore
// sends the length of a reply with MSG_MORE, and with no bytes after it the
// kernel holds the reply for its 200 ms cork timeout (braid publishes an
// empty address for a transport that is compiled in but not used).
//
// Errors: a wait that runs out throws braid::Timeout naming the keys still
// missing; a c10d call that throws (a c10::Error, or a socket error) is a
// failure of the c10d store, braid::PeerLost, whose message names the store
// (TCPStore host:port, FileStore path), the call and the key, and keeps
// c10d's own text.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "braid/store.hpp"

namespace braid::torch_backend {

/// "the c10d TCPStore at 127.0.0.1:29500": what is under the PrefixStores.
inline std::string describe_c10d_store(const c10::intrusive_ptr<::c10d::Store>& outer) {
  c10::intrusive_ptr<::c10d::Store> store = outer;
  // PrefixStores nest one per process group; the chain is short, the bound a guard.
  for (int depth = 0; depth < 64; ++depth) {
    auto* prefixed = dynamic_cast<::c10d::PrefixStore*>(store.get());
    if (prefixed == nullptr) break;
    store = prefixed->getUnderlyingStore();
  }
  if (const auto* tcp = dynamic_cast<const ::c10d::TCPStore*>(store.get()))
    return "the c10d TCPStore at " + tcp->getHost() + ":" + std::to_string(tcp->getPort());
  if (const auto* file = dynamic_cast<const ::c10d::FileStore*>(store.get()))
    return "the c10d FileStore " + file->getPath();
  if (dynamic_cast<const ::c10d::HashStore*>(store.get()) != nullptr) return "the c10d HashStore";
  return "the c10d store";
}

class C10dStore final : public braid::Store {
 public:
  /// Between checks a wait sleeps kFirstPoll, doubling up to kLongestPoll:
  /// a key that comes at once is seen within a millisecond or two, and a
  /// rank waiting long for a slow peer (braid's join waits 200 ms at a time)
  /// costs the store about a hundred checks a second.
  static constexpr std::chrono::microseconds kFirstPoll{1'000};
  static constexpr std::chrono::microseconds kLongestPoll{10'000};

  explicit C10dStore(c10::intrusive_ptr<::c10d::Store> store)
      : store_(std::move(store)), name_(describe_c10d_store(store_)) {}

  void set(std::string_view key, std::span<const std::byte> value) override {
    std::vector<std::uint8_t> stored(value.size() + 1);
    stored[0] = kValueMarker;
    std::transform(value.begin(), value.end(), stored.begin() + 1, [](std::byte b) { return std::uint8_t(b); });
    call("set", key, [&] { store_->set(std::string(key), stored); });
  }

  Bytes get(std::string_view key, Millis timeout) override {
    const std::vector<std::string> keys{std::string(key)};
    wait(keys, timeout);
    return get_present(keys[0]);
  }

  std::int64_t add(std::string_view key, std::int64_t delta) override {
    std::int64_t value = 0;
    call("add", key, [&] { value = store_->add(std::string(key), delta); });
    return value;
  }

  bool check(std::span<const std::string> keys) override {
    bool present = false;
    call("check", keys.empty() ? std::string_view() : std::string_view(keys[0]),
         [&] { present = store_->check(std::vector<std::string>(keys.begin(), keys.end())); });
    return present;
  }

  /// Polls check until every key is there; a zero or negative timeout checks once.
  void wait(std::span<const std::string> keys, Millis timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::chrono::microseconds pause = kFirstPoll;
    while (!check(keys)) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) {
        std::vector<std::string> absent = absent_keys(keys);
        if (absent.empty()) return;
        throw braid::Timeout(describe_absent(absent, keys.size(), timeout));
      }
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, left));
      pause = std::min(pause * 2, kLongestPoll);
    }
  }

  std::optional<Bytes> peek(std::string_view key, Millis /*budget: each call is one prompt request*/) override {
    const std::string k(key);
    if (!check(std::span(&k, 1))) return std::nullopt;
    return get_present(k);
  }

 private:
  /// Runs one c10d call under the lock; its failure becomes PeerLost naming the store.
  template <typename Call>
  void call(std::string_view what, std::string_view key, Call&& c10d_call) {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      c10d_call();
    } catch (const c10::Error& e) {
      throw braid::PeerLost(failure(what, key, e.what_without_backtrace()));
    } catch (const std::exception& e) {
      throw braid::PeerLost(failure(what, key, e.what()));
    }
  }

  /// c10d's get waits for the key (up to the store's own timeout) before
  /// reading it; called only once check saw the key, it answers at once.
  Bytes get_present(const std::string& key) {
    std::vector<std::uint8_t> value;
    call("get", key, [&] { value = store_->get(key); });
    if (value.empty() || value[0] != kValueMarker)
      throw braid::ProtocolMismatch(name_ + ": the value of key '" + key +
                                    "' was not stored by braid (another program writes braid's keys in this store)");
    Bytes out(value.size() - 1);
    std::transform(value.begin() + 1, value.end(), out.begin(), [](std::uint8_t b) { return std::byte{b}; });
    return out;
  }

  std::string failure(std::string_view what, std::string_view key, std::string_view why) const {
    return name_ + ": " + std::string(what) + " of key '" + std::string(key) + "' failed: " + std::string(why);
  }

  std::vector<std::string> absent_keys(std::span<const std::string> keys) {
    std::vector<std::string> absent;
    for (const std::string& key : keys)
      if (!check(std::span(&key, 1))) absent.push_back(key);
    return absent;
  }

  /// "the c10d TCPStore at ...: 2 of 4 keys not set within 200 ms: 'a', 'b'" (the first few named).
  std::string describe_absent(const std::vector<std::string>& absent, std::size_t asked, Millis timeout) const {
    constexpr std::size_t kNamed = 4;
    std::string text = name_ + ": " + std::to_string(absent.size()) + " of " + std::to_string(asked) +
                       (asked == 1 ? " key" : " keys") + " not set within " +
                       std::to_string(std::max<Millis::rep>(timeout.count(), 0)) + " ms:";
    for (std::size_t i = 0; i < absent.size() && i < kNamed; ++i) text += (i ? ", '" : " '") + absent[i] + "'";
    if (absent.size() > kNamed) text += ", ...";
    return text;
  }

  static constexpr std::uint8_t kValueMarker = 'b';

  c10::intrusive_ptr<::c10d::Store> store_;
  std::string name_;
  // braid's Store may be called from several threads (the caller's and the
  // communicator's); a c10d store need not be safe for that.
  std::mutex mutex_;
};

}  // namespace braid::torch_backend
