#!/usr/bin/python3
"""braid-perf's three output forms, from real runs on 2 ranks:

  - the table, read by nccl_tests_log.py (a parser shaped like those written
    for nccl-tests logs): every row has 13 columns, the footer lines are there,
    "# Avg bus bandwidth" is the mean of the busbw columns (up to the table's
    rounding), "# Out of bounds values : 0 OK";
  - --csv: a header of 15 fields, two records per size (out of place, in place);
  - --json: one object per size and placement with the same fields;
  - nccl-tests' other flags as all_reduce_perf (the link to braid-perf
    beside it) runs them: -m 3 (the header's agg iters), -N 2 (the sweep
    twice), -C 1, -M 1 (a memory line), -T, and -N 0 running cycle after
    cycle until braid-run's --timeout stops it.
No timing is asserted.

    check_perf_output.py BRAID_RUN BRAID_PERF
"""
import csv
import io
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nccl_tests_log  # noqa: E402

FIELDS = ["collective", "algorithm", "transport", "ranks", "hosts", "size", "count", "type", "redop", "root",
          "in_place", "time_us", "algbw_gbps", "busbw_gbps", "wrong"]


def run(braid_run, perf, *args):
    done = subprocess.run([braid_run, "-n", "2", "--no-prefix", "--timeout", "120s", perf, *args],
                          capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        sys.exit(f"braid-perf {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def check(condition, message):
    if not condition:
        sys.exit("FAIL: " + message)


def main():
    braid_run, perf = sys.argv[1:3]
    sweep = ["-b", "8", "-e", "256K", "-f", "8", "-n", "3", "-w", "1"]
    sizes = [8, 64, 512, 4096, 32768, 262144]

    table = run(braid_run, perf, "all_reduce", *sweep)
    log = nccl_tests_log.parse(table)
    check([r["size"] for r in log["rows"]] == sizes, f"rows {[r['size'] for r in log['rows']]}, expected {sizes}\n{table}")
    check(all(r["type"] == "float" and r["redop"] == "sum" and r["root"] == -1 for r in log["rows"]), "type/redop/root")
    check(all(r["oop_wrong"] == "0" and r["ip_wrong"] == "0" for r in log["rows"]), "#wrong columns")
    check(log["out_of_bounds"] == 0 and log["ok"], "no '# Out of bounds values : 0 OK' line")
    check(log["avg_busbw"] is not None, "no '# Avg bus bandwidth' line")
    busbw = [r["oop_busbw"] for r in log["rows"]] + [r["ip_busbw"] for r in log["rows"]]
    mean = sum(busbw) / len(busbw)
    check(abs(log["avg_busbw"] - mean) <= 0.006, f"avg busbw {log['avg_busbw']} is not the mean {mean} of the rows")
    check(any(line.startswith("# nThread 1") for line in table.splitlines()), "no nccl-tests settings line")
    check(any("Rank  1" in line and " on " in line for line in table.splitlines()), "no rank list")

    # Unchecked: #wrong is N/A; sendrecv has no in-place form (N/A), still 13 columns.
    log = nccl_tests_log.parse(run(braid_run, perf, "sendrecv", *sweep, "-c", "0"))
    check(len(log["rows"]) == len(sizes) and all(r["oop_wrong"] == "N/A" and r["ip_time_us"] is None
                                                 for r in log["rows"]), "sendrecv -c 0 rows")

    text = run(braid_run, perf, "broadcast", *sweep, "--csv", "-r", "1")
    records = list(csv.DictReader(io.StringIO(text)))
    check(text.splitlines()[0].split(",") == FIELDS, f"CSV header {text.splitlines()[0]}")
    check(len(records) == 2 * len(sizes), f"{len(records)} CSV records")
    check([r["in_place"] for r in records[:2]] == ["false", "true"], "CSV placements")
    check(all(r["collective"] == "broadcast" and r["root"] == "1" and r["ranks"] == "2" and r["wrong"] == "0"
              and float(r["time_us"]) > 0 for r in records), "CSV values")

    lines = run(braid_run, perf, "all_gather", *sweep, "--json").splitlines()
    objects = [json.loads(line) for line in lines]
    check(len(objects) == 2 * len(sizes), f"{len(objects)} JSON objects")
    check(all(list(o) == FIELDS for o in objects), f"JSON fields {list(objects[0])}")
    check(all(o["transport"] == "shm" and o["hosts"] == 1 and isinstance(o["size"], int) for o in objects), "JSON values")

    alias = os.path.join(os.path.dirname(perf), "all_reduce_perf")
    short = ["-b", "8", "-e", "512", "-f", "8", "-n", "2", "-w", "1"]
    table = run(braid_run, alias, *short, "-m", "3", "-N", "2", "-C", "1", "-M", "1", "-T", "60", "-p", "0",
                "-G", "0", "-R", "0")
    log = nccl_tests_log.parse(table)
    check([r["size"] for r in log["rows"]] == [8, 64, 512] * 2, f"-N 2: rows {[r['size'] for r in log['rows']]}")
    check(log["ok"] and all(r["oop_wrong"] == "0" for r in log["rows"]), "-m 3: results wrong")
    check("agg iters: 3 " in table and "CPU time" in table and "timeout 60 s" in table, f"header:\n{table}")
    check("# Memory: peak resident set per rank (MiB): 0: " in table, "-M 1: no memory line")
    endless = subprocess.run([braid_run, "-n", "2", "--no-prefix", "--timeout", "4s", alias, *short, "-m", "1", "-G",
                              "0", "-p", "0", "-C", "0", "-N", "0"], capture_output=True, text=True, timeout=60)
    rows = len(nccl_tests_log.parse(endless.stdout)["rows"])
    check(endless.returncode == 124 and rows > 2 * 3, f"-N 0: status {endless.returncode}, {rows} rows")
    refused = subprocess.run([braid_run, "-n", "1", alias, "-G", "1"], capture_output=True, text=True, timeout=60)
    check(refused.returncode == 2 and "use -G 0" in refused.stdout + refused.stderr, "-G 1 not refused with a reason")
    print("braid-perf's table, CSV and JSON, and nccl-tests' flags, read as expected")


if __name__ == "__main__":
    main()
