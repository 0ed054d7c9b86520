#!/usr/bin/python3
"""The planner's all-reduce choice against every forced algorithm, interleaved.

    bench/auto_vs_forced.py [--ranks 2 4] [--rounds 3] [--small-rounds 9] [--small-max 64K] [-b 8] [-e 64M]
                            [-n 0] [-w 0] [--algos ring,direct,...] [--build build] [--json FILE]
                            [--hosts 2x2 [--shape 1gbit]]

With --hosts 2xN the job runs on two hosts of N ranks each: two network
namespaces joined by a veth pair (bench/netns_hosts.py; root), each with its
own host name, one braid-run per namespace (--nnodes 2), so the ranks of a
namespace talk over shared memory and the two namespaces over TCP across the
veth pair, as two machines on one switch would (each host on its own half of
the CPUs where its ranks fit there, as on two machines: 2x1 on 2 CPUs); --shape shapes the pair with
tc tbf (1gbit, 10gbit). --ranks then counts the ranks per host, and the
algorithms include hierarchical.

Each round runs, for every rank count, `braid-run -n N braid-perf all_reduce
-b MIN -e MAX --algo X` once per algorithm and once with no --algo (auto), in
an order that changes from round to round (each variant at another place,
after another one), so that the machine's drift (other jobs on this shared
machine) falls on every variant alike; the sweep runs in
bands of sizes (--bands: 8 B-64 KiB, 128 KiB-2 MiB, 4 MiB-64 MiB), every
variant finishing a band before the next band starts, so that the variants
of one size run seconds apart rather than minutes. Sizes up to
--small-max get --small-rounds rounds in all (the extra rounds run only those
sizes, interleaved the same way): a microsecond-scale time needs more samples
to outvote a scheduler hiccup. braid-perf's -n 0 scales the iterations to the
size (200 up to 1 MiB), so a size's first iterations (a fresh slot page, a
first reduction kernel) do not weigh on a row of ten.

The table has, per size, each variant's best and median out-of-place time over
the rounds, the algorithm auto ran (braid-perf's algorithm column: the
communicator's plan), the best forced algorithm by median, and auto's median
over that one's. The verdict is by medians: "ok" within --within (10%);
"OVER" beyond it; "OVER same" beyond it although auto ran the best forced
algorithm itself, so that the gap is the measurement's noise between two runs
of one schedule, not a wrong choice (counted apart, not hidden).

A second verdict judges the choice alone: "chosen/best" is the forced median
of the algorithm auto ran over the best forced median, both from forced runs.
Where the launches of one variant fall into modes (4 ranks on 2 cores: the
scheduler places the ranks anew at every launch, and an 8-byte all-reduce
took 2.4 us in some launches and 4.2 in others, whatever the algorithm),
auto's own median depends on how many of its launches drew the slow mode;
the forced runs of the chosen algorithm do not carry that draw twice.
--bind-to core pins rank i to the i-th CPU in every launch, which removes the
draw (braid-run itself binds more ranks than CPUs round robin only when no
other task runs at launch; docs/launchers.md).

The algorithms default to those braid-perf --help lists for all_reduce (the
algorithm registry), less hierarchical on one host (it runs as the ring there).
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path

from netns_hosts import TwoHosts
from perf_rows import out_of_place_rows


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


_launches = [0]


def run_once(build, ranks, algo, lo, hi, iters, warmup, env, bind, hosts=None):
    perf = [str(build.resolve() / "bench/braid-perf"), "all_reduce",
            "-b", lo, "-e", hi, "-n", str(iters), "-w", str(warmup), "--json", "--no-progress", "-c", "0"]
    if algo != "auto":
        perf += ["--algo", algo]
    run = [str(build.resolve() / "tools/braid-run"), "-n", str(ranks)] + (["--bind-to", bind] if bind else [])
    if hosts is None:
        cmds = [run + perf]
    else:
        # One braid-run per host; a port of its own per launch, so that no
        # earlier launch's connection in TIME_WAIT is in the way.
        _launches[0] += 1
        master = f"{hosts.addr[0]}:{29600 + _launches[0] % 2000}"
        cmds = [hosts.prefix(k) + hosts.own_cpus(k, ranks) + run + ["--nnodes", "2", "--node-rank", str(k),
                                                                    "--master", master] + perf
                for k in range(2)]
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for c in cmds]
    outs = []
    failed = False
    for c, p in zip(cmds, procs):
        try:
            out, err = p.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs.append(out)
        if p.returncode != 0:
            failed = True
            print(f"{' '.join(c)} failed ({p.returncode}):\n{out[-1000:]}\n{err[-1000:]}", file=sys.stderr)
    if failed:
        # A failed run (a timeout on a loaded machine) costs its variant this
        # round's samples, not the whole table.
        return {}
    return {row["size"]: (row["time_us"], row["algorithm"]) for row in out_of_place_rows(outs[0])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small-rounds", type=int, default=9, help="rounds in all for sizes up to --small-max")
    ap.add_argument("--small-max", default="64K")
    ap.add_argument("--bands", default="64K,2M",
                    help="the sizes where one band of the sweep ends and the next begins (each band runs every variant)")
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="64M")
    ap.add_argument("-n", "--iters", type=int, default=0,
                    help="braid-perf -n (timed iterations per size; 0: scaled to the size)")
    ap.add_argument("-w", "--warmup", type=int, default=0,
                    help="braid-perf -w (untimed iterations first; 0 with -n 0: a tenth)")
    ap.add_argument("--algos", default="", help="comma-separated; default: the registry's, less hierarchical")
    ap.add_argument("--build", default="build")
    ap.add_argument("--within", type=float, default=0.10)
    ap.add_argument("--json", default="", help="also write every measurement to this file")
    ap.add_argument("--bind-to", default="", choices=["", "core", "none"],
                    help="braid-run --bind-to for every launch (core: rank i on the i-th CPU, round robin, also "
                         "when ranks outnumber CPUs; default: braid-run's own choice)")
    ap.add_argument("--report", default="", help="measure nothing: print the tables of a file --json wrote")
    ap.add_argument("--hosts", default="", help="2xN: two hosts (network namespaces) of N ranks each")
    ap.add_argument("--shape", default="", help="with --hosts: shape the link between them (tc tbf rate: 1gbit)")
    args = ap.parse_args()
    build = Path(args.build)
    if args.hosts and not args.report:
        m = re.fullmatch(r"2x(\d+)", args.hosts)
        if not m:
            raise SystemExit(f"--hosts {args.hosts}: only two hosts are supported (2x1, 2x2, 2x4)")
        args.ranks = [int(m.group(1))]
        # SIGTERM (a timeout) leaves through the with-block, which deletes the namespaces.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        with TwoHosts(args.shape) as hosts:
            print(f"hosts: {hosts.describe()}, {args.ranks[0]} ranks each", file=sys.stderr)
            measure(args, build, hosts)
        return
    measure(args, build, None)


def measure(args, build, hosts):
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        args.ranks = [int(n) for n in saved["times"]]
        variants = list(next(iter(saved["times"].values())))
        algos = [v for v in variants if v != "auto"]
        times = {int(n): {v: {int(s): t for s, t in by_size.items()} for v, by_size in t_n.items()}
                 for n, t_n in saved["times"].items()}
        ran = {int(n): {int(s): set(a) for s, a in r_n.items()} for n, r_n in saved["auto_ran"].items()}
        report(args, algos, variants, times, ran)
        return
    perf = str(build / "bench/braid-perf")
    algos = args.algos.split(",") if args.algos else [a for a in registry_algorithms(perf)
                                                      if a != "hierarchical" or hosts is not None]
    variants = algos + ["auto"]
    env = dict(os.environ)
    env.pop("BRAID_ALGO", None)
    env.setdefault("BRAID_TIMEOUT", "60s")
    # times[n][variant][size] -> list of us; ran[n][size] -> auto's algorithms
    times = {n: {v: {} for v in variants} for n in args.ranks}
    ran = {n: {} for n in args.ranks}
    # The sweep in bands of sizes, each band run by every variant before the
    # next band starts: the variants of one size then run seconds apart, not
    # minutes, and the load of other jobs drifts less between them.
    lo, hi, small_max = parse_size(args.b), parse_size(args.e), parse_size(args.small_max)
    edges = sorted({lo, hi} | {parse_size(c) for c in args.bands.split(",") if c and lo < parse_size(c) < hi})
    bands = [(lo, hi)] if lo == hi else []
    for i in range(len(edges) - 1):
        first = edges[i] if i == 0 else edges[i] * 2
        if first <= edges[i + 1]:
            bands.append((first, edges[i + 1]))
    passes = []
    for r in range(max(args.rounds, args.small_rounds)):
        for band in bands:
            if r < args.rounds or band[1] <= small_max:
                passes.append((r, band))
    rounds_of = max(args.rounds, args.small_rounds)
    # The order of the variants in a round: a Williams design (0, 1, n-1, 2,
    # n-2, ...) shifted by the round, so that over the rounds each variant
    # runs after a different one and at a different place. A plain rotation
    # kept the neighbours: auto always ran right after rabenseifner, the ring
    # right after the tree, and whatever one launch leaves behind for the
    # next (its exit unmapping a 64 MiB job's buffers, the shared-memory files
    # it unlinks) fell on the same variant every round.
    k = len(variants)
    williams = [0]
    for j in range(1, k):
        williams.append((j + 1) // 2 if j % 2 else k - j // 2)
    for r, (first, last) in passes:
        for n in args.ranks:
            order = [variants[(i + r) % len(variants)] for i in williams]
            for v in order:
                print(f"round {r + 1}/{rounds_of} ({first}-{last} B): {n} ranks, {v}", file=sys.stderr, flush=True)
                for size, (us, algo) in run_once(build, n, v, str(first), str(last), args.iters, args.warmup,
                                                 env, args.bind_to, hosts).items():
                    times[n][v].setdefault(size, []).append(us)
                    if v == "auto":
                        ran[n].setdefault(size, set()).add(algo)
    if args.json:
        Path(args.json).write_text(json.dumps({"times": {str(n): t for n, t in times.items()},
                                               "auto_ran": {str(n): {str(s): sorted(a) for s, a in v.items()}
                                                            for n, v in ran.items()}}, indent=1))
    report(args, algos, variants, times, ran)


def report(args, algos, variants, times, ran):
    """The tables: per rank count and size, every variant against the best forced one."""
    worst = 0.0
    for n in args.ranks:
        counted = [len(t) for v in variants for t in times[n][v].values()]
        shape = f"2 hosts x {n} ranks ({args.shape or 'unshaped'})" if getattr(args, "hosts", "") else f"{n} ranks"
        print(f"\nall_reduce, {shape}, {min(counted)} interleaved rounds ({max(counted)} up to "
              f"{args.small_max}): best / median out-of-place time (us)")
        head = f"{'size':>9} " + " ".join(f"{a:>17}" for a in algos) + f" {'auto':>17} {'auto ran':>13} " \
               f"{'best forced':>12} {'auto/best':>10} {'(median)':>8} {'verdict':>9} {'chosen/best':>11}"
        print(head)
        counts = {"ok": 0, "OVER": 0, "OVER same": 0}
        misses = []
        chosen_ok, chosen_total, chosen_misses = 0, 0, []
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
            auto_algos = sorted(ran[n].get(size, []))
            verdict = "ok" if ratio_m <= 1 + args.within else "OVER same" if auto_algos == [best_m] else "OVER"
            counts[verdict] += 1
            if verdict != "ok":
                misses.append(f"{size} B {ratio_m:.2f} ({','.join(auto_algos)} vs {best_m})")
            worst = max(worst, ratio_m)
            chosen = ""
            if len(auto_algos) == 1 and auto_algos[0] in forced:
                ratio_c = forced[auto_algos[0]][1] / forced[best_m][1]
                chosen_total += 1
                if ratio_c <= 1 + args.within:
                    chosen_ok += 1
                else:
                    chosen_misses.append(f"{size} B {ratio_c:.2f} ({auto_algos[0]} vs {best_m})")
                chosen = f"{ratio_c:.2f}"
            print(f"{size:>9} " + " ".join(f"{cell[a][0]:>8.1f}/{cell[a][1]:<8.1f}" if a in cell else f"{'-':>17}"
                                           for a in algos) +
                  f" {cell['auto'][0]:>8.1f}/{cell['auto'][1]:<8.1f} {','.join(auto_algos):>13} "
                  f"{best_m:>12} {ratio_b:>10.2f} {ratio_m:>8.2f} {verdict:>9} {chosen:>11}")
        total = sum(counts.values())
        print(f"{n} ranks: auto within {args.within:.0%} of the best forced median at {counts['ok']} of {total} sizes; "
              f"over at {counts['OVER']} with another algorithm, {counts['OVER same']} running the best forced one "
              f"(noise)" + (f": {'; '.join(misses)}" if misses else ""))
        print(f"{n} ranks: the chosen algorithm's forced median within {args.within:.0%} of the best forced median at "
              f"{chosen_ok} of {chosen_total} sizes" + (f"; over: {'; '.join(chosen_misses)}" if chosen_misses else ""))
    print(f"\nworst auto/best forced (medians): {worst:.2f}; load average now {os.getloadavg()}")


if __name__ == "__main__":
    main()
