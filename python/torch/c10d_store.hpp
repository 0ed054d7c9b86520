// C10dStore: the c10d store that torch.distributed hands a backend (a
// PrefixStore over the TCPStore or FileStore of init_process_group), seen
// through braid's public Store interface, so that Comm::init(store, ...) finds
// its peers there and no braid store is hosted or listened for.
//
// c10d's calls differ from braid's in three ways that this adapter bridges:
// a get blocks for the store's own timeout, so a get with a timeout waits for
// the key first; c10d reads a zero timeout as "none", so a zero or negative
// timeout here is a check without waiting; and c10d throws c10::Error (or a
// std::runtime_error from a socket), which become braid::Timeout for waits
// and braid::PeerLost for the rest, naming the key and keeping c10d's text.
#pragma once

#include <algorithm>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "braid/store.hpp"

namespace braid::torch_backend {

class C10dStore final : public braid::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<::c10d::Store> store) : store_(std::move(store)) {}

  void set(std::string_view key, std::span<const std::byte> value) override {
    const auto* first = reinterpret_cast<const std::uint8_t*>(value.data());
    try {
      store_->set(std::string(key), std::vector<std::uint8_t>(first, first + value.size()));
    } catch (const std::exception& e) {
      throw braid::PeerLost(describe("set", key, e));
    }
  }

  Bytes get(std::string_view key, Millis timeout) override {
    const std::vector<std::string> keys{std::string(key)};
    wait_or_check(keys, timeout);
    std::vector<std::uint8_t> value;
    try {
      value = store_->get(keys[0]);
    } catch (const std::exception& e) {
      throw braid::PeerLost(describe("get", key, e));
    }
    Bytes out(value.size());
    std::transform(value.begin(), value.end(), out.begin(), [](std::uint8_t b) { return std::byte{b}; });
    return out;
  }

  std::int64_t add(std::string_view key, std::int64_t delta) override {
    try {
      return store_->add(std::string(key), delta);
    } catch (const std::exception& e) {
      throw braid::PeerLost(describe("add", key, e));
    }
  }

  bool check(std::span<const std::string> keys) override {
    try {
      return store_->check(std::vector<std::string>(keys.begin(), keys.end()));
    } catch (const std::exception& e) {
      throw braid::PeerLost(describe("check", keys.empty() ? std::string() : keys[0], e));
    }
  }

  void wait(std::span<const std::string> keys, Millis timeout) override {
    wait_or_check(std::vector<std::string>(keys.begin(), keys.end()), timeout);
  }

  std::optional<Bytes> peek(std::string_view key, Millis /*budget*/) override {
    const std::string k(key);
    if (!check(std::span(&k, 1))) return std::nullopt;
    return get(key, Millis(0));
  }

 private:
  static std::string describe(std::string_view call, std::string_view key, const std::exception& e) {
    return "c10d store: " + std::string(call) + " of key '" + std::string(key) + "' failed: " + e.what();
  }

  void wait_or_check(const std::vector<std::string>& keys, Millis timeout) {
    const std::string first = keys.empty() ? std::string() : keys[0];
    if (timeout <= Millis(0)) {
      if (!check(keys))
        throw braid::Timeout("c10d store: key '" + first + "' (of " + std::to_string(keys.size()) + ") is not set yet");
      return;
    }
    try {
      store_->wait(keys, timeout);
    } catch (const std::exception& e) {
      throw braid::Timeout("c10d store: waiting " + std::to_string(timeout.count()) + " ms for key '" + first +
                           "' (of " + std::to_string(keys.size()) + "): " + e.what());
    }
  }

  c10::intrusive_ptr<::c10d::Store> store_;
};

}  // namespace braid::torch_backend
