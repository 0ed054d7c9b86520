// DataShard: the per-replica batches of an epoch (include/braid/mirrored/sharding.hpp).
//
// The shuffle is written out here rather than taken from <random>/<algorithm>:
// std::shuffle and std::uniform_int_distribution are implementation-defined,
// and every rank, on whatever compiler or standard library built it, must
// produce the same order. A splitmix64 generator, seeded from (seed, epoch),
// drives a Fisher–Yates shuffle; each bounded draw rejects the few values
// that would make a plain modulo biased.
#include "braid/mirrored/sharding.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "braid/types.hpp"

namespace braid::mirrored {
namespace {

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15;

// The splitmix64 output function: a bijection on 64-bit words with full avalanche.
std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  SplitMix64(std::uint64_t seed, std::int64_t epoch)
      : state_(mix64(seed ^ mix64(static_cast<std::uint64_t>(epoch) + kGolden))) {}

  std::uint64_t next() {
    state_ += kGolden;
    return mix64(state_);
  }

  // Uniform in [0, bound), bound > 0. The 2^64 mod bound smallest outputs are
  // rejected so that what remains is a whole number of copies of [0, bound).
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      std::uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  std::uint64_t state_;
};

std::string where(int replica, int num_replicas) {
  return "DataShard (replica " + std::to_string(replica) + " of " + std::to_string(num_replicas) + "): ";
}

}  // namespace

DataShard::DataShard(const ShardOptions& options, int replica, int num_replicas)
    : options_(options), replica_(replica), num_replicas_(num_replicas) {
  const std::string prefix = where(replica, num_replicas);
  const std::string dataset = std::to_string(options.dataset_size);
  const std::string global = std::to_string(options.global_batch_size);
  if (options.dataset_size <= 0)
    throw InvalidArgument(prefix + "dataset_size must be positive, got " + dataset);
  if (options.global_batch_size <= 0)
    throw InvalidArgument(prefix + "global_batch_size must be positive, got " + global);
  if (num_replicas < 1)
    throw InvalidArgument(prefix + "num_replicas must be at least 1, got " + std::to_string(num_replicas));
  if (replica < 0 || replica >= num_replicas)
    throw InvalidArgument(prefix + "replica " + std::to_string(replica) + " is outside [0, " +
                          std::to_string(num_replicas) + ")");
  if (options.remainder != Remainder::drop && options.remainder != Remainder::keep)
    throw InvalidArgument(prefix + "remainder has the unknown value " +
                          std::to_string(static_cast<int>(options.remainder)));
  if (options.global_batch_size < num_replicas)
    throw InvalidArgument(prefix + "global_batch_size " + global + " is smaller than num_replicas " +
                          std::to_string(num_replicas) + ": some replica would get no data");
  if (options.remainder == Remainder::drop && options.global_batch_size > options.dataset_size)
    throw InvalidArgument(prefix + "global_batch_size " + global + " is larger than dataset_size " + dataset +
                          " with Remainder::drop: every epoch would be empty");
}

std::int64_t DataShard::per_replica_batch_size() const {
  return options_.global_batch_size / num_replicas_ + (replica_ < options_.global_batch_size % num_replicas_ ? 1 : 0);
}

std::int64_t DataShard::batches_per_epoch() const {
  const std::int64_t full = options_.dataset_size / options_.global_batch_size;
  const bool partial = options_.dataset_size % options_.global_batch_size != 0;
  return full + (partial && options_.remainder == Remainder::keep ? 1 : 0);
}

std::vector<std::int64_t> DataShard::epoch_order(std::int64_t epoch) const {
  if (epoch < 0)
    throw InvalidArgument(where(replica_, num_replicas_) + "epoch must not be negative, got " + std::to_string(epoch));
  std::vector<std::int64_t> order(static_cast<std::size_t>(options_.dataset_size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (options_.shuffle) {
    SplitMix64 random(options_.seed, epoch);
    for (std::size_t i = order.size() - 1; i > 0; --i)
      std::swap(order[i], order[random.below(i + 1)]);
  }
  return order;
}

std::int64_t DataShard::global_batch_samples(std::int64_t batch) const {
  const std::int64_t batches = batches_per_epoch();
  if (batch < 0 || batch >= batches)
    throw InvalidArgument(where(replica_, num_replicas_) + "batch " + std::to_string(batch) + " is outside [0, " +
                          std::to_string(batches) + ") (batches_per_epoch)");
  const std::int64_t first = batch * options_.global_batch_size;
  return std::min(options_.global_batch_size, options_.dataset_size - first);
}

std::shared_ptr<const std::vector<std::int64_t>> DataShard::cached_order(std::int64_t epoch) const {
  std::lock_guard lock(cache_.mutex);
  if (!cache_.order || cache_.epoch != epoch) {
    cache_.order = std::make_shared<const std::vector<std::int64_t>>(epoch_order(epoch));
    cache_.epoch = epoch;
  }
  return cache_.order;
}

std::vector<std::int64_t> DataShard::batch(std::int64_t epoch, std::int64_t batch) const {
  if (epoch < 0)
    throw InvalidArgument(where(replica_, num_replicas_) + "epoch must not be negative, got " + std::to_string(epoch));
  const std::int64_t samples = global_batch_samples(batch);
  const std::int64_t share = samples / num_replicas_;
  const std::int64_t extra = samples % num_replicas_;
  const std::int64_t offset = share * replica_ + std::min<std::int64_t>(replica_, extra);
  const std::int64_t count = share + (replica_ < extra ? 1 : 0);
  const std::int64_t first = batch * options_.global_batch_size + offset;
  if (!options_.shuffle) {
    std::vector<std::int64_t> indices(static_cast<std::size_t>(count));
    std::iota(indices.begin(), indices.end(), first);
    return indices;
  }
  auto order = cached_order(epoch);
  return {order->begin() + first, order->begin() + first + count};
}

}  // namespace braid::mirrored
