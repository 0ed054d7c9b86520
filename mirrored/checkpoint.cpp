// Checkpoints of a strategy's variables. The chief writes every variable and
// optimizer slot (on_read ones as a cross-replica read sees them) to one file
// with a checksum (checkpoint_file.cpp); on restore the chief reads and checks
// it against the model, and broadcasts each value, so every replica restores
// the same bytes even where only the chief can see the file. Nothing in the
// file depends on the replica count, so a checkpoint restores onto another.
#include <algorithm>
#include <cstring>

#include "braid/mirrored.hpp"
#include "checkpoint_file.hpp"

namespace braid::mirrored {
namespace {

constexpr std::size_t kStatusBytes = 2048;

[[noreturn]] void throw_with_code(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::invalid_argument: throw InvalidArgument(message);
    case ErrorCode::timeout: throw Timeout(message);
    default: throw Error(code, message);
  }
}

}  // namespace

void Strategy::broadcast_status(const std::string& failure, ErrorCode code, std::string_view operation) {
  std::vector<char> status(kStatusBytes, '\0');
  status[0] = failure.empty() ? 1 : 0;
  status[1] = static_cast<char>(code);
  std::memcpy(status.data() + 2, failure.data(), std::min(failure.size(), kStatusBytes - 3));
  broadcast_from_chief(status.data(), status.size());
  if (status[0] == 1) return;
  std::string message(status.data() + 2);
  if (comm_ && comm_->rank() != 0)
    message = "rank " + std::to_string(comm_->rank()) + ": " + std::string(operation) + " failed on the chief: " + message;
  throw_with_code(static_cast<ErrorCode>(status[1]), message);
}

CheckpointContents Strategy::checkpoint_of(const TrainingPosition& position, int replicas) const {
  CheckpointContents contents;
  contents.model = std::string(name()) + " checkpoint of " + std::to_string(variable_list_.size()) + " variables";
  contents.step = position.step != 0 ? position.step : optimizer_step_;
  contents.epoch = position.epoch;
  contents.batch_in_epoch = position.batch_in_epoch;
  contents.replicas = replicas;
  return contents;
}

void Strategy::write_on_chief(const std::string& path, CheckpointContents& contents) {
  std::string failure;
  ErrorCode code = ErrorCode::system;
  if (is_chief()) {
    try {
      contents.fingerprint = fingerprint_of(contents.entries);
      write_checkpoint_file(path, contents);
    } catch (const Error& e) {
      failure = e.what();
      code = e.code();
    }
  }
  broadcast_status(failure, code, "save('" + path + "')");
}

CheckpointContents Strategy::read_on_chief(const std::string& path,
                                           const std::function<std::string(const CheckpointContents&)>& check) {
  CheckpointContents contents;
  std::string failure;
  ErrorCode code = ErrorCode::invalid_argument;
  if (is_chief()) {
    try {
      contents = read_checkpoint_file(path);
      failure = check(contents);
    } catch (const Error& e) {
      failure = e.what();
      code = e.code();
    }
  }
  broadcast_status(failure, code, "restore('" + path + "')");
  return contents;
}

RestoredCheckpoint Strategy::finish_restore(const CheckpointContents& contents) {
  std::int64_t meta[4] = {contents.step, contents.epoch, contents.batch_in_epoch, contents.replicas};
  broadcast_from_chief(meta, sizeof meta);
  optimizer_step_ = meta[0];
  RestoredCheckpoint restored;
  restored.position = TrainingPosition{meta[0], meta[1], meta[2]};
  restored.replicas_when_saved = static_cast<int>(meta[3]);
  restored.model = contents.model;
  return restored;
}

void Strategy::save(const std::string& path, const TrainingPosition& position) {
  check_cross_replica("save");
  CheckpointContents contents = checkpoint_of(position, num_replicas_in_sync());
  for (Variable* v : variable_list_) {
    // on_read values are aggregated (a collective every rank joins).
    std::vector<std::byte> value;
    if (v->options().synchronization == Synchronization::on_read) value = read(*v);
    else if (is_chief()) value.assign(v->replica_bytes(0).begin(), v->replica_bytes(0).end());
    if (is_chief()) contents.entries.push_back(CheckpointEntry{v->name(), v->type(), v->shape(), std::move(value)});
  }
  write_on_chief(path, contents);
}

std::string Strategy::check_checkpoint(const std::string& path, const CheckpointContents& contents) const {
  std::string problems;
  auto note = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
  for (const Variable* v : variable_list_) {
    auto it = std::find_if(contents.entries.begin(), contents.entries.end(),
                           [&](const CheckpointEntry& e) { return e.name == v->name(); });
    if (it == contents.entries.end()) {
      note("it has no variable '" + v->name() + "'");
      continue;
    }
    if (it->type != v->type() || it->shape != v->shape())
      note("variable '" + v->name() + "' is " + std::string(braid::name_of(it->type)) + " " + shape_text(it->shape) +
           " there and " + std::string(braid::name_of(v->type())) + " " + shape_text(v->shape()) + " in this model");
  }
  for (const CheckpointEntry& e : contents.entries) {
    if (by_name_.count(e.name)) continue;
    std::string hint = e.name.find('/') != std::string::npos && std::count(e.name.begin(), e.name.end(), '/') >= 2
                           ? " (if it is an optimizer slot, call create_slots(optimizer) before restore())"
                           : "";
    note("it holds '" + e.name + "', which this model does not have" + hint);
  }
  if (problems.empty()) return {};
  return "checkpoint '" + path + "' does not match this model (" + contents.model + "): " + problems;
}

CheckpointInfo inspect_checkpoint(const std::string& path) {
  const CheckpointContents contents = read_checkpoint_file(path);
  CheckpointInfo info;
  info.position = TrainingPosition{contents.step, contents.epoch, contents.batch_in_epoch};
  info.replicas_when_saved = contents.replicas;
  info.model = contents.model;
  for (const CheckpointEntry& e : contents.entries) info.variables.push_back(e.name);
  return info;
}

RestoredCheckpoint Strategy::restore(const std::string& path) {
  check_cross_replica("restore");
  CheckpointContents contents =
      read_on_chief(path, [&](const CheckpointContents& c) { return check_checkpoint(path, c); });
  for (Variable* v : variable_list_) {
    std::vector<std::byte> value(v->bytes());
    if (is_chief()) {
      for (const CheckpointEntry& e : contents.entries)
        if (e.name == v->name()) value = e.data;
    }
    broadcast_from_chief(value.data(), value.size());
    assign(*v, value);
  }
  return finish_restore(contents);
}

}  // namespace braid::mirrored
