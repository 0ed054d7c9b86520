#!/usr/bin/python3
"""The planner's all-reduce choice against every forced algorithm, interleaved.

    bench/auto_vs_forced.py [--ranks 2 4] [--rounds 3] [-b 8] [-e 64M] [-n 10] [-w 2] [--algos ring,direct,...]
                            [--build build] [--json FILE]

Each round runs, for every rank count, `braid-run -n N braid-perf all_reduce
-b MIN -e MAX --algo X` once per algorithm and once with no --algo (auto), in
an order that rotates from round to round, so that the machine's drift (other
jobs on this shared machine) falls on every variant alike. The table has, per
size, each variant's best and median out-of-place time over the rounds, the
algorithm auto ran (braid-perf's algorithm column: the communicator's plan),
and auto's time over the best forced one's (best against best, median against
median). "ok" marks sizes where auto is within --within (10%) of the best
forced one on either statistic.

The algorithms default to those braid-perf --help lists for all_reduce (the
algorithm registry), less hierarchical on one host (it runs as the ring there).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def registry_algorithms(perf):
    out = subprocess.run([perf, "--help"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("all_reduce:"):
            return line.split(":", 1)[1].split()
    raise SystemExit("braid-perf --help lists no all_reduce algorithms")


def run_once(build, ranks, algo, lo, hi, iters, warmup, env):
    cmd = [str(build / "tools/braid-run"), "-n", str(ranks), str(build / "bench/braid-perf"), "all_reduce",
           "-b", lo, "-e", hi, "-n", str(iters), "-w", str(warmup), "--json", "--no-progress", "-c", "0"]
    if algo != "auto":
        cmd += ["--algo", algo]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        # A failed run (a timeout on a loaded machine) costs its variant this
        # round's samples, not the whole table.
        print(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-1000:]}\n{p.stderr[-1000:]}", file=sys.stderr)
        return {}
    rows = {}
    for line in p.stdout.splitlines():
        brace = line.find("{")
        if brace < 0:
            continue
        row = json.loads(line[brace:])
        if row.get("in_place"):
            continue
        rows[row["size"]] = (row["time_us"], row["algorithm"])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="64M")
    ap.add_argument("-n", "--iters", type=int, default=10, help="braid-perf -n (timed iterations per size)")
    ap.add_argument("-w", "--warmup", type=int, default=2, help="braid-perf -w (untimed iterations first)")
    ap.add_argument("--algos", default="", help="comma-separated; default: the registry's, less hierarchical")
    ap.add_argument("--build", default="build")
    ap.add_argument("--within", type=float, default=0.10)
    ap.add_argument("--json", default="", help="also write every measurement to this file")
    args = ap.parse_args()
    build = Path(args.build)
    perf = str(build / "bench/braid-perf")
    algos = args.algos.split(",") if args.algos else [a for a in registry_algorithms(perf) if a != "hierarchical"]
    variants = algos + ["auto"]
    env = dict(os.environ)
    env.pop("BRAID_ALGO", None)
    env.setdefault("BRAID_TIMEOUT", "60s")
    # times[n][variant][size] -> list of us; ran[n][size] -> auto's algorithms
    times = {n: {v: {} for v in variants} for n in args.ranks}
    ran = {n: {} for n in args.ranks}
    for r in range(args.rounds):
        for n in args.ranks:
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for v in order:
                print(f"round {r + 1}/{args.rounds}: {n} ranks, {v}", file=sys.stderr, flush=True)
                for size, (us, algo) in run_once(build, n, v, args.b, args.e, args.iters, args.warmup, env).items():
                    times[n][v].setdefault(size, []).append(us)
                    if v == "auto":
                        ran[n].setdefault(size, set()).add(algo)
    if args.json:
        Path(args.json).write_text(json.dumps({"times": {str(n): t for n, t in times.items()},
                                               "auto_ran": {str(n): {str(s): sorted(a) for s, a in v.items()}
                                                            for n, v in ran.items()}}, indent=1))
    worst = 0.0
    for n in args.ranks:
        print(f"\nall_reduce, {n} ranks, {args.rounds} interleaved rounds: best / median out-of-place time (us)")
        head = f"{'size':>9} " + " ".join(f"{a:>17}" for a in algos) + f" {'auto':>17} {'auto ran':>13} " \
               f"{'best forced':>12} {'auto/best':>10} {'(median)':>8}"
        print(head)
        for size in sorted(set().union(*(times[n][v].keys() for v in variants))):
            cell = {}
            for v in variants:
                t = times[n][v].get(size)
                if t:
                    cell[v] = (min(t), statistics.median(t))
            forced = {a: cell[a] for a in algos if a in cell}
            if "auto" not in cell or not forced:
                continue
            best_a = min(forced, key=lambda a: forced[a][0])
            best_m = min(forced, key=lambda a: forced[a][1])
            ratio_b = cell["auto"][0] / forced[best_a][0]
            ratio_m = cell["auto"][1] / forced[best_m][1]
            ok = min(ratio_b, ratio_m) <= 1 + args.within
            worst = max(worst, min(ratio_b, ratio_m))
            print(f"{size:>9} " + " ".join(f"{cell[a][0]:>8.1f}/{cell[a][1]:<8.1f}" if a in cell else f"{'-':>17}"
                                           for a in algos) +
                  f" {cell['auto'][0]:>8.1f}/{cell['auto'][1]:<8.1f} {','.join(sorted(ran[n].get(size, []))):>13} "
                  f"{best_a:>12} {ratio_b:>10.2f} {ratio_m:>8.2f} {'ok' if ok else 'OVER'}")
    print(f"\nworst auto/best forced (the better of best and median): {worst:.2f}")


if __name__ == "__main__":
    main()
