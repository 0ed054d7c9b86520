// TensorFlow's TF_CONFIG (braid::ClusterSpec) and the JSON reader under it:
// good cluster specs and their rank order, every kind of bad one with a
// message naming the problem, the reader's edge cases, and Comm::from_env
// taking a 1-task TF_CONFIG. tests/multiprocess/tf_config_launch.py starts
// real multi-task clusters.
#include <catch2/catch.hpp>

#include <string>

#include "braid/braid.hpp"
#include "core/json.hpp"
#include "core/socket.hpp"
#include "loopback_fixtures.hpp"

using namespace braid;
using Catch::Contains;

namespace {

std::string tf_config(const std::string& cluster, const std::string& task) {
  return R"({"cluster": )" + cluster + R"(, "task": )" + task + "}";
}

const std::string kChiefAndWorkers = R"({"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222", "w2:2222"]})";

}  // namespace

TEST_CASE("cluster: chief and workers rank the chief first, then the workers by index") {
  ClusterSpec spec = ClusterSpec::parse(tf_config(kChiefAndWorkers, R"({"type": "worker", "index": 1})"));
  REQUIRE(spec.jobs.size() == 2);
  CHECK(spec.jobs[0].name == "chief");
  CHECK(spec.jobs[1].addresses == std::vector<std::string>{"w0:2222", "w1:2222", "w2:2222"});
  CHECK(spec.task_type == "worker");
  CHECK(spec.task_index == 1);
  CHECK(spec.size() == 4);
  CHECK(spec.rank() == 2);
  CHECK(spec.count("chief") == 1);
  CHECK(spec.count("worker") == 3);
  CHECK(spec.count("ps") == 0);
  CHECK(spec.store_address() == "c:2222");
  CHECK(spec.rank_of("chief", 0) == 0);
  CHECK(spec.task_of(0) == std::pair<std::string, int>{"chief", 0});
  CHECK(spec.task_of(3) == std::pair<std::string, int>{"worker", 2});
  CHECK(ClusterSpec::parse(tf_config(kChiefAndWorkers, R"({"type": "chief", "index": 0})")).rank() == 0);
}

TEST_CASE("cluster: without a chief, worker 0 is rank 0 and hosts the store") {
  ClusterSpec spec = ClusterSpec::parse(
      tf_config(R"({"worker": ["10.0.0.1:5000", "10.0.0.2:5000"]})", R"({"type": "worker", "index": 0})"));
  CHECK(spec.size() == 2);
  CHECK(spec.rank() == 0);
  CHECK(spec.store_address() == "10.0.0.1:5000");
  CHECK(spec.task_of(1) == std::pair<std::string, int>{"worker", 1});
}

TEST_CASE("cluster: parameter servers come last, whatever the order of the JSON keys") {
  ClusterSpec spec = ClusterSpec::parse(tf_config(
      R"({"ps": ["p0:1", "p1:1"], "worker": ["w0:1", "w1:1", "w2:1"], "chief": ["c:1"]})", R"({"type": "ps", "index": 1})"));
  REQUIRE(spec.jobs.size() == 3);
  CHECK(spec.jobs[0].name == "chief");
  CHECK(spec.jobs[1].name == "worker");
  CHECK(spec.jobs[2].name == "ps");
  CHECK(spec.size() == 6);
  CHECK(spec.rank() == 5);
  CHECK(spec.rank_of("ps", 0) == 4);
  CHECK(spec.rank_of("worker", 2) == 3);
  CHECK(spec.store_address() == "c:1");
  // rank_of and task_of are inverses over every rank.
  for (int r = 0; r < spec.size(); ++r) {
    auto [type, index] = spec.task_of(r);
    CHECK(spec.rank_of(type, index) == r);
  }
  CHECK_THROWS_WITH(spec.rank_of("ps", 2), Contains("job \"ps\" has 2 tasks, no index 2"));
  CHECK_THROWS_WITH(spec.rank_of("evaluator", 0), Contains("no job \"evaluator\" (its jobs: chief, worker, ps)"));
  CHECK_THROWS_WITH(spec.task_of(6), Contains("rank 6 is outside [0, 6)"));
  CHECK_THROWS_WITH(spec.task_of(-1), Contains("rank -1 is outside"));
}

