#!/usr/bin/python3
"""bench/compare.py: braid against Open MPI and Gloo, in one run, on this machine.

    bench/compare.py [--hosts 2x2 [--shape 1gbit]] [--ranks 2,4] [--collectives all_reduce,broadcast] [-b 8 -e 64M -f 2]
                  [--rounds 3] [--variants braid/shm,openmpi/vader] [--out DIR] [--build DIR] [--no-install] [--no-plots] [--smoke]

Runs the same sweep (float32, sum, out of place; iterations scaled to the size
as braid-perf -n 0 does) with every variant in VARIANTS that this machine can
run, round after round. Each round launches every variant once per rank count
and collective, in an order that rotates from round to round, so that drift
on a shared machine hits all libraries alike. It writes every measurement to
DIR/compare.csv, prints the best and the median per size, and a ratio table:
braid's busbw over the busbw of the best peer of the same transport class
(> 1: braid is faster; at one size, busbw ratio = inverse time ratio). With
matplotlib it also draws DIR/busbw_<collective>.png and
DIR/latency_<collective>.png (bench/plot_results.py). Unless --no-limits or
--smoke, it also measures the machine's limits (bench/limits.py, written to
DIR/limits.csv), prints the least all-reduce time it models per size (2 and 4
ranks over shm and tcp), shows each braid row's median time against that
limit ("limit/braid") and the best peer's median time against it ("ceiling":
the most any library could lead that peer by here), and shows braid's TCP busbw
as a fraction of one loopback TCP stream (iperf3's when installed).

Transport classes: "tcp" moves bytes through the kernel's TCP stack over
loopback (braid's tcp, Open MPI's btl tcp, Open MPI over UCX restricted to
UCX's tcp transport, braid over UCX's tcp (ucx-tcp), Gloo); "shm" through
shared memory (Open MPI's vader btl, Open MPI over UCX with UCX's own choice,
which on one host is its shared-memory and CMA transports, or restricted to
posix,cma (ucx-shm) as braid's ucx-shm row is). braid's transports are found
by asking braid-perf for each entry of BRAID_TRANSPORTS, so a new braid
transport becomes a new row of the table with one line.

With --hosts 2xN the sweep runs across two hosts of N ranks each: two
network namespaces joined by a veth pair (bench/netns_hosts.py; root), each
with its own host name, --shape shaping the pair with tc tbf. The variants
are then braid (one braid-run per namespace: shared memory inside, tcp
across) and Open MPI (mpirun in the first namespace, a hostfile of the two
host names and an rsh agent that runs `ip netns exec` into the other one,
ob1 with the vader, tcp and self btls, tcp and the runtime's own wire bound
to the veth subnet) in two placements: bound to cores as mpirun binds when a
host's slots fit its cores, and unbound with mpi_yield_when_idle, Open MPI's
setting for more ranks than cores (the namespaces share this machine's
cores). Their class is "2 hosts", so the ratio table gets a row of its own.

Unless --no-install, it first installs Open MPI and Gloo
(scripts/install-deps.sh --bench) and builds the harnesses in bench/peers/.
"""
import argparse
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare_report  # noqa: E402
from netns_hosts import HOSTNAME as HOST_NAMES, TwoHosts  # noqa: E402

