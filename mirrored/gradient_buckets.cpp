// Fused gradient buckets (see gradient_buckets.hpp for how they work).
#include "gradient_buckets.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "elementwise.hpp"

namespace braid::mirrored {
namespace {

DataType wire_type_of(Compression c) { return c == Compression::f16 ? DataType::f16 : DataType::bf16; }

}  // namespace

GradientBuckets::GradientBuckets(int local_replicas, GradientOptions options)
    : local_replicas_(local_replicas), options_(options) {
  if (options_.bucket_bytes == 0) throw InvalidArgument("GradientOptions::bucket_bytes must be positive");
  if (options_.aggregation != Aggregation::mean && options_.aggregation != Aggregation::sum)
    throw InvalidArgument(std::string("GradientOptions::aggregation must be mean or sum, not ") +
                          std::string(name_of(options_.aggregation)));
}

void GradientBuckets::layout(std::span<Variable* const> trainable, int replicas_in_sync) {
  std::lock_guard lock(mutex_);
  replicas_in_sync_ = replicas_in_sync;
  if (std::equal(trainable.begin(), trainable.end(), laid_out_.begin(), laid_out_.end())) return;
  for (const Variable* v : trainable) {
    if (!is_floating(v->type()))
      throw InvalidArgument("trainable variable '" + v->name() + "' holds " + std::string(braid::name_of(v->type())) +
                            ": gradients need f16, bf16, f32 or f64 (create it with trainable = false)");
    if (options_.compression != Compression::none && v->type() != DataType::f32)
      throw InvalidArgument("gradient compression to " + std::string(name_of(options_.compression)) +
                            " needs f32 gradients; variable '" + v->name() + "' holds " +
                            std::string(braid::name_of(v->type())));
  }
  laid_out_.assign(trainable.begin(), trainable.end());
  buckets_.clear();
  places_.clear();
  // Reverse creation order: the last layers' gradients are ready first.
  constexpr std::size_t kFirstBucketBytes = 1u << 20;
  for (std::size_t i = laid_out_.size(); i-- > 0;) {
    const Variable* v = laid_out_[i];
    bool fresh = buckets_.empty() || buckets_.back().type != v->type();
    if (!fresh) {
      const Bucket& last = buckets_.back();
      const std::size_t limit =
          buckets_.size() == 1 ? std::min(options_.bucket_bytes, kFirstBucketBytes) : options_.bucket_bytes;
      fresh = (last.count + v->count()) * size_of(last.type) > limit;
    }
    if (fresh) {
      buckets_.emplace_back();
      buckets_.back().type = v->type();
    }
    Bucket& b = buckets_.back();
    places_[v] = Place{buckets_.size() - 1, b.count, i};
    b.variables.push_back(v);
    b.count += v->count();
  }
  for (Bucket& b : buckets_) {
    b.storage.assign(static_cast<std::size_t>(local_replicas_), std::vector<std::byte>(b.count * size_of(b.type)));
    if (options_.compression != Compression::none) {
      b.wire.assign(b.count * 2, std::byte{0});
      b.residual.assign(b.count, 0.f);
    }
    b.pending = local_replicas_ * static_cast<int>(b.variables.size());
  }
  marked_.assign(static_cast<std::size_t>(local_replicas_), std::vector<bool>(laid_out_.size(), false));
  next_to_start_ = 0;
}

const GradientBuckets::Place& GradientBuckets::place_of(const Variable& variable) const {
  auto it = places_.find(&variable);
  if (it == places_.end())
    throw InvalidArgument("variable '" + variable.name() + "' has no gradient: it is not a trainable variable of " +
                          "this strategy");
  return it->second;
}

std::span<std::byte> GradientBuckets::gradient(int replica, const Variable& variable) {
  const Place& p = place_of(variable);
  Bucket& b = buckets_[p.bucket];
  std::size_t element = size_of(b.type);
  return std::span<std::byte>(b.storage[static_cast<std::size_t>(replica)]).subspan(p.offset * element,
                                                                                     variable.count() * element);
}

void GradientBuckets::ready(int replica, const Variable& variable, const Start& start) {
  std::lock_guard lock(mutex_);
  const Place& p = place_of(variable);
  if (synchronized_)
    throw InvalidArgument("gradients().ready('" + variable.name() +
                          "') after synchronize() in the same step: gradients are final once synchronized");
  auto& marks = marked_[static_cast<std::size_t>(replica)];
  if (marks[p.position]) return;
  marks[p.position] = true;
  if (--buckets_[p.bucket].pending == 0 && options_.overlap) start_ready_buckets(start, false);
}

void GradientBuckets::ready_all(int replica, const Start& start) {
  std::lock_guard lock(mutex_);
  if (synchronized_) return;  // synchronize() again in the same step: nothing more to do
  auto& marks = marked_[static_cast<std::size_t>(replica)];
  for (std::size_t i = 0; i < laid_out_.size(); ++i) {
    if (marks[i]) continue;
    marks[i] = true;
    --buckets_[places_.at(laid_out_[i]).bucket].pending;
  }
  if (options_.overlap) start_ready_buckets(start, false);
}

void GradientBuckets::start_ready_buckets(const Start& start, bool all) {
  while (next_to_start_ < buckets_.size() && (all || buckets_[next_to_start_].pending == 0))
    start_bucket(buckets_[next_to_start_++], start);
}

void GradientBuckets::start_bucket(Bucket& b, const Start& start) {
  // On the BRAID_TRACE timeline (docs/tracing.md): the bucket's all-reduce
  // follows on the communicator's track.
  TraceSpan span("start gradient bucket");
  void* first = b.storage[0].data();
  for (std::size_t r = 1; r < b.storage.size(); ++r) combine(first, b.storage[r].data(), b.count, b.type, ReduceOp::sum);
  if (options_.compression != Compression::none) {
    float scale = options_.aggregation == Aggregation::mean ? 1.f / static_cast<float>(replicas_in_sync_) : 1.f;
    pack_with_feedback(static_cast<const float*>(first), b.residual.data(), b.wire.data(), b.count,
                       wire_type_of(options_.compression), scale);
    b.work = start(b.wire.data(), b.count, wire_type_of(options_.compression));
    step_.bytes += b.count * 2;
  } else {
    b.work = start(first, b.count, b.type);
    step_.bytes += b.count * size_of(b.type);
  }
  ++step_.buckets;
}

void GradientBuckets::finish(const Start& start, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  if (synchronized_) return;
  start_ready_buckets(start, true);
  double waited = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    auto t0 = std::chrono::steady_clock::now();
    // The communication the backward pass did not hide, on the timeline.
    TraceSpan span("wait for gradient bucket");
    if (b.work && !b.work->wait(timeout))
      throw Timeout("gradient bucket " + std::to_string(i) + " (" + std::to_string(b.count) + " x " +
                    std::string(braid::name_of(b.type)) + ", first variable '" + b.variables.front()->name() +
                    "') was not aggregated within " + std::to_string(timeout.count()) + " ms");
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    void* first = b.storage[0].data();
    if (options_.compression != Compression::none) {
      unpack(b.wire.data(), static_cast<float*>(first), b.count, wire_type_of(options_.compression));
    } else if (options_.aggregation == Aggregation::mean) {
      divide(first, b.count, b.type, replicas_in_sync_);
    }
    for (std::size_t r = 1; r < b.storage.size(); ++r) std::memcpy(b.storage[r].data(), first, b.storage[0].size());
    b.work.reset();
  }
  synchronized_ = true;
  step_.wait_seconds = waited;
  stats_ = step_;
  step_ = StepStats{};
}

void GradientBuckets::zero(int replica) {
  for (Bucket& b : buckets_) {
    auto& s = b.storage[static_cast<std::size_t>(replica)];
    std::fill(s.begin(), s.end(), std::byte{0});
  }
}

void GradientBuckets::end_step() {
  std::lock_guard lock(mutex_);
  for (Bucket& b : buckets_) b.pending = local_replicas_ * static_cast<int>(b.variables.size());
  for (auto& marks : marked_) std::fill(marks.begin(), marks.end(), false);
  next_to_start_ = 0;
  synchronized_ = false;
}

void GradientBuckets::abandon_step() {
  {
    std::lock_guard lock(mutex_);
    for (Bucket& b : buckets_) b.work.reset();
  }
  for (int r = 0; r < local_replicas_; ++r) zero(r);
  end_step();
}

StepStats GradientBuckets::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace braid::mirrored
