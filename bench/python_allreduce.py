#!/usr/bin/python3
"""All-reduce bandwidth from Python (numpy arrays through the braid package),
measured the way braid-perf measures it, and compared with braid-perf.

As a rank (under braid-run), one row like braid-perf's --json:

    PYTHONPATH=build/python build/tools/braid-run -n 4 /usr/bin/python3 bench/python_allreduce.py -b 64M

`warmup` untimed all-reduces, a barrier, `iters` timed back-to-back ones;
each rank's mean iteration time, averaged over ranks (braid-perf's -a 1);
algbw = bytes / time, busbw = algbw x 2(n-1)/n; out of place and in place.

As the comparison driver, alternating the two benchmarks ROUNDS times so that
the drift of a shared machine hits both alike, then best and median busbw:

    /usr/bin/python3 bench/python_allreduce.py --compare 5 -b 64M -n 4 [--build build]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def run_rank(args):
    import numpy as np

    import braid

    comm = braid.Comm.from_env()
    n = comm.size
    dtype = np.dtype(args.dtype)
    count = args.bytes // dtype.itemsize
    send = np.full(count, comm.rank + 1, dtype)
    recv = np.zeros(count, dtype)
    rows = []
    for in_place in (False, True):
        kwargs = {} if in_place else {"out": recv}
        buf = recv if in_place else send
        if in_place:
            recv[:] = send
        for _ in range(args.warmup):
            comm.all_reduce(buf, **kwargs)
        comm.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            comm.all_reduce(buf, **kwargs)
        local_us = (time.perf_counter() - start) / args.iters * 1e6
        per_rank = comm.all_gather(np.array([local_us]))
        time_us = float(per_rank.mean())
        algbw = args.bytes / time_us / 1e3
        rows.append({"collective": "all_reduce", "source": "python", "ranks": n, "size": args.bytes,
                     "type": dtype.name, "in_place": in_place, "time_us": time_us, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * 2 * (n - 1) / n})
    # The result of one checked all-reduce: every element is 1 + ... + n.
    check = np.full(1024, comm.rank + 1, dtype)
    comm.all_reduce(check)
    wrong = int((check != n * (n + 1) // 2).sum())
    if comm.rank == 0:
        for row in rows:
            row["wrong"] = wrong
            print(json.dumps(row), flush=True)
    comm.close()


def busbw_of(output, in_place):
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            row = json.loads(line)
            if row.get("in_place") == in_place and "busbw_gbps" in row:
                return row["busbw_gbps"]
    raise RuntimeError("no result row in:\n" + output)


def compare(args):
    build = args.build
    run = os.path.join(build, "tools", "braid-run")
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "src", "python"))
    size = str(args.bytes)
    commands = {
        "python": [run, "-n", str(args.ranks), sys.executable, os.path.abspath(__file__), "-b", size,
                   "--iters", str(args.iters), "--warmup", str(args.warmup), "--dtype", args.dtype],
        "braid-perf": [run, "-n", str(args.ranks), os.path.join(build, "bench", "braid-perf"), "all_reduce",
                       "-b", size, "-e", size, "-n", str(args.iters), "-w", str(args.warmup), "-c", "0",
                       "-d", {"float32": "f32", "float64": "f64"}.get(args.dtype, args.dtype), "--json",
                       "--no-progress"],
    }
    results = {name: {False: [], True: []} for name in commands}
    for round_ in range(args.compare):
        for name, command in commands.items():
            out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
            # braid-run prefixes each line with its rank: keep what follows the first '{'.
            text = "\n".join(line[line.index("{"):] for line in out.stdout.splitlines() if "{" in line)
            for in_place in (False, True):
                results[name][in_place].append(busbw_of(text, in_place))
            print(f"round {round_ + 1} {name:10s} busbw out of place {results[name][False][-1]:7.2f} GB/s, "
                  f"in place {results[name][True][-1]:7.2f} GB/s", flush=True)
    print(f"\nall_reduce {args.bytes} bytes {args.dtype}, {args.ranks} ranks, {args.compare} rounds interleaved "
          f"(busbw GB/s: best / median)")
    for in_place in (False, True):
        py, cpp = results["python"][in_place], results["braid-perf"][in_place]
        label = "in place    " if in_place else "out of place"
        print(f"  {label}  python {max(py):7.2f} / {statistics.median(py):7.2f}   braid-perf {max(cpp):7.2f} / "
              f"{statistics.median(cpp):7.2f}   python/braid-perf: best {max(py) / max(cpp):.1%}, "
              f"median {statistics.median(py) / statistics.median(cpp):.1%}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", "--bytes", type=parse_size, default=64 << 20, help="buffer size (64M)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--compare", type=int, metavar="ROUNDS", help="alternate this and braid-perf ROUNDS times")
    p.add_argument("-n", "--ranks", type=int, default=4, help="ranks for --compare")
    p.add_argument("--build", default="build", help="build folder for --compare")
    args = p.parse_args()
    if args.compare:
        compare(args)
    else:
        run_rank(args)


if __name__ == "__main__":
    main()
