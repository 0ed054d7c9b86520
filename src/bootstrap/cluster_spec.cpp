// ClusterSpec (include/braid/cluster.hpp): TensorFlow's TF_CONFIG, read the
// way TensorFlow's own validation reads it (multi_worker_util.py), with the
// messages naming the job, the index or the key that is wrong.
//
// braid's rank order is TensorFlow's task order: chief, then workers, then
// parameter servers, each by index. The chief (else worker 0) is rank 0 and
// hosts the rendezvous store at its TF_CONFIG address, which is the address
// a TensorFlow chief would have listened on.
#include <algorithm>
#include <array>
#include <map>

#include "braid/cluster.hpp"
#include "core/json.hpp"
#include "core/settings.hpp"
#include "core/socket.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// The jobs that take part, in rank order. An evaluator may appear in the
// cluster too (TensorFlow allows one) but never joins the collectives.
constexpr std::array<std::string_view, 3> kJobs = {"chief", "worker", "ps"};
constexpr std::string_view kEvaluator = "evaluator";

constexpr std::string_view kShape =
    R"({"cluster": {"chief": ["host:port"], "worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}})";

[[noreturn]] void bad(const std::string& why) { throw InvalidArgument(cat("TF_CONFIG: ", why)); }

std::string job_list(const std::vector<ClusterSpec::Job>& jobs) {
  std::string out;
  for (const auto& j : jobs) out += cat(out.empty() ? "" : ", ", j.name);
  return out.empty() ? "none" : out;
}

// A job's value: a list of "host:port" strings.
std::vector<std::string> addresses_of(std::string_view job, const JsonValue& value) {
  if (value.kind == JsonValue::Kind::object)
    bad(cat("job \"", job, "\" is an object; braid needs a list of \"host:port\" strings (sparse jobs given as "
            "{index: address} are not supported)"));
  if (value.kind != JsonValue::Kind::array)
    bad(cat("job \"", job, "\" is ", describe(value.kind), ", not a list of \"host:port\" strings"));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < value.items.size(); ++i) {
    const JsonValue& a = value.items[i];
    if (a.kind != JsonValue::Kind::string)
      bad(cat("job \"", job, "\" is not a list of \"host:port\" strings: element ", i, " is ", describe(a.kind)));
    try {
      parse_host_port(a.text, "address");
    } catch (const InvalidArgument& e) {
      bad(cat(job, " ", i, ": ", e.what()));
    }
    out.push_back(a.text);
  }
  return out;
}

// task.index: a number, or a string of digits (TensorFlow applies int()).
int index_of(const JsonValue& value, int job_size, std::string_view type) {
  std::optional<long long> index;
  if (value.kind == JsonValue::Kind::number) {
    if (value.text.find_first_of(".eE") != std::string::npos) bad(cat("task index ", value.text, " is not a whole number"));
    index = value.integer();
  } else if (value.kind == JsonValue::Kind::string && !value.text.empty() &&
             value.text.find_first_not_of("0123456789") == std::string::npos) {
    if (value.text.size() <= 9) index = std::stoll(value.text);
  } else {
    bad(cat("\"task\" \"index\" is ", describe(value.kind), ", not a whole number"));
  }
  if (!index || *index < 0 || *index >= job_size)
    bad(cat("task index ", value.text, " is out of range: job \"", type, "\" has ", job_size, " task",
            job_size == 1 ? "" : "s", " (indexes 0 to ", job_size - 1, ")"));
  return static_cast<int>(*index);
}

}  // namespace

