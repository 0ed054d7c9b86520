// Settings: every malformed, non-finite, out-of-range or empty value is an
// error naming the variable; the small text helpers settings errors use; and
// BRAID_TRANSPORT's ordered list.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/device.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "core/text.hpp"
#include "loopback_fixtures.hpp"
#include "transport/registry.hpp"

using namespace braid;
using namespace braid::test;

TEST_CASE("settings reject malformed values naming the variable") {
  CHECK(parse_duration("30", "X") == std::chrono::seconds(30));
  CHECK(parse_duration("250ms", "X") == std::chrono::milliseconds(250));
  CHECK(parse_duration("2m", "X") == std::chrono::minutes(2));
  CHECK_THROWS_WITH(parse_duration("soon", "BRAID_TIMEOUT"), Catch::Contains("BRAID_TIMEOUT='soon'"));
  CHECK(parse_bytes("4M", "X") == 4u << 20);
  CHECK(parse_bytes("256K", "X") == 256u << 10);
  CHECK_THROWS_WITH(parse_bytes("4Q", "BRAID_SLICE_BYTES"), Catch::Contains("BRAID_SLICE_BYTES='4Q'"));
}

TEST_CASE("an unknown BRAID_* name is matched to the setting it most likely meant") {
  CHECK(closest_setting("BRAID_TRANSPORTS") == "BRAID_TRANSPORT");
  CHECK(closest_setting("BRAID_TIMOUT") == "BRAID_TIMEOUT");
  CHECK(closest_setting("BRAID_SLCIE_BYTES") == "BRAID_SLICE_BYTES");
  CHECK(closest_setting("BRAID_IFNAME") == "BRAID_SOCKET_IFNAME");
  CHECK(closest_setting("BRAID_ALGORITHM") == "BRAID_ALGO");
  CHECK(closest_setting("BRAID_TCP_STREAM") == "BRAID_TCP_STREAMS");
  CHECK(closest_setting("BRAID_LOG") == "BRAID_DEBUG");
  CHECK(closest_setting("BRAID_XYZZY").empty());
  CHECK(closest_setting("TRANSPORT").empty());
  CHECK(edit_distance("BRAID_TIMOUT", "BRAID_TIMEOUT") == 1);
  CHECK(edit_distance("ab", "ba") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("the log: subsystems from the source's folder, BRAID_DEBUG_SUBSYS, a timestamped file with %h and %p") {
  CHECK(log_subsystem_of("../transport/tcp/tcp_link.cpp") == kLogNet);
  CHECK(log_subsystem_of("../transport/shm/shm_link.cpp") == kLogShm);
  CHECK(log_subsystem_of("/home/me/comm/braid/transport/cuda_ipc/x.cpp") == kLogP2p);  // the nearest folder wins
  CHECK(log_subsystem_of("../src/bootstrap/tcp_store_server.cpp") == kLogBootstrap);
  CHECK(log_subsystem_of("../comm/comm_impl.cpp") == kLogInit);
  CHECK(log_subsystem_of("../comm/comm_progress.cpp") == kLogColl);
  CHECK(log_subsystem_of("../src/core/settings.cpp") == kLogEnv);
  CHECK(log_subsystem_of("../topology/plan.cpp") == kLogTuning);
  CHECK(parse_log_subsystems("INIT,net") == (kLogInit | kLogNet));
  CHECK(parse_log_subsystems("ALL") == kLogAll);
  CHECK(parse_log_subsystems("^SHM,COLL") == (kLogAll & ~(kLogShm | kLogColl)));
  CHECK_THROWS_WITH(parse_log_subsystems("INIT,GPU"), Catch::Contains("'GPU' is not a subsystem"));

  const std::string pattern = "/tmp/braid-log-test.%h.%p";
  const std::string path = "/tmp/braid-log-test." + std::string(hostname()) + "." + std::to_string(getpid());
  std::remove(path.c_str());
  configure_log(LogLevel::info, kLogNet, pattern);
  log_info("shown only under INIT: ", 1);  // this file's subsystem
  log_warn("a warning shows whatever the subsystems: ", 2);
  configure_log(LogLevel::info, kLogInit, pattern);
  log_info("now shown: ", 3);
  configure_log(LogLevel::warn, kLogAll, "");  // back to stderr
  log_warn("this goes to stderr");
  std::ifstream file(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  REQUIRE(lines.size() == 2);
  const std::regex line_form(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} \[.+:\d+\] INIT (WARN|INFO) .*)");
  CHECK(std::regex_match(lines[0], line_form));
  CHECK(lines[0].ends_with("INIT WARN a warning shows whatever the subsystems: 2"));
  CHECK(lines[1].ends_with("INIT INFO now shown: 3"));
  std::remove(path.c_str());
}

TEST_CASE("durations that are not finite, negative or overflow are refused") {
  for (const char* text : {"nan", "NaN", "inf", "-inf", "infinity", "nanms", "-1", "1e300", "2e9s", "9e18ms"})
    CHECK_THROWS_WITH(parse_duration(text, "BRAID_TIMEOUT"), Catch::Contains(std::string("BRAID_TIMEOUT='") + text));
  // The bound is on the duration, not on the number: hours and minutes past
  // the clock's range wrapped around before (2562048h timed out at once).
  for (const char* text : {"2562048h", "471416793h", "20000000m", "300000000h"})
    CHECK_THROWS_WITH(parse_duration(text, "BRAID_TIMEOUT"),
                      Catch::Contains(std::string("BRAID_TIMEOUT='") + text + "' is longer than 1e9 seconds"));
  CHECK(parse_duration("270000h", "X") == std::chrono::hours(270000));  // 30.8 years: taken
  CHECK(parse_duration("1e9", "X") == std::chrono::seconds(1'000'000'000));
  EnvVar t("BRAID_TIMEOUT", "nan");
  CHECK_THROWS_WITH(Settings::from_env(), Catch::Contains("BRAID_TIMEOUT='nan'"));
}

TEST_CASE("byte sizes that overflow are refused") {
  CHECK_THROWS_WITH(parse_bytes("99999999999999999999", "BRAID_SLICE_BYTES"), Catch::Contains("BRAID_SLICE_BYTES"));
  CHECK_THROWS_WITH(parse_bytes("2000G", "BRAID_SLICE_BYTES"), Catch::Contains("BRAID_SLICE_BYTES='2000G'"));
}

TEST_CASE("the world size is bounded by what one store serves") {
  {
    EnvVar w("BRAID_WORLD_SIZE", "65536");
    CHECK(Settings::from_env().world_size == 65536);
  }
  EnvVar w("BRAID_WORLD_SIZE", "65537");
  CHECK_THROWS_WITH(Settings::from_env(), Catch::Contains("BRAID_WORLD_SIZE='65537'") &&
                                              Catch::Contains("[1, 65536]") && Catch::Contains("store"));
}

TEST_CASE("an empty authentication key is an error, not 'no authentication'") {
  {
    EnvVar k("BRAID_AUTH_KEY", "");
    CHECK_THROWS_WITH(Settings::from_env(), Catch::Contains("BRAID_AUTH_KEY is set but empty"));
  }
  EnvVar f("BRAID_AUTH_KEY_FILE", "");
  CHECK_THROWS_WITH(Settings::from_env(), Catch::Contains("BRAID_AUTH_KEY_FILE is set but empty"));
}

TEST_CASE("a socket buffer too small to be useful is refused") {
  {
    EnvVar b("BRAID_TCP_BUFFER", "4K");
    CHECK_THROWS_WITH(Settings::from_env(), Catch::Contains("BRAID_TCP_BUFFER='4K'") && Catch::Contains("64"));
  }
  {
    EnvVar b("BRAID_TCP_BUFFER", "64K");
    CHECK(Settings::from_env().tcp_buffer_bytes == std::optional<std::size_t>(64u << 10));
  }
  EnvVar b("BRAID_TCP_BUFFER", "0");
  CHECK(Settings::from_env().tcp_buffer_bytes == std::optional<std::size_t>(0));
}

TEST_CASE("shm's mapped messages and stores: on, off, the ways, and bad values") {
  CHECK(Settings::from_env().shm_mapped);
  CHECK(Settings::from_env().shm_stores == Settings::ShmStores::automatic);
  {
    EnvVar m("BRAID_SHM_MAPPED", "off"), s("BRAID_SHM_STORES", "Streaming");
    CHECK_FALSE(Settings::from_env().shm_mapped);
    CHECK(Settings::from_env().shm_stores == Settings::ShmStores::streaming);
  }
  {
    EnvVar m("BRAID_SHM_MAPPED", "1"), s("BRAID_SHM_STORES", "plain");
    CHECK(Settings::from_env().shm_mapped);
    CHECK(Settings::from_env().shm_stores == Settings::ShmStores::plain);
  }
  {
    EnvVar m("BRAID_SHM_MAPPED", "sometimes");
    CHECK_THROWS_WITH(Settings::from_env(), Catch::Contains("BRAID_SHM_MAPPED='sometimes' is not 0 or 1"));
  }
  EnvVar s("BRAID_SHM_STORES", "fast");
  CHECK_THROWS_WITH(Settings::from_env(), Catch::Contains("BRAID_SHM_STORES='fast'"));
}

TEST_CASE("the flow window: auto, a size, 0, and too small") {
  CHECK_FALSE(Settings::from_env().flow_window.has_value());
  {
    EnvVar w("BRAID_FLOW_WINDOW", "auto");
    CHECK_FALSE(Settings::from_env().flow_window.has_value());
  }
  {
    EnvVar w("BRAID_FLOW_WINDOW", "256K");
    CHECK(Settings::from_env().flow_window == std::optional<std::size_t>(256u << 10));
  }
  {
    EnvVar w("BRAID_FLOW_WINDOW", "0");
    CHECK(Settings::from_env().flow_window == std::optional<std::size_t>(0));
  }
  EnvVar w("BRAID_FLOW_WINDOW", "1K");
  CHECK_THROWS_WITH(Settings::from_env(), Catch::Contains("BRAID_FLOW_WINDOW='1K'") && Catch::Contains("4K"));
}

TEST_CASE("the job id comes from braid, then torchrun, then Slurm, and is bounded") {
  EnvVar slurm("SLURM_JOB_ID", "4242");
  CHECK(Settings::from_env().job_id == "4242");
  {
    EnvVar torch("TORCHELASTIC_RUN_ID", "run-7");
    CHECK(Settings::from_env().job_id == "run-7");
    EnvVar braid_id("BRAID_JOB_ID", "mine");
    CHECK(Settings::from_env().job_id == "mine");
  }
  EnvVar too_long("BRAID_JOB_ID", std::string(129, 'j'));
  CHECK_THROWS_WITH(Settings::from_env(), Catch::Contains("BRAID_JOB_ID is 129 bytes"));
}

TEST_CASE("split keeps every piece, empty ones too") {
  CHECK(split("a,b", ',') == std::vector<std::string>{"a", "b"});
  CHECK(split("a,,b,", ',') == std::vector<std::string>{"a", "", "b", ""});
  CHECK(split("", ',') == std::vector<std::string>{""});
  CHECK(split("host:1", ',') == std::vector<std::string>{"host:1"});
}

TEST_CASE("rank lists are abbreviated") {
  auto ranks = [](std::vector<int> v) { return describe_ranks(v); };
  CHECK(ranks({}) == "no rank");
  CHECK(ranks({3}) == "rank 3");
  CHECK(ranks({1, 3}) == "ranks 1, 3");
  CHECK(ranks({1, 2}) == "ranks 1, 2");
  CHECK(ranks({1, 4, 5, 6, 7, 9}) == "ranks 1, 4-7, 9 (6 ranks)");
  std::vector<int> many;
  for (int r = 3; r < 65536; ++r) many.push_back(r);
  CHECK(ranks(many) == "ranks 3-65535 (65533 ranks)");
  std::vector<int> evens;
  for (int r = 0; r < 200; r += 2) evens.push_back(r);
  std::string text = ranks(evens);
  CHECK(text == "ranks 0, 2, 4, 6, 8, 10, 12, 14 and 92 more (100 ranks)");
  CHECK(text.size() < 100);
}

TEST_CASE("a rate limit passes a burst, then one message per interval with the count left out") {
  LogRateLimit limit(3, std::chrono::milliseconds(200));
  int passed = 0;
  std::string last;
  for (int i = 0; i < 1000; ++i)
    if (auto note = limit.pass()) {
      ++passed;
      last = *note;
    }
  CHECK(passed == 3);
  CHECK_THAT(last, Catch::Contains("more like this are left out"));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  auto note = limit.pass();
  REQUIRE(note);
  CHECK(*note == " (997 similar messages left out)");
  CHECK_FALSE(limit.pass());
}

TEST_CASE("BRAID_TRANSPORT is an ordered list of transports this braid has") {
  auto names = [](std::string_view setting) {
    std::string out;
    for (const TransportKind* k : transport_order(setting)) out += std::string(out.empty() ? "" : ",") + std::string(k->name);
    return out;
  };
  // cuda_ipc, where CUDA is compiled in, leads the default order (it links
  // only ranks that both have a GPU); ucx, where UCX is, is behind shm (it
  // links only hosts with RDMA unless named).
  const bool ucx = std::any_of(compiled_transports().begin(), compiled_transports().end(),
                               [](const TransportKind& k) { return k.name == "ucx"; });
  CHECK(names("") == cat(device::compiled() ? "cuda_ipc," : "", ucx ? "shm,ucx,tcp" : "shm,tcp"));
  CHECK(names("tcp,shm") == "tcp,shm");
  CHECK(names("tcp") == "tcp");
  CHECK(names(" tcp ") == "tcp");
  CHECK_THROWS_WITH(transport_order("carrier-pigeon"),
                    Catch::Contains("BRAID_TRANSPORT='carrier-pigeon'") &&
                        Catch::Contains(cat("it has: ", device::compiled() ? "cuda_ipc, " : "", "shm, ",
                                            ucx ? "ucx, " : "", "tcp")));
  CHECK_THROWS_WITH(transport_order("tcp,tcp"), Catch::Contains("names 'tcp' twice"));
  CHECK_THROWS_WITH(transport_order("tcp,"), Catch::Contains("empty entry"));
  RankInfo a{.rank = 0, .hostname = "a", .host_id = 1, .pid = 10};
  RankInfo b{.rank = 1, .hostname = "b", .host_id = 2, .pid = 11};
  auto order = transport_order("tcp");
  CHECK(transport_between(order, a, b, "tcp").name == "tcp");
  // Shared memory reaches ranks of one host only; the default order falls
  // back to tcp across hosts, and shm alone names the pair and the rule.
  RankInfo a2{.rank = 2, .hostname = "a", .host_id = 1, .pid = 12};
  CHECK(transport_between(transport_order(""), a, a2, "").name == "shm");
  CHECK(transport_between(transport_order(""), a, b, "").name == "tcp");
  CHECK_THROWS_WITH(transport_between(transport_order("shm"), a, b, "shm"),
                    Catch::Contains("reaches rank 1 (b) from rank 0 (a)") && Catch::Contains("shm needs both ranks on one host"));
  if (device::compiled()) {
    // CUDA IPC between ranks of one host that both have a GPU; shm when
    // either has none, tcp across hosts whatever they have.
    RankInfo g1 = a, g2 = a2, gb = b;
    g1.gpus = g2.gpus = gb.gpus = 1;
    const auto gpu_first = transport_order("cuda_ipc,shm,tcp");
    CHECK(transport_between(gpu_first, g1, g2, "").name == "cuda_ipc");
    CHECK(transport_between(gpu_first, g1, a2, "").name == "shm");
    CHECK(transport_between(gpu_first, g1, gb, "").name == "tcp");
    CHECK(transport_between(transport_order(""), g1, g2, "").name == "cuda_ipc");
    CHECK(transport_between(transport_order(""), g1, a2, "").name == "shm");
    CHECK(transport_order("cuda_ipc").front()->device_memory);
    CHECK_THROWS_WITH(transport_between(transport_order("cuda_ipc"), a, a2, "cuda_ipc"),
                      Catch::Contains("cuda_ipc needs both ranks on one host, each with a CUDA device"));
  }
  CHECK_FALSE(transport_order("shm").front()->device_memory);
  if (ucx) {
    // By default UCX links two hosts only when both see an RDMA device;
    // named, it links any pair, on one host too.
    RankInfo ra = a, rb = b;
    ra.rdma = rb.rdma = true;
    CHECK(transport_between(transport_order(""), ra, rb, "").name == "ucx");
    CHECK(transport_between(transport_order(""), ra, b, "").name == "tcp");
    CHECK(transport_between(transport_order(""), ra, a2, "").name == "shm");
    CHECK(transport_between(transport_order("ucx"), a, b, "ucx").name == "ucx");
    CHECK(transport_between(transport_order("ucx,tcp"), a, a2, "ucx,tcp").name == "ucx");
    CHECK_FALSE(transport_order("ucx").front()->device_memory);
  } else {
    CHECK_THROWS_WITH(transport_order("ucx"), Catch::Contains("UCX was not found when braid was built"));
  }
}

TEST_CASE("BRAID_HOST_ID names a simulated host; the kernel stays the machine's, and both travel") {
  const RankInfo real = RankInfo::local(0);
  CHECK_FALSE(real.host_id_from_env);
  CHECK(real.host_id == RankInfo::local(1).host_id);  // from the boot id and host name: the same for every rank here
  CHECK(real.kernel_id == RankInfo::local(1).kernel_id);
  EnvVar a("BRAID_HOST_ID", "laptop-a");
  const RankInfo on_a = RankInfo::local(0);
  CHECK(on_a.host_id_from_env);
  CHECK(on_a.kernel_id == real.kernel_id);
  CHECK(on_a.host_id != real.host_id);
  {
    EnvVar b("BRAID_HOST_ID", "laptop-b");
    const RankInfo on_b = RankInfo::local(1);
    CHECK(on_b.host_id != on_a.host_id);
    // Another simulated host: tcp, not shm, by the default order.
    CHECK(transport_between(transport_order(""), on_a, on_b, "").name == "tcp");
  }
  RankInfo with_rdma = on_a;
  with_rdma.rdma = true;
  CHECK(RankInfo::decode(with_rdma.encode()).rdma);
  const RankInfo back = RankInfo::decode(on_a.encode());
  CHECK(back.host_id == on_a.host_id);
  CHECK(back.kernel_id == on_a.kernel_id);
  CHECK(back.host_id_from_env);
  CHECK(back.pid == on_a.pid);
  RankInfo with_gpus = on_a;
  with_gpus.gpus = 8;
  CHECK(RankInfo::decode(with_gpus.encode()).gpus == 8);
  RankInfo with_cache = on_a;
  with_cache.cache_kib = 2048;
  CHECK(RankInfo::decode(with_cache.encode()).cache_kib == 2048);
  with_cache.link_mbps = 2500;
  CHECK(RankInfo::decode(with_cache.encode()).link_mbps == 2500);
}