TEST_CASE("cluster: what real launchers write is accepted") {
  // Extra top-level keys (Kubeflow, cloud trainers), an index as a string of
  // digits, a missing index (0), an evaluator job, an empty ps job, IPv6.
  ClusterSpec spec = ClusterSpec::parse(R"({
      "cluster": {"chief": ["[::1]:2222"], "worker": ["h1:2222"], "ps": [], "evaluator": ["e:2222"]},
      "task": {"type": "worker", "index": "0", "trial": "1"},
      "environment": "cloud", "rpc_layer": "grpc"})");
  CHECK(spec.size() == 2);
  CHECK(spec.rank() == 1);
  CHECK(spec.count("evaluator") == 0);
  CHECK(spec.count("ps") == 0);
  CHECK(spec.store_address() == "[::1]:2222");
  CHECK(ClusterSpec::parse(tf_config(kChiefAndWorkers, R"({"type": "chief"})")).task_index == 0);
}

TEST_CASE("cluster: bad TF_CONFIG names the problem") {
  const std::string worker0 = R"({"type": "worker", "index": 0})";
  auto parse = [](const std::string& text) { return ClusterSpec::parse(text); };
  // Not JSON, with the offset.
  CHECK_THROWS_AS(parse("{\"cluster\": "), InvalidArgument);
  CHECK_THROWS_WITH(parse("{\"cluster\": "), Contains("TF_CONFIG is not JSON at offset 12"));
  CHECK_THROWS_WITH(parse("cluster=a,b"), Contains("TF_CONFIG is not JSON at offset 0"));
  CHECK_THROWS_WITH(parse("[1, 2]"), Contains("the text is an array, not an object"));
  // The cluster.
  CHECK_THROWS_WITH(parse(R"({"task": {"type": "worker", "index": 0}})"), Contains("no \"cluster\""));
  CHECK_THROWS_WITH(parse(tf_config(R"(["a:1"])", worker0)), Contains("\"cluster\" is an array, not an object of jobs"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"worker": "a:1"})", worker0)),
                    Contains("job \"worker\" is a string, not a list of \"host:port\" strings"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"worker": ["a:1", 7]})", worker0)),
                    Contains("job \"worker\" is not a list of \"host:port\" strings: element 1 is a number"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"worker": {"0": "a:1"}})", worker0)), Contains("sparse jobs"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"worker": ["a:1", "b"]})", worker0)),
                    Contains("worker 1: address 'b' is not host:port (no port)"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"worker": ["a:1"], "evaluator": ["e:1"], "trainer": ["t:1"]})", worker0)),
                    Contains("unknown job \"trainer\"") && Contains("braid knows chief, worker and ps"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"master": ["m:1"], "worker": ["a:1"]})", worker0)),
                    Contains("unknown job \"master\"") && Contains("old name of \"chief\""));
  CHECK_THROWS_WITH(parse(tf_config(R"({})", worker0)), Contains("\"cluster\" has no tasks"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"worker": [], "ps": []})", worker0)), Contains("\"cluster\" has no tasks"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"chief": ["c:1", "d:1"], "worker": ["a:1"]})", worker0)),
                    Contains("the \"chief\" job has 2 addresses; there is at most one chief"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"worker": ["a:1"], "evaluator": ["e:1", "f:1"]})", worker0)),
                    Contains("the \"evaluator\" job has 2 addresses"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["b:1"]})", worker0)),
                    Contains("address \"b:1\" is used twice, by worker 0 and ps 0"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"worker": ["a:1", "a:1"]})", worker0)), Contains("used twice"));
  CHECK_THROWS_WITH(parse(R"({"cluster": {"worker": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker"}})"),
                    Contains("duplicate key \"worker\""));
  // The task.
  CHECK_THROWS_WITH(parse(R"({"cluster": {"worker": ["a:1"]}})"), Contains("no \"task\""));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"("worker")")), Contains("\"task\" is a string, not an object"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"index": 0})")), Contains("\"task\" has no \"type\""));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": 1})")), Contains("\"task\" \"type\" is a number"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": "ps", "index": 0})")),
                    Contains("task type \"ps\" has no job in \"cluster\" (its jobs: chief, worker)"));
  CHECK_THROWS_WITH(parse(tf_config(R"({"worker": ["a:1"], "evaluator": ["e:1"]})", R"({"type": "evaluator"})")),
                    Contains("this task is the \"evaluator\", which is not part of the training cluster"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": "worker", "index": 3})")),
                    Contains("task index 3 is out of range: job \"worker\" has 3 tasks (indexes 0 to 2)"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": "chief", "index": 1})")),
                    Contains("task index 1 is out of range: job \"chief\" has 1 task (indexes 0 to 0)"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": "worker", "index": -1})")),
                    Contains("task index -1 is out of range"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": "worker", "index": "12345678901234"})")),
                    Contains("task index 12345678901234 is out of range"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": "worker", "index": 99999999999999999999})")),
                    Contains("is out of range"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": "worker", "index": 1.5})")),
                    Contains("task index 1.5 is not a whole number"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": "worker", "index": "one"})")),
                    Contains("\"task\" \"index\" is a string, not a whole number"));
  CHECK_THROWS_WITH(parse(tf_config(kChiefAndWorkers, R"({"type": "worker", "index": null})")),
                    Contains("\"task\" \"index\" is null"));
  // A spec built by hand without tasks has no rank 0.
  CHECK_THROWS_WITH(ClusterSpec{}.store_address(), Contains("no tasks"));
  CHECK_THROWS_AS(ClusterSpec{}.rank(), InvalidArgument);
}

