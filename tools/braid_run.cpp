// braid-run: the local launcher. `braid-run -n N [options] [--] program args...`
// starts N ranks of a program on this host with the BRAID_* identity variables
// set, tags their output with the rank, and turns the first failure of a rank
// into the end of the whole job.
//
// How it works. Each rank is fork+exec'd as the leader of a process group of
// its own, so that signalling the group also reaches what the rank started (a
// shell script's children), and dies with the launcher (PR_SET_PDEATHSIG), so
// a SIGKILLed braid-run leaves no orphans. A rank's stdout and stderr are pipes
// that one poll loop reads; complete lines go to braid-run's stdout or stderr
// with "[r] " in front, written only when they can be without blocking
// (rank_output.hpp), so the loop stays free to enforce the timeout and to stop
// a failed job. Signals (SIGCHLD, and SIGINT/SIGTERM/SIGHUP to forward) arrive
// through a signalfd in the same loop.
//
// Stopping. The first rank that exits non-zero or dies from a signal decides
// the exit status; the others get SIGTERM, then SIGKILL after --grace. A
// timeout or a signal to braid-run stops the job the same way. Every wait is
// bounded: the exec of each rank, the grace period, the wait for SIGKILLed
// ranks, and the drain of pipes that a rank's leftover children hold open.
// The one exception is the last flush of a successful job's output, which
// waits for braid-run's reader like any Unix filter does.
//
// Binding (--bind-to): when the ranks fit the CPUs braid-run may use, rank i
// is bound to the i-th of them. Unbound, a rank that wakes another through a
// futex often finds it placed on its own CPU (the scheduler's wake-affine
// placement) while the other CPU idles; a spinning rank then holds the CPU
// its peer needs, and each exchange waits for a wake-up. After an Open MPI
// run, two launches of five of an 8-byte all-reduce on 2 ranks stayed in that
// state (16-40 us per call instead of 1.2 us); bound, none did. "The i-th"
// skips CPUs that another braid-run on this machine claimed (cpu_claims.hpp).
// More ranks than CPUs are bound round robin (rank i on CPU i mod the CPUs,
// so ring neighbours 0 1 2 3 alternate CPUs) when no other task is running
// on the machine at launch (others_running). Left to the kernel, the ranks
// of a 4-rank job on 2 CPUs settled where ring neighbours shared a CPU in
// most launches: a 1 MiB all-reduce over tcp took 1730-2110 us against
// 880-1000 when they did not, and pinned that way 1140-1260 us, 2 MiB
// 2340-2690 us bound against 3450-4660 unbound; over shm 10-12 us at 8 B
// against 9-19. With other work on the CPUs (two busy loops) binding lost
// instead (2 MiB over tcp 22.5 ms bound, 12.2 unbound): the kernel can move
// an unbound rank off a busy CPU. So busy machines keep today's placement.
//
// Ranks get /dev/null as stdin: they run in background process groups, where
// reading the terminal would stop them. The store port is picked by binding
// port 0 and closing the socket; another process could take it before rank 0
// binds it, which --port avoids where that matters.

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>  // sigabbrev_np
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/types.hpp"
#include "bootstrap/store.hpp"
#include "core/comm_id.hpp"
#include "core/deadline.hpp"
#include "core/event_loop.hpp"
#include "core/settings.hpp"
#include "core/socket.hpp"
#include "core/text.hpp"
#include "command_line.hpp"
#include "cpu_claims.hpp"
#include "rank_output.hpp"

extern char** environ;

