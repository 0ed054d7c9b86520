// The transport conformance suite: one set of cases that every transport
// must pass, run once per transport (BRAID_CONFORMANCE_TRANSPORT names it;
// tests/transport/meson.build lists the transports). Each case forks two
// processes that make the transport through the registry, exchange
// addresses over a socketpair, connect, and talk through the Link interface
// alone: ordering, sizes 0/1/odd/huge, many in flight both ways, recv_reduce
// for every type and operator, striping (tcp with 3 streams), the sleep
// protocol (arm/wait woken by a late message), abort notices, peer death,
// tag and size mismatches that must leave the receiver's buffer untouched,
// and an unanswered receive that stays pending without hanging. After every
// case no shared-memory segment of either process is left in /dev/shm.
#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "bench/expected_values.hpp"
#include "core/event_loop.hpp"
#include "core/poller.hpp"
#include "core/reduce.hpp"
#include "core/settings.hpp"
#include "core/socket.hpp"
#include "core/text.hpp"
#include "core/wire.hpp"
#include "tests/transport/shm/child_process.hpp"
#include "transport/message.hpp"
#include "transport/registry.hpp"

using namespace braid;
using braid::test::ChildProcess;
using braid::test::child_require;

namespace {

std::string transport_name() {
  const char* name = std::getenv("BRAID_CONFORMANCE_TRANSPORT");
  return name ? name : "tcp";
}

const TransportKind& kind() {
  for (const auto& k : compiled_transports())
    if (k.name == transport_name()) return k;
  throw std::runtime_error("no transport named " + transport_name());
}

// One side of a connected pair, in a child process: the transport's context
// for that process, on a service loop and a poller of its own, as the
// runtime gives them.
struct Side {
  int rank;
  Settings settings;
  EventLoop service{"test-service"};
  Poller poller;
  std::unique_ptr<TransportContext> context;
  LinkOwner owner;
  std::unique_ptr<Link> link;
  int peer_pid = 0;
};

// True once process `pid` is gone or a zombie.
bool exited(int pid) {
  std::ifstream stat(cat("/proc/", pid, "/stat"));
  std::string text;
  if (!std::getline(stat, text)) return true;
  auto close = text.rfind(')');
  return close == std::string::npos || text.substr(close + 2, 1) == "Z";
}

void send_blob(int fd, const std::vector<std::byte>& b) {
  std::uint32_t n = static_cast<std::uint32_t>(b.size());
  send_all(fd, &n, sizeof n, Deadline::after(Millis(5000)), "test pipe");
  send_all(fd, b.data(), b.size(), Deadline::after(Millis(5000)), "test pipe");
}

std::vector<std::byte> recv_blob(int fd) {
  std::uint32_t n = 0;
  recv_all(fd, &n, sizeof n, Deadline::after(Millis(10000)), "test pipe");
  std::vector<std::byte> b(n);
  recv_all(fd, b.data(), n, Deadline::after(Millis(10000)), "test pipe");
  return b;
}

// Makes the transport for `rank` of 2 and connects to the other side.
std::unique_ptr<Side> connect_side(int rank, int fd, const CommId& id, int streams) {
  auto side = std::make_unique<Side>();
  side->rank = rank;
  side->settings.timeout = Millis(10000);
  side->settings.tcp_streams = streams;
  side->settings.transport = transport_name();  // as BRAID_TRANSPORT would name it
  // shm_single_copy runs the cases with the shm ring's single copies on.
  side->settings.shm_single_copy_bytes = Settings::from_env().shm_single_copy_bytes;
  SockAddr loopback = resolve(HostPort{"127.0.0.1", 0}, "loopback").front();
  Poller* poller = &side->poller;
  side->context = kind().make(ContextSetup{.service = &side->service,
                                           .wake_engine = [poller] { poller->wake(); },
                                           .settings = &side->settings,
                                           .bind = loopback});
  if (side->context->wait_fd() >= 0) side->poller.add_readable(side->context->wait_fd());
  side->owner = LinkOwner{.comm_id = id, .rank = rank, .size = 2, .tcp_streams = streams, .timeout = Millis(10000)};
  side->context->enroll(side->owner);
  RankInfo me = RankInfo::local(rank);
  send_blob(fd, me.encode());
  send_blob(fd, side->context->local_address(loopback));
  RankInfo peer = RankInfo::decode(recv_blob(fd));
  side->peer_pid = peer.pid;
  std::vector<std::byte> address = recv_blob(fd);
  PeerRef ref{&peer, address};
  // A link the peer makes its side of first comes from a later call.
  const Deadline deadline = Deadline::after(Millis(10000));
  std::vector<std::unique_ptr<Link>> links;
  while (links.empty()) {
    links = side->context->connect(side->owner, std::span(&ref, 1), deadline, {});
    if (links.empty()) side->poller.wait(std::chrono::milliseconds(1));
  }
  child_require(links.size() == 1 && links[0]->peer() == 1 - rank, "one link to the peer");
  side->link = std::move(links[0]);
  side->link->attach(side->poller);
  return side;
}

// Drives the link until every request is done or `within` passes (false).
// Sleeps through the transport's arm protocol, as the engine does.
bool drive(Side& s, const std::vector<Request>& requests, Millis within = Millis(10000)) {
  Deadline deadline = Deadline::after(within);
  auto all_done = [&] {
    return std::all_of(requests.begin(), requests.end(), [](const Request& r) { return r->done(); });
  };
  while (!all_done()) {
    if (s.link->progress()) continue;
    if (all_done()) break;
    if (deadline.expired()) return false;
    s.context->progress();
    if (!s.context->arm()) continue;
    auto nap = std::min<Clock::duration>(deadline.remaining(), std::chrono::milliseconds(20));
    s.poller.wait(std::chrono::duration_cast<std::chrono::microseconds>(nap));
    s.context->disarm();
  }
  return true;
}

void require_ok(const std::vector<Request>& requests) {
  for (auto& r : requests) r->rethrow_if_failed();
}

// The pattern message `m` of `bytes` bytes carries.
std::vector<std::byte> pattern(std::size_t bytes, unsigned m) {
  std::vector<std::byte> b(bytes);
  for (std::size_t i = 0; i < bytes; ++i) b[i] = static_cast<std::byte>((i * 131 + m * 7 + (i >> 12)) & 0xff);
  return b;
}

// Segments of process `pid` still named in /dev/shm.
int segments_of(pid_t pid) {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return 0;
  int n = 0;
  const std::string prefix = cat("braid-", pid, "-");
  while (dirent* e = ::readdir(dir))
    if (std::string(e->d_name).rfind(prefix, 0) == 0) ++n;
  ::closedir(dir);
  return n;
}

using Body = std::function<void(Side&)>;

// Runs `body` on both ranks, connected through the transport under test.
// `expect` is the exit status each rank must end with (0: passed; a case
// that kills a rank expects -SIGKILL).
void run_pair(const Body& body, int streams = 1, std::array<int, 2> expect = {0, 0}) {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  const CommId id = CommId::random();
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::make_unique<ChildProcess>([&, r] {
      ::close(fds[1 - r]);
      auto side = connect_side(r, fds[r], id, streams);
      body(*side);
      return 0;
    }));
  ::close(fds[0]);
  ::close(fds[1]);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << " of the " << transport_name() << " pair");
    CHECK(ranks[r]->join(std::chrono::seconds(60)) == expect[r]);
  }
  for (auto& child : ranks) CHECK(segments_of(child->pid()) == 0);
}