TEST_CASE("cluster: from_env reads TF_CONFIG, and none when it is unset or empty") {
  {
    test::EnvVar unset("TF_CONFIG", nullptr);
    CHECK_FALSE(ClusterSpec::from_env().has_value());
  }
  {
    test::EnvVar empty("TF_CONFIG", "");
    CHECK_FALSE(ClusterSpec::from_env().has_value());
  }
  test::EnvVar set("TF_CONFIG", tf_config(kChiefAndWorkers, R"({"type": "worker", "index": 2})"));
  auto spec = ClusterSpec::from_env();
  REQUIRE(spec.has_value());
  CHECK(spec->rank() == 3);
  test::EnvVar bad("TF_CONFIG", "{\"cluster\": {}");
  CHECK_THROWS_WITH(ClusterSpec::from_env(), Contains("TF_CONFIG is not JSON at offset 14"));
}

TEST_CASE("cluster: Comm::from_env joins from TF_CONFIG when BRAID_RANK is not set") {
  test::EnvVar no_rank("BRAID_RANK", nullptr);
  test::EnvVar timeout("BRAID_TIMEOUT", "5s");
  // A cluster of one chief, on a free loopback port: the chief hosts the store there.
  Fd holder = listen_tcp(test::loopback(), "test");
  const std::string addr = "127.0.0.1:" + std::to_string(local_address(holder.get()).port());
  holder.reset();
  {
    test::EnvVar config("TF_CONFIG", tf_config(R"({"chief": [")" + addr + R"("]})", R"({"type": "chief", "index": 0})"));
    Comm comm = Comm::from_env();
    CHECK(comm.rank() == 0);
    CHECK(comm.size() == 1);
    std::vector<float> v = {1, 2};
    comm.all_reduce(std::span(v), ReduceOp::sum);
    CHECK(v == std::vector<float>{1, 2});
  }
  {
    // The same through Comm::init(ClusterSpec), from the localhost name.
    const std::string named = "localhost:" + addr.substr(addr.find(':') + 1);
    Comm comm = Comm::init(ClusterSpec::parse(tf_config(R"({"worker": [")" + named + R"("]})", R"({"type": "worker"})")));
    CHECK(comm.size() == 1);
    comm.barrier();
  }
  {
    test::EnvVar unset("TF_CONFIG", nullptr);
    CHECK_THROWS_WITH(Comm::from_env(), Contains("BRAID_RANK is not set") && Contains("TF_CONFIG"));
  }
  {
    test::EnvVar config("TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}})");
    CHECK_THROWS_WITH(Comm::from_env(), Contains("TF_CONFIG: no \"task\""));
  }
  {
    // BRAID_RANK takes precedence: TF_CONFIG is not even parsed.
    test::EnvVar config("TF_CONFIG", "not json");
    test::EnvVar rank("BRAID_RANK", "0");
    CHECK_THROWS_WITH(Comm::from_env(), Contains("BRAID_WORLD_SIZE is not set"));
  }
}

