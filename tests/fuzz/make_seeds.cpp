// fuzz_seeds DIR: writes the seed corpus of every fuzz target into
// DIR/<target>/, a few valid inputs made by braid's own encoders (and, for
// fuzz_tcp_link, by a TcpLink that sends), so the fuzzer starts from inputs
// that get past the first checks. tests/fuzz/corpus/ holds its output;
// scripts/fuzz.sh also adds a fresh run's output to every fuzzing run, so a
// changed wire format is seeded even before the committed files are redone:
//
//   build-fuzz/tests/fuzz/fuzz_seeds tests/fuzz/corpus
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bootstrap/store_protocol.hpp"
#include "core/rank_info.hpp"
#include "topology/topo_file.hpp"
#include "core/socket.hpp"
#include "core/text.hpp"
#include "core/wire.hpp"
#include "link_script.hpp"
#include "comm/rendezvous.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/tcp_link.hpp"

using namespace braid;
namespace fs = std::filesystem;
namespace sp = braid::store_protocol;

namespace {

using Bytes = std::vector<std::byte>;

class SeedWriter {
 public:
  explicit SeedWriter(fs::path root) : root_(std::move(root)) {}

  void add(const std::string& target, const std::string& name, std::span<const std::byte> bytes) {
    fs::create_directories(root_ / target);
    std::ofstream out(root_ / target / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw SystemError(cat("cannot write ", (root_ / target / name).string()));
    ++count_;
  }
  int count() const { return count_; }

 private:
  fs::path root_;
  int count_ = 0;
};

Bytes text_bytes(std::string_view s) {
  auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

CommId sample_comm_id() {
  CommId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<std::byte>(0xa0 + i);
  return id;
}

void handshake_seeds(SeedWriter& w) {
  Hello h;
  h.stream = 1;
  h.streams = 2;
  h.comm_id = sample_comm_id();
  h.from_rank = 3;
  h.to_rank = 1;
  h.world_size = 4;
  w.add("handshake", "hello", encode_hello(h));
  h.auth = true;
  w.add("handshake", "hello-auth", encode_hello(h));
  h.version = 1;
  w.add("handshake", "hello-v1", encode_hello(h));
  w.add("handshake", "reply-accepted", encode_reply(HelloStatus::accepted));
  w.add("handshake", "reply-challenge", encode_reply(HelloStatus::challenge));
  w.add("handshake", "reply-auth-failed", encode_reply(HelloStatus::auth_failed));
  AuthProof p;
  for (std::size_t i = 0; i < p.client_nonce.size(); ++i) p.client_nonce[i] = static_cast<std::byte>(i);
  for (std::size_t i = 0; i < p.proof.size(); ++i) p.proof[i] = static_cast<std::byte>(0xff - i);
  w.add("handshake", "auth-proof", encode_auth_proof(p));
}

void store_seeds(SeedWriter& w) {
  using sp::Op;
  using sp::Reply;
  using sp::Request;
  using sp::Status;
  Bytes value = text_bytes("rank 1 lives at 10.0.0.2:40123");
  Request hello{.op = Op::hello};
  Request hello_auth{.op = Op::hello, .auth = true};
  Request auth{.op = Op::auth};
  for (std::size_t i = 0; i < auth.nonce.size(); ++i) auth.nonce[i] = static_cast<std::byte>(i);
  Bytes requests = concat({
      sp::encode(hello),
      sp::encode(Request{.op = Op::set, .keys = {"braid/rank/1"}, .value = value}),
      sp::encode(Request{.op = Op::get, .keys = {"braid/comm_id"}, .timeout = Millis(30000)}),
      sp::encode(Request{.op = Op::add, .keys = {"braid/barrier/0"}, .delta = -1}),
      sp::encode(Request{.op = Op::check, .keys = {"a", "bb", ""}}),
      sp::encode(Request{.op = Op::wait, .keys = {"braid/rank/0", "braid/rank/2"}, .timeout = Millis(5)}),
      sp::encode(auth),
  });
  w.add("store_protocol", "requests", requests);
  w.add("store_protocol", "request-set", sp::encode(Request{.op = Op::set, .keys = {"k"}, .value = value}));
  Reply challenge{.op = Op::hello, .challenge = true};
  for (std::size_t i = 0; i < challenge.nonce.size(); ++i) challenge.nonce[i] = static_cast<std::byte>(0x40 + i);
  Bytes replies = concat({
      sp::encode(challenge),
      sp::encode(Reply{.op = Op::auth}),
      sp::encode(Reply{.op = Op::set}),
      sp::encode(Reply{.op = Op::get, .value = value}),
      sp::encode(Reply{.op = Op::add, .number = 41}),
      sp::encode(Reply{.op = Op::check, .all_present = true}),
      sp::encode(Reply{.op = Op::wait, .status = Status::timeout, .missing = {"braid/rank/2"}}),
      sp::encode(Reply{.op = Op::get, .status = Status::invalid_argument, .message = "key too long"}),
  });
  w.add("store_protocol", "replies", replies);
  w.add("store_protocol", "reply-auth-failed",
        sp::encode(Reply{.op = Op::auth, .status = Status::auth_failed, .message = "wrong key"}));
  w.add("store_protocol", "reply-timeout",
        sp::encode(Reply{.op = Op::get, .status = Status::timeout, .missing = {"braid/comm_id"}}));

  // fuzz_store_handshake: a scene byte (bit 0 server key, bit 1 right proof), then frames.
  auto scene = [](std::uint8_t b) { return Bytes{std::byte{b}}; };
  Bytes set = sp::encode(Request{.op = Op::set, .keys = {"k"}, .value = value});
  w.add("store_handshake", "open", concat({scene(0), sp::encode(hello), set}));
  w.add("store_handshake", "keyed", concat({scene(3), sp::encode(hello_auth), sp::encode(auth), set}));
  w.add("store_handshake", "wrong-proof", concat({scene(1), sp::encode(hello_auth), sp::encode(auth)}));
  w.add("store_handshake", "no-hello", concat({scene(0), set}));
}

void rank_info_seeds(SeedWriter& w) {
  RankInfo info{.rank = 3, .hostname = "node-a.cluster", .host_id = 0x1234567890abcdefull, .pid = 4242};
  w.add("rank_info", "node-a", info.encode());
  w.add("rank_info", "empty-host", RankInfo{.rank = 0}.encode());
}

void topo_file_seeds(SeedWriter& w) {
  TopoFile file;
  for (int r = 0; r < 3; ++r)
    file.ranks.push_back(RankInfo{.rank = r, .hostname = r < 2 ? "node-a" : "node-b",
                                  .host_id = r < 2 ? 0x11u : 0x22u, .kernel_id = r < 2 ? 0x11u : 0x22u,
                                  .pid = 4242 + r, .cpus = {std::uint64_t{1} << r}});
  file.ranks[2].cpus = {0xf0, 0x1};
  file.machines.push_back(HostMachine{0x11, "<topology version=\"2.0\">\n  <object type=\"Machine\"/>\n</topology>\n"});
  file.plan = "ring: 0 1 2\n";
  w.add("topo_file", "two-hosts", text_bytes(format_topo_file(file)));
  file.machines.clear();
  file.plan.clear();
  w.add("topo_file", "no-machine", text_bytes(format_topo_file(file)));
}

void wire_seeds(SeedWriter& w) {
  // fuzz_wire programs: op in the low 3 bits, argument above (wire reads).
  auto step = [](unsigned op, unsigned arg = 0) { return static_cast<std::byte>(op | (arg << 3)); };
  RankInfo info{.rank = 3, .hostname = "node-a", .host_id = 77, .pid = 4242};
  Bytes program = {step(2), step(3), step(2), step(5, 27), step(6), step(7)};  // RankInfo::decode's reads
  w.add("wire", "rank-info", concat({Bytes{static_cast<std::byte>(program.size())}, program, info.encode()}));
  Bytes reads = {step(0), step(1), step(4, 5), step(4, 31), step(6), step(7)};
  Bytes data(16);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 17);
  w.add("wire", "mixed", concat({Bytes{static_cast<std::byte>(reads.size())}, reads, data}));
}

void unique_id_seeds(SeedWriter& w) {
  auto v4 = encode_unique_id(UniqueIdContents{sample_comm_id(), "10.0.0.1:29500"});
  w.add("unique_id", "ipv4", v4);
  w.add("unique_id", "ipv6", encode_unique_id(UniqueIdContents{sample_comm_id(), "[fe80::1]:40123"}));
  w.add("unique_id", "hex", text_bytes(to_hex(v4)));
}

void tf_config_seeds(SeedWriter& w) {
  w.add("tf_config", "chief-workers",
        text_bytes(R"({"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]}, )"
                   R"("task": {"type": "worker", "index": 1}})"));
  w.add("tf_config", "workers-ps-launcher",
        text_bytes(R"({"cluster": {"worker": ["10.0.0.1:5000", "[fe80::1]:5000"], "ps": ["ps0:1"], )"
                   R"("evaluator": ["e:1"]}, "task": {"type": "ps", "index": "0", "trial": "1"}, )"
                   R"("environment": "cloud", "rpc_layer": "grpc"})"));
  w.add("tf_config", "escapes", text_bytes(R"({"cluster": {"worker": ["h\u00e9\/x:1", "\ud83d\ude00:2"]}, )"
                                           R"("task": {"type": "worker", "index": 0.5e1, "x": [true, false, null]}})"));
}