Tag tag_of(unsigned op, unsigned step) { return make_tag(op, step, {std::byte{0x42}}); }

}  // namespace

TEST_CASE("conformance: messages arrive in order, with every size") {
  const std::vector<std::size_t> sizes = {0, 1, 7, 8, 4093, 65536, 262145, (1u << 20) + 3, 9u << 20};
  run_pair([&](Side& s) {
    std::vector<std::vector<std::byte>> in(sizes.size());
    std::vector<std::vector<std::byte>> out;
    std::vector<Request> requests;
    for (unsigned m = 0; m < sizes.size(); ++m) out.push_back(pattern(sizes[m], m + 10 * s.rank));
    // Both ways at once: every send and receive is posted before any moves.
    for (unsigned m = 0; m < sizes.size(); ++m) {
      requests.push_back(s.link->send(ConstMemView{out[m].data(), out[m].size()}, tag_of(1, m)));
      in[m].assign(sizes[m], std::byte{0xEE});
      requests.push_back(s.link->recv(MemView{in[m].data(), in[m].size()}, tag_of(1, m)));
    }
    child_require(drive(s, requests), "every message arrived");
    require_ok(requests);
    for (unsigned m = 0; m < sizes.size(); ++m)
      child_require(in[m] == pattern(sizes[m], m + 10 * (1 - s.rank)), cat("message ", m, " of ", sizes[m], " bytes intact"));
  });
}

