// braid.mirrored.DataShard: which samples each replica trains on (see
// include/braid/mirrored/sharding.hpp), with sample indices as numpy arrays.
#include <pybind11/numpy.h>

#include <cstring>
#include <string>
#include <vector>

#include "braid/types.hpp"
#include "mirrored_binding.hpp"

namespace braid::python {

namespace py = pybind11;
namespace mr = braid::mirrored;

namespace {

py::array index_array(const std::vector<std::int64_t>& v) {
  py::array_t<std::int64_t> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(std::int64_t));
  return a;
}

}  // namespace

mr::ShardOptions shard_options(std::int64_t dataset_size, std::int64_t global_batch_size, std::uint64_t seed,
                               bool shuffle, const std::string& remainder) {
  mr::Remainder r;
  if (remainder == "drop")
    r = mr::Remainder::drop;
  else if (remainder == "keep")
    r = mr::Remainder::keep;
  else
    throw InvalidArgument("DataShard: remainder '" + remainder + "': use 'drop' or 'keep'");
  return {.dataset_size = dataset_size,
          .global_batch_size = global_batch_size,
          .seed = seed,
          .shuffle = shuffle,
          .remainder = r};
}

void bind_data_shard(py::module_& m) {
  using py::arg;
  py::class_<mr::DataShard>(m, "DataShard",
                            "One replica's part of every global batch (tf.data's auto-sharding by data).")
      .def(py::init([](std::int64_t dataset_size, std::int64_t global_batch_size, int replica, int num_replicas,
                       std::uint64_t seed, bool shuffle, const std::string& remainder) {
             return mr::DataShard(shard_options(dataset_size, global_batch_size, seed, shuffle, remainder), replica,
                                  num_replicas);
           }),
           arg("dataset_size"), arg("global_batch_size"), arg("replica") = 0, arg("num_replicas") = 1, py::kw_only(),
           arg("seed") = 0, arg("shuffle") = true, arg("remainder") = "drop")
      .def_property_readonly("replica", &mr::DataShard::replica)
      .def_property_readonly("num_replicas", &mr::DataShard::num_replicas)
      .def_property_readonly("per_replica_batch_size", &mr::DataShard::per_replica_batch_size)
      .def_property_readonly("batches_per_epoch", &mr::DataShard::batches_per_epoch)
      .def(
          "epoch_order", [](const mr::DataShard& s, std::int64_t e) { return index_array(s.epoch_order(e)); },
          arg("epoch"))
      .def("global_batch_samples", &mr::DataShard::global_batch_samples, arg("batch"))
      .def(
          "batch", [](const mr::DataShard& s, std::int64_t e, std::int64_t b) { return index_array(s.batch(e, b)); },
          arg("epoch"), arg("batch"), "This replica's sample indices in global batch `batch` of `epoch`.");
}

}  // namespace braid::python
