// TcpLink's receive path (transport/tcp/tcp_link.hpp): the frame headers and
// payloads a peer sends, read off the sockets by progress(). The target knows
// only the public Link API, not the frame format: it posts the receives a
// LinkScript (link_script.hpp) names, writes the script's bytes into the
// other end of each socket pair, closes it, and calls progress() until every
// receive has completed or failed.
//
// Checked: no crash, sanitizer report or out-of-bounds access (each receive
// lands in a buffer of exactly its size); no hang (a link whose peer has
// closed must finish every receive within a bounded number of progress
// calls); a receive fails only with a braid error that is not internal; a
// link that failed refuses later receives at once and is idle.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>

#include "core/socket.hpp"
#include "core/text.hpp"
#include "finding.hpp"
#include "link_script.hpp"
#include "transport/tcp/tcp_link.hpp"

using namespace braid;

namespace {

// Every progress call reads what the peer wrote since the last one or hits
// the end of a stream, so a round per chunked turn and a few more suffice;
// this many means the link is stuck.
constexpr int kMaxRounds = 1000;

// Turns in which the peer writes a chunk; then it writes the rest at once. The
// pieces that matter are those of the first frames, and a turn costs a thread
// hand-over (ChunkedPeer).
constexpr int kChunkedTurns = 32;

// The peer's end of one socket: writes what the socket takes, at most `chunk`
// bytes a turn for the first kChunkedTurns where chunk is set, and closes once
// everything is written.
struct PeerEnd {
  Fd fd;
  std::span<const std::byte> left;
  std::size_t chunk = 0;
  int turns = 0;

  void pump() {
    bool chunked = chunk > 0 && turns++ < kChunkedTurns;
    for (std::size_t budget = chunked ? chunk : left.size(); fd && !left.empty() && budget > 0;) {
      ssize_t n = ::send(fd.get(), left.data(), std::min(left.size(), budget), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0) fuzz::finding(cat("writing into the socket pair failed: ", errno_text(errno)));
      left = left.subspan(static_cast<std::size_t>(n));
      budget -= static_cast<std::size_t>(n);
    }
    if (left.empty()) fd.reset();
  }
};

// Hands the peer's bytes over a chunk per socket per turn. The main thread
// takes a turn before each progress() call and waits for it, so the link sees
// the bytes arrive in the same pieces every run. A turn also comes by itself
// after a millisecond in which none was taken: TcpLink waits inside progress()
// (up to 200 ms) for the rest of an abort notice, and only more bytes end that
// wait early.
class ChunkedPeer {
 public:
  explicit ChunkedPeer(std::vector<PeerEnd>& ends) : ends_(ends), thread_([this] { run(); }) {}
  ~ChunkedPeer() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  void turn() {
    std::unique_lock lock(mutex_);
    ++asked_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return served_ == asked_; });
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      changed_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stop_ || asked_ != served_; });
      if (stop_) return;
      for (auto& e : ends_) e.pump();
      served_ = asked_;
      changed_.notify_all();
    }
  }

  std::vector<PeerEnd>& ends_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t asked_ = 0, served_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last, so it starts once the rest exists
};

struct Buffers {
  std::vector<std::byte> dst, local;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::LinkScript script = fuzz::parse_link_script(fuzz::input_bytes(data, size));

  std::vector<Fd> link_ends;
  std::vector<PeerEnd> peers;
  for (int i = 0; i < (script.two_sockets ? 2 : 1); ++i) {
    int sv[2];
    // A leak of the link's sockets would end here, at EMFILE.
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
      fuzz::finding(cat("socketpair failed: ", errno_text(errno)));
    link_ends.emplace_back(sv[0]);
    peers.push_back(PeerEnd{Fd(sv[1]), script.sent[static_cast<std::size_t>(i)], script.chunk});
  }
  TcpLink link(0, 1, "fuzz peer", std::move(link_ends));

  std::vector<Buffers> buffers(script.recvs.size());
  std::vector<Request> requests;
  for (std::size_t i = 0; i < script.recvs.size(); ++i) {
    const fuzz::ScriptedRecv& r = script.recvs[i];
    Buffers& b = buffers[i];
    b.dst.assign(r.bytes, std::byte{0});
    MemView dst{b.dst.data(), b.dst.size()};
    if (!r.reduce) {
      requests.push_back(link.recv(dst, fuzz::tag_of(r)));
      continue;
    }
    ConstMemView local{b.dst.data(), b.dst.size()};
    if (!r.in_place) {
      b.local.assign(r.bytes, std::byte{1});
      local.data = b.local.data();
    }
    requests.push_back(link.recv_reduce(dst, local, r.type, r.op, fuzz::tag_of(r)));
  }

  std::optional<ChunkedPeer> chunked;
  if (script.chunk > 0) chunked.emplace(peers);
  auto all_done = [&] {
    return std::all_of(requests.begin(), requests.end(), [](const Request& q) { return q->done(); });
  };
  for (int round = 0; !all_done(); ++round) {
    if (round == kMaxRounds)
      fuzz::finding(cat("receives still pending after ", kMaxRounds, " progress calls, though the peer has written "
                        "everything and closed"));
    if (chunked)
      chunked->turn();
    else
      for (auto& p : peers) p.pump();
    link.progress();
  }
  link.progress();

  bool broken = false;
  for (const Request& q : requests) {
    if (!q->failed()) continue;
    broken = true;
    try {
      q->rethrow_if_failed();
    } catch (const Error& e) {
      fuzz::expect_refusal(e);
    }
  }
  BRAID_FUZZ_EXPECT(!link.busy());
  if (broken) {
    std::byte one{};
    Request late = link.recv(MemView{&one, 1}, fuzz::tag_of(fuzz::ScriptedRecv{}));
    BRAID_FUZZ_EXPECT(late->done() && late->failed());
  }
  return 0;
}