TEST_CASE("conformance: a huge message (64 MiB) and many small ones in flight") {
  run_pair([](Side& s) {
    const std::size_t huge = 64u << 20;
    auto out = pattern(huge, 3 + s.rank);
    std::vector<std::byte> in(huge);
    std::vector<Request> requests;
    requests.push_back(s.link->send(ConstMemView{out.data(), huge}, tag_of(2, 0)));
    requests.push_back(s.link->recv(MemView{in.data(), huge}, tag_of(2, 0)));
    // Then 256 small messages queued behind it, each tagged with its index.
    std::vector<std::uint32_t> small_out(256), small_in(256, 0xFFFFFFFF);
    for (std::uint32_t i = 0; i < 256; ++i) {
      small_out[i] = i * 3 + static_cast<std::uint32_t>(s.rank);
      requests.push_back(s.link->send(ConstMemView{reinterpret_cast<std::byte*>(&small_out[i]), 4}, tag_of(3, i)));
      requests.push_back(s.link->recv(MemView{reinterpret_cast<std::byte*>(&small_in[i]), 4}, tag_of(3, i)));
    }
    child_require(drive(s, requests, Millis(30000)), "all of it arrived");
    require_ok(requests);
    child_require(in == pattern(huge, 3 + (1 - s.rank)), "the huge message is intact");
    for (std::uint32_t i = 0; i < 256; ++i)
      child_require(small_in[i] == i * 3 + static_cast<std::uint32_t>(1 - s.rank), cat("small message ", i));
  });
}

TEST_CASE("conformance: recv_reduce combines every type with every operator") {
  run_pair([](Side& s) {
    // Skip where the link does not reduce (the executor stages instead).
    if (!s.link->can_reduce()) return;
    const std::size_t count = 1000;  // spans slots/parts of odd size
    unsigned m = 0;
    for (int t = 0; t < kDataTypeCount; ++t)
      for (int o = 0; o < kReduceOpCount; ++o, ++m) {
        auto type = static_cast<DataType>(t);
        auto op = static_cast<ReduceOp>(o);
        const std::size_t bytes = count * size_of(type);
        // braid-perf's inputs: exact in every type under every operator.
        auto values = [&](int rank) {
          std::vector<std::byte> b(bytes);
          check::fill_reduce_input(type, op, rank, b.data(), count);
          return b;
        };
        auto mine = values(s.rank), theirs = values(1 - s.rank);
        std::vector<std::byte> got(bytes), want(bytes);
        std::vector<Request> requests;
        requests.push_back(s.link->send(ConstMemView{mine.data(), bytes}, tag_of(4, m)));
        requests.push_back(s.link->recv_reduce(MemView{got.data(), bytes}, ConstMemView{mine.data(), bytes}, type, op,
                                               tag_of(4, m)));
        child_require(drive(s, requests), "the reduce finished");
        require_ok(requests);
        reduce(type, op, want.data(), mine.data(), theirs.data(), count);
        child_require(got == want, cat("recv_reduce ", name_of(type), " ", static_cast<int>(o), " matches core/reduce"));
      }
  });
}

