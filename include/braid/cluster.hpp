// braid — TensorFlow's TF_CONFIG cluster spec, so that a job launched for
// TensorFlow (by its own scripts, Kubeflow's TFJob, a cloud trainer) starts
// braid unchanged:
//
//   TF_CONFIG='{"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
//               "task": {"type": "worker", "index": 0}}'
//   braid::Comm comm = braid::Comm::from_env();   // rank 1 of 3; the chief hosts the store at host0:2222
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/types.hpp"

namespace braid {

/// A cluster as TensorFlow's TF_CONFIG describes it: jobs "chief", "worker"
/// and "ps" with host:port addresses, and which task this process is.
///
/// braid ranks the tasks chief first, then the workers in index order, then
/// the parameter servers; rank 0 hosts the rendezvous store at its own
/// address (store_address()). An "evaluator" job may appear in the cluster,
/// as TensorFlow allows, but is not part of the communicator (TensorFlow
/// keeps it out of its strategies' collectives too).
struct ClusterSpec {
  /// One job: its name and the address of each of its tasks, by index.
  struct Job {
    std::string name;                    ///< "chief", "worker" or "ps"
    std::vector<std::string> addresses;  ///< "host:port" of task i at [i]
  };
  std::vector<Job> jobs;  ///< in braid rank order: chief, worker, ps (absent or empty jobs omitted)
  std::string task_type;  ///< this process's job: "chief", "worker" or "ps"
  int task_index = 0;     ///< this process's index in its job

  /// Parses TF_CONFIG's JSON:
  /// `{"cluster": {"chief": ["h:p"], "worker": ["h:p", ...], "ps": [...]}, "task": {"type": "worker", "index": 1}}`.
  /// Other top-level keys ("environment", "rpc_layer") are ignored; a
  /// missing "index" is 0, and an index given as a string of digits is
  /// read as TensorFlow reads it. Throws InvalidArgument naming what is
  /// wrong: text that is not JSON (with the byte offset), no "cluster", a job
  /// that is not a list of host:port strings, a job other than chief, worker,
  /// ps and evaluator, no "task", a task type with no job in the cluster (or
  /// "evaluator"), an index out of range, an empty cluster, more than one
  /// chief, an address used twice.
  static ClusterSpec parse(std::string_view tf_config_json);
  /// Parses TF_CONFIG from the environment; nullopt when it is unset or empty.
  static std::optional<ClusterSpec> from_env();

  /// Number of tasks, every job together: the communicator's size.
  int size() const;
  /// This task's braid rank: the chief is rank 0, then the workers in index
  /// order, then the parameter servers.
  int rank() const;
  /// The braid rank of task `index` of job `type`; throws InvalidArgument if
  /// the cluster has no such task.
  int rank_of(std::string_view type, int index) const;
  /// The job and index of `rank` (the inverse of rank_of); throws
  /// InvalidArgument if rank is outside [0, size()).
  std::pair<std::string, int> task_of(int rank) const;
  /// Number of tasks of job `type` (0 if the cluster has none).
  int count(std::string_view type) const;
  /// Where the rendezvous store listens: the address of rank 0 (the chief's,
  /// else worker 0's), which hosts it there. Throws InvalidArgument for an
  /// empty cluster.
  std::string store_address() const;
};

}  // namespace braid