// What a TcpLink over `sockets` sockets sends for `messages` (each a tag and a
// size, its payload a counting pattern), and then, if `abort_reason` is set,
// for abort(): the bytes that arrive on each socket.
std::array<Bytes, 2> link_bytes(int sockets, const std::vector<fuzz::ScriptedRecv>& messages,
                                std::string_view abort_reason = {}) {
  std::vector<Fd> ends;
  std::vector<Fd> readers;
  for (int i = 0; i < sockets; ++i) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
      throw SystemError(cat("socketpair: ", errno_text(errno)));
    ends.emplace_back(sv[0]);
    readers.emplace_back(sv[1]);
  }
  std::array<Bytes, 2> got;
  auto drain = [&] {
    for (std::size_t i = 0; i < readers.size(); ++i) {
      std::byte buf[65536];
      ssize_t n;
      while ((n = ::recv(readers[i].get(), buf, sizeof buf, MSG_DONTWAIT)) > 0) got[i].insert(got[i].end(), buf, buf + n);
    }
  };
  TcpLink sender(1, 0, "seed receiver", std::move(ends));
  std::vector<Bytes> payloads;
  std::vector<Request> sends;
  for (const auto& m : messages) {
    Bytes& p = payloads.emplace_back(m.bytes);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::byte>(i % 251);
    sends.push_back(sender.send(ConstMemView{p.data(), p.size()}, fuzz::tag_of(m)));
  }
  for (const auto& s : sends) {
    while (!s->done()) {
      sender.progress();
      drain();
    }
    s->rethrow_if_failed();
  }
  if (!abort_reason.empty()) sender.abort(abort_reason);
  drain();
  return got;
}