TEST_CASE("conformance: a message striped over several streams arrives whole") {
  // Streams are TCP's; other transports run the same case with one path.
  run_pair(
      [](Side& s) {
        const std::size_t bytes = (5u << 20) + 17;
        auto out = pattern(bytes, 5 + s.rank);
        std::vector<std::byte> in(bytes);
        std::vector<Request> requests = {s.link->send(ConstMemView{out.data(), bytes}, tag_of(5, 0)),
                                         s.link->recv(MemView{in.data(), bytes}, tag_of(5, 0))};
        child_require(drive(s, requests), "the striped message arrived");
        require_ok(requests);
        child_require(in == pattern(bytes, 5 + (1 - s.rank)), "striped message intact");
      },
      3);
}

TEST_CASE("conformance: a sleeping receiver wakes for a late message") {
  run_pair([](Side& s) {
    std::uint64_t value = 0;
    if (s.rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));  // rank 0 is asleep by now
      value = 0x1234567890abcdefull;
      std::vector<Request> r = {s.link->send(ConstMemView{reinterpret_cast<std::byte*>(&value), 8}, tag_of(6, 0))};
      child_require(drive(s, r), "sent");
      require_ok(r);
      // Wait for the answer so the link is not closed under rank 0.
      std::vector<Request> a = {s.link->recv(MemView{reinterpret_cast<std::byte*>(&value), 8}, tag_of(6, 1))};
      child_require(drive(s, a), "answered");
      require_ok(a);
    } else {
      std::vector<Request> r = {s.link->recv(MemView{reinterpret_cast<std::byte*>(&value), 8}, tag_of(6, 0))};
      child_require(drive(s, r), "woke for the message");
      require_ok(r);
      child_require(value == 0x1234567890abcdefull, "the late message's value");
      std::vector<Request> a = {s.link->send(ConstMemView{reinterpret_cast<std::byte*>(&value), 8}, tag_of(6, 1))};
      child_require(drive(s, a), "answer sent");
      require_ok(a);
    }
  });
}

TEST_CASE("conformance: an abort notice reaches the peer with its reason") {
  run_pair([](Side& s) {
    if (s.rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      s.link->abort("rank 1 gave up: conformance reason 4711");
      return;
    }
    std::vector<std::byte> in(64);
    std::vector<Request> r = {s.link->recv(MemView{in.data(), in.size()}, tag_of(7, 0))};
    child_require(drive(s, r), "the receive ended");
    child_require(r[0]->failed(), "the receive failed");
    try {
      r[0]->rethrow_if_failed();
    } catch (const PeerLost& e) {
      child_require(std::string(e.what()).find("conformance reason 4711") != std::string::npos,
                    cat("the reason travelled: ", e.what()));
      return;
    }
    child_require(false, "PeerLost expected");
  });
}

TEST_CASE("conformance: a peer killed mid-message fails the pending requests") {
  run_pair(
      [](Side& s) {
        // More than the transport buffers (socket buffers, ring slots) hold.
        const std::size_t bytes = 64u << 20;
        if (s.rank == 1) {
          // Send part of a large message, then die without a word.
          // Rank 0 receives only once this rank is dead, so the buffers fill
          // and stay full.
          auto out = pattern(bytes, 1);
          std::vector<Request> r = {s.link->send(ConstMemView{out.data(), bytes}, tag_of(8, 0))};
          for (auto until = Clock::now() + std::chrono::milliseconds(100); Clock::now() < until;) s.link->progress();
          ::kill(::getpid(), SIGKILL);
        }
        for (auto until = Clock::now() + std::chrono::seconds(20); !exited(s.peer_pid) && Clock::now() < until;)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::vector<std::byte> in(bytes);
        std::vector<std::byte> other(16);
        std::vector<Request> r = {s.link->recv(MemView{in.data(), bytes}, tag_of(8, 0)),
                                  s.link->recv(MemView{other.data(), other.size()}, tag_of(8, 1))};
        child_require(drive(s, r), "the receives ended");
        for (std::size_t i = 0; i < r.size(); ++i) {
          auto& q = r[i];
          child_require(q->failed(), cat("receive ", i, " failed"));
          try {
            q->rethrow_if_failed();
          } catch (const PeerLost& e) {
            child_require(std::string(e.what()).find("rank 1") != std::string::npos, cat("names the peer: ", e.what()));
          }
        }
      },
      1, {0, -SIGKILL});
}