# braid transports to try: (label, class, environment, braid-perf options).
# A transport braid does not have is left out after one quick probe. UCX runs
# in its two flavours here, as Open MPI's UCX rows do: UCX's tcp on loopback,
# and its shared memory with CMA. shm-mem is shm with buffers from
# braid_mem_alloc (braid-perf -R 1), which the ranks read in place.
BRAID_TRANSPORTS = [
    ("tcp", "tcp", {"BRAID_TRANSPORT": "tcp"}, []),
    ("shm", "shm", {"BRAID_TRANSPORT": "shm"}, []),
    ("shm-mem", "shm", {"BRAID_TRANSPORT": "shm"}, ["-R", "1"]),
    ("ucx-tcp", "tcp", {"BRAID_TRANSPORT": "ucx", "UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}, []),
    ("ucx-shm", "shm", {"BRAID_TRANSPORT": "ucx", "UCX_TLS": "posix,cma"}, []),
]

# The peers: (library, transport label, class, how to start it).
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def others_running():
    """As braid-run asks before it binds more ranks than CPUs (tools/cpu_claims.hpp):
    whether another task keeps a CPU busy, the least procs_running of 5 reads of
    /proc/stat 1 ms apart, less this process."""
    least = None
    for sample in range(5):
        if sample:
            time.sleep(0.001)
        try:
            with open("/proc/stat") as f:
                line = next((l for l in f if l.startswith("procs_running ")), None)
        except OSError:
            return True
        if line is None:
            return True
        n = int(line.split()[1])
        least = n if least is None else min(least, n)
    return least > 1


def mpi_binding(ranks):
    """Placement as braid-run's: each rank on a core of its own when the ranks
    fit the CPUs this process may use; more ranks than CPUs round robin over
    them (rank i on core i mod the cores, as braid-run binds them) when nothing
    else runs, else left to the kernel."""
    fit = ranks <= len(os.sched_getaffinity(0))
    if fit:
        return ["--bind-to", "core"]
    return ["--bind-to", "none"] if others_running() else ["--bind-to", "core:overload-allowed"]
UCX = ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any"]
PEERS = [
    ("openmpi", "tcp", "tcp", ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]),
    ("openmpi", "ucx-tcp", "tcp", UCX + ["-x", "UCX_TLS=tcp,self", "-x", "UCX_NET_DEVICES=lo"]),
    ("openmpi", "vader", "shm", ["--mca", "pml", "ob1", "--mca", "btl", "vader,self"]),
    ("openmpi", "ucx", "shm", UCX),
    ("openmpi", "ucx-shm", "shm", UCX + ["-x", "UCX_TLS=posix,cma,self"]),
    ("gloo", "tcp", "tcp", None),
]

LAUNCH_TIMEOUT_S = 600


def parse_size(text):
    units = {"": 1, "B": 1, "K": 1 << 10, "k": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    digits = text.rstrip("BKkMG")
    return int(digits) * units[text[len(digits):]]


class Variant:
    def __init__(self, library, transport, klass, command, env=None):
        self.library, self.transport, self.klass = library, transport, klass
        self.command, self.env = command, env or {}

    @property
    def name(self):
        return f"{self.library}/{self.transport}"


def sweep_args(args):
    return ["-b", str(args.min_bytes), "-e", str(args.max_bytes), "-f", str(args.factor), "-n", str(args.iters)]


def find_variants(args, build):
    run = os.path.join(build, "tools", "braid-run")
    perf = os.path.join(build, "bench", "braid-perf")
    mpi_perf = os.path.join(build, "bench", "peers", "mpi_perf")
    gloo_perf = os.path.join(build, "bench", "peers", "gloo_perf")
    variants, missing = [], []
    for transport, klass, transport_env, perf_args in BRAID_TRANSPORTS:
        env = {**transport_env, "BRAID_SOCKET_IFNAME": "lo", "BRAID_TIMEOUT": "120s"}
        probe = subprocess.run([run, "-n", "1", "--timeout", "30s", perf, "all_reduce", "-b", "8", "-e", "8", "-n", "1",
                                "-w", "0", "-c", "0", "--csv", *perf_args], env={**os.environ, **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            missing.append(f"braid/{transport} (not built into this braid)")
            continue

        def braid_command(ranks, collective, _unused_dir, args=args, perf_args=perf_args):
            return [run, "-n", str(ranks), "--no-prefix", "--timeout", f"{LAUNCH_TIMEOUT_S}s", perf, collective,
                    *sweep_args(args), "-c", "0", "--csv", "--no-progress", *perf_args]
        variants.append(Variant("braid", transport, klass, braid_command, env))
    for library, transport, klass, mca in PEERS:
        if library == "openmpi":
            if not (os.access(mpi_perf, os.X_OK) and shutil.which("mpirun")):
                missing.append(f"openmpi/{transport} (no {mpi_perf} or mpirun)")
                continue

            def mpi_command(ranks, collective, _unused_dir, mca=mca, transport=transport):
                return [*MPIRUN, *mpi_binding(ranks), "-np", str(ranks), *mca, mpi_perf, collective, *sweep_args(args),
                        "--transport", transport]
            variants.append(Variant(library, transport, klass, mpi_command))
        elif library == "gloo":
            if not os.access(gloo_perf, os.X_OK):
                missing.append(f"gloo/{transport} (no {gloo_perf})")
                continue

            def gloo_command(ranks, collective, store_dir):
                return [run, "-n", str(ranks), "--no-prefix", "--timeout", f"{LAUNCH_TIMEOUT_S}s", gloo_perf, collective,
                        "--store", store_dir, *sweep_args(args)]
            variants.append(Variant(library, transport, klass, gloo_command))
    return variants, missing


def host_variants(args, build, hosts, per_host):
    """The variants across the two namespace hosts of `hosts` (a TwoHosts), per_host ranks each."""
    run = os.path.join(build, "tools", "braid-run")
    perf = os.path.join(build, "bench", "braid-perf")
    mpi_perf = os.path.join(build, "bench", "peers", "mpi_perf")
    launches = [0]

    def braid_command_bound(bind):
        def braid_command(ranks, collective, _unused_dir):
            # One braid-run per host, a store port of its own per launch.
            launches[0] += 1
            master = f"{hosts.addr[0]}:{29800 + launches[0] % 150}"
            return [hosts.prefix(k) + [run, "-n", str(per_host), "--nnodes", "2", "--node-rank", str(k), "--master",
                                       master, "--bind-to", bind, "--no-prefix", "--timeout", f"{LAUNCH_TIMEOUT_S}s",
                                       perf, collective, *sweep_args(args), "-c", "0", "--csv", "--no-progress"]
                    for k in range(2)]
        return braid_command
    # braid-run binds each host's ranks to the CPUs from the first (so the
    # ranks of the two namespaces share them pairwise); unbound, the kernel
    # places them, as Open MPI's yielding variant runs.
    variants = [Variant("braid", "hosts", "2 hosts", braid_command_bound("core"), {"BRAID_TIMEOUT": "120s"}),
                Variant("braid", "hosts-unbound", "2 hosts", braid_command_bound("none"), {"BRAID_TIMEOUT": "120s"})]
    # --braid-env NAME=V[;NAME=V]: braid across the hosts with those
    # settings too, as a variant of its own in the same rounds.
    for spec in args.braid_env:
        extra = dict(kv.split("=", 1) for kv in spec.split(";") if kv)
        variants.append(Variant("braid", "hosts+" + spec.replace(";", "+"), "2 hosts", braid_command_bound("core"),
                                {"BRAID_TIMEOUT": "120s", **extra}))
    missing = []
    if not (os.access(mpi_perf, os.X_OK) and shutil.which("mpirun")):
        return variants, [f"openmpi/hosts (no {mpi_perf} or mpirun)"]
    # Open MPI's rsh agent: the command for host $1 runs in its namespace,
    # under its host name, as ssh would run it there.
    agent_dir = tempfile.mkdtemp(prefix="braid-compare-mpi-")
    agent = os.path.join(agent_dir, "netns-rsh")
    cases = "\n".join(f"  {name}) ns={ns} ;;" for name, ns in zip(HOST_NAMES, hosts.ns))
    with open(agent, "w") as f:
        f.write(f"""#!/bin/sh
host="$1"; shift
case "$host" in
{cases}
  *) echo "netns-rsh: unknown host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
""")
    os.chmod(agent, 0o755)
    hostfile = os.path.join(agent_dir, "hosts")
    with open(hostfile, "w") as f:
        f.write("".join(f"{name} slots={per_host}\n" for name in HOST_NAMES))
    subnet = hosts.addr[0].rsplit(".", 1)[0] + ".0/24"
    base = ["--hostfile", hostfile, "--mca", "plm_rsh_agent", agent, "--mca", "oob_tcp_if_include", subnet,
            "--mca", "btl_tcp_if_include", subnet, "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"]
    placements = [("hosts", mpi_binding(per_host)),
                  ("hosts-yield", ["--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"])]
    for transport, placement in placements:
        def mpi_command(ranks, collective, _unused_dir, placement=placement, transport=transport):
            return hosts.prefix(0) + [*MPIRUN, *placement, "-np", str(ranks), *base, mpi_perf, collective,
                                      *sweep_args(args), "--transport", transport]
        variants.append(Variant("openmpi", transport, "2 hosts", mpi_command))
    return variants, missing


def launch(variant, ranks, collective):
    """One launch of one variant: its CSV rows (out of place only), or an error text.
    A variant across hosts gives one command per host; the first prints the rows."""
    with tempfile.TemporaryDirectory(prefix="braid-compare-") as store_dir:
        command = variant.command(ranks, collective, store_dir)
        commands = command if isinstance(command[0], list) else [command]
        procs = [subprocess.Popen(c, env={**os.environ, **variant.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for c in commands]
        results = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=LAUNCH_TIMEOUT_S + 30)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                    q.communicate()
                return None, f"{variant.name}: timed out after {LAUNCH_TIMEOUT_S + 30} s"
            results.append((p.returncode, out, err))
    for code, _, err in results:
        if code != 0:
            return None, f"{variant.name} on {ranks} ranks: exit status {code}: {err.strip()[-600:]}"
    stdout = results[0][1]
    lines = [line for line in stdout.splitlines() if line.count(",") >= 14]
    rows = [r for r in csv.DictReader(lines) if r["in_place"] == "false"]
    return rows, None


def install_and_build(build):
    subprocess.run([os.path.join(ROOT, "scripts", "install-deps.sh"), "--bench"], check=True)
    env = {**os.environ, "BUILD_DIR": os.path.relpath(build, ROOT) if build.startswith(ROOT) else build}
    subprocess.run([os.path.join(ROOT, "scripts", "build.sh")], check=True, env=env)
    peers = [os.path.join(build, "bench", "peers", p) for p in ("mpi_perf", "gloo_perf")]
    if not all(os.access(p, os.X_OK) for p in peers):
        # A build directory configured before Open MPI or Gloo was installed:
        # Meson looks for them again.
        subprocess.run(["meson", "setup", "--reconfigure", build], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", build], check=True, stdout=subprocess.DEVNULL)


def limit_function(limits_module, machine):
    """limit_us(collective, class, ranks, size) for compare_report: the least
    all-reduce time bench/limits.py models over shm or tcp; None elsewhere."""
    if machine is None:
        return None

    def limit_us(collective, cls, ranks, size):
        if collective != "all_reduce" or cls not in ("shm", "tcp"):
            return None
        return limits_module.modelled_us(machine, cls, ranks, size)
    return limit_us


def report_only(args, out):
    records = compare_report.read_csv(args.from_csv)
    rounds = len({r["round"] for r in records})
    stream = None
    limits_csv = os.path.join(os.path.dirname(os.path.abspath(args.from_csv)), "limits.csv")
    limit_us = None
    if os.path.exists(limits_csv):
        with open(limits_csv, newline="") as f:
            streams = {r["build"]: float(r["median"]) for r in csv.DictReader(f) if r["measure"] == "tcp_stream"}
        stream = streams.get("iperf3") or streams.get("threads")
        import limits
        limit_us = limit_function(limits, limits.read_csv(limits_csv))
    table_sizes = [parse_size(s) for s in args.table_sizes.split(",")]
    print(compare_report.format_tables(compare_report.summarize(records), table_sizes, rounds, stream, limit_us))
    if not args.no_plots:
        import plot_results
        for path in plot_results.plot(args.from_csv, out):
            print(f"plot: {path}")
    return 0


def main():
    p = argparse.ArgumentParser(description="braid against Open MPI and Gloo, interleaved, with plots.")
    p.add_argument("--ranks", default="2,4", help="rank counts, comma-separated (default 2,4)")
    p.add_argument("--collectives", default="all_reduce,broadcast")
    p.add_argument("-b", dest="min_bytes", default="8", type=parse_size)
    p.add_argument("-e", dest="max_bytes", default="64M", type=parse_size)
    p.add_argument("-f", dest="factor", default=2, type=int)
    p.add_argument("-n", dest="iters", default=0, type=int,
                   help="timed iterations per size; 0 (default): scaled to the size, as braid-perf -n 0")
    p.add_argument("--rounds", default=3, type=int)
    p.add_argument("--variants", default=None,
                   help="only these variants, comma-separated (e.g. braid/shm,openmpi/vader; default: all)")
    p.add_argument("--table-sizes", default="8,1M,16M,64M", help="sizes of the printed tables (those in the sweep)")
    p.add_argument("--out", default=None, help="output directory (default BUILD/bench-results)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--no-install", action="store_true", help="do not install Open MPI and Gloo or build")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-limits", action="store_true", help="do not measure the machine's limits (bench/limits.py)")
    p.add_argument("--from-csv", metavar="CSV", help="run nothing: print the tables and draw the plots of an "
                   "earlier run's compare.csv (and its limits.csv, when next to it)")
    p.add_argument("--hosts", default="", help="2xN: across two hosts (network namespaces) of N ranks each")
    p.add_argument("--braid-env", action="append", default=[], metavar="NAME=V[;NAME=V]",
                   help="with --hosts: one more braid variant with these settings (repeatable)")
    p.add_argument("--shape", default="", help="with --hosts: shape the link between them (tc tbf rate: 1gbit)")
    p.add_argument("--smoke", action="store_true",
                   help="a few seconds: 2 ranks, all_reduce, 8 B to 4 KiB, 3 iterations, 1 round")
    args = p.parse_args()
    if args.smoke:
        args.ranks, args.collectives, args.min_bytes, args.max_bytes = "2", "all_reduce", 8, 4096
        args.factor, args.iters, args.rounds, args.table_sizes = 8, 3, 1, "8,4096"
    build = os.path.abspath(args.build)
    out = os.path.abspath(args.out or os.path.join(build, "bench-results"))
    os.makedirs(out, exist_ok=True)
    if args.from_csv:
        return report_only(args, out)
    if not args.no_install:
        install_and_build(build)

    if args.hosts:
        m = re.fullmatch(r"2x(\d+)", args.hosts)
        if not m:
            sys.exit(f"compare: --hosts {args.hosts}: only two hosts are supported (2x1, 2x2, 2x4)")
        # SIGTERM (a timeout) leaves through the with-block, which deletes the namespaces.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        with TwoHosts(args.shape) as hosts:
            print(f"compare: {hosts.describe()}, {m.group(1)} ranks each", file=sys.stderr)
            args.ranks = str(2 * int(m.group(1)))
            variants, missing = host_variants(args, build, hosts, int(m.group(1)))
            return measure(args, build, out, variants, missing)
    variants, missing = find_variants(args, build)
    return measure(args, build, out, variants, missing)


def measure(args, build, out, variants, missing):
    for m in missing:
        print(f"compare: skipping {m}", file=sys.stderr)
    if args.variants:
        wanted = args.variants.split(",")
        unknown = [w for w in wanted if w not in {v.name for v in variants}]
        if unknown:
            sys.exit(f"compare: --variants names {', '.join(unknown)}; this machine can run "
                     f"{', '.join(v.name for v in variants)}")
        variants = [v for v in variants if v.name in wanted]
    if not any(v.library == "braid" for v in variants):
        sys.exit("compare: braid-perf did not run; build braid first (scripts/build.sh)")
    rank_counts = [int(r) for r in args.ranks.split(",")]
    collectives = args.collectives.split(",")
    print(f"compare: {len(variants)} variants ({', '.join(v.name for v in variants)}), ranks {args.ranks}, "
          f"{args.rounds} round(s), {args.min_bytes}..{args.max_bytes} B x{args.factor}", file=sys.stderr)

    records, failures = [], []
    started = time.monotonic()
    for round_ in range(args.rounds):
        for ranks in rank_counts:
            for collective in collectives:
                k = round_ % len(variants)
                for variant in variants[k:] + variants[:k]:
                    rows, error = launch(variant, ranks, collective)
                    if error:
                        failures.append(error)
                        print(f"compare: {error}", file=sys.stderr)
                        continue
                    for r in rows:
                        records.append({"round": round_, "library": variant.library, "transport": variant.transport,
                                        "class": variant.klass, "collective": collective, "ranks": ranks,
                                        "size": int(r["size"]), "time_us": float(r["time_us"]),
                                        "algbw_gbps": float(r["algbw_gbps"]), "busbw_gbps": float(r["busbw_gbps"]),
                                        "wrong": r["wrong"]})
        print(f"compare: round {round_ + 1} of {args.rounds} done, {time.monotonic() - started:.0f} s", file=sys.stderr)

    csv_path = os.path.join(out, "compare.csv")
    compare_report.write_csv(csv_path, records)
    summary = compare_report.summarize(records)
    table_sizes = [parse_size(s) for s in args.table_sizes.split(",")]
    stream = None
    limit_us = None
    if not args.smoke and not args.no_limits and not args.hosts:
        import limits
        machine = limits.measure(build)
        limits.write_csv(os.path.join(out, "limits.csv"), machine)
        print(limits.format_limits(machine) + "\n")
        print(limits.format_model(machine) + "\n")
        stream = machine["tcp"]["iperf3_gbps"] or machine["tcp"]["stream_gbps"]
        limit_us = limit_function(limits, machine)
    print(compare_report.format_tables(summary, table_sizes, args.rounds, stream, limit_us))
    print(f"csv: {csv_path}")
    if not args.no_plots:
        try:
            import plot_results
        except ImportError as e:  # matplotlib missing
            print(f"compare: no plots ({e}); install python3-matplotlib", file=sys.stderr)
        else:
            for path in plot_results.plot(csv_path, out):
                print(f"plot: {path}")
    wrong = [r for r in records if r["wrong"] not in ("", "0")]
    if wrong:
        print(f"compare: {len(wrong)} measurements had wrong elements", file=sys.stderr)
    return 1 if failures or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
