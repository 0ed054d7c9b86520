#!/usr/bin/python3
"""Simulated hosts: the default transports (shm inside a host, TCP across) against TCP everywhere, interleaved.

    bench/host_boundary.py [--hosts 2] [--per-host 2] [--rounds 5] [-b 8] [-e 64K] [-n 0]
                           [--bind-to core|none] [--build build] [--json FILE]

A job of HOSTS x PER_HOST ranks on this machine, each rank told by
BRAID_HOST_ID which simulated host it is on (rank r on host r / PER_HOST), so
that braid plans and connects it as it would on HOSTS machines: shared memory
between ranks of one host, TCP between hosts. Each round launches
`braid-run -n N braid-perf all_reduce -b B -e E` twice, once with the default
transports and once with BRAID_TRANSPORT=tcp (every peer over TCP), in an
order that alternates from round to round, so that the machine's drift falls
on both alike. The table has each variant's best and median out-of-place time
per size over the rounds, and default's median over tcp's.

The question it answers: does a rank whose peers are on two transports at once
wait on one of them while a message sits on the other? (A progress engine that
naps on shared memory before it looks at TCP makes every cross-host message
wait out the nap, and the default would lose to TCP everywhere.)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from perf_rows import out_of_place_rows


def run_once(build, ranks, per_host, lo, hi, iters, bind, transport):
    env = dict(os.environ)
    env.pop("BRAID_TRANSPORT", None)
    if transport:
        env["BRAID_TRANSPORT"] = transport
    perf = [str(build / "bench/braid-perf"), "all_reduce", "-b", lo, "-e", hi, "-n", str(iters),
            "--json", "--no-progress", "-c", "0"]
    # braid-run sets BRAID_RANK for each rank; the shell names its host from it.
    shell = ["sh", "-c", f'BRAID_HOST_ID=sim$((BRAID_RANK / {per_host})) exec "$0" "$@"'] + perf
    cmd = [str(build / "tools/braid-run"), "-n", str(ranks)] + (["--bind-to", bind] if bind else []) + shell
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        print(f"{' '.join(cmd)} ({transport or 'default'}) failed ({p.returncode}):\n"
              f"{p.stdout[-1000:]}\n{p.stderr[-1000:]}", file=sys.stderr)
        return {}
    return {row["size"]: row["time_us"] for row in out_of_place_rows(p.stdout)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--per-host", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="64K")
    ap.add_argument("-n", "--iters", type=int, default=0, help="braid-perf -n (0: scaled to the size)")
    ap.add_argument("--bind-to", default="", choices=["", "core", "none"],
                    help="braid-run --bind-to for every launch (default: braid-run's own choice)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--json", default="", help="also write every measurement to this file")
    args = ap.parse_args()
    if args.hosts < 2 or args.per_host < 1:
        sys.exit(f"host_boundary.py: --hosts {args.hosts} --per-host {args.per_host}: need at least 2 hosts "
                 "and 1 rank per host")
    build = Path(args.build)
    ranks = args.hosts * args.per_host
    variants = {"default": "", "tcp": "tcp"}
    times = {name: {} for name in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            rows = run_once(build, ranks, args.per_host, args.b, args.e, args.iters, args.bind_to, variants[name])
            for size, t in rows.items():
                times[name].setdefault(size, []).append(t)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    sizes = sorted(set().union(*(set(t) for t in times.values())))
    print(f"# {args.hosts} simulated hosts x {args.per_host} ranks, all_reduce float32 sum, "
          f"{args.rounds} interleaved rounds, out-of-place time in us")
    print(f"{'size':>10} {'default best':>13} {'default med':>12} {'tcp best':>9} {'tcp med':>8} {'default/tcp':>12}")
    failed = 0
    for size in sizes:
        d = times["default"].get(size, [])
        t = times["tcp"].get(size, [])
        if not d or not t:
            print(f"{size:>10} {'(missing samples)':>30}")
            failed += 1
            continue
        dm, tm = statistics.median(d), statistics.median(t)
        print(f"{size:>10} {min(d):>13.2f} {dm:>12.2f} {min(t):>9.2f} {tm:>8.2f} {dm / tm:>12.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"hosts": args.hosts, "per_host": args.per_host,
                                               "rounds": args.rounds, "bind_to": args.bind_to,
                                               "times": times}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