TEST_CASE("conformance: a tag or size mismatch fails and leaves the buffer untouched") {
  for (int variant = 0; variant < 2; ++variant) {
    run_pair([variant](Side& s) {
      std::vector<std::byte> out = pattern(4096, 9);
      if (s.rank == 1) {
        std::vector<Request> r = {s.link->send(ConstMemView{out.data(), out.size()}, tag_of(9, 0))};
        drive(s, r, Millis(2000));  // the peer may close before taking it all
        // Stay until rank 0 has judged the message.
        std::uint8_t done = 0;
        std::vector<Request> a = {s.link->recv(MemView{reinterpret_cast<std::byte*>(&done), 1}, tag_of(9, 9))};
        drive(s, a, Millis(5000));
        return;
      }
      // variant 0: the right size under another tag; 1: the right tag, another size.
      std::vector<std::byte> in(variant == 0 ? 4096 : 4000, std::byte{0x5C});
      std::vector<Request> r = {s.link->recv(MemView{in.data(), in.size()}, variant == 0 ? tag_of(9, 1) : tag_of(9, 0))};
      child_require(drive(s, r), "the receive ended");
      child_require(r[0]->failed(), "the mismatched receive failed");
      try {
        r[0]->rethrow_if_failed();
      } catch (const TagMismatch& e) {
        child_require(std::string(e.what()).find("different operations") != std::string::npos, e.what());
      }
      for (auto b : in) child_require(b == std::byte{0x5C}, "the receiver's buffer is untouched");
      s.link->abort("judged");
    });
  }
}

TEST_CASE("conformance: the tag of a waiting message is read without taking it") {
  // CommImpl::check_arrived reads it while it waits for another peer to
  // connect (a peer that runs another collective never will). tcp, shm and
  // ucx must tell; another transport may say it cannot (nullopt), never a
  // wrong tag.
  const bool must_tell = transport_name() == "tcp" || transport_name() == "shm" || transport_name() == "ucx";
  run_pair([must_tell](Side& s) {
    std::vector<std::byte> out = pattern(4096, 5);
    if (s.rank == 1) {
      std::vector<Request> r = {s.link->send(ConstMemView{out.data(), out.size()}, tag_of(5, 3))};
      child_require(drive(s, r), "the message went");
      std::uint8_t done = 0;
      std::vector<Request> a = {s.link->recv(MemView{reinterpret_cast<std::byte*>(&done), 1}, tag_of(5, 4))};
      drive(s, a, Millis(10000));
      return;
    }
    std::optional<Tag> seen;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!(seen = s.link->waiting_tag()) && must_tell && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (must_tell) child_require(seen.has_value(), "the waiting message's tag was read");
    if (seen) child_require(*seen == tag_of(5, 3), cat("the tag read is the message's: ", describe_tag(*seen)));
    // Reading it took nothing: the message arrives whole, and then none waits.
    std::vector<std::byte> in(4096, std::byte{0});
    std::vector<Request> r = {s.link->recv(MemView{in.data(), in.size()}, tag_of(5, 3))};
    child_require(drive(s, r), "the message arrived after its tag was read");
    require_ok(r);
    child_require(in == out, "the message is intact");
    child_require(!s.link->waiting_tag(), "no message waits once it was received");
    std::uint8_t done = 1;
    std::vector<Request> a = {s.link->send(ConstMemView{reinterpret_cast<std::byte*>(&done), 1}, tag_of(5, 4))};
    child_require(drive(s, a), "the all-done message went");
  });
}

