// Link parameters per transport for the cost model (cost_model.hpp): the
// built-in ones, measured on the development machine, or a tuning file
// (BRAID_TUNING_FILE) that `braid-perf --tune` wrote on the user's machine.
//
// The file is JSON:
//
//   {"braid_tuning": 1, "machine": "node17",
//    "profiles": [{"ranks": 2, "hosts": 1,
//                  "transports": {"shm": {"latency_us": 1.1, "bandwidth_gbps": 6.2, "reduce_gbps": 9.5,
//                                         "cache_bandwidth_gbps": 20, "cache_reduce_gbps": 12}}}]}
//
// The cache rates (LinkParams) are optional: without them a transport's
// copies run at its memory rates at every size.
// One profile per rank and host count (the effective parameters change when
// ranks share cores); the profile of the job's shape on the machine it was
// measured on is used, else the built-in parameters, with a warning saying so.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "topology/cost_model.hpp"

namespace braid {

/// The link parameters of each transport for one job, and where they came from.
struct LinkModel {
  std::map<std::string, LinkParams, std::less<>> transports;
  std::string source;  // "built-in", "tuning file t.json (2 ranks on 1 host)"

  /// The parameters of `transport`; a transport the model does not name gets
  /// the built-in ones.
  LinkParams of(std::string_view transport) const;
};

/// Built-in parameters of `transport` ("shm", "tcp", ...), for ranks that
/// each have a core or for more ranks than cores (`oversubscribed`).
LinkParams default_link_params(std::string_view transport, bool oversubscribed);

struct TuningProfile {
  int ranks = 0;
  int hosts = 1;
  std::map<std::string, LinkParams, std::less<>> transports;
};

struct TuningFile {
  std::string machine;  // the host name of rank 0 of the job that measured it
  std::vector<TuningProfile> profiles;

  /// The profile for `ranks` on `hosts`, or nullptr.
  const TuningProfile* find(int ranks, int hosts) const;
  /// Adds `profile`, replacing the transports it names in a profile of the same shape.
  void merge(const TuningProfile& profile);
};

/// Throws InvalidArgument naming `what` (the file) and the problem: not JSON,
/// a missing or mistyped field, a non-positive parameter.
TuningFile parse_tuning(std::string_view text, std::string_view what);
/// The JSON text of `file` (parse_tuning reads it back).
std::string format_tuning(const TuningFile& file);

/// The model for a job of `ranks` ranks on `hosts` hosts whose rank 0 runs
/// on `machine`: from the tuning file at `path` when it has a profile for
/// this machine and shape (the transports it lacks keep the built-in
/// parameters), else the built-in parameters with a warning in the log
/// naming why. An empty path means built-in parameters. A file that cannot
/// be read or parsed throws InvalidArgument: the user asked for it.
LinkModel load_link_model(const std::string& path, std::string_view machine, int ranks, int hosts, bool oversubscribed);

}  // namespace braid
