#include "rank_output.hpp"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <utility>

namespace braid {

OutputSink::OutputSink(int fd) : fd_(fd) {
  struct stat st {};
  regular_file_ = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

void OutputSink::write_some() {
  std::size_t n = queue_.size() - head_;
  if (!regular_file_) n = std::min<std::size_t>(n, PIPE_BUF);
  ssize_t written = ::write(fd_, queue_.data() + head_, n);
  if (written < 0) {
    if (errno != EINTR && errno != EAGAIN) {
      broken_ = true;
      queue_.clear();
      head_ = 0;
    }
    return;
  }
  head_ += static_cast<std::size_t>(written);
  if (head_ == queue_.size()) {
    queue_.clear();
    head_ = 0;
  } else if (head_ > kBacklogLimit) {
    queue_.erase(0, head_);
    head_ = 0;
  }
}

bool OutputSink::flush(Deadline deadline) {
  while (pending()) {
    pollfd p{fd_, POLLOUT, 0};
    int rc = ::poll(&p, 1, deadline.poll_ms());
    if (rc > 0) write_some();
    else if (rc < 0 && errno != EINTR) return false;
    else if (deadline.expired()) return false;
  }
  return true;
}

RankStream::RankStream(Fd fd, OutputSink& sink, std::string prefix)
    : fd_(std::move(fd)), sink_(&sink), prefix_(std::move(prefix)) {}

void RankStream::read_available(std::size_t budget) {
  char buffer[16384];
  while (fd_ && budget > 0) {
    ssize_t n = ::read(fd_.get(), buffer, sizeof buffer);
    if (n > 0) {
      take(std::string_view(buffer, static_cast<std::size_t>(n)));
      budget -= std::min(budget, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {
      finish();  // EOF, or an error that ends the stream the same way
    }
  }
}

void RankStream::finish() {
  if (!partial_.empty()) emit(partial_);
  partial_.clear();
  fd_.reset();
}

void RankStream::take(std::string_view data) {
  std::size_t searched = partial_.size();  // what was there holds no newline
  partial_.append(data);
  std::size_t start = 0;
  for (auto nl = partial_.find('\n', searched); nl != std::string::npos; nl = partial_.find('\n', start)) {
    emit(std::string_view(partial_).substr(start, nl - start));
    start = nl + 1;
  }
  while (partial_.size() - start >= kMaxLine) {
    emit(std::string_view(partial_).substr(start, kMaxLine));
    start += kMaxLine;
  }
  partial_.erase(0, start);
}

void RankStream::emit(std::string_view line) {
  sink_->append(prefix_);
  sink_->append(line);
  sink_->append("\n");
}

}  // namespace braid