TEST_CASE("conformance: an unanswered receive stays pending without hanging, then completes") {
  run_pair([](Side& s) {
    std::uint64_t value = 0;
    if (s.rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      value = 77;
      std::vector<Request> r = {s.link->send(ConstMemView{reinterpret_cast<std::byte*>(&value), 8}, tag_of(10, 0))};
      child_require(drive(s, r), "sent");
      require_ok(r);
      std::vector<Request> a = {s.link->recv(MemView{reinterpret_cast<std::byte*>(&value), 8}, tag_of(10, 1))};
      child_require(drive(s, a), "acknowledged");
      return;
    }
    std::vector<Request> r = {s.link->recv(MemView{reinterpret_cast<std::byte*>(&value), 8}, tag_of(10, 0))};
    child_require(!drive(s, r, Millis(200)), "the receive did not complete before the send");
    child_require(!r[0]->done() && s.link->busy(), "it is still pending");
    child_require(drive(s, r), "it completed once the send came");
    require_ok(r);
    child_require(value == 77, "the value");
    std::vector<Request> a = {s.link->send(ConstMemView{reinterpret_cast<std::byte*>(&value), 8}, tag_of(10, 1))};
    child_require(drive(s, a), "acknowledgement sent");
  });
}

namespace {

// Polls Link::recv_now until it takes the message or `within` passes.
bool receive_now(Side& s, MemView dst, const std::byte* local, DataType type, ReduceOp op, const Tag& tag,
                 Millis within = Millis(10000)) {
  Deadline deadline = Deadline::after(within);
  while (!s.link->recv_now(dst, local, type, op, tag)) {
    if (deadline.expired()) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

TEST_CASE("conformance: a burst of short messages keeps order, contents and each one's descriptor") {
  // More short messages than a link holds unreceived (UCX's FIFO has 64
  // elements, shm's ring its slots), sizes on both sides of UCX's short
  // limit, the descriptor changing every few messages (over UCX a message
  // like its predecessor travels with the short header and takes the
  // descriptor from it). Whatever send_now refuses goes by send().
  constexpr unsigned kCount = 600;
  auto tag_for = [](unsigned k) {
    return make_tag(k, 0, {std::byte{static_cast<unsigned char>(0x10 + (k / 5) % 3)}});
  };
  run_pair([&](Side& s) {
    const std::size_t limit = s.link->short_message_bytes();
    if (limit == 0) return;  // no short path
    auto size_for = [&](unsigned k) { return std::min<std::size_t>(limit, std::size_t{8} << (k % 6)); };
    if (s.rank == 1) {
      std::vector<Request> requests;
      std::vector<std::vector<std::byte>> kept;
      for (unsigned k = 0; k < kCount; ++k) {
        std::vector<std::byte> payload(size_for(k), std::byte(k & 0xff));
        if (!s.link->send_now(ConstMemView{payload.data(), payload.size()}, tag_for(k))) {
          requests.push_back(s.link->send(ConstMemView{payload.data(), payload.size()}, tag_for(k)));
          kept.push_back(std::move(payload));  // a request reads it until done
        }
      }
      child_require(drive(s, requests, Millis(30000)), "every queued send went");
      require_ok(requests);
      std::uint8_t done = 0;
      std::vector<Request> w = {s.link->recv(MemView{reinterpret_cast<std::byte*>(&done), 1}, tag_of(12, 0))};
      child_require(drive(s, w, Millis(30000)) && done == 1, "rank 0 took them all");
      return;
    }
    for (unsigned k = 0; k < kCount; ++k) {
      std::vector<std::byte> got(size_for(k), std::byte{0xee});
      child_require(receive_now(s, MemView{got.data(), got.size()}, nullptr, DataType::u8, ReduceOp::sum, tag_for(k),
                                Millis(30000)),
                    "message arrived under its own descriptor");
      child_require(std::all_of(got.begin(), got.end(), [&](std::byte b) { return b == std::byte(k & 0xff); }),
                    "its contents are its own");
    }
    // A message under the right step but another descriptor is refused.
    std::uint8_t one = 1;
    std::vector<Request> r = {s.link->send(ConstMemView{reinterpret_cast<std::byte*>(&one), 1}, tag_of(12, 0))};
    child_require(drive(s, r, Millis(30000)), "told rank 1");
    require_ok(r);
  });
}

TEST_CASE("conformance: the short path keeps the order and the checks of requests") {
  run_pair([](Side& s) {
    const std::size_t limit = s.link->short_message_bytes();
    std::uint64_t a = 100 + s.rank, b = 200 + s.rank;
    auto bytes_of = [](std::uint64_t& v) { return reinterpret_cast<std::byte*>(&v); };
    if (limit == 0) {  // no short path: both calls refuse and touch nothing
      std::uint64_t got = 5;
      child_require(!s.link->send_now(ConstMemView{bytes_of(a), 8}, tag_of(11, 0)), "send_now refused");
      child_require(!s.link->recv_now(MemView{bytes_of(got), 8}, nullptr, DataType::u8, ReduceOp::sum, tag_of(11, 0)) &&
                        got == 5,
                    "recv_now refused, the buffer untouched");
      return;
    }
    child_require(limit >= 8, "a short path takes at least 8 bytes");
    std::vector<std::byte> big(limit + 1);
    child_require(!s.link->send_now(ConstMemView{big.data(), big.size()}, tag_of(11, 9)), "past the limit: refused");
    if (s.rank == 1) {
      // A request, then the short path behind it: the short send waits its turn.
      std::vector<Request> r = {s.link->send(ConstMemView{bytes_of(a), 8}, tag_of(11, 0))};
      child_require(!s.link->send_now(ConstMemView{bytes_of(b), 8}, tag_of(11, 1)), "not past a queued send");
      child_require(drive(s, r), "the queued send went");
      require_ok(r);
      child_require(s.link->send_now(ConstMemView{bytes_of(b), 8}, tag_of(11, 1)), "then the short send goes");
      // The third under a tag rank 0 does not expect, taken by recv_now.
      std::uint64_t c = 300;
      child_require(s.link->send_now(ConstMemView{bytes_of(c), 8}, tag_of(11, 5)), "the mismatched one goes");
      std::uint8_t done = 0;
      std::vector<Request> w = {s.link->recv(MemView{reinterpret_cast<std::byte*>(&done), 1}, tag_of(11, 7))};
      drive(s, w, Millis(5000));  // until rank 0 has judged (it aborts)
      return;
    }
    std::uint64_t got = 7;
    child_require(receive_now(s, MemView{bytes_of(got), 8}, nullptr, DataType::u64, ReduceOp::sum, tag_of(11, 0)) &&
                      got == 101,
                  "the queued send arrives first, through recv_now");
    const std::uint64_t local = 1000;
    child_require(receive_now(s, MemView{bytes_of(got), 8}, reinterpret_cast<const std::byte*>(&local), DataType::u64,
                              ReduceOp::sum, tag_of(11, 1)) &&
                      got == 1201,
                  "the short send second, reduced on receive");
    got = 9;
    bool mismatch = false;
    try {
      receive_now(s, MemView{bytes_of(got), 8}, nullptr, DataType::u64, ReduceOp::sum, tag_of(11, 2));
    } catch (const TagMismatch& e) {
      mismatch = std::string(e.what()).find("different operations") != std::string::npos;
    }
    child_require(mismatch, "a mismatched tag throws TagMismatch");
    child_require(got == 9, "and leaves the buffer untouched");
    s.link->abort("judged");
  });
}
