// What this machine's TCP stack allows over loopback, the ceiling of every
// TCP transport on one host: the half round trip of an 8-byte ping-pong and
// the throughput of one stream, between two threads over 127.0.0.1 with
// TCP_NODELAY (as braid's TCP transport sets it). The ping-pong runs twice:
// blocking in recv (each message a sleep and a wake-up), and polling with
// MSG_DONTWAIT (as a rank that spins does), which is the floor on a machine
// with a core per side. Then two streams in opposite directions at once,
// as every rank of an all-reduce sends and receives: the rate each direction
// keeps. bench/limits runs it, and iperf3 as well when it is installed.
//
//   tcp_loopback [--seconds S] [--csv]
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// A connected pair of sockets over loopback.
std::pair<int, int> connect_pair() {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) die("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die("bind/listen");
  int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("connect");
  int server = accept(listener, nullptr, nullptr);
  if (server < 0) die("accept");
  close(listener);
  int one = 1;
  for (int fd : {client, server}) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return {client, server};
}

// `polling`: receive with MSG_DONTWAIT and try again at once (bounded by the
// peer's answer: the caller's loops are bounded in count).
bool full(int fd, char* data, std::size_t n, bool send_it, bool polling = false) {
  while (n > 0) {
    ssize_t k = send_it ? ::send(fd, data, n, MSG_NOSIGNAL) : ::recv(fd, data, n, polling ? MSG_DONTWAIT : 0);
    if (k < 0 && polling && !send_it && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) return false;
    data += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// Median half round trip in us over `batches` batches of `trips` round trips.
double ping_pong_us(int batches, int trips, bool polling) {
  auto [a, b] = connect_pair();
  std::thread echo([fd = b, total = batches * trips, polling] {
    char buf[8];
    for (int i = 0; i < total; ++i)
      if (!full(fd, buf, 8, false, polling) || !full(fd, buf, 8, true)) return;
  });
  std::vector<double> half_rtt;
  char buf[8] = {};
  for (int batch = 0; batch < batches; ++batch) {
    const auto start = Clock::now();
    for (int i = 0; i < trips; ++i)
      if (!full(a, buf, 8, true) || !full(a, buf, 8, false, polling)) die("ping-pong");
    half_rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / trips / 2);
  }
  echo.join();
  close(a);
  close(b);
  std::sort(half_rtt.begin(), half_rtt.end());
  return half_rtt[half_rtt.size() / 2];
}

// One stream's throughput in GB/s over about `seconds`.
double stream_gbps(double seconds) {
  auto [a, b] = connect_pair();
  constexpr std::size_t kChunk = std::size_t{4} << 20;
  std::thread sink([fd = b] {
    std::vector<char> buf(kChunk);
    while (::recv(fd, buf.data(), buf.size(), 0) > 0) {
    }
  });
  std::vector<char> buf(kChunk, 1);
  std::size_t sent = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (!full(a, buf.data(), buf.size(), true)) die("stream");
    sent += buf.size();
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  shutdown(a, SHUT_WR);
  sink.join();
  close(a);
  close(b);
  return static_cast<double>(sent) / elapsed / 1e9;
}

// Two streams in opposite directions over one connection, as the ranks of
// an all-reduce send at once: one thread a side, each sending and receiving
// through a nonblocking socket as a rank's engine does. GB/s each direction
// carried (the mean of the two) over about `seconds`.
double duplex_gbps(double seconds) {
  auto [a, b] = connect_pair();
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::size_t sent[2] = {0, 0};
  const auto start = Clock::now();
  auto side = [end](int fd, std::size_t& total) {
    std::vector<char> out(kChunk, 1);
    std::vector<char> in(kChunk);
    bool sending = true;
    bool receiving = true;
    while (sending || receiving) {
      pollfd p{fd, static_cast<short>((sending ? POLLOUT : 0) | (receiving ? POLLIN : 0)), 0};
      if (::poll(&p, 1, 10000) <= 0) die("duplex poll");
      if (sending && (p.revents & POLLOUT)) {
        const ssize_t k = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) total += static_cast<std::size_t>(k);
        else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) die("duplex send");
        if (Clock::now() >= end) {
          sending = false;
          shutdown(fd, SHUT_WR);
        }
      }
      if (receiving && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
        const ssize_t k = ::recv(fd, in.data(), in.size(), MSG_DONTWAIT);
        if (k == 0) receiving = false;
        else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) die("duplex recv");
      }
    }
  };
  std::thread other(side, b, std::ref(sent[1]));
  side(a, sent[0]);
  other.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  close(a);
  close(b);
  return static_cast<double>(sent[0] + sent[1]) / 2 / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2.0;
  bool csv = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--csv") csv = true;
    else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
  }
  const double latency = ping_pong_us(9, 2000, false);
  const double polled = ping_pong_us(9, 2000, true);
  const double throughput = stream_gbps(seconds);
  const double duplex = duplex_gbps(seconds);
  if (csv)
    std::printf("measure,value,unit\nping_pong_half_rtt_8B,%.3f,us\nping_pong_half_rtt_8B_polling,%.3f,us\n"
                "stream_throughput,%.3f,GB/s\nduplex_throughput,%.3f,GB/s\n", latency, polled, throughput, duplex);
  else
    std::printf("8-byte ping-pong, half round trip: %.2f us blocking, %.2f us polling (median of 9 x 2000)\n"
                "one TCP stream: %.2f GB/s (%.1f s)\n"
                "two streams in opposite directions at once: %.2f GB/s each\n", latency, polled, throughput, seconds,
                duplex);
}