namespace braid {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotRun = 127;
constexpr int kMaxRanks = 4096;
constexpr Millis kExecConfirmTimeout{10000};   // fork to successful exec of one rank
constexpr Millis kReapAfterKill{5000};         // longer: a rank stuck in the kernel; give up

constexpr std::string_view kUsage =
    R"(usage: braid-run -n N [options] [--] program [args...]
       braid-run -n N --nnodes M --node-rank K --master HOST:PORT [options] [--] program [args...]

Starts N ranks of program on this host. Each rank gets BRAID_RANK (0..N-1),
BRAID_WORLD_SIZE=N, BRAID_LOCAL_RANK, BRAID_LOCAL_SIZE=N and
BRAID_STORE_ADDR=host:port, where rank 0 hosts the rendezvous store, and
BRAID_JOB_ID (one per launch, unless set already), so a rank of another job
that reaches this store is refused instead of joining. Every line
a rank writes to stdout or stderr appears on braid-run's stdout or stderr with
"[rank] " in front. If a rank fails, the others are stopped.

Across hosts, run one braid-run on each of M hosts, each with the same -n
and --master and its own --node-rank K (0..M-1): this one starts ranks
K*N..K*N+N-1 of M*N, and rank 0 (on node 0) hosts the store at HOST:PORT,
listening on every interface. HOST must be node 0's address as the other
hosts reach it (or a name they resolve to it).

options:
  -n, --ranks N    number of ranks on this host (required, 1..4096)
  --nnodes M       number of hosts, one braid-run each (default 1)
  --node-rank K    this host's index among them (0..M-1; node 0 hosts rank 0)
  --master H:P     the store's address (required with --nnodes above 1);
                   with --elastic, a list H0:P,H1:P,... names one store per
                   node (node K hosts the K-th): the job moves to the next
                   when node 0's machine leaves
  --host H         host part of BRAID_STORE_ADDR (default 127.0.0.1)
  --port P         port of BRAID_STORE_ADDR (default: a free port)
  --timeout T      stop the job and exit 124 after T (30, 30s, 500ms, 2m;
                   default and 0: no limit)
  --grace T        time between SIGTERM and SIGKILL when stopping ranks
                   (default 5s)
  --no-prefix      do not put "[rank] " in front of output lines
  --keep-going     a rank that fails or is killed does not stop the others
                   (for jobs that go on without it: Comm::shrink); the exit
                   status counts only the ranks that exited, not those a
                   signal killed
  --elastic        an elastic job (docs/elastic.md): BRAID_ELASTIC=1 for
                   every rank, --keep-going, and the store runs in this
                   braid-run (on node 0) instead of in rank 0, so that it
                   outlives any rank; a rank that is lost leaves the others
                   going on (Comm::shrink_lost), and a rank started again
                   with the same command joins the running job
  --bind-to B      core: bind rank i to the i-th CPU braid-run may use (round
                   robin when there are more ranks than CPUs), skipping
                   CPUs that another braid-run on this machine claimed
                   (BRAID_CPU_CLAIMS); none: leave placement to the kernel
                   (default: core when the ranks fit those CPUs, or when no
                   other task is running on the machine at launch; else none)
  --env-help       print the settings (BRAID_*, TF_CONFIG) as a Markdown table
  --version        print braid's version
  -h, --help       print this help

SIGINT, SIGTERM and SIGHUP to braid-run are forwarded to the ranks.

exit status: 0 when every rank exits 0; else that of the first rank to fail
(128+S if signal S killed it, but for --keep-going); 124 after --timeout;
128+S when braid-run got signal S; 127 when the program cannot be started;
2 on bad usage.
)";

struct Options {
  int ranks = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::vector<std::string> masters;  // host:port of the store across hosts; with --elastic, one per node may follow
  std::string host = "127.0.0.1";
  std::optional<int> port;
  std::optional<Millis> timeout;
  Millis grace{5000};
  bool prefix = true;
  bool keep_going = false;
  bool elastic = false;
  std::optional<bool> bind;  // --bind-to: core (true), none (false); unset: core when the ranks fit the CPUs or nothing else runs
  std::vector<std::string> command;
};

enum class Action { run, help, env_help };

int parse_int(std::string_view text, std::string_view what, int lo, int hi) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi)
    throw UsageError(cat(what, " '", text, "' is not a whole number in [", lo, ", ", hi, "]"));
  return value;
}

