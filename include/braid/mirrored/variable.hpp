// braid::mirrored — variables: what a strategy owns, and typed handles on it.
// Include braid/mirrored.hpp rather than this file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/types.hpp"

namespace braid::mirrored {

class Strategy;
class ReplicaContext;

/// When replicas of a variable are brought into agreement (TensorFlow's
/// VariableSynchronization): on_write aggregates every update in replica
/// context and writes the result to every replica, so all replicas always
/// hold the same value; on_read lets each replica update its own copy and
/// aggregates only when the variable is read in cross-replica context
/// (metrics, batch statistics).
enum class Synchronization { on_write, on_read };
/// How per-replica updates (on_write) or copies (on_read) combine
/// (TensorFlow's VariableAggregation). none forbids updates of an on_write
/// variable in replica context, and reads of an on_read one.
enum class Aggregation { none, sum, mean, only_first_replica };
/// The element type gradients travel in; error feedback keeps what rounding
/// removed and adds it to the next step's gradient.
enum class Compression { none, f16, bf16 };

std::string_view name_of(Synchronization s);
std::string_view name_of(Aggregation a);
std::string_view name_of(Compression c);

using Shape = std::vector<std::int64_t>;
/// Number of elements of a shape (1 for a scalar, []); throws InvalidArgument for a negative dimension.
std::size_t element_count(const Shape& shape);
/// "[16, 4]".
std::string shape_text(const Shape& shape);

struct VariableOptions {
  Synchronization synchronization = Synchronization::on_write;
  Aggregation aggregation = Aggregation::none;
  bool trainable = true;  ///< gets a gradient buffer and is updated by apply_gradients (f16, bf16, f32 or f64 only)
};

/// A variable owned by a strategy: a name, an element type, a shape and one
/// contiguous copy per local replica. Created only through
/// Strategy::create_variable, inside Strategy::scope().
class Variable {
 public:
  Variable(const Variable&) = delete;
  Variable& operator=(const Variable&) = delete;

  const std::string& name() const { return name_; }
  DataType type() const { return type_; }
  const Shape& shape() const { return shape_; }
  std::size_t count() const { return count_; }
  std::size_t bytes() const { return count_ * size_of(type_); }
  const VariableOptions& options() const { return options_; }
  /// Creation order within its strategy (every rank creates in the same order).
  int index() const { return index_; }
  /// True when every replica holds the same value (on_write, and not a slot
  /// that lives on one rank only); verify_replicas checks these.
  bool mirrored() const { return mirrored_; }
  Strategy& strategy() const { return *strategy_; }
  /// The copy of local replica `local_replica` (empty where the variable is
  /// not held, for example an optimizer slot kept on another rank).
  std::span<std::byte> replica_bytes(int local_replica);
  std::span<const std::byte> replica_bytes(int local_replica) const;

 private:
  friend class Strategy;
  Variable(Strategy* strategy, int index, std::string name, DataType type, Shape shape, VariableOptions options,
           bool mirrored, int copies, bool held);
  Strategy* strategy_;
  int index_;
  std::string name_;
  DataType type_;
  Shape shape_;
  std::size_t count_;
  VariableOptions options_;
  bool mirrored_;
  std::vector<std::vector<std::byte>> copies_;
};

/// A typed handle on a strategy's Variable. A default-constructed handle is
/// not a variable: using it throws InvalidArgument.
template <typename T>
class MirroredVariable {
 public:
  MirroredVariable() = default;
  /// Throws InvalidArgument when the variable's type is not T.
  explicit MirroredVariable(Variable& variable) : variable_(&variable) {
    if (variable.type() != data_type_of<T>)
      throw InvalidArgument("variable '" + variable.name() + "' holds " + std::string(braid::name_of(variable.type())) +
                            ", not " + std::string(braid::name_of(data_type_of<T>)));
  }
  bool valid() const { return variable_ != nullptr; }
  Variable& variable() const {
    if (variable_ == nullptr)
      throw InvalidArgument("this MirroredVariable was not created through a strategy (use Strategy::create_variable "
                            "inside strategy.scope())");
    return *variable_;
  }
  const std::string& name() const { return variable().name(); }
  const Shape& shape() const { return variable().shape(); }
  std::size_t count() const { return variable().count(); }
  /// The copy of one local replica (0 for one replica per process).
  std::span<T> value(int local_replica = 0) const {
    auto bytes = variable().replica_bytes(local_replica);
    return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
  std::span<T> value(const ReplicaContext& context) const;

 private:
  Variable* variable_ = nullptr;
};

}  // namespace braid::mirrored
