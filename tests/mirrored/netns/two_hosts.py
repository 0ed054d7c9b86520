#!/usr/bin/python3
"""MultiWorkerMirrored on two hosts, simulated by two network namespaces.

    two_hosts.py --train PATH [--ranks-per-host N] [--epochs E] [--keep-logs]

Builds hosts a and b: network namespaces joined by a veth pair (10.213.50.1/24
and 10.213.50.2/24, loopback up), each process in it with a hostname of its
own (a UTS namespace), so braid sees two hosts, as it would across machines.
Ranks 0..N-1 run braid-train on host a and ranks N..2N-1 on host b; the store
is rank 0's, at 10.213.50.1. The job runs twice:

  braid     identity from BRAID_RANK, BRAID_WORLD_SIZE, BRAID_LOCAL_RANK,
            BRAID_LOCAL_SIZE and BRAID_STORE_ADDR, as braid-run sets them, and
            BRAID_SOCKET_IFNAME naming the host's veth.
  tf_config identity from TensorFlow's TF_CONFIG only (a chief and workers at
            10.213.50.x addresses), no BRAID_* identity and no interface: each
            rank finds its address by the route to the store. Skipped, with a
            message, when this braid does not read TF_CONFIG yet.

Each run passes when every rank exits 0; rank 0 (the chief) printed one line
per epoch, each saying "replicas consistent", with a loss within --tolerance
(relative) of the 1-replica reference the chief trains in-process; the
Summary line says the replicas were identical after every epoch; and the
training traffic crossed the veth pair.

Every process is killed after a bound, and dies with this driver. The
namespaces carry this pid in their names and are deleted in a finally block
(also on SIGTERM/SIGINT); ones left by a SIGKILLed earlier run are deleted at
start. Traffic goes only to 10.213.50.1 and .2 inside those namespaces.
Exits 0 (pass), 1 (fail) or 77 (skip: not root, no ip command, or no
namespaces here).
"""

import argparse
import ctypes
import json
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
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "netns"))
from veth_pair import IpFailed, NamespacesUnavailable, VethPair, in_namespace, run_ip  # noqa: E402

SKIP = 77
SUBNET = "10.213.50"
IDENTITY = ("BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK", "BRAID_LOCAL_SIZE", "BRAID_STORE_ADDR",
            "BRAID_SOCKET_IFNAME", "TF_CONFIG")
EPOCH_LINE = re.compile(r"^\s*epoch (\d+)\s+loss (\S+)\s+\(1 replica: (\S+), rel\. diff (\S+)\)\s+"
                        r"replica hash ([0-9a-f]{16})\s+(.*)$")
PR_SET_PDEATHSIG = 1


class Failed(Exception):
    pass


class Skipped(Exception):
    pass


class TwoHosts(VethPair):
    """Hosts a and b: namespaces braid-mw-PID-a and -b with a veth pair between them, each with a hostname."""

    def __init__(self):
        pid = os.getpid()
        super().__init__(ns=(f"braid-mw-{pid}-a", f"braid-mw-{pid}-b"), dev=(f"bmwa{pid}", f"bmwb{pid}"),
                         addr=(f"{SUBNET}.1", f"{SUBNET}.2"), stale=re.compile(r"braid-mw-(\d+)-[ab]"))
        self.hostname = ("braid-mw-host-a", "braid-mw-host-b")

    def __enter__(self):
        if os.geteuid() != 0:
            raise Skipped("needs root to create network namespaces")
        return super().__enter__()

    def distinct_hostnames(self):
        return bool(shutil.which("unshare") and shutil.which("hostname"))

    def prefix(self, host):
        """Runs a command on host 0 (a) or 1 (b): in its network namespace, under its own hostname.

        ip netns exec, unshare and sh each exec the next, so the pid is the program's."""
        return in_namespace(self.ns[host], self.hostname[host] if self.distinct_hostnames() else None)

    def veth_bytes(self, host):
        """Bytes sent and received on host's veth end so far."""
        stats = json.loads(run_ip("-n", self.ns[host], "-s", "-j", "link", "show", "dev", self.dev[host]).stdout)
        s = stats[0]["stats64"]
        return s["tx"]["bytes"] + s["rx"]["bytes"]


