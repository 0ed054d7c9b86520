// Optimizers. They see a variable's elements in its own type; f16 and bf16
// are widened, updated in double and rounded back (no master copy).
#include <cmath>

#include "braid/mirrored.hpp"
#include "elementwise.hpp"

namespace braid::mirrored {
namespace {

template <typename T>
void sgd(void* value, const void* gradient, void* momentum, std::size_t count, double rate, double beta) {
  auto* w = static_cast<T*>(value);
  auto* g = static_cast<const T*>(gradient);
  auto* v = static_cast<T*>(momentum);
  for (std::size_t i = 0; i < count; ++i) {
    double step = detail::as_double(g[i]);
    if (v != nullptr) {
      step = beta * detail::as_double(v[i]) + step;
      v[i] = detail::from_double<T>(step);
    }
    w[i] = detail::from_double<T>(detail::as_double(w[i]) - rate * step);
  }
}

}  // namespace

Sgd::Sgd(double learning_rate, double momentum) : learning_rate_(learning_rate), momentum_(momentum) {
  if (!(learning_rate > 0) || !std::isfinite(learning_rate))
    throw InvalidArgument("Sgd: learning rate " + std::to_string(learning_rate) + " must be positive and finite");
  if (!(momentum >= 0 && momentum < 1))
    throw InvalidArgument("Sgd: momentum " + std::to_string(momentum) + " must be in [0, 1)");
}

std::string Sgd::name() const { return "sgd"; }

std::vector<std::string> Sgd::slot_names() const {
  if (momentum_ > 0) return {"momentum"};
  return {};
}

void Sgd::update(DataType type, void* value, const void* gradient, std::span<void* const> slots, std::size_t count,
                 std::int64_t /*step*/) {
  void* momentum = momentum_ > 0 ? slots[0] : nullptr;
  switch (type) {
    case DataType::f16: return sgd<Float16>(value, gradient, momentum, count, learning_rate_, momentum_);
    case DataType::bf16: return sgd<BFloat16>(value, gradient, momentum, count, learning_rate_, momentum_);
    case DataType::f32: return sgd<float>(value, gradient, momentum, count, learning_rate_, momentum_);
    case DataType::f64: return sgd<double>(value, gradient, momentum, count, learning_rate_, momentum_);
    default:
      throw InvalidArgument("Sgd: cannot update a variable of type " + std::string(braid::name_of(type)));
  }
}

}  // namespace braid::mirrored
