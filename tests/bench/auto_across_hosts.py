#!/usr/bin/python3
"""The short form of bench/auto_vs_forced.py --hosts 2x2: two hosts of two
ranks each (two network namespaces joined by an unshaped veth pair, each with
a host name of its own: bench/netns_hosts.py), checked for what they do, not
for how fast.

    auto_across_hosts.py --run BRAID_RUN --perf BRAID_PERF --topo BRAID_TOPO

1. braid-topo under braid-run on both hosts: rank 0 prints the job's plan; it
   must see 2 hosts of 2 ranks, shared memory inside each and tcp between
   them, and give an all_reduce band for every size from 8 B to 64 MiB, each
   saying what bounds it.
2. braid-perf all_reduce with no --algo (auto) at 8 B to 2 MiB, every 8th
   power of two, results checked (-c 1): every result right, and at every
   size the algorithm that ran is the one the plan's band names.
3. The same sizes forced to recdbl and to hierarchical: every result right,
   and the forced algorithm is the one that ran.

No time is asserted (the machine may be loaded: the plan, not the speed, is
what this checks). Every launch is killed after a bound. The namespaces carry
this driver's pid in their names and are deleted on exit, also on SIGTERM;
traffic stays inside them (10.213.1.1 and .2). Exits 0 (pass), 1 (fail) or
77 (skip: not root, no ip, tc or unshare, or no namespaces here).
"""

import argparse
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from netns_hosts import TwoHosts  # noqa: E402
from perf_rows import out_of_place_rows  # noqa: E402
from veth_pair import IpFailed, NamespacesUnavailable  # noqa: E402

SKIP = 77
LAUNCH_TIMEOUT_S = 120
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
BAND = re.compile(r"^\[0\]\s+(\S+)\s+(\d+) (B|KiB|MiB|GiB) - (\d+) (B|KiB|MiB|GiB)\s")


class Failed(Exception):
    pass


_port = [29700 + os.getpid() % 200]


def launch(args, hosts, program, env=None):
    """Runs program (a list) on both hosts, 2 ranks each; rank 0's output."""
    _port[0] += 1
    master = f"{hosts.addr[0]}:{_port[0]}"
    cmds = [hosts.prefix(k) + [args.run, "-n", "2", "--nnodes", "2", "--node-rank", str(k), "--master", master] + program
            for k in range(2)]
    full_env = dict(os.environ, BRAID_TIMEOUT="60s", **(env or {}))
    full_env.pop("BRAID_ALGO", None)
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env)
             for c in cmds]
    outs = []
    for c, p in zip(cmds, procs):
        try:
            out, _ = p.communicate(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise Failed(f"{' '.join(c)} did not finish in {LAUNCH_TIMEOUT_S} s")
        if p.returncode != 0:
            raise Failed(f"{' '.join(c)} exited {p.returncode}:\n{out[-2000:]}")
        outs.append(out)
    return outs[0]


def plan_bands(args, hosts):
    """The plan's all_reduce bands [(algorithm, first, last)] as braid-topo prints them."""
    out = launch(args, hosts, [args.topo])
    print(out[-2500:])
    if "host bench-host-0: 2 rank(s)" not in out or "host bench-host-1: 2 rank(s)" not in out:
        raise Failed("braid-topo does not see 2 hosts of 2 ranks")
    communicator = next((line for line in out.splitlines() if "communicator:" in line), "")
    if not re.search(r"shm \([^)]*\): 0-1 2-3", communicator) or "tcp (1 stream): 0-2 0-3 1-2 1-3" not in communicator:
        raise Failed(f"not shm inside each host and tcp between them: {communicator}")
    plan = next((line for line in out.splitlines() if "plan:" in line), "")
    bands, in_table = [], False
    for line in out.splitlines():
        if "all_reduce by size" in line:
            in_table = True
        elif in_table and "by size" in line:
            break
        elif in_table and (m := BAND.match(line)):
            bands.append((m.group(1), int(m.group(2)) * UNITS[m.group(3)], int(m.group(4)) * UNITS[m.group(5)]))
    if not bands or bands[0][1] != 8 or bands[-1][2] != 64 << 20:
        raise Failed(f"the all_reduce bands do not cover 8 B to 64 MiB: {bands}")
    # Every band of the plan's description says what bounds it ("[tcp latency .. shm bytes]").
    all_reduce = plan.split("all_reduce ", 1)[-1].split(", broadcast", 1)[0]
    for part in all_reduce.split(", "):
        if not re.search(r"\[(shm|tcp) (latency|bytes)( \.\. (shm|tcp) (latency|bytes))?\]", part):
            raise Failed(f"the plan's band '{part}' does not say what bounds it")
    return bands


def perf(args, hosts, algo):
    """braid-perf all_reduce, checked, at 8 B to 2 MiB: {size: (algorithm, wrong)}."""
    program = [args.perf, "all_reduce", "-b", "8", "-e", "2M", "-f", "8", "-n", "5", "-w", "1", "-c", "1", "--json",
               "--no-progress"]
    if algo:
        program += ["--algo", algo]
    rows = list(out_of_place_rows(launch(args, hosts, program)))
    if len(rows) != 7:  # 8 B, 64 B, ... 2 MiB
        raise Failed(f"braid-perf --algo {algo or 'auto'}: {len(rows)} rows, not 7")
    for row in rows:
        if row["hosts"] != 2 or row["ranks"] != 4:
            raise Failed(f"braid-perf ran on {row['ranks']} ranks on {row['hosts']} hosts: {row}")
    return {row["size"]: (row["algorithm"], row["wrong"]) for row in rows}


def check(args, hosts):
    bands = plan_bands(args, hosts)
    planned = lambda size: next(a for a, first, last in bands if first <= size <= last)  # noqa: E731
    for algo in ["", "recdbl", "hierarchical"]:
        for size, (ran, wrong) in perf(args, hosts, algo).items():
            expected = algo or planned(size)
            print(f"{algo or 'auto'} at {size} B: ran {ran} (expected {expected}), {wrong} wrong")
            if wrong:
                raise Failed(f"{algo or 'auto'} at {size} B across hosts: {wrong} wrong results")
            if ran != expected:
                raise Failed(f"{algo or 'auto'} at {size} B ran {ran}, the plan says {expected}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--perf", required=True)
    ap.add_argument("--topo", required=True)
    args = ap.parse_args()
    # SIGTERM (meson's timeout) leaves through the with-block, which deletes the namespaces.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        with TwoHosts() as hosts:
            check(args, hosts)
    except NamespacesUnavailable as e:
        print(f"SKIP: {e}")
        return SKIP
    except (Failed, IpFailed) as e:
        print(f"FAIL: {e}")
        return 1
    print("PASS: the plan across 2 namespace hosts is the one that runs, and every result is right")
    return 0


if __name__ == "__main__":
    sys.exit(main())
