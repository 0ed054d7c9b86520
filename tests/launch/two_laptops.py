#!/usr/bin/python3
"""The two-laptop demo without two laptops: two network namespaces on one machine.

    two_laptops.py --run BRAID_RUN --train BRAID_TRAIN --check LAUNCH_CHECK
                   [--perf BRAID_PERF --measure] [--epochs E] [--keep-logs]

Builds "laptop-a" and "laptop-b": network namespaces joined by a veth pair
(10.213.0.1/24 and 10.213.0.2/24) shaped to 1 Gbit/s with tc tbf on both
ends, each process in them under a hostname of its own (a UTS namespace). The
interfaces are named like a laptop's Ethernet (en...), not veth*, since braid
skips veth* as a container's. Each namespace gets an /etc/hosts of its own
(ip netns exec mounts /etc/netns/NAME/hosts): on laptop-a, as Debian writes
it, its own name maps to 127.0.1.1; on laptop-b, laptop-a maps to 10.213.0.1.
Then, with the store address given as the host name laptop-a, exactly as a
person would on two real laptops:

  1. on each laptop, braid-run -n R --nnodes 2 --node-rank K --master
     laptop-a:40000 -- launch_check: both all-reduce correctly, and every
     socket they listen on is in BRAID_PORT_RANGE=40000-40050;
  2. the demo: braid-run ... -- braid-train --per-rank (MultiWorkerMirrored,
     R = --ranks ranks per laptop, default 1): every rank prints a line per
     epoch, the replica hashes are equal on both laptops at every epoch, the
     chief says the replicas stayed identical, and every rank advertises its
     laptop's Ethernet address (laptop-a's too, though its store address is
     loopback there).

With --measure (for the record, not a pass/fail bound) it also runs iperf3
from laptop-b to laptop-a, braid-perf's all-reduce at 64 MiB across the pair,
and the demo with a wider model (--hidden 4096) with and without bf16 gradient
compression, and prints the figures.

Every process is killed after a bound and dies with this driver. The
namespaces carry this pid in their names; they and /etc/netns/NAME are
removed in a finally block (also on SIGTERM/SIGINT), and ones left by a
SIGKILLed earlier run are removed at start. Traffic goes only to 10.213.0.1
and .2 inside those namespaces. Exits 0 (pass), 1 (fail) or 77 (skip: not
root, no ip or tc command, or no namespaces here).
"""

import argparse
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "netns"))
from veth_pair import IpFailed, NamespacesUnavailable, VethPair, in_namespace, require_tools, shape_link  # noqa: E402

SKIP = 77
ADDR = ("10.213.0.1", "10.213.0.2")
HOSTNAME = ("laptop-a", "laptop-b")
STORE_PORT = 40000
PORT_RANGE = "40000-40050"
PR_SET_PDEATHSIG = 1
IDENTITY = re.compile(r"^(BRAID_(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_SIZE|STORE_ADDR|SOCKET_IFNAME|JOB_ID|HOST_ID)|RANK|"
                      r"WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TF_CONFIG|SLURM_.*|OMPI_.*|"
                      r"PMIX_.*)$")
PER_RANK = re.compile(r"rank (\d+) on (\S+): epoch (\d+)  replica hash ([0-9a-f]{16})  step (\S+) ms  (\S+) samples/s")


class Failed(Exception):
    pass


class Skipped(Exception):
    pass


class Laptops(VethPair):
    def __init__(self):
        pid = os.getpid()
        super().__init__(ns=(f"braid-lt-{pid}-a", f"braid-lt-{pid}-b"), dev=(f"enlta{pid}", f"enltb{pid}"),
                         addr=ADDR, stale=re.compile(r"braid-lt-(\d+)-[ab]"))
        self.etc = [f"/etc/netns/{ns}" for ns in self.ns]

    def __enter__(self):
        if os.geteuid() != 0:
            raise Skipped("needs root to create network namespaces")
        try:
            require_tools("tc", "unshare", "hostname")
        except NamespacesUnavailable as e:
            raise Skipped(str(e))
        for stale in Path("/etc/netns").glob("braid-lt-*") if Path("/etc/netns").is_dir() else []:
            m = re.fullmatch(r"braid-lt-(\d+)-[ab]", stale.name)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                shutil.rmtree(stale, ignore_errors=True)
        super().__enter__()
        try:
            # /etc/hosts per laptop: laptop-a's own name is loopback there (as
            # Debian's installer writes it) and 10.213.0.1 on laptop-b.
            hosts = (f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME[0]}\n{ADDR[1]} {HOSTNAME[1]}\n",
                     f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME[1]}\n{ADDR[0]} {HOSTNAME[0]}\n")
            for etc, text in zip(self.etc, hosts):
                os.makedirs(etc, exist_ok=True)
                Path(etc, "hosts").write_text(text)
            for ns, dev in zip(self.ns, self.dev):
                shape_link(ns, dev, "1gbit")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for etc in self.etc:
            shutil.rmtree(etc, ignore_errors=True)
        return super().__exit__(*exc)

    def prefix(self, host):
        """A command on laptop `host` (0 or 1): in its namespace, its /etc/hosts, its own hostname."""
        return in_namespace(self.ns[host], HOSTNAME[host])