fuzz::ScriptedRecv recv_of(std::uint32_t bytes, std::uint32_t sequence, std::uint32_t step) {
  fuzz::ScriptedRecv r;
  r.bytes = bytes;
  r.tag_id = (std::uint64_t{sequence} << 32) | step;
  for (std::size_t i = 0; i < r.tag_context.size(); ++i) r.tag_context[i] = static_cast<std::byte>(sequence + i);
  return r;
}

void tcp_link_seeds(SeedWriter& w) {
  auto add = [&](const std::string& name, bool two, std::vector<fuzz::ScriptedRecv> recvs,
                 std::array<Bytes, 2> sent, std::size_t chunk = 0) {
    fuzz::LinkScript s{.two_sockets = two, .chunk = chunk, .recvs = std::move(recvs), .sent = std::move(sent)};
    w.add("tcp_link", name, fuzz::encode_link_script(s));
  };
  auto small = recv_of(64, 7, 3);
  add("recv", false, {small}, link_bytes(1, {small}));
  auto empty = recv_of(0, 7, 4);
  add("recv-empty", false, {empty}, link_bytes(1, {empty}));

  auto reduce = recv_of(256, 9, 0);
  reduce.reduce = true;
  reduce.in_place = true;
  reduce.type = DataType::f32;
  add("recv-reduce-f32", false, {reduce}, link_bytes(1, {reduce}));
  auto reduce_i8 = recv_of(33, 9, 1);
  reduce_i8.reduce = true;
  reduce_i8.type = DataType::i8;
  reduce_i8.op = ReduceOp::max;
  add("recv-reduce-i8", false, {reduce_i8}, link_bytes(1, {reduce_i8}));

  std::vector<fuzz::ScriptedRecv> three = {recv_of(16, 11, 0), recv_of(1000, 11, 1), recv_of(8, 11, 2)};
  add("three", false, three, link_bytes(1, three));
  add("three-two-sockets", true, three, link_bytes(2, three));

  // The peer runs another operation: a tag and a size the receive does not expect.
  add("mismatch", false, {recv_of(64, 12, 0)}, link_bytes(1, {recv_of(48, 13, 0)}));
  // The peer gave up and says why.
  add("abort-notice", false, {small}, link_bytes(1, {}, "rank 1: BRAID_TIMEOUT passed in all_reduce"));
  add("abort-after-one", false, {small, recv_of(64, 7, 5)},
      link_bytes(1, {small}, "rank 1: aborted by the user"));

  // The same, arriving a few bytes at a time.
  add("recv-reduce-i8-chunked", false, {reduce_i8}, link_bytes(1, {reduce_i8}), 3);
  add("three-chunked", false, three, link_bytes(1, three), 10);
  add("abort-notice-chunked", false, {small}, link_bytes(1, {}, "rank 1: BRAID_TIMEOUT passed in all_reduce"), 7);

  // A message large enough to be striped over both sockets, cut short: each
  // socket carries its part's header and the start of its payload.
  auto striped = recv_of(TcpLink::kStripeMinBytes, 14, 0);
  auto sent = link_bytes(2, {striped});
  for (auto& s : sent) s.resize(std::min<std::size_t>(s.size(), 96));
  add("striped-cut", true, {striped}, sent);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR   (writes DIR/<target>/<seed>)\n", argv[0]);
    return 2;
  }
  try {
    SeedWriter w(argv[1]);
    handshake_seeds(w);
    store_seeds(w);
    rank_info_seeds(w);
    wire_seeds(w);
    unique_id_seeds(w);
    tf_config_seeds(w);
    tcp_link_seeds(w);
    topo_file_seeds(w);
    std::printf("fuzz_seeds: wrote %d seeds under %s\n", w.count(), argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
