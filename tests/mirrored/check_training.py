#!/usr/bin/env python3
"""Runs the training example under braid-run and checks what it prints.

usage: check_training.py BRAID_RUN BRAID_TRAIN RANKS ARGS...

Synchronous strategies: every epoch says the replicas are consistent and the
loss is within 1e-3 (relative) of the 1-replica run. The parameter server:
the loss falls and the workers agree after finish.
"""
import re
import subprocess
import sys

braid_run, train, ranks, *args = sys.argv[1:]
cmd = [braid_run, "-n", ranks, "--timeout", "200s", "--", train, *args]
print("$", " ".join(cmd), flush=True)
try:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=250)
except subprocess.TimeoutExpired:
    sys.exit("the training run did not finish within 250 s")
print(done.stdout)
print(done.stderr, file=sys.stderr)
failures = []
if done.returncode != 0:
    failures.append(f"exit status {done.returncode}")
epochs = [l for l in done.stdout.splitlines() if re.search(r"epoch \d+\s+loss", l)]
losses = [float(re.search(r"loss ([0-9.]+)", l).group(1)) for l in epochs]
if len(epochs) < 3:
    failures.append(f"expected per-epoch lines, found {len(epochs)}")
if "parameter_server" in args:
    if not any("after finish" in l and "replicas consistent" in l for l in done.stdout.splitlines()):
        failures.append("workers do not agree after finish")
    if losses and not losses[-1] < losses[0]:
        failures.append(f"loss did not fall: {losses}")
else:
    for line in epochs:
        if "replicas consistent" not in line:
            failures.append(f"replicas not consistent: {line}")
        diff = re.search(r"rel\. diff ([0-9.e+-]+)", line)
        if not diff:
            failures.append(f"no 1-replica comparison: {line}")
        elif float(diff.group(1)) > 1e-3:
            failures.append(f"loss differs from the 1-replica run by {diff.group(1)}: {line}")
    if not any(l.startswith("[0] Summary:") and "identical" in l for l in done.stdout.splitlines()):
        failures.append("no summary saying the replicas stayed identical")
for f in failures:
    print("FAILED:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