def die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not IDENTITY.match(k)}
    env.update(BRAID_TIMEOUT="60s", BRAID_PORT_RANGE=PORT_RANGE, BRAID_DEBUG="INFO")
    env.update(extra)
    return env


def run_pair(net, argv_of, bound, logdir, tag, env=None):
    """Starts argv_of(host) on both laptops at once; returns their (status, stdout, stderr) after at most bound s."""
    procs, files = [], []
    try:
        for host in (0, 1):
            out = open(os.path.join(logdir, f"{tag}-{HOSTNAME[host]}.out"), "w+")
            err = open(os.path.join(logdir, f"{tag}-{HOSTNAME[host]}.err"), "w+")
            files.append((out, err))
            procs.append(subprocess.Popen(net.prefix(host) + argv_of(host), env=env or clean_env(),
                                          stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                                          preexec_fn=die_with_parent))
        end = time.monotonic() + bound
        while time.monotonic() < end and None in [p.poll() for p in procs]:
            if any(p.returncode not in (None, 0) for p in procs):
                time.sleep(1)
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in procs:
            p.wait(timeout=10)
    results = []
    for p, (out, err) in zip(procs, files):
        out.seek(0)
        err.seek(0)
        results.append((p.returncode, out.read(), err.read()))
        out.close()
        err.close()
    return results


def braid_run(args, host, nodes_args):
    return [args.run, "-n", str(args.ranks), "--nnodes", "2", "--node-rank", str(host), "--master",
            f"{HOSTNAME[0]}:{STORE_PORT}", "--timeout", "90s", "--"] + nodes_args


def tail(text, n=12):
    return "\n    ".join(text.splitlines()[-n:]) or "(empty)"


def check_pair(name, results):
    problems = [f"{HOSTNAME[h]}: exit {r[0]}\n    stdout: {tail(r[1], 4)}\n    stderr: {tail(r[2])}"
                for h, r in enumerate(results) if r[0] != 0]
    if problems:
        raise Failed(f"{name}:\n  " + "\n  ".join(problems))


def demo(net, args, logdir, tag, extra, samples=None):
    """Runs the demo across the laptops; returns the per-rank epoch lines of each laptop."""
    train = [args.train, "--strategy", "multi_worker_mirrored", "--epochs", str(args.epochs), "--per-rank",
             "--no-reference"] + extra
    if samples:
        train += ["--samples", str(samples)]
    results = run_pair(net, lambda h: braid_run(args, h, train), 150, logdir, tag)
    check_pair(f"demo ({tag})", results)
    lines = [[PER_RANK.search(l) for l in r[1].splitlines() if PER_RANK.search(l)] for r in results]
    # Every rank of a laptop prints one line per epoch; all must agree.
    hashes = []
    for h in (0, 1):
        ranks = range(args.ranks * h, args.ranks * (h + 1))
        got = sorted((int(m.group(3)), int(m.group(1))) for m in lines[h])
        expected = sorted((e, r) for e in range(1, args.epochs + 1) for r in ranks)
        if got != expected:
            raise Failed(f"demo ({tag}): {HOSTNAME[h]} printed (epoch, rank) {got}, expected {expected}")
        if any(m.group(2) != HOSTNAME[h] for m in lines[h]):
            raise Failed(f"demo ({tag}): a rank on {HOSTNAME[h]} says it runs elsewhere: {lines[h][0].group(0)}")
        hashes.append(sorted({(int(m.group(3)), m.group(4)) for m in lines[h]}))
    if hashes[0] != hashes[1] or len(hashes[0]) != args.epochs:
        raise Failed(f"demo ({tag}): the replica hashes differ (between the laptops or between ranks): "
                     f"{hashes[0]} against {hashes[1]}")
    summary = [l for l in results[0][1].splitlines() if "Summary:" in l]
    if len(summary) != 1 or "replicas identical after every epoch" not in summary[0]:
        raise Failed(f"demo ({tag}): the chief's Summary does not say the replicas stayed identical: {summary}")
    return lines, summary[0], results