def die_with_parent():
    """In the child before exec: SIGKILL when the driver dies, so a killed driver leaves no ranks behind."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Rank:
    """One braid-train process with its output in files."""

    def __init__(self, rank, argv, env, logdir, tag):
        self.rank = rank
        self.out_path = os.path.join(logdir, f"{tag}-rank{rank}.out")
        self.err_path = os.path.join(logdir, f"{tag}-rank{rank}.err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True, preexec_fn=die_with_parent)

    def kill(self):
        """Sends SIGKILL (reap with wait())."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self):
        self.proc.wait(timeout=10)

    def read(self, path):
        with open(path, "r", errors="replace") as f:
            return f.read()

    def stdout(self):
        return self.read(self.out_path)

    def stderr(self):
        return self.read(self.err_path)

    def status(self):
        code = self.proc.returncode
        if code is None:
            return "running"
        return f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"

    def tail(self, lines=10):
        err = self.stderr().splitlines()[-lines:] or ["(empty)"]
        out = self.stdout().splitlines()[-3:]
        return (f"  --- rank {self.rank} ({self.status()}) stderr:\n    " + "\n    ".join(err) +
                ("\n    stdout: " + " | ".join(out) if out else ""))


def base_env():
    env = {k: v for k, v in os.environ.items() if k not in IDENTITY}
    env.setdefault("BRAID_TIMEOUT", "60s")
    return env


def braid_env(net, rank, size, per_host, port):
    host = rank // per_host
    return dict(base_env(), BRAID_RANK=str(rank), BRAID_WORLD_SIZE=str(size), BRAID_LOCAL_RANK=str(rank % per_host),
                BRAID_LOCAL_SIZE=str(per_host), BRAID_STORE_ADDR=f"{net.addr[0]}:{port}",
                BRAID_SOCKET_IFNAME=net.dev[host])


def tf_config_env(net, rank, size, per_host, port):
    # Task i listens (for TensorFlow) at its host's address, port + its index
    # there; braid uses the chief's address for its store.
    addresses = [f"{net.addr[r // per_host]}:{port + r % per_host}" for r in range(size)]
    config = {"cluster": {"chief": addresses[:1], "worker": addresses[1:]},
              "task": {"type": "chief", "index": 0} if rank == 0 else {"type": "worker", "index": rank - 1}}
    return dict(base_env(), TF_CONFIG=json.dumps(config))


