#include "train_recovery.hpp"

#include <regex>

namespace braid_train {

LostPeer lost_peer_in(const std::string& message, int self) {
  // braid's messages name ranks as "rank N", followed by "(host, address)"
  // where the rank is a peer the message is about.
  static const std::regex kRank(R"(rank (\d+)( \(([^,)]+))?)");
  for (auto it = std::sregex_iterator(message.begin(), message.end(), kRank); it != std::sregex_iterator(); ++it) {
    const int rank = std::stoi((*it)[1].str());
    if (rank != self) return LostPeer{rank, (*it)[3].str()};
  }
  // "lost the braid store at ...": rank 0 hosts it.
  if (message.find("braid store") != std::string::npos && self != 0) return LostPeer{0, {}};
  return {};
}

std::string recovery_advice(const RecoveryFacts& f) {
  const LostPeer peer = lost_peer_in(f.error, f.rank);
  const std::string who = peer.rank < 0 ? std::string("a peer")
                                        : "rank " + std::to_string(peer.rank) +
                                              (peer.host.empty() ? std::string() : " (" + peer.host + ")");
  std::string out = "braid-train: rank " + std::to_string(f.rank) + " lost " + who + " after " + f.position +
                    ", and stops: " + f.error + "\n";
  if (f.checkpoint_path.empty()) {
    out += "braid-train: no checkpoints were written (no --checkpoint-dir): start the job again from the beginning, "
           "with --checkpoint-dir DIR --checkpoint-every N to be able to resume next time.\n";
    return out;
  }
  if (f.chief) {
    // The chief looked at the file itself: what it says is what --resume loads.
    out += "braid-train: the last checkpoint, " + f.checkpoint_path + ", " + f.checkpoint_check + ".\n";
  } else if (f.checkpoint) {
    out += "braid-train: the last checkpoint, " + *f.checkpoint + ", is " + f.checkpoint_path +
           " on rank 0's machine (rank 0 writes the checkpoints)" +
           (f.saving ? ", or the next one if rank 0 finished writing it before it went" : "") + ".\n";
  } else {
    out += "braid-train: no checkpoint was written yet to " + f.checkpoint_path + " on rank 0's machine" +
           (f.saving ? " (unless rank 0 finished the first one before it went)" : "") +
           ": --resume starts from step 0.\n";
  }
  out += "braid-train: to resume, start every rank again as before, with --resume (" +
         (peer.rank < 0 ? std::string("the lost one's") : "rank " + std::to_string(peer.rank) + "'s") +
         " too, once its machine is back); this rank's command:\n";
  out += "braid-train:   " + f.resume_command + "\n";
  return out;
}

namespace {

std::string shell_quoted(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                               "-_./=:,+@%") == std::string::npos)
    return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

std::string resume_command(int argc, char** argv) {
  std::string command;
  bool has_resume = false;
  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    has_resume = has_resume || word == "--resume";
    if (i > 0) command += ' ';
    command += shell_quoted(word);
  }
  return has_resume ? command : command + " --resume";
}

}  // namespace braid_train