// ---- the JSON reader ------------------------------------------------------------

namespace {

JsonValue json(std::string_view text) { return parse_json(text, "test"); }

}  // namespace

TEST_CASE("json: values of every kind, nested, with whitespace") {
  JsonValue v = json(" \t\r\n{\"a\": [1, -2.5e3, 0, true, false, null, \"s\", {}, []], \"b\": {\"c\": {\"d\": []}}} \n");
  REQUIRE(v.kind == JsonValue::Kind::object);
  CHECK(v.keys == std::vector<std::string>{"a", "b"});
  const JsonValue* a = v.find("a");
  REQUIRE(a != nullptr);
  REQUIRE(a->items.size() == 9);
  CHECK(a->items[0].integer() == 1);
  CHECK(a->items[1].number == -2500.0);
  CHECK_FALSE(a->items[1].integer().has_value());
  CHECK(a->items[2].integer() == 0);
  CHECK(a->items[3].boolean);
  CHECK(a->items[4].kind == JsonValue::Kind::boolean);
  CHECK_FALSE(a->items[4].boolean);
  CHECK(a->items[5].kind == JsonValue::Kind::null);
  CHECK(a->items[6].text == "s");
  CHECK(a->items[7].kind == JsonValue::Kind::object);
  CHECK(a->items[8].kind == JsonValue::Kind::array);
  CHECK(v.find("b")->find("c")->find("d")->items.empty());
  CHECK(v.find("missing") == nullptr);
  CHECK(a->find("a") == nullptr);  // not an object
  CHECK(json("\"x\"").offset == 0);
  CHECK(json("  7").offset == 2);
}

TEST_CASE("json: string escapes, surrogate pairs and UTF-8") {
  CHECK(json(R"("a\"b\\c\/d\b\f\n\r\t")").text == "a\"b\\c/d\b\f\n\r\t");
  CHECK(json(R"("\u0041\u00e9\u20AC")").text == "A\xc3\xa9\xe2\x82\xac");
  CHECK(json(R"("\ud83d\ude00")").text == "\xf0\x9f\x98\x80");  // U+1F600
  CHECK(json("\"h\xc3\xa9llo \xf0\x9f\x98\x80\"").text == "h\xc3\xa9llo \xf0\x9f\x98\x80");
  CHECK(json(R"("\u0000")").text == std::string(1, '\0'));
  CHECK_THROWS_WITH(json(R"("\x")"), Contains("test is not JSON at offset 2: invalid escape: \\ followed by 'x'"));
  CHECK_THROWS_WITH(json(R"("\u12G4")"), Contains("expected 4 hex digits after \\u"));
  CHECK_THROWS_WITH(json(R"("\ude00")"), Contains("a low surrogate"));
  CHECK_THROWS_WITH(json(R"("\ud83d")"), Contains("a high surrogate \\u escape without a low one"));
  CHECK_THROWS_WITH(json(R"("\ud83d\u0041")"), Contains("without a low one"));
  CHECK_THROWS_WITH(json("\"a\tb\""), Contains("offset 2: a string holds the control character byte 0x09"));
  CHECK_THROWS_WITH(json("\"\xff\""), Contains("offset 1: a string holds bytes that are not UTF-8"));
  CHECK_THROWS_WITH(json("\"\xc0\x80\""), Contains("not UTF-8"));          // overlong NUL
  CHECK_THROWS_WITH(json("\"\xed\xa0\x80\""), Contains("not UTF-8"));      // a surrogate
  CHECK_THROWS_WITH(json("\"\xf4\x90\x80\x80\""), Contains("not UTF-8"));  // above U+10FFFF
  CHECK_THROWS_WITH(json("\"\xe2\x82\""), Contains("not UTF-8"));          // cut short
}

