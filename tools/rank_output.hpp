// The output path of braid-run: each rank's stdout and stderr pipe is cut into
// lines (RankStream) that are tagged with the rank and queued on braid-run's
// own stdout or stderr (OutputSink).
//
// Nothing here blocks. A RankStream reads only what its pipe holds; an
// OutputSink writes only after poll says its descriptor is writable, and then
// at most PIPE_BUF bytes, which a pipe with room takes at once. So a stalled
// reader of braid-run holds back the ranks (the launcher stops reading their
// pipes while a sink is backlogged, and their pipes fill up) but never the
// launcher's loop, which keeps enforcing timeouts and stopping failed jobs.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/deadline.hpp"
#include "core/socket.hpp"

namespace braid {

/// braid-run's stdout or stderr with a queue in front of it. A reader that
/// went away (EPIPE) makes the sink discard from then on; the job runs on.
class OutputSink {
 public:
  /// Queued bytes past which the launcher stops reading the ranks' pipes.
  static constexpr std::size_t kBacklogLimit = 1 << 20;

  explicit OutputSink(int fd);
  int fd() const { return fd_; }
  void append(std::string_view bytes) {
    if (!broken_) queue_.append(bytes);
  }
  bool pending() const { return !broken_ && head_ < queue_.size(); }
  bool backlogged() const { return !broken_ && queue_.size() - head_ > kBacklogLimit; }
  /// One write; call when poll reports the descriptor writable.
  void write_some();
  /// Writes out the queue; false if the deadline came first.
  bool flush(Deadline deadline);

 private:
  int fd_;
  bool regular_file_ = false;  // always writable: no need to write in PIPE_BUF pieces
  bool broken_ = false;
  std::string queue_;
  std::size_t head_ = 0;  // queue_ before head_ is written
};

/// The read end of one rank's stdout or stderr, cut into lines that go to a
/// sink with `prefix` in front ("[3] "). A line longer than kMaxLine is cut
/// into pieces, each a line of its own, so one rank cannot hold the others'
/// output back without bound.
class RankStream {
 public:
  static constexpr std::size_t kMaxLine = 64 * 1024;

  /// `fd` must be non-blocking.
  RankStream(Fd fd, OutputSink& sink, std::string prefix);
  bool open() const { return static_cast<bool>(fd_); }
  int fd() const { return fd_.get(); }
  const OutputSink& sink() const { return *sink_; }
  /// Reads what the pipe holds now, up to `budget` bytes; finishes at EOF.
  void read_available(std::size_t budget = 256 * 1024);
  /// Emits a last line that had no newline (adding one), and closes the pipe.
  void finish();

 private:
  void take(std::string_view data);
  void emit(std::string_view line);

  Fd fd_;
  OutputSink* sink_;
  std::string prefix_;
  std::string partial_;  // bytes after the last newline
};

}  // namespace braid