def measure(net, args, logdir):
    """iperf3 and braid's 64 MiB all-reduce across the pair, then the demo's step time with and without bf16."""
    if shutil.which("iperf3") is None:
        print("measure: no iperf3 command; skipping the link rate", flush=True)
        iperf = None
    else:
        server = subprocess.Popen(["ip", "netns", "exec", net.ns[0], "iperf3", "-s", "-1", "-B", ADDR[0]],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
        try:
            time.sleep(0.5)
            p = subprocess.run(["ip", "netns", "exec", net.ns[1], "iperf3", "-c", ADDR[0], "-t", "5", "-J"],
                               capture_output=True, text=True, timeout=30)
        finally:
            server.kill()
            server.wait()
        import json
        iperf = json.loads(p.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9
        print(f"measure: iperf3 laptop-b -> laptop-a: {iperf:.3f} Gbit/s", flush=True)
    if args.perf:
        perf = [args.perf, "all_reduce", "-b", "64M", "-e", "64M", "-n", "10", "-w", "3", "-d", "float", "-o", "sum"]
        results = run_pair(net, lambda h: braid_run(args, h, perf), 150, logdir, "perf")
        check_pair("braid-perf", results)
        print("measure: braid-perf all_reduce 64 MiB across the pair (rank 0's output):", flush=True)
        for line in results[0][1].splitlines():
            print(f"  {line}", flush=True)
        m = re.search(r"Avg bus bandwidth\s*:\s*(\S+)", results[0][1])
        if m and iperf:
            busbw = float(m.group(1)) * 8  # GB/s to Gbit/s
            print(f"measure: braid all_reduce busbw at 64 MiB {busbw:.3f} Gbit/s = {100 * busbw / iperf:.1f}% of "
                  f"iperf3's {iperf:.3f} Gbit/s on the same pair", flush=True)
    # A wider model than the demo's (18 x 4096 + 1 floats of gradient, 288 KiB,
    # in one bucket) and one sample per replica and step, so that the link,
    # not the latency or the (scalar) model code, sets the step time.
    wide = ["--hidden", str(args.hidden), "--bucket-kib", "1024", "--global-batch", "2"]
    for extra, name in ((wide, "no compression"), (wide + ["--compression", "bf16"], "bf16 compression")):
        lines, summary, _ = demo(net, args, logdir, "measure-" + name.replace(" ", "-"), extra, samples=args.samples)
        steps = [float(m.group(5)) for m in lines[0]]
        print(f"measure: demo step time (--hidden {args.hidden}), {name}: {', '.join(f'{s:.2f}' for s in steps)} ms per epoch "
              f"(median {sorted(steps)[len(steps) // 2]:.2f} ms)", flush=True)


def on_signal(signum, frame):
    raise SystemExit(f"two_laptops: stopped by signal {signal.Signals(signum).name}; cleaning up")


def main():
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="braid-run")
    ap.add_argument("--train", required=True, help="braid-train")
    ap.add_argument("--check", required=True, help="launch_check")
    ap.add_argument("--perf", help="braid-perf, for --measure")
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=1, help="ranks per laptop")
    ap.add_argument("--samples", type=int, default=512, help="dataset size of the --measure demo runs")
    ap.add_argument("--hidden", type=int, default=4096, help="hidden units of the --measure demo runs")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    for k in ("run", "train", "check", "perf"):
        if getattr(args, k):
            setattr(args, k, os.path.abspath(getattr(args, k)))
    logdir = tempfile.mkdtemp(prefix="braid-two-laptops-")
    status = 0
    try:
        with Laptops() as net:
            print(f"laptop-a: {net.dev[0]} {ADDR[0]}; laptop-b: {net.dev[1]} {ADDR[1]}; 1 Gbit/s (tbf); "
                  f"store at {HOSTNAME[0]}:{STORE_PORT} (127.0.1.1 on laptop-a, {ADDR[0]} on laptop-b)", flush=True)
            t0 = time.monotonic()
            check = [args.check, "--expect-source", "braid", "--port-range", PORT_RANGE]
            results = run_pair(net, lambda h: braid_run(args, h, check), 60, logdir, "check")
            check_pair("launch_check across the laptops", results)
            for h, r in enumerate(results):
                for line in r[1].splitlines():
                    if "launch_check:" in line:
                        print(f"  {HOSTNAME[h]}: {line}", flush=True)
            print(f"launch_check: {2 * args.ranks} ranks across the pair all-reduced; ports in {PORT_RANGE} "
                  f"({time.monotonic() - t0:.1f} s)", flush=True)
            t0 = time.monotonic()
            lines, summary, results = demo(net, args, logdir, "demo", [])
            for h in (0, 1):
                for m in lines[h]:
                    print(f"  {HOSTNAME[h]}: {m.group(0)}", flush=True)
            print(f"  {summary.strip()}", flush=True)
            for h in (0, 1):
                # laptop-a reached its store through 127.0.1.1, yet advertises its Ethernet address.
                chosen = [l for l in results[h][2].splitlines() if "advertising" in l]
                if not chosen or any(f"advertising {ADDR[h]} ({net.dev[h]})" not in l for l in chosen):
                    raise Failed(f"demo: the ranks on {HOSTNAME[h]} do not all advertise {ADDR[h]} ({net.dev[h]}): "
                                 f"{chosen}")
                print(f"  {HOSTNAME[h]}: {chosen[0].strip()}", flush=True)
            print(f"demo: both laptops printed the same replica hash every epoch ({time.monotonic() - t0:.1f} s)",
                  flush=True)
            if args.measure:
                measure(net, args, logdir)
    except (Skipped, NamespacesUnavailable) as e:
        print(f"two_laptops: SKIPPED: {e}", flush=True)
        status = SKIP
    except (Failed, IpFailed) as e:
        print(f"two_laptops: FAILED: {e}", flush=True)
        status = 1
    finally:
        if args.keep_logs or status == 1:
            print(f"  (logs in {logdir})", flush=True)
        else:
            shutil.rmtree(logdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