// Options come before the program: the first argument that is not an option
// (or the one after "--") is the program, and the rest belong to it. Long
// options take "--name value" or "--name=value"; -n also takes "-n4"
// (command_line.hpp, the parser every braid tool uses).
Action parse_args(int argc, char** argv, Options& opts) {
  Action action = Action::run;
  bool have_ranks = false;
  CommandLine cli;
  cli.flag({"-h", "--help"}, [&] { action = Action::help; })
      .flag({"--env-help"}, [&] { action = Action::env_help; })
      .version("braid-run")
      .option({"-n", "--ranks"},
              [&](std::string_view name, std::string_view v) {
                opts.ranks = parse_int(v, name, 1, kMaxRanks);
                have_ranks = true;
              })
      .option({"--nnodes"}, [&](std::string_view name, std::string_view v) { opts.nnodes = parse_int(v, name, 1, kMaxRanks); })
      .option({"--node-rank"},
              [&](std::string_view name, std::string_view v) { opts.node_rank = parse_int(v, name, 0, kMaxRanks - 1); })
      .option({"--master"},
              [&](std::string_view name, std::string_view v) {
                opts.masters = split(v, ',');
                for (const std::string& one : opts.masters)
                  if (parse_host_port(one, name).port == 0)
                    throw UsageError(cat(name, " '", one, "' needs a port other than 0 (host:port)"));
              })
      .option({"--host"},
              [&](std::string_view, std::string_view v) {
                opts.host = v;
                if (opts.host.empty()) throw UsageError("--host needs a host name or address");
              })
      .option({"--port"}, [&](std::string_view name, std::string_view v) { opts.port = parse_int(v, name, 1, 65535); })
      .option({"--timeout"},
              [&](std::string_view name, std::string_view v) {
                Millis t = parse_duration(v, name);
                opts.timeout = t.count() > 0 ? std::optional(t) : std::nullopt;
              })
      .option({"--grace"}, [&](std::string_view name, std::string_view v) { opts.grace = parse_duration(v, name); })
      .flag({"--no-prefix"}, [&] { opts.prefix = false; })
      .flag({"--keep-going"}, [&] { opts.keep_going = true; })
      .flag({"--elastic"}, [&] {
        opts.elastic = true;
        opts.keep_going = true;
      })
      .option({"--bind-to"},
              [&](std::string_view name, std::string_view v) {
                if (v == "core") opts.bind = true;
                else if (v == "none") opts.bind = false;
                else throw UsageError(cat(name, " '", v, "' is not core or none"));
              });
  opts.command = cli.parse(argc, argv, CommandLine::Positionals::end_options);
  if (action != Action::run) return action;
  if (!have_ranks) throw UsageError("missing -n N, the number of ranks");
  if (opts.command.empty()) throw UsageError("missing the program to run");
  if (opts.node_rank >= opts.nnodes)
    throw UsageError(cat("--node-rank ", opts.node_rank, " is outside [0, --nnodes ", opts.nnodes, ")"));
  if (opts.nnodes > 1 && opts.masters.empty())
    throw UsageError("--nnodes above 1 needs --master HOST:PORT, node 0's address as every host reaches it");
  if (opts.masters.size() > 1 && !opts.elastic)
    throw UsageError(cat("--master lists ", opts.masters.size(), " stores: standby stores are for --elastic jobs"));
  if (opts.masters.size() > static_cast<std::size_t>(opts.nnodes))
    throw UsageError(cat("--master lists ", opts.masters.size(), " stores for --nnodes ", opts.nnodes,
                         ": one per node at most (node K hosts the K-th)"));
  if (static_cast<long long>(opts.nnodes) * opts.ranks > kMaxRanks)
    throw UsageError(cat("--nnodes ", opts.nnodes, " x -n ", opts.ranks, " is more than ", kMaxRanks, " ranks"));
  return Action::run;
}

// The same table as docs/settings.md, which a test keeps equal to
// setting_table().
void print_env_table() {
  auto cell = [](std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c;
    }
    return out;
  };
  std::string table = "| Variable | Default | Meaning |\n| --- | --- | --- |\n";
  for (const SettingInfo& s : setting_table())
    table += cat("| `", s.name, "` | ", cell(s.default_value), " | ", cell(s.meaning), " |\n");
  std::fwrite(table.data(), 1, table.size(), stdout);
}