TEST_CASE("json: numbers follow the grammar exactly") {
  CHECK(json("-0").integer() == 0);
  CHECK(json("123456789012").integer() == 123456789012LL);
  CHECK(json("1E2").number == 100.0);
  CHECK(json("1e-2").number == 0.01);
  CHECK_FALSE(json("1e2").integer().has_value());
  CHECK_FALSE(json("99999999999999999999").integer().has_value());  // a number, but no long long
  CHECK_THROWS_WITH(json("01"), Contains("offset 1: unexpected '1' after the JSON value"));
  CHECK_THROWS_WITH(json("+1"), Contains("offset 0: expected a value, found '+'"));
  CHECK_THROWS_WITH(json("-"), Contains("offset 1: expected a digit in a number, found end of the text"));
  CHECK_THROWS_WITH(json("1."), Contains("expected a digit after the decimal point"));
  CHECK_THROWS_WITH(json(".5"), Contains("expected a value"));
  CHECK_THROWS_WITH(json("1e"), Contains("expected a digit in the exponent"));
  CHECK_THROWS_WITH(json("1e999"), Contains("offset 0: the number 1e999 is out of range"));
  CHECK_THROWS_WITH(json("NaN"), Contains("expected a value"));
  CHECK_THROWS_WITH(json("Infinity"), Contains("expected a value"));
}

TEST_CASE("json: truncated input, trailing text and bad structure are refused with the offset") {
  CHECK_THROWS_WITH(json(""), Contains("offset 0: expected a value, found end of the text"));
  CHECK_THROWS_WITH(json("   "), Contains("offset 3: expected a value"));
  CHECK_THROWS_WITH(json("{"), Contains("offset 1: expected a string key, found end of the text"));
  CHECK_THROWS_WITH(json("{\"a\""), Contains("offset 4: expected ':' after an object key, found end of the text"));
  CHECK_THROWS_WITH(json("{\"a\":"), Contains("offset 5: expected a value"));
  CHECK_THROWS_WITH(json("{\"a\":1"), Contains("offset 6: expected '}' or ',' after an object member"));
  CHECK_THROWS_WITH(json("[1,"), Contains("offset 3: expected a value"));
  CHECK_THROWS_WITH(json("[1 2]"), Contains("offset 3: expected ']' or ',' after an array element, found '2'"));
  CHECK_THROWS_WITH(json("\"abc"), Contains("offset 0: a string is not terminated"));
  CHECK_THROWS_WITH(json("tru"), Contains("offset 0: expected a value"));
  CHECK_THROWS_WITH(json("{} {}"), Contains("offset 3: unexpected '{' after the JSON value"));
  CHECK_THROWS_WITH(json("[1] x"), Contains("unexpected 'x'"));
  CHECK_THROWS_WITH(json("{\"a\":1,}"), Contains("offset 7: expected a string key, found '}'"));
  CHECK_THROWS_WITH(json("[1,]"), Contains("offset 3: expected a value, found ']'"));
  CHECK_THROWS_WITH(json("{'a': 1}"), Contains("expected a string key, found '''"));
  CHECK_THROWS_WITH(json("{1: 2}"), Contains("expected a string key, found '1'"));
  CHECK_THROWS_WITH(json(std::string_view("[1]\0", 4)), Contains("offset 3: unexpected byte 0x00"));
  CHECK_THROWS_WITH(json("{\"k\": 1, \"k\": 2}"), Contains("offset 9: duplicate key \"k\""));
  CHECK_THROWS_WITH(json("\xef\xbb\xbf{}"), Contains("offset 0: expected a value, found byte 0xef"));  // a BOM
}

TEST_CASE("json: nesting is limited") {
  std::string ok = std::string(kJsonMaxDepth, '[') + std::string(kJsonMaxDepth, ']');
  CHECK(json(ok).kind == JsonValue::Kind::array);
  std::string deep = std::string(kJsonMaxDepth + 1, '[') + std::string(kJsonMaxDepth + 1, ']');
  CHECK_THROWS_WITH(json(deep), Contains("offset 64: arrays and objects nest deeper than 64 levels"));
  // Far deeper than any stack allows recursing into: refused just the same.
  std::string very_deep(1 << 20, '[');
  CHECK_THROWS_WITH(json(very_deep), Contains("nest deeper than 64"));
}
