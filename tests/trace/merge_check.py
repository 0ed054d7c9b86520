#!/usr/bin/python3
"""BRAID_TRACE end to end: braid-perf on 4 ranks writes one trace per rank,
braid-trace merge joins them, and braid-trace check finds every operation on
every rank, the steps inside their operations and the clocks aligned within
100 us. Then the check is shown to fail: rank 1's clock moved by 1 ms must be
caught, and so must a rank's missing operation.

    merge_check.py BRAID_RUN BRAID_PERF BRAID_TRACE_PY
"""

import json
import os
import subprocess
import sys
import tempfile

braid_run, braid_perf, tool = sys.argv[1:4]
ranks = 4


def run_tool(*args):
    return subprocess.run([sys.executable, tool, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    env = dict(os.environ, BRAID_TRACE=os.path.join(tmp, "t.%r.json"))
    job = subprocess.run([braid_run, "-n", str(ranks), braid_perf, "all_reduce", "-b", "8", "-e", "16M"], env=env,
                         capture_output=True, text=True, timeout=240)
    if job.returncode != 0:
        sys.exit(f"braid-perf failed ({job.returncode}):\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}")
    files = [os.path.join(tmp, f"t.{r}.json") for r in range(ranks)]
    for f in files:
        if not os.path.exists(f):
            sys.exit(f"no trace at {f}: {sorted(os.listdir(tmp))}")
    merged = os.path.join(tmp, "merged.json")
    m = run_tool("merge", merged, *files)
    print(m.stdout, m.stderr)
    if m.returncode != 0:
        sys.exit("merge failed")
    c = run_tool("check", merged, "--ranks", str(ranks), "--tolerance-us", "100")
    print(c.stdout, c.stderr)
    if c.returncode != 0:
        sys.exit("check failed on the real trace")
    trace = json.load(open(merged))
    # braid-perf's sizes 8 B .. 16 MiB (x2): 22 all-reduce sizes on every rank.
    sizes = {e["args"]["bytes"] for e in trace["traceEvents"]
             if e.get("cat") == "op" and e["pid"] == 0 and e["args"]["collective"] == "all_reduce"}
    expected = {8 << k for k in range(22)}
    if not expected <= sizes:
        sys.exit(f"all-reduce sizes missing from rank 0's trace: {sorted(expected - sizes)}")
    kinds = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "step"}
    if not {"send", "recv"} <= kinds and not {"send", "recv_reduce"} <= kinds:
        sys.exit(f"steps seen: {kinds}")
    # One host: the offsets the store exchange measured are within their
    # own bound (half the round trip), as the clock is one.
    for r, info in trace["otherData"]["ranks"].items():
        measured, round_trip = info["clock_measured_offset_us"], info["clock_round_trip_us"]
        print(f"rank {r}: measured offset {measured:+.1f} us, round trip {round_trip:.1f} us")
        if abs(measured) > round_trip / 2 + 0.01:
            sys.exit(f"rank {r}: measured offset {measured} us beyond half its round trip {round_trip} us")

    # The check can fail: rank 1's clock 1 ms off.
    t1 = json.load(open(files[1]))
    t1["otherData"]["clock_offset_us"] += 1000.0
    skewed = os.path.join(tmp, "skewed.1.json")
    json.dump(t1, open(skewed, "w"))
    run_tool("merge", os.path.join(tmp, "bad.json"), files[0], skewed, files[2], files[3])
    bad = run_tool("check", os.path.join(tmp, "bad.json"), "--ranks", str(ranks))
    if bad.returncode == 0 or "clocks" not in bad.stderr:
        sys.exit(f"check passed a trace with rank 1's clock 1 ms off:\n{bad.stdout}{bad.stderr}")
    # ... and a rank's operation missing.
    t2 = json.load(open(files[2]))
    ops = [i for i, e in enumerate(t2["traceEvents"]) if e.get("cat") == "op"]
    del t2["traceEvents"][ops[len(ops) // 2]]
    missing = os.path.join(tmp, "missing.2.json")
    json.dump(t2, open(missing, "w"))
    run_tool("merge", os.path.join(tmp, "bad2.json"), files[0], files[1], missing, files[3])
    bad = run_tool("check", os.path.join(tmp, "bad2.json"), "--ranks", str(ranks))
    if bad.returncode == 0 or "rank 2" not in bad.stderr:
        sys.exit(f"check passed a trace with an operation of rank 2 missing:\n{bad.stdout}{bad.stderr}")
    print("ok")