ClusterSpec ClusterSpec::parse(std::string_view tf_config_json) {
  const JsonValue root = parse_json(tf_config_json, "TF_CONFIG");
  if (root.kind != JsonValue::Kind::object) bad(cat("the text is ", describe(root.kind), ", not an object like ", kShape));
  const JsonValue* cluster = root.find("cluster");
  if (cluster == nullptr) bad(cat("no \"cluster\": expected ", kShape));
  if (cluster->kind != JsonValue::Kind::object)
    bad(cat("\"cluster\" is ", describe(cluster->kind), ", not an object of jobs like {\"worker\": [\"host:port\", ...]}"));

  ClusterSpec spec;
  std::map<std::string_view, std::vector<std::string>> found;
  for (std::size_t i = 0; i < cluster->keys.size(); ++i) {
    const std::string& name = cluster->keys[i];
    const bool known = std::find(kJobs.begin(), kJobs.end(), name) != kJobs.end();
    if (!known && name != kEvaluator) {
      std::string hint = name == "master" ? " (\"master\" is the old name of \"chief\": rename the job)"
                                          : " (braid knows chief, worker and ps, and leaves an evaluator out)";
      bad(cat("unknown job \"", name, "\" in \"cluster\"", hint));
    }
    std::vector<std::string> addresses = addresses_of(name, cluster->items[i]);
    if (name == kEvaluator) {
      if (addresses.size() > 1) bad(cat("the \"evaluator\" job has ", addresses.size(), " addresses; there is at most one"));
      continue;
    }
    if (name == "chief" && addresses.size() > 1)
      bad(cat("the \"chief\" job has ", addresses.size(), " addresses; there is at most one chief"));
    found[name] = std::move(addresses);
  }
  for (std::string_view name : kJobs) {
    auto it = found.find(name);
    if (it != found.end() && !it->second.empty()) spec.jobs.push_back(Job{std::string(name), std::move(it->second)});
  }
  if (spec.jobs.empty()) bad("\"cluster\" has no tasks: list at least one chief or worker address");

  std::map<std::string_view, std::pair<std::string_view, std::size_t>> owner;  // address -> job, index
  for (const Job& job : spec.jobs)
    for (std::size_t i = 0; i < job.addresses.size(); ++i) {
      auto [it, fresh] = owner.try_emplace(job.addresses[i], job.name, i);
      if (!fresh)
        bad(cat("address \"", job.addresses[i], "\" is used twice, by ", it->second.first, " ", it->second.second, " and ",
                job.name, " ", i, "; every task needs its own host:port"));
    }

  const JsonValue* task = root.find("task");
  if (task == nullptr) bad(cat("no \"task\" saying which task this process is: expected ", kShape));
  if (task->kind != JsonValue::Kind::object)
    bad(cat("\"task\" is ", describe(task->kind), ", not an object like {\"type\": \"worker\", \"index\": 0}"));
  const JsonValue* type = task->find("type");
  if (type == nullptr) bad("\"task\" has no \"type\" (chief, worker or ps)");
  if (type->kind != JsonValue::Kind::string) bad(cat("\"task\" \"type\" is ", describe(type->kind), ", not a string"));
  spec.task_type = type->text;
  if (spec.task_type == kEvaluator)
    bad("this task is the \"evaluator\", which is not part of the training cluster (as in TensorFlow, it joins no "
        "collective): run it without a braid communicator, or give it a TF_CONFIG of its own");
  if (spec.count(spec.task_type) == 0)
    bad(cat("task type \"", spec.task_type, "\" has no job in \"cluster\" (its jobs: ", job_list(spec.jobs), ")"));
  const JsonValue* index = task->find("index");
  spec.task_index = index == nullptr ? 0 : index_of(*index, spec.count(spec.task_type), spec.task_type);
  return spec;
}

std::optional<ClusterSpec> ClusterSpec::from_env() {
  std::optional<std::string> text = Settings::raw("TF_CONFIG");
  if (!text) return std::nullopt;
  return parse(*text);
}

int ClusterSpec::size() const {
  std::size_t n = 0;
  for (const Job& job : jobs) n += job.addresses.size();
  return static_cast<int>(n);
}

int ClusterSpec::rank() const { return rank_of(task_type, task_index); }

int ClusterSpec::rank_of(std::string_view type, int index) const {
  int first = 0;
  for (const Job& job : jobs) {
    const int n = static_cast<int>(job.addresses.size());
    if (job.name == type) {
      if (index < 0 || index >= n)
        throw InvalidArgument(cat("cluster: job \"", type, "\" has ", n, " task", n == 1 ? "" : "s", ", no index ", index));
      return first + index;
    }
    first += n;
  }
  throw InvalidArgument(cat("cluster: no job \"", type, "\" (its jobs: ", job_list(jobs), ")"));
}

std::pair<std::string, int> ClusterSpec::task_of(int rank) const {
  int first = 0;
  for (const Job& job : jobs) {
    const int n = static_cast<int>(job.addresses.size());
    if (rank >= first && rank < first + n) return {job.name, rank - first};
    first += n;
  }
  throw InvalidArgument(cat("cluster: rank ", rank, " is outside [0, ", size(), ")"));
}

int ClusterSpec::count(std::string_view type) const {
  for (const Job& job : jobs)
    if (job.name == type) return static_cast<int>(job.addresses.size());
  return 0;
}

std::string ClusterSpec::store_address() const {
  for (const Job& job : jobs)
    if (!job.addresses.empty()) return job.addresses.front();
  throw InvalidArgument("cluster: no tasks, so no rank 0 to host the store");
}

}  // namespace braid
