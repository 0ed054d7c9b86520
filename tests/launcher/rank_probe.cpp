// rank_probe: a stand-in rank for the braid-run tests. Its arguments are a
// small script of actions, run in order:
//   env            print "rank=R world=W local_rank=L local_size=S store=ADDR"
//   out TEXT       print TEXT and a newline on stdout (err TEXT: on stderr)
//   partial TEXT   print TEXT on stdout with no newline
//   lines N        print "line 0" .. "line N-1" on stdout
//   long N         print one line of N 'x' on stdout
//   sleep SECONDS  sleep (fractions allowed)
//   ignore-term    ignore SIGTERM from now on
//   exit CODE      exit with CODE
//   signal N       die from signal N
//   @R ACTION      do ACTION only on rank R (BRAID_RANK), e.g. "@2 exit 3"
// Output is flushed after every action. A malformed script exits 99.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

extern char** environ;

namespace {

// Reads the environment directly: this probe reports what braid-run passed,
// not what braid's settings layer would make of it.
std::string env_value(std::string_view name) {
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view var(*e);
    if (var.starts_with(name) && var.substr(name.size()).starts_with("=")) return std::string(var.substr(name.size() + 1));
  }
  return "(unset)";
}

[[noreturn]] void malformed(std::string_view why) {
  std::fprintf(stderr, "rank_probe: %.*s\n", static_cast<int>(why.size()), why.data());
  std::exit(99);
}

}  // namespace

int main(int argc, char** argv) {
  std::string rank = env_value("BRAID_RANK");
  for (int i = 1; i < argc; ++i) {
    std::string_view action = argv[i];
    if (action.starts_with("@")) {
      if (i + 1 >= argc) malformed("@R needs an action");
      bool mine = action.substr(1) == rank;
      action = argv[++i];
      if (!mine) {
        bool takes_value = action != "env" && action != "ignore-term";
        if (takes_value) ++i;
        continue;
      }
    }
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) malformed(std::string(action) + " needs a value");
      return argv[++i];
    };
    if (action == "env") {
      std::printf("rank=%s world=%s local_rank=%s local_size=%s store=%s\n", rank.c_str(),
                  env_value("BRAID_WORLD_SIZE").c_str(), env_value("BRAID_LOCAL_RANK").c_str(),
                  env_value("BRAID_LOCAL_SIZE").c_str(), env_value("BRAID_STORE_ADDR").c_str());
    } else if (action == "out") {
      std::printf("%s\n", value().c_str());
    } else if (action == "err") {
      std::fprintf(stderr, "%s\n", value().c_str());
    } else if (action == "partial") {
      std::printf("%s", value().c_str());
    } else if (action == "lines") {
      long n = std::atol(value().c_str());
      for (long k = 0; k < n; ++k) std::printf("line %ld\n", k);
    } else if (action == "long") {
      std::string line(static_cast<std::size_t>(std::atol(value().c_str())), 'x');
      std::printf("%s\n", line.c_str());
    } else if (action == "sleep") {
      std::fflush(nullptr);
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(value().c_str())));
    } else if (action == "ignore-term") {
      ::signal(SIGTERM, SIG_IGN);
    } else if (action == "exit") {
      std::fflush(nullptr);
      std::exit(std::atoi(value().c_str()));
    } else if (action == "signal") {
      int signo = std::atoi(value().c_str());
      std::fflush(nullptr);
      ::signal(signo, SIG_DFL);
      ::raise(signo);
      malformed("survived its signal");
    } else {
      malformed("unknown action '" + std::string(action) + "'");
    }
    std::fflush(nullptr);
  }
  return 0;
}
