// Launch environments and the choice of address and ports, without a
// network: launch_identity over environments given as maps, Slurm's host
// lists, BRAID_SOCKET_IFNAME's syntax and the interface choice over made-up
// interface lists, BRAID_PORT_RANGE; then two ranks (threads) joining
// through a store of the caller's own (Comm::init(store, ...)) on loopback.
#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "bootstrap/launch_env.hpp"
#include "braid/braid.hpp"
#include "core/interfaces.hpp"
#include "core/socket.hpp"

using namespace braid;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

InterfaceAddress iface(std::string name, const char* ip, bool up = true, bool loopback = false) {
  InterfaceAddress n;
  n.name = std::move(name);
  n.address = resolve(HostPort{ip, 0}, "test").front();
  n.up = up;
  n.loopback = loopback;
  return n;
}

std::string chosen(const std::vector<InterfaceAddress>& list, const char* spec, bool allow_loopback = false) {
  std::optional<InterfaceFilter> f;
  if (spec != nullptr) f = InterfaceFilter::parse(spec);
  auto n = choose_interface(list, f, allow_loopback);
  return n ? n->name : "(none)";
}

}  // namespace

TEST_CASE("launch_identity reads each launcher's variables, in order") {
  CHECK_FALSE(launch_identity(env_of({})));
  CHECK_FALSE(launch_identity(env_of({{"BRAID_WORLD_SIZE", "2"}})));  // PMIx-less, rank-less

  auto braid = launch_identity(env_of({{"BRAID_RANK", "1"}, {"BRAID_WORLD_SIZE", "4"}, {"BRAID_LOCAL_SIZE", "2"},
                                       {"BRAID_STORE_ADDR", "a:1"}, {"RANK", "3"}, {"WORLD_SIZE", "8"}}));
  REQUIRE(braid);
  CHECK(braid->source.starts_with("braid"));
  CHECK(braid->rank == 1);
  CHECK(braid->size == 4);
  CHECK(braid->local_size == 2);
  CHECK(braid->store_addr == "a:1");

  auto torch = launch_identity(env_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
                                       {"TF_CONFIG", "{}"}, {"SLURM_PROCID", "0"}}));
  REQUIRE(torch);
  CHECK(torch->source.starts_with("torchrun"));
  CHECK(torch->rank == 3);
  CHECK(torch->local_rank == 1);
  CHECK(torch->local_size == 2);
  CHECK(torch->store_addr == "10.0.0.1:29500");
  // torchrun's agent holds MASTER_PORT: braid's store goes next to it.
  auto agent = launch_identity(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "::1"},
                                       {"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  CHECK(agent->store_addr == "[::1]:29501");

  auto tf = launch_identity(env_of({{"TF_CONFIG", "{}"}, {"SLURM_PROCID", "0"}}));
  REQUIRE(tf);
  CHECK(tf->tf_config);

  auto slurm = launch_identity(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                                       {"SLURM_JOB_NODELIST", "gpu[007-009,12],login1"},
                                       {"OMPI_COMM_WORLD_RANK", "0"}}));
  REQUIRE(slurm);
  CHECK(slurm->source.starts_with("Slurm"));
  CHECK(slurm->rank == 5);
  CHECK(slurm->local_rank == 1);
  CHECK(slurm->store_addr == "gpu007:29500");
  auto slurm_port = launch_identity(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                                            {"SLURM_JOB_NODELIST", "n1"}, {"MASTER_PORT", "40000"}}));
  CHECK(slurm_port->store_addr == "n1:40000");

  auto ompi = launch_identity(env_of({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                      {"BRAID_STORE_ADDR", "h:7"}, {"PMIX_RANK", "2"}}));
  REQUIRE(ompi);
  CHECK(ompi->source.starts_with("Open MPI"));
  CHECK(ompi->store_addr == "h:7");
  CHECK(ompi->local_size == 4);

  auto pmix = launch_identity(env_of({{"PMIX_RANK", "1"}, {"BRAID_WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"},
                                      {"MASTER_PORT", "9"}}));
  REQUIRE(pmix);
  CHECK(pmix->source.starts_with("PMIx"));
  CHECK(pmix->rank == 1);
  CHECK(pmix->store_addr == "m:9");
}