def reads_tf_config(net, train):
    """Whether this braid joins from TF_CONFIG: a 1-task cluster on host a either trains or asks for BRAID_RANK."""
    env = dict(base_env(), TF_CONFIG=json.dumps({"cluster": {"chief": [f"{net.addr[0]}:0"]},
                                                 "task": {"type": "chief", "index": 0}}))
    try:
        p = subprocess.run(net.prefix(0) + [train, "--epochs", "1", "--samples", "64", "--no-reference"], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                           preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:
        raise Failed("a 1-task TF_CONFIG job on host a did not end within 60 s")
    # Not "joining as TF_CONFIG's chief", logged at INFO by one that does.
    return not (p.returncode != 0 and "braid-train: BRAID_RANK is not set (" in p.stderr)


def check_chief(out, replicas, epochs, tolerance):
    """Problems in rank 0's output; returns (problems, epoch and Summary lines)."""
    problems, lines = [], []
    for line in out.splitlines():
        if re.match(r"^\s*epoch \d+", line):
            m = EPOCH_LINE.match(line)
            if not m:
                problems.append(f"an epoch line without the 1-replica reference or the replica check: {line!r}")
                continue
            lines.append(line.strip())
            epoch, diff, verdict = int(m.group(1)), float(m.group(4)), m.group(6)
            if not verdict.startswith("replicas consistent"):
                problems.append(f"epoch {epoch}: replicas not consistent: {verdict}")
            if not diff < tolerance:  # also catches nan
                problems.append(f"epoch {epoch}: loss {m.group(2)} is {diff:.1e} from the 1-replica {m.group(3)} "
                                f"(bound {tolerance:.0e})")
    numbers = [int(EPOCH_LINE.match(l).group(1)) for l in lines]
    if numbers != list(range(1, epochs + 1)):
        problems.append(f"expected epochs 1..{epochs} in order, rank 0 printed {numbers}")
    summary = [l for l in out.splitlines() if l.startswith("Summary:")]
    if len(summary) != 1:
        problems.append(f"expected one Summary line, found {len(summary)}")
    elif not summary[0].startswith(f"Summary: MultiWorkerMirrored, {replicas} replicas: replicas identical after "
                                   "every epoch"):
        problems.append(f"the Summary does not say {replicas} replicas were identical: {summary[0]!r}")
    else:
        lines.append(summary[0])
    return problems, lines


def run_job(name, net, train, env_of, port, opts, logdir):
    """Starts every rank of one job (rank 0 first), waits at most opts.bound seconds, and checks it.

    Returns the chief's epoch and Summary lines, and the bytes that crossed the veth pair."""
    per_host, size = opts.ranks_per_host, 2 * opts.ranks_per_host
    before = net.veth_bytes(0)
    ranks = []
    try:
        for r in range(size):
            argv = net.prefix(r // per_host) + [train, "--strategy", "multi_worker_mirrored", "--epochs",
                                                 str(opts.epochs)]
            ranks.append(Rank(r, argv, env_of(net, r, size, per_host, port), logdir, name))
        end = time.monotonic() + opts.bound
        # Poll every rank each round (a list, not any() of a generator, which
        # would stop at the first running one and never see a later one fail).
        while time.monotonic() < end and None in [r.proc.poll() for r in ranks]:
            if any(r.proc.returncode not in (None, 0) for r in ranks):
                time.sleep(1)  # the others may still say what they saw; then they are stopped
                break
            time.sleep(0.05)
        stopped = [r for r in ranks if r.proc.poll() is None]
    finally:
        # All at once, so that none sees the others go and fails on its own first.
        for r in ranks:
            r.kill()
        for r in ranks:
            r.wait()
    problems = []
    failed = [r for r in ranks if r not in stopped and r.proc.returncode != 0]
    problems += [f"rank {r.rank} ended with {r.status()}" for r in failed]
    if stopped:
        why = "after another rank failed" if failed else f"still running after {opts.bound:g} s (a HANG)"
        problems.append(f"rank(s) {', '.join(str(r.rank) for r in stopped)} killed: {why}")
    chief_problems, lines = check_chief(ranks[0].stdout(), size, opts.epochs, opts.tolerance)
    problems += chief_problems
    crossed = net.veth_bytes(0) - before
    if crossed < 64 * 1024:
        problems.append(f"only {crossed} bytes crossed the veth pair: the hosts did not talk through it")
    if problems:
        raise Failed(f"{name}: " + "\n  ".join(problems) + "\n" + "\n".join(r.tail() for r in ranks))
    return lines, crossed


def on_signal(signum, frame):
    raise SystemExit(f"two_hosts: stopped by signal {signal.Signals(signum).name}; cleaning up")


def main():
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="the braid-train program")
    ap.add_argument("--ranks-per-host", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--tolerance", type=float, default=1e-3, help="bound on the relative loss difference")
    ap.add_argument("--bound", type=float, default=150, help="seconds each job may take before it is killed")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    train = os.path.abspath(args.train)
    per_host, size = args.ranks_per_host, 2 * args.ranks_per_host
    logdir = tempfile.mkdtemp(prefix="braid-mw-netns-")
    status = 0
    try:
        with TwoHosts() as net:
            print(f"hosts: {net.hostname[0]} ({net.ns[0]}, {net.dev[0]} {net.addr[0]}) and {net.hostname[1]} "
                  f"({net.ns[1]}, {net.dev[1]} {net.addr[1]}); ranks 0-{per_host - 1} on a, {per_host}-{size - 1} "
                  f"on b" + ("" if net.distinct_hostnames() else " (one hostname: no unshare or hostname command, "
                                   "so braid sees one host)"), flush=True)
            jobs = [("braid", braid_env, 29650)]
            if reads_tf_config(net, train):
                jobs.append(("tf_config", tf_config_env, 29660))
            else:
                print("tf_config: SKIPPED: this braid does not join from TF_CONFIG (Comm::from_env asks for "
                      "BRAID_RANK); only the BRAID_* run counts", flush=True)
            printed = {}
            for name, env_of, port in jobs:
                t0 = time.monotonic()
                lines, crossed = run_job(name, net, train, env_of, port, args, logdir)
                print(f"{name}: {size} ranks on 2 hosts, {time.monotonic() - t0:.1f} s, "
                      f"{crossed / 1e6:.1f} MB over the veth pair: OK", flush=True)
                for line in lines:
                    print(f"  {line}", flush=True)
                printed[name] = lines
            if len(printed) == 2:
                # The same job under another launcher: the same ranks, so the
                # same schedules and, float for float, the same training.
                same = printed["braid"] == printed["tf_config"]
                print("tf_config and braid runs printed " + ("the same losses and replica hashes" if same else
                      "different losses or replica hashes (not a failure: each matched its reference)"), flush=True)
    except (Skipped, NamespacesUnavailable) as e:
        print(f"two_hosts: SKIPPED: {e}", flush=True)
        status = SKIP
    except (Failed, IpFailed) as e:
        print(f"two_hosts: FAILED: {e}", flush=True)
        status = 1
    finally:
        if args.keep_logs or status == 1:
            print(f"  (logs in {logdir})", flush=True)
        else:
            shutil.rmtree(logdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
