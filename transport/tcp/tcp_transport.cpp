#include "transport/tcp/tcp_transport.hpp"

#include <algorithm>

#include "core/log.hpp"
#include "core/text.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/tcp_link.hpp"

namespace braid {
namespace {

// How long an accepted connection may take to present its Hello: long enough
// for a loaded machine, short enough that a silent stranger cannot stall us.
constexpr Millis kHelloWait{5000};

Deadline min_deadline(Deadline a, Millis b) { return Deadline(std::min(a.at(), Clock::now() + b)); }

}  // namespace

SockAddr parse_tcp_address(std::span<const std::byte> bytes) {
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto addrs = resolve(parse_host_port(text, "peer TCP address"), "peer TCP address");
  return addrs.front();
}

TcpTransport::TcpTransport(TcpOptions options) : options_(std::move(options)) {
  SockAddr bind_to = options_.listen_address;
  bind_to.set_port(0);
  listener_ = listen_tcp(bind_to, cat("rank ", options_.rank, ": TCP transport listener"));
  listen_address_ = braid::local_address(listener_.get());
}

std::vector<std::byte> TcpTransport::local_address() const {
  std::string text = listen_address_.to_string();
  auto* p = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(p, p + text.size());
}

std::unique_ptr<Link> TcpTransport::connect(const RankInfo& peer, std::span<const std::byte> peer_address,
                                            Deadline deadline) {
  PeerRef ref{&peer, peer_address};
  auto links = connect_all(std::span(&ref, 1), deadline);
  return std::move(links.front());
}

std::vector<std::unique_ptr<Link>> TcpTransport::connect_all(std::span<const PeerRef> peers, Deadline deadline) {
  std::vector<std::unique_ptr<Link>> links(peers.size());
  std::vector<std::size_t> order(peers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return peers[a].info->rank < peers[b].info->rank; });
  for (std::size_t i : order)
    if (peers[i].info->rank < options_.rank) links[i] = make_link(*peers[i].info, dial(peers[i], deadline));
  for (std::size_t i : order)
    if (peers[i].info->rank > options_.rank)
      links[i] = make_link(*peers[i].info, accept_from(peers[i].info->rank, deadline));
  return links;
}

std::unique_ptr<Link> TcpTransport::make_link(const RankInfo& peer, std::vector<Fd> sockets) {
  SockAddr remote = peer_address(sockets.front().get());
  for (auto& fd : sockets) {
    set_nonblocking(fd.get(), true);
    set_nodelay(fd.get());
    set_buffer_sizes(fd.get(), options_.buffer_bytes);
    set_liveness(fd.get(), options_.timeout);
  }
  std::string name = cat("rank ", peer.rank, " (", peer.hostname, ", ", remote.to_string(), ")");
  log_info("connected to ", name, " over ", sockets.size(), " TCP stream(s)");
  return std::make_unique<TcpLink>(options_.rank, peer.rank, std::move(name), std::move(sockets));
}

std::vector<Fd> TcpTransport::dial(const PeerRef& peer, Deadline deadline) {
  int rank = peer.info->rank;
  SockAddr addr = parse_tcp_address(peer.address);
  std::string what = cat("rank ", options_.rank, ": connecting to rank ", rank, " (", peer.info->hostname, ", ",
                         addr.to_string(), ")");
  std::vector<Fd> sockets;
  for (int stream = 0; stream < options_.streams; ++stream) {
    Fd fd = connect_tcp({addr}, deadline, what);
    Hello hello;
    hello.stream = static_cast<std::uint16_t>(stream);
    hello.streams = static_cast<std::uint16_t>(options_.streams);
    hello.comm_id = options_.comm_id;
    hello.from_rank = static_cast<std::uint32_t>(options_.rank);
    hello.to_rank = static_cast<std::uint32_t>(rank);
    hello.world_size = static_cast<std::uint32_t>(options_.world_size);
    auto bytes = encode_hello(hello);
    send_all(fd.get(), bytes.data(), bytes.size(), deadline, what);
    std::array<std::byte, kHelloReplyBytes> reply;
    recv_all(fd.get(), reply.data(), reply.size(), deadline, what);
    HelloStatus status = decode_reply(reply);
    if (status != HelloStatus::accepted) {
      log_warn(what, ": refused: ", describe(status));
      throw ProtocolMismatch(cat(what, ": the peer refused the connection: ", describe(status)));
    }
    sockets.push_back(std::move(fd));
  }
  return sockets;
}

bool TcpTransport::accept_one(Deadline deadline) {
  auto conn = accept_tcp(listener_.get(), deadline);
  if (!conn) return false;
  Fd fd = std::move(*conn);
  SockAddr from = peer_address(fd.get());
  std::array<std::byte, kHelloBytes> bytes;
  try {
    recv_all(fd.get(), bytes.data(), bytes.size(), min_deadline(deadline, kHelloWait),
             cat("rank ", options_.rank, ": reading the hello of a connection from ", from.to_string()));
    Hello hello = decode_hello(bytes);
    HelloStatus status = check_hello(hello, options_.comm_id, options_.rank, options_.world_size, options_.streams);
    auto reply = encode_reply(status);
    send_all(fd.get(), reply.data(), reply.size(), min_deadline(deadline, kHelloWait),
             cat("rank ", options_.rank, ": answering ", from.to_string()));
    if (status != HelloStatus::accepted) {
      log_warn("rank ", options_.rank, ": refused a connection from ", from.to_string(), " claiming rank ",
               hello.from_rank, ": ", describe(status));
      return true;
    }
    accepted_[{static_cast<int>(hello.from_rank), hello.stream}] = std::move(fd);
  } catch (const Error& e) {
    log_warn("rank ", options_.rank, ": refused a connection from ", from.to_string(), ": ", e.what());
  }
  return true;
}

std::vector<Fd> TcpTransport::accept_from(int peer, Deadline deadline) {
  std::vector<Fd> sockets;
  for (int stream = 0; stream < options_.streams; ++stream) {
    auto key = std::make_pair(peer, stream);
    while (accepted_.find(key) == accepted_.end()) {
      if (!accept_one(deadline))
        throw Timeout(cat("rank ", options_.rank, ": rank ", peer, " did not connect to ", listen_address_.to_string(),
                          " within the timeout (did it start, and can it reach this address?)"));
    }
    sockets.push_back(std::move(accepted_[key]));
    accepted_.erase(key);
  }
  return sockets;
}

}  // namespace braid
