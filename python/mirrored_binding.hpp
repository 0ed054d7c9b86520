// braid.mirrored: the strategies of braid::mirrored for Python
// (mirrored_binding.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "braid/mirrored/sharding.hpp"

namespace braid::python {

void bind_mirrored(pybind11::module_& module);
/// braid.mirrored.DataShard (sharding_binding.cpp).
void bind_data_shard(pybind11::module_& module);
/// ShardOptions from Python's arguments; remainder is 'drop' or 'keep'.
mirrored::ShardOptions shard_options(std::int64_t dataset_size, std::int64_t global_batch_size, std::uint64_t seed,
                                     bool shuffle, const std::string& remainder);

}  // namespace braid::python
