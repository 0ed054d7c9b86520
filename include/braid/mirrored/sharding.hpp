// braid::mirrored — splitting a dataset into the per-replica batches of
// synchronous data-parallel training.
//
// An epoch is a permutation of the sample indices (a portable Fisher–Yates
// shuffle seeded from the seed and the epoch, or natural order), cut into
// consecutive global batches; each replica takes a contiguous piece of every
// global batch. The global batches depend only on the options, the epoch and
// the batch number, never on the replica count, so a job resumed on another
// number of replicas trains on the same global batches.
//
//   braid::mirrored::DataShard shard({.dataset_size = 50'000, .global_batch_size = 256, .seed = 7},
//                                    comm.rank(), comm.size());
//   for (std::int64_t b = 0; b < shard.batches_per_epoch(); ++b)
//     train_on(shard.batch(epoch, b));
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace braid::mirrored {

/// What to do with the samples left over when the dataset does not divide
/// into global batches.
enum class Remainder {
  drop,  ///< the last partial global batch is dropped
  keep,  ///< it becomes a smaller last batch, split over the replicas as evenly as possible
};

/// How a dataset is cut into global batches.
struct ShardOptions {
  std::int64_t dataset_size = 0;       ///< samples in the dataset, indexed [0, dataset_size)
  std::int64_t global_batch_size = 0;  ///< samples per step over all replicas together
  std::uint64_t seed = 0;              ///< with the epoch, selects the shuffle
  bool shuffle = true;                 ///< false: natural order in every epoch
  Remainder remainder = Remainder::drop;
};

/// One replica's view of a dataset: which samples it trains on in each step.
///
/// Global batch `b` of epoch `e` is `epoch_order(e)[b * G, b * G + global_batch_samples(b))`
/// with G the global batch size. It is split over the replicas in replica
/// order: with g samples and R replicas, each replica takes g / R of them and
/// the first g % R replicas one more. With Remainder::keep, a last batch
/// smaller than the replica count leaves some replicas with no sample in it
/// (their batch() is empty; a synchronous step must still be taken by them).
///
/// batch() keeps the order of the epoch it last computed (dataset_size
/// indices, 8 bytes each) so that the batches of one epoch cost one shuffle;
/// asking for another epoch reshuffles, O(dataset_size). The const member
/// functions may be called from several threads at once. A copy starts
/// without that cache.
class DataShard {
 public:
  /// Throws InvalidArgument when dataset_size <= 0, global_batch_size <= 0,
  /// num_replicas < 1, replica is outside [0, num_replicas), the global
  /// batch is smaller than the number of replicas (some replica would get no
  /// data), or, with Remainder::drop, the global batch is larger than the
  /// dataset (every epoch would be empty).
  DataShard(const ShardOptions& options, int replica, int num_replicas);

  const ShardOptions& options() const { return options_; }
  int replica() const { return replica_; }
  int num_replicas() const { return num_replicas_; }

  /// This replica's share of a full global batch: global_batch_size / num_replicas,
  /// plus one for the first (global_batch_size % num_replicas) replicas, so
  /// that every sample of a global batch is used exactly once.
  std::int64_t per_replica_batch_size() const;

  /// Global batches in an epoch: dataset_size / global_batch_size, rounded
  /// down with Remainder::drop and up with Remainder::keep.
  std::int64_t batches_per_epoch() const;

  /// The epoch's order of sample indices: a permutation of [0, dataset_size),
  /// identical on every replica, compiler and standard library for a given
  /// seed and epoch; natural order without shuffle. Throws InvalidArgument
  /// for a negative epoch.
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;

  /// Samples in global batch `batch` of an epoch: global_batch_size, or less
  /// for a kept remainder. Throws InvalidArgument when batch is outside
  /// [0, batches_per_epoch()).
  std::int64_t global_batch_samples(std::int64_t batch) const;

  /// This replica's sample indices in global batch `batch` of `epoch`: a
  /// contiguous piece of that global batch in the epoch order. Throws
  /// InvalidArgument when epoch is negative or batch is outside
  /// [0, batches_per_epoch()).
  std::vector<std::int64_t> batch(std::int64_t epoch, std::int64_t batch) const;

 private:
  // The order of the last epoch batch() was asked for. Copying a DataShard
  // gives the copy an empty cache (a mutex cannot be copied, and sharing the
  // order would need no lock anyway: it is immutable once built).
  struct EpochCache {
    EpochCache() = default;
    EpochCache(const EpochCache&) {}
    EpochCache& operator=(const EpochCache&) { return *this; }

    std::mutex mutex;
    std::int64_t epoch = -1;
    std::shared_ptr<const std::vector<std::int64_t>> order;
  };

  std::shared_ptr<const std::vector<std::int64_t>> cached_order(std::int64_t epoch) const;

  ShardOptions options_;
  int replica_;
  int num_replicas_;
  mutable EpochCache cache_;
};

}  // namespace braid::mirrored