TEST_CASE("launch_identity refuses incomplete or malformed sources, naming the variable") {
  auto throws_with = [](std::map<std::string, std::string> vars, const std::string& text) {
    CHECK_THROWS_WITH(launch_identity(env_of(std::move(vars))), Catch::Contains(text));
  };
  throws_with({{"BRAID_RANK", "0"}, {"BRAID_WORLD_SIZE", "2"}}, "BRAID_STORE_ADDR is not");
  throws_with({{"BRAID_RANK", "2"}, {"BRAID_WORLD_SIZE", "2"}, {"BRAID_STORE_ADDR", "a:1"}}, "outside [0");
  throws_with({{"RANK", "0"}}, "WORLD_SIZE is not");
  throws_with({{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR is not");
  throws_with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT is not");
  throws_with({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK='x'");
  throws_with({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "SLURM_JOB_NODELIST");
  throws_with({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-"}}, "without ']'");
  throws_with({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "BRAID_STORE_ADDR=host:port");
  throws_with({{"PMIX_RANK", "0"}}, "BRAID_WORLD_SIZE");
}

TEST_CASE("Slurm host lists expand as Slurm writes them") {
  using V = std::vector<std::string>;
  CHECK(expand_nodelist("node1") == V{"node1"});
  CHECK(expand_nodelist("node[01-04,07]") == V{"node01", "node02", "node03", "node04", "node07"});
  CHECK(expand_nodelist("a[8-11],b,c[3]") == V{"a8", "a9", "a10", "a11", "b", "c3"});
  CHECK(expand_nodelist("gpu[098-101]") == V{"gpu098", "gpu099", "gpu100", "gpu101"});
  CHECK(expand_nodelist("r[1-2]n[1-2]") == V{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(expand_nodelist("r[1-2]-n[1-2].lan") == V{"r1-n1.lan", "r1-n2.lan", "r2-n1.lan", "r2-n2.lan"});
  CHECK(expand_nodelist("node[1-100000000]", 3) == V{"node1", "node2", "node3"});
  CHECK(expand_nodelist("n[1-99999999],m", 2).size() == 2);
  for (const char* bad : {"", "n[", "n]", "n[]", "n[3-1]", "n[a-b]", "n[1-]", "n[1234567890]", "a,,b", "n[1,]"})
    CHECK_THROWS_AS(expand_nodelist(bad), InvalidArgument);
}

TEST_CASE("BRAID_SOCKET_IFNAME takes NCCL's syntax") {
  auto f = InterfaceFilter::parse("eth,en");
  CHECK(f.matches("eth0"));
  CHECK(f.matches("enp3s0"));
  CHECK_FALSE(f.matches("wlan0"));
  auto x = InterfaceFilter::parse("^docker,lo");
  CHECK(x.matches("eth0"));
  CHECK_FALSE(x.matches("docker0"));
  CHECK_FALSE(x.matches("lo"));
  auto e = InterfaceFilter::parse("=eth0");
  CHECK(e.matches("eth0"));
  CHECK_FALSE(e.matches("eth01"));
  auto xe = InterfaceFilter::parse("^=eth0");
  CHECK_FALSE(xe.matches("eth0"));
  CHECK(xe.matches("eth01"));
  for (const char* bad : {"", "^", "=", "eth,", ",eth", "a,,b"}) CHECK_THROWS_AS(InterfaceFilter::parse(bad), InvalidArgument);
}

TEST_CASE("The interface choice skips loopback and virtual interfaces unless asked") {
  const std::vector<InterfaceAddress> laptop = {
      iface("lo", "127.0.0.1", true, true), iface("docker0", "172.17.0.1"), iface("virbr0", "192.168.122.1"),
      iface("veth1a2b", "10.9.0.1"), iface("br-5f3e", "172.18.0.1"), iface("tun0", "10.8.0.2"),
      iface("tap0", "10.7.0.2"), iface("eth0", "10.1.0.5", false), iface("wlp2s0", "fd00::5"),
      iface("enp0s31f6", "192.168.1.20")};
  CHECK(chosen(laptop, nullptr) == "enp0s31f6");  // IPv4 first; eth0 is down
  CHECK(chosen(laptop, "wl") == "wlp2s0");
  CHECK(chosen(laptop, "docker") == "docker0");  // asked for
  CHECK(chosen(laptop, "=lo") == "lo");
  CHECK(chosen(laptop, "^en,lo,docker") == "virbr0");  // exclusions only: what is left, in order
  CHECK(chosen(laptop, "=enp0") == "(none)");
  CHECK(chosen(laptop, "eth") == "(none)");  // down
  const std::vector<InterfaceAddress> alone = {iface("lo", "127.0.0.1", true, true), iface("docker0", "172.17.0.1")};
  CHECK(chosen(alone, nullptr) == "(none)");
  CHECK(chosen(alone, nullptr, true) == "lo");
  CHECK(virtual_interface_name("veth0"));
  CHECK_FALSE(virtual_interface_name("enp3s0"));
  CHECK(interface_of(laptop, resolve(HostPort{"192.168.1.20", 0}, "t").front()) == "enp0s31f6");
}

TEST_CASE("BRAID_PORT_RANGE: parsing, and listeners that stay in it") {
  CHECK(PortRange::parse("40000-40050", "R").first == 40000);
  CHECK(PortRange::parse("40000-40050", "R").last == 40050);
  CHECK(PortRange::parse("5000", "R").last == 5000);
  for (const char* bad : {"", "-", "1-", "-5", "0-10", "10-5", "40000-70000", "a-b", "1-2-3", " 1-2"})
    CHECK_THROWS_AS(PortRange::parse(bad, "R"), InvalidArgument);
  // Three listeners in a range of three ports take all of them; a fourth is
  // refused with a message naming the range.
  SockAddr any = resolve(HostPort{"127.0.0.1", 0}, "t").front();
  Fd probe = listen_tcp(any, "probe");
  const std::uint16_t base = local_address(probe.get()).port();
  probe.reset();
  // The kernel gave base; base+1 and base+2 may be in use elsewhere, so the
  // range is checked by what it admits, not by which ports are free.
  const PortRange range{base, base};
  Fd one = listen_tcp(any, range, "first");
  CHECK(local_address(one.get()).port() == base);
  CHECK_THROWS_WITH(listen_tcp(any, range, "second"), Catch::Contains("BRAID_PORT_RANGE=" + std::to_string(base)));
}

namespace {

// The simplest store an embedding framework could hand over: a map in this
// process, shared by the rank threads.
class MapStore : public Store {
 public:
  void set(std::string_view key, std::span<const std::byte> value) override {
    std::lock_guard lock(mutex_);
    data_[std::string(key)] = Bytes(value.begin(), value.end());
    changed_.notify_all();
  }
  Bytes get(std::string_view key, Millis timeout) override {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return data_.contains(std::string(key)); }))
      throw Timeout("MapStore: no key " + std::string(key));
    return data_[std::string(key)];
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    std::lock_guard lock(mutex_);
    Bytes& b = data_[std::string(key)];
    std::int64_t v = b.empty() ? 0 : std::stoll(std::string(reinterpret_cast<const char*>(b.data()), b.size()));
    v += delta;
    std::string text = std::to_string(v);
    b.assign(reinterpret_cast<const std::byte*>(text.data()), reinterpret_cast<const std::byte*>(text.data()) + text.size());
    changed_.notify_all();
    return v;
  }
  bool check(std::span<const std::string> keys) override {
    std::lock_guard lock(mutex_);
    for (const auto& k : keys)
      if (!data_.contains(k)) return false;
    return true;
  }
  void wait(std::span<const std::string> keys, Millis timeout) override {
    std::unique_lock lock(mutex_);
    auto all = [&] {
      for (const auto& k : keys)
        if (!data_.contains(k)) return false;
      return true;
    };
    if (!changed_.wait_for(lock, timeout, all)) throw Timeout("MapStore: keys missing");
  }
  std::size_t keys() {
    std::lock_guard lock(mutex_);
    return data_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> data_;
};

}  // namespace

TEST_CASE("Comm::init with the caller's store: no rank hosts one") {
  auto store = std::make_shared<MapStore>();
  CommOptions o;
  o.timeout = std::chrono::milliseconds(10000);
  std::vector<float> result[2];
  std::string described[2], errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        Comm comm = Comm::init(store, r, 2, o);
        result[r].assign(1000, static_cast<float>(r + 1));
        comm.all_reduce(result[r].data(), result[r].data(), result[r].size(), DataType::f32, ReduceOp::sum);
        described[r] = comm.describe();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
    CHECK(result[r] == std::vector<float>(1000, 3.0f));
    CHECK_THAT(described[r], Catch::Contains("identity from Comm::init with the caller's store"));
  }
  CHECK(store->keys() > 4);  // the communicator id, each rank's claim, address and info
  CHECK_THROWS_AS(Comm::init(std::shared_ptr<Store>(), 0, 1), InvalidArgument);
}