std::string signal_name(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  return abbrev != nullptr ? cat("SIG", abbrev) : cat("signal ", signo);
}

std::string duration_text(Millis d) {
  return d.count() % 1000 == 0 ? cat(d.count() / 1000, "s") : cat(d.count(), "ms");
}

// "127.0.0.1:29500", "[::1]:29500".
std::string join_host_port(const std::string& host, int port) {
  bool bare_v6 = host.find(':') != std::string::npos && !host.starts_with("[");
  return bare_v6 ? cat("[", host, "]:", port) : cat(host, ":", port);
}

// A port that is free now on `host` (or, if that is not an address of this
// machine, on 127.0.0.1): bind port 0, read the port, close.
int pick_free_port(const std::string& host) {
  for (const std::string& h : {host, std::string("127.0.0.1")}) {
    try {
      std::string bare = h.starts_with("[") && h.ends_with("]") ? h.substr(1, h.size() - 2) : h;
      for (const SockAddr& addr : resolve(HostPort{bare, 0}, "--host")) {
        try {
          Fd probe = listen_tcp(addr, "picking a store port", 1);
          return local_address(probe.get()).port();
        } catch (const Error&) {
        }
      }
    } catch (const Error&) {
    }
  }
  throw SystemError("cannot find a free TCP port on 127.0.0.1 for the store; pass --port");
}

struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool exited = false;
  bool exec_failed = false;
  std::optional<RankStream> out, err;
};

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_rank(pid_t launcher, int out_fd, int err_fd, int status_fd, char** argv, char** envp,
                            const cpu_set_t* cpus) {
  ::setpgid(0, 0);
  if (cpus != nullptr) ::sched_setaffinity(0, sizeof *cpus, cpus);  // best effort, like mpirun's binding
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(kExitCannotRun);  // the launcher died before prctl
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);  // an ignored signal would stay ignored across exec
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0 && ::dup2(null_fd, STDIN_FILENO) >= 0 && ::dup2(out_fd, STDOUT_FILENO) >= 0 &&
      ::dup2(err_fd, STDERR_FILENO) >= 0)
    ::execvpe(argv[0], argv, envp);
  int err = errno;
  [[maybe_unused]] ssize_t ignored = ::write(status_fd, &err, sizeof err);
  ::_exit(kExitCannotRun);
}

std::pair<Fd, Fd> make_pipe(bool nonblocking_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw SystemError(cat("cannot create a pipe: ", errno_text(errno)));
  Fd read_end(fds[0]), write_end(fds[1]);
  if (nonblocking_read) set_nonblocking(read_end.get(), true);
  return {std::move(read_end), std::move(write_end)};
}

