// braid::mirrored — optimizers: the update rule a strategy applies where a
// variable's authoritative copy lives. Include braid/mirrored.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "braid/types.hpp"

namespace braid::mirrored {

/// An update rule. A strategy calls update() where the variable's
/// authoritative copy lives: on every replica (mirrored strategies), on the
/// chief (CentralStorage) or on the server holding a shard (ParameterServer).
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  /// Names of the per-variable state it keeps ("momentum"); each slot has its
  /// variable's type and shape, starts at zero and is checkpointed.
  virtual std::vector<std::string> slot_names() const { return {}; }
  /// Updates `count` elements of a variable of `type` (f16, bf16, f32 or f64)
  /// from its aggregated gradient; slots[i] holds slot_names()[i] for the same
  /// elements. step is 1 for the first update.
  virtual void update(DataType type, void* value, const void* gradient, std::span<void* const> slots, std::size_t count,
                      std::int64_t step) = 0;
};

/// Stochastic gradient descent, with optional (heavy-ball) momentum:
/// v = momentum * v + g; value -= learning_rate * v.
class Sgd final : public Optimizer {
 public:
  explicit Sgd(double learning_rate, double momentum = 0.0);
  std::string name() const override;
  std::vector<std::string> slot_names() const override;
  void update(DataType type, void* value, const void* gradient, std::span<void* const> slots, std::size_t count,
              std::int64_t step) override;

 private:
  double learning_rate_, momentum_;
};

}  // namespace braid::mirrored
