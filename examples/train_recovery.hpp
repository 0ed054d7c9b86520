// What braid-train tells its user when a peer is lost mid-training: which
// rank (and host) went, where this rank stood, whether the last checkpoint is
// intact, and the command that resumes from it (train_recovery.cpp).
#pragma once

#include <optional>
#include <string>

namespace braid_train {

/// The rank a braid error names as lost, and its host where the message says.
struct LostPeer {
  int rank = -1;  ///< -1: the message names no other rank
  std::string host;
};

/// Reads the peer out of a PeerLost or Timeout message: the first "rank N"
/// other than `self` ("rank 0: lost the connection to rank 1 (laptop-b, ...)"),
/// or rank 0 when the message is about the store that rank 0 hosts.
LostPeer lost_peer_in(const std::string& message, int self);

/// Everything the advice is made of.
struct RecoveryFacts {
  int rank = 0;                ///< this rank
  bool chief = false;          ///< this rank writes the checkpoints
  std::string error;           ///< braid's message
  std::string position;        ///< where this rank stood: "step 212 (epoch 7, batch 20 of 32)"
  std::string checkpoint_path; ///< empty: no --checkpoint-dir
  std::optional<std::string> checkpoint;  ///< the last checkpoint every rank saw written, described
  std::string checkpoint_check;  ///< on the chief: "intact (...)" or why not
  bool saving = false;         ///< the peer went while a checkpoint was being written
  std::string resume_command;  ///< this rank's command line with --resume
};

/// The lines to print (each starting "braid-train: "), newline-terminated.
std::string recovery_advice(const RecoveryFacts& facts);

/// argv as a shell command line (quoted where needed), with --resume added
/// unless it is there already.
std::string resume_command(int argc, char** argv);

}  // namespace braid_train