class Launcher {
 public:
  explicit Launcher(Options opts) : opts_(std::move(opts)), out_(STDOUT_FILENO), err_(STDERR_FILENO) {
    // Blocked before any fork, so no SIGCHLD or forwarded signal is lost;
    // each child unblocks them before exec. A signal that braid-run was
    // started with ignored (nohup, a background job of a script) stays
    // ignored, here and in the ranks, as shells do. SIGCHLD cannot: ignoring
    // it would reap the ranks before braid-run sees their status.
    ::signal(SIGCHLD, SIG_DFL);
    sigset_t set;
    ::sigemptyset(&set);
    ::sigaddset(&set, SIGCHLD);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction current {};
      if (::sigaction(s, nullptr, &current) == 0 && current.sa_handler != SIG_IGN) ::sigaddset(&set, s);
    }
    if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0)
      throw SystemError(cat("sigprocmask failed: ", errno_text(errno)));
    signals_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!signals_) throw SystemError(cat("signalfd failed: ", errno_text(errno)));
    ::signal(SIGPIPE, SIG_IGN);
    for (char** e = environ; *e != nullptr; ++e) {
      std::string_view var(*e);
      bool ours = false;
      for (std::string_view name : kIdentity)
        ours = ours || (var.starts_with(name) && var.substr(name.size()).starts_with("="));
      if (!ours) env_base_.emplace_back(var);
    }
    // The CPUs braid-run may use (its own affinity: taskset, a cgroup);
    // binding when every rank gets one of its own, or when nothing else
    // keeps the machine busy (the comment at the top says why).
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
      std::vector<int> cpus;
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
      const bool fit = static_cast<std::size_t>(opts_.ranks) <= cpus.size();
      if (opts_.bind.value_or(fit || !others_running())) {
        // Claimed, so that another braid-run on this machine binds elsewhere
        // (cpu_claims.hpp); held until braid-run exits.
        const auto path = Settings::raw("BRAID_CPU_CLAIMS").value_or(CpuClaims::default_path());
        claims_.emplace(path == "none" ? std::string() : path, cpus, opts_.ranks);
        cpus_ = claims_->order();
      }
    }
  }

  int run() {
    if (opts_.timeout) job_deadline_ = Deadline::after(*opts_.timeout);
    if (!opts_.masters.empty()) {
      store_addr_ = opts_.masters.front();
      for (std::size_t k = 1; k < opts_.masters.size(); ++k)
        store_standby_ += cat(k > 1 ? "," : "", opts_.masters[k]);
    } else {
      store_addr_ = join_host_port(opts_.host, opts_.port ? *opts_.port : pick_free_port(opts_.host));
      // One id per launch: two launches pointed at one store address never
      // mix. Across hosts the braid-runs could not agree on one; set
      // BRAID_JOB_ID on every host for that.
      if (!Settings::raw("BRAID_JOB_ID")) job_id_ = cat("braid-run-", CommId::random().to_hex().substr(0, 16));
    }
    // Node 0 hosts the job's store; with a --master list, node K hosts the
    // K-th, a standby that the job moves to when the stores before it go.
    const auto node = static_cast<std::size_t>(opts_.node_rank);
    if (opts_.elastic && (node == 0 || node < opts_.masters.size())) {
      const std::string at = node == 0 ? store_addr_ : opts_.masters[node];
      try {
        host_store(at, node > 0);
      } catch (const Error& e) {
        say(cat("cannot host the elastic job's ", node > 0 ? "standby " : "", "store at ", at, ": ", e.what()));
        return kExitCannotRun;
      }
    }
    ranks_.reserve(static_cast<std::size_t>(opts_.ranks));
    for (int r = 0; r < opts_.ranks && phase_ == Phase::running; ++r) {
      try {
        start(r);
      } catch (const Error& e) {
        say(cat("cannot start rank ", r, ": ", e.what()));
        stop(kExitCannotRun, SIGTERM);
      }
    }
    loop();
    for (Rank& rank : ranks_) {
      rank.out->finish();
      rank.err->finish();
    }
    Deadline flush_by = exit_code_ ? Deadline::after(std::max(opts_.grace, Millis(1000))) : Deadline::never();
    out_.flush(flush_by);
    err_.flush(flush_by);
    return exit_code_.value_or(0);
  }

 private:
  enum class Phase { running, stopping, killing, given_up };
  static constexpr std::string_view kIdentity[] = {"BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK",
                                                   "BRAID_LOCAL_SIZE", "BRAID_STORE_ADDR", "BRAID_STORE_STANDBY"};

  // An elastic job's store lives here rather than in rank 0, so that it
  // outlives any rank (the chief included): it listens at the store address
  // (on every interface when the job spans hosts or the address is not
  // loopback) until braid-run exits.
  void host_store(const std::string& at, bool standby) {
    Settings settings = Settings::from_env();
    HostPort hp = parse_host_port(at, "the store address");
    SockAddr bind = resolve(hp, "the store address").front();
    if (opts_.nnodes > 1 || !bind.is_loopback()) bind.set_any_host();
    bind.set_port(hp.port);
    store_loop_ = std::make_unique<EventLoop>("braid-run-store");
    store_ = TcpStoreServer::start(*store_loop_, bind, settings.auth_key, settings.tls,
                                   job_id_.empty() ? settings.job_id : job_id_);
    if (standby)
      say(cat("elastic job: a standby store runs in this braid-run at ", at, ", where the job moves if the stores "
              "before it in --master go (node 0's machine leaving)"));
    else
      say(cat("elastic job: the store runs in this braid-run at ", at, ", so that the job outlives any rank"));
  }
  std::unique_ptr<EventLoop> store_loop_;
  std::unique_ptr<TcpStoreServer> store_;

  void start(int index) {
    std::vector<std::string> env = env_base_;
    const int global = opts_.node_rank * opts_.ranks + index;  // the rank in the job; index is this host's
    env.push_back(cat("BRAID_RANK=", global));
    env.push_back(cat("BRAID_WORLD_SIZE=", opts_.nnodes * opts_.ranks));
    env.push_back(cat("BRAID_LOCAL_RANK=", index));
    env.push_back(cat("BRAID_LOCAL_SIZE=", opts_.ranks));
    env.push_back(cat("BRAID_STORE_ADDR=", store_addr_));
    if (!store_standby_.empty()) env.push_back(cat("BRAID_STORE_STANDBY=", store_standby_));
    if (!job_id_.empty()) env.push_back(cat("BRAID_JOB_ID=", job_id_));
    if (opts_.elastic) {
      env.push_back("BRAID_ELASTIC=1");
      env.push_back("BRAID_STORE_EXTERNAL=1");
    }
    std::vector<char*> envp, argv;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (std::string& a : opts_.command) argv.push_back(a.data());
    argv.push_back(nullptr);

    auto [out_read, out_write] = make_pipe(true);
    auto [err_read, err_write] = make_pipe(true);
    auto [status_read, status_write] = make_pipe(false);
    pid_t launcher = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw SystemError(cat("fork failed: ", errno_text(errno)));
    cpu_set_t one;
    CPU_ZERO(&one);
    if (!cpus_.empty()) CPU_SET(cpus_[static_cast<std::size_t>(index) % cpus_.size()], &one);
    if (pid == 0)
      exec_rank(launcher, out_write.get(), err_write.get(), status_write.get(), argv.data(), envp.data(),
                cpus_.empty() ? nullptr : &one);
    ::setpgid(pid, pid);  // the child does it too; whichever runs first wins the race
    std::string prefix = opts_.prefix ? cat("[", global, "] ") : std::string();
    Rank& rank = ranks_.emplace_back();
    rank.index = global;
    rank.pid = pid;
    rank.out.emplace(std::move(out_read), out_, prefix);
    rank.err.emplace(std::move(err_read), err_, prefix);
    status_write.reset();

    // The status pipe is close-on-exec: EOF means the exec happened, an errno
    // means it failed. Waiting here reports a missing program once, not N times.
    Deadline deadline = Deadline::after(kExecConfirmTimeout);
    int err = 0;
    ssize_t got = 0;
    while (true) {
      pollfd p{status_read.get(), POLLIN, 0};
      int rc = ::poll(&p, 1, deadline.poll_ms());
      if (rc > 0) {
        got = ::read(status_read.get(), &err, sizeof err);
        if (got >= 0 || errno != EINTR) break;
      } else if ((rc < 0 && errno != EINTR) || deadline.expired()) {
        break;  // still exec'ing; a later failure shows as exit status 127
      }
    }
    if (got == static_cast<ssize_t>(sizeof err)) {
      rank.exec_failed = true;
      say(cat("cannot run '", opts_.command[0], "': ", errno_text(err)));
      stop(kExitCannotRun, SIGTERM);
    }
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<RankStream*> streams;
    bool check_children = true;
    while (true) {
      if (check_children) reap();
      check_children = false;
      check_deadlines();
      if (phase_ == Phase::given_up) return;
      if (live_ranks() == 0) {
        // Pipes still open belong to children the ranks left behind; give them
        // a bounded time to finish writing.
        if (!drain_until_) drain_until_ = Deadline::after(std::max(opts_.grace, Millis(1000)));
        bool open = std::ranges::any_of(ranks_, [](const Rank& r) { return r.out->open() || r.err->open(); });
        if (!open || drain_until_->expired()) return;
      }

      fds.clear();
      streams.clear();
      fds.push_back({signals_.get(), POLLIN, 0});
      for (Rank& rank : ranks_) {
        for (RankStream* s : {&*rank.out, &*rank.err}) {
          if (!s->open() || s->sink().backlogged()) continue;
          fds.push_back({s->fd(), POLLIN, 0});
          streams.push_back(s);
        }
      }
      std::size_t first_sink = fds.size();
      for (OutputSink* sink : {&out_, &err_})
        fds.push_back({sink->pending() ? sink->fd() : -1, POLLOUT, 0});

      int rc = ::poll(fds.data(), fds.size(), next_deadline().poll_ms());
      if (rc < 0) {
        if (errno == EINTR) continue;
        throw SystemError(cat("poll failed: ", errno_text(errno)));
      }
      check_children = rc == 0;  // a safety net besides SIGCHLD
      if (fds[0].revents != 0) check_children = handle_signals() || check_children;
      for (std::size_t i = 0; i < streams.size(); ++i)
        if (fds[i + 1].revents != 0) streams[i]->read_available();
      if (fds[first_sink].revents != 0) out_.write_some();
      if (fds[first_sink + 1].revents != 0) err_.write_some();
    }
  }

  // The deadline that matters in the current phase; poll wakes for it.
  Deadline next_deadline() const {
    if (live_ranks() == 0) return drain_until_.value_or(Deadline::never());
    switch (phase_) {
      case Phase::running: return job_deadline_;
      case Phase::stopping: return kill_at_;
      case Phase::killing: return give_up_at_;
      case Phase::given_up: break;
    }
    return Deadline::never();
  }

  // Returns whether SIGCHLD arrived.
  bool handle_signals() {
    bool child = false;
    signalfd_siginfo info;
    while (::read(signals_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      int signo = static_cast<int>(info.ssi_signo);
      if (signo == SIGCHLD) {
        child = true;
      } else if (phase_ == Phase::running) {
        say(cat("received ", signal_name(signo), "; forwarding it to the ranks"));
        stop(128 + signo, signo);
      } else if (phase_ == Phase::stopping) {
        say(cat("received ", signal_name(signo), " again; killing the ranks"));
        kill_now();
      }
    }
    return child;
  }

  void reap() {
    for (Rank& rank : ranks_) {
      if (rank.exited) continue;
      int status = 0;
      pid_t got = ::waitpid(rank.pid, &status, WNOHANG);
      if (got == rank.pid) on_exit(rank, status);
      else if (got < 0 && errno == ECHILD) rank.exited = true;
    }
  }

  void on_exit(Rank& rank, int status) {
    rank.exited = true;
    // What the rank wrote before it ended is in its pipes now; take it, so that
    // its last words come before braid-run's report.
    rank.out->read_available();
    rank.err->read_available();
    if (phase_ != Phase::running || rank.exec_failed) return;
    std::string what;
    int code = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      code = WEXITSTATUS(status);
      what = cat("rank ", rank.index, " exited with status ", code);
    } else if (WIFSIGNALED(status)) {
      const int signo = WTERMSIG(status);
      code = 128 + signo;
      what = cat("rank ", rank.index, " killed by signal ", signo, " (", signal_name(signo), ")",
                 WCOREDUMP(status) ? ", core dumped" : "");
    } else {
      return;
    }
    if (!opts_.keep_going) {
      say(what);
      stop(code, SIGTERM);
      return;
    }
    // The others go on without it; a non-zero exit still decides the status,
    // a rank a signal killed does not.
    say(cat(what, opts_.elastic ? "; the others go on without it (--elastic): start it again with the same "
                                  "command, and it joins the running job"
                                : "; the others go on (--keep-going)"));
    if (WIFEXITED(status) && !exit_code_) exit_code_ = code;
  }

  void check_deadlines() {
    if (phase_ == Phase::running && job_deadline_.expired()) {
      say(cat("the job ran past --timeout ", duration_text(*opts_.timeout)));
      stop(kExitTimeout, SIGTERM);
    }
    if (phase_ == Phase::stopping && kill_at_.expired()) kill_now();
    if (phase_ == Phase::killing && give_up_at_.expired() && live_ranks() > 0) {
      std::string pids;
      for (const Rank& rank : ranks_)
        if (!rank.exited) pids += cat(pids.empty() ? "" : ", ", "rank ", rank.index, " (pid ", rank.pid, ")");
      say(cat(pids, " still alive ", duration_text(kReapAfterKill), " after SIGKILL; giving up"));
      phase_ = Phase::given_up;
    }
  }

  // The job ends: `exit_code` unless an earlier event already decided one.
  void stop(int exit_code, int signo) {
    if (!exit_code_) exit_code_ = exit_code;
    phase_ = Phase::stopping;
    kill_at_ = Deadline::after(opts_.grace);
    auto started = std::ranges::count_if(ranks_, [](const Rank& r) { return !r.exited && !r.exec_failed; });
    if (started > 0) {
      long live = static_cast<long>(started);
      say(cat("sending ", signal_name(signo), " to ", live, " remaining rank", live == 1 ? "" : "s",
              " (SIGKILL after ", duration_text(opts_.grace), ")"));
    }
    signal_ranks(signo);
  }

  void kill_now() {
    signal_ranks(SIGKILL);
    phase_ = Phase::killing;
    give_up_at_ = Deadline::after(kReapAfterKill);
  }

  // Signals the process group of every rank not yet reaped. A reaped rank's
  // group is skipped: its id could belong to someone else by now.
  void signal_ranks(int signo) {
    for (const Rank& rank : ranks_)
      if (!rank.exited && ::killpg(rank.pid, signo) != 0) ::kill(rank.pid, signo);
  }

  int live_ranks() const {
    return static_cast<int>(std::ranges::count_if(ranks_, [](const Rank& r) { return !r.exited; }));
  }

  void say(std::string_view message) { err_.append(cat("braid-run: ", message, "\n")); }

  Options opts_;
  OutputSink out_, err_;
  Fd signals_;
  std::vector<std::string> env_base_;
  std::optional<CpuClaims> claims_;  // the CPUs this braid-run claimed, while it binds
  std::vector<int> cpus_;  // rank i is bound to cpus_[i % size]; empty: no binding
  std::string job_id_;  // empty: the user's BRAID_JOB_ID passes through
  std::string store_addr_;
  std::string store_standby_;  // BRAID_STORE_STANDBY: the --master list after its first
  std::vector<Rank> ranks_;
  Phase phase_ = Phase::running;
  std::optional<int> exit_code_;
  Deadline job_deadline_ = Deadline::never();
  Deadline kill_at_ = Deadline::never();
  Deadline give_up_at_ = Deadline::never();
  std::optional<Deadline> drain_until_;  // set once no rank is left
};

// Pipes created later must not land on 0, 1 or 2 if braid-run was started
// with one of them closed.
void open_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0) continue;
    int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0 && null_fd != fd) {
      ::dup2(null_fd, fd);
      ::close(null_fd);
    }
  }
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  using namespace braid;
  Options opts;
  Action action = Action::run;
  try {
    action = parse_args(argc, argv, opts);
  } catch (const std::exception& e) {  // UsageError, or InvalidArgument from parse_duration
    std::fprintf(stderr, "braid-run: %s\nRun 'braid-run --help' for usage.\n", e.what());
    return kExitUsage;
  }
  if (action == Action::help) {
    std::fwrite(kUsage.data(), 1, kUsage.size(), stdout);
    return 0;
  }
  if (action == Action::env_help) {
    print_env_table();
    return 0;
  }
  try {
    open_standard_fds();
    Launcher launcher(std::move(opts));
    return launcher.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid-run: %s\n", e.what());
    return 1;
  }
}
