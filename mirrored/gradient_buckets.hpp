// Fused gradient buckets. Every trainable variable's gradient lives inside a
// bucket (one buffer per local replica), in reverse creation order, so that a
// backward pass fills the buckets one after another. When every local replica
// has marked all gradients of a bucket ready, the replicas' copies are summed
// into the first one, packed into the wire type if compression is on, and the
// cross-process aggregation starts in the background. Buckets start strictly
// in bucket order, whatever order gradients become ready in, so every process
// issues the same sequence of collectives. The first bucket is small (1 MiB)
// so that communication starts early; the others hold at most bucket_bytes
// (or one variable, if larger).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "braid/mirrored.hpp"

namespace braid::mirrored {

class GradientBuckets {
 public:
  /// Starts one bucket's cross-process aggregation (sum) and returns its Work.
  using Start = std::function<std::optional<Work>(void* data, std::size_t count, DataType type)>;

  GradientBuckets(int local_replicas, GradientOptions options);

  /// Lays the buckets out for these trainable variables (when they changed).
  void layout(std::span<Variable* const> trainable, int replicas_in_sync);
  std::span<std::byte> gradient(int replica, const Variable& variable);
  /// May start this and following buckets.
  void ready(int replica, const Variable& variable, const Start& start);
  /// Marks every remaining gradient of this replica ready.
  void ready_all(int replica, const Start& start);
  /// Run once per step on one replica while the others wait: starts what has
  /// not started, waits for every bucket, unpacks, scales (mean over the
  /// replicas in sync), and copies the result to every local replica's buffers.
  void finish(const Start& start, std::chrono::milliseconds timeout);
  void zero(int replica);
  /// The step's aggregated gradients have been used: the next ready() or
  /// synchronize() belongs to a new step.
  void end_step();
  /// A step that failed part-way (a replica was lost): forgets its
  /// operations and zeroes every replica's gradients, then end_step().
  void abandon_step();
  StepStats stats() const;
  bool empty() const { return buckets_.empty(); }

 private:
  struct Bucket {
    DataType type = DataType::f32;
    std::size_t count = 0;
    std::vector<const Variable*> variables;
    std::vector<std::vector<std::byte>> storage;  // one per local replica
    std::vector<std::byte> wire;                  // compressed copy sent on the wire
    std::vector<float> residual;                  // error feedback
    int pending = 0;                              // gradients not yet ready this step, over all local replicas
    std::optional<Work> work;  // none when there is no other process
  };
  struct Place {
    std::size_t bucket;
    std::size_t offset;    // in elements
    std::size_t position;  // in laid_out_
  };
  void start_ready_buckets(const Start& start, bool all);
  void start_bucket(Bucket& bucket, const Start& start);
  const Place& place_of(const Variable& variable) const;

  int local_replicas_;
  int replicas_in_sync_ = 1;
  GradientOptions options_;
  std::vector<const Variable*> laid_out_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const Variable*, Place> places_;
  std::vector<std::vector<bool>> marked_;  // [replica][variable position]: ready this step
  std::size_t next_to_start_ = 0;
  bool synchronized_ = false;  // this step's buckets are aggregated; no more ready() until end_step()
  mutable std::mutex mutex_;
  StepStats step_;   // this step so far
  StepStats stats_;  // the last finished step
};

}  // namespace braid::mirrored
