#!/usr/bin/python3
"""Elastic training from Python: braid.mirrored.MultiWorkerMirrored(elastic=True).

    elastic_train.py --run BRAID_RUN [--ranks 3]          (the driver)
    elastic_train.py --worker [--die-at STEP]             (one rank; under braid-run)

The driver starts braid-run --elastic with --ranks workers; the last one kills
itself (SIGKILL) at step 40; the others go on (strategy.elastic_step shrinks
and resyncs), the driver starts that rank's command again, it joins the
running job and takes the chief's state, and every process ends the same
steps with the same replica hash. Prints one line and exits 0, 1 (fail) or
77 (skip: braid's Python module not importable).
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time

STEPS = 240
DIE_AT = 40


def worker(args):
    import numpy as np

    import braid.mirrored as mr

    strategy = mr.MultiWorkerMirrored(elastic=True, aggregation="mean")
    with strategy.scope():
        w = strategy.create_variable("w", np.linspace(-1, 1, 64).astype(np.float32))
    opt = mr.Sgd(0.05)
    strategy.create_slots(opt)
    target = np.linspace(0.5, -0.5, 64).astype(np.float32)
    position = {"step": 0, "epoch": 0, "batch_in_epoch": 0}

    def step(ctx, at):
        value = w.value(ctx)
        grad = ctx.gradients.of(w)
        rank_weight = 1.0 + 0.1 * (at["step"] % 7)
        grad[:] = (value - target) * rank_weight
        ctx.apply_gradients(opt)

    while position["step"] < STEPS:
        if args.die_at is not None and position["step"] == args.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        change = strategy.elastic_step(step, position)
        if change["changed"]:
            print(f"changed: {change['describe']} at step {position['step']}", flush=True)
        if change["step_done"]:
            position["step"] += 1
            time.sleep(0.01)
    print(f"done step {position['step']} replicas {strategy.num_replicas_in_sync} hash {strategy.replica_hash():016x}",
          flush=True)
    return 0


def driver(args):
    try:
        subprocess.run([sys.executable, "-c", "import braid.mirrored"], check=True, capture_output=True)
    except subprocess.CalledProcessError as e:
        print(f"elastic_train: SKIPPED: braid's Python module does not import: {e.stderr.decode()[-300:]}")
        return 77
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRAID_")}
    env.update(BRAID_TIMEOUT="4s", BRAID_ELASTIC_GRACE="1s", BRAID_JOB_ID=f"elastic-py-{os.getpid()}")
    me = os.path.abspath(__file__)
    n, last = args.ranks, args.ranks - 1
    log = open(f"/tmp/braid-elastic-py-{os.getpid()}.log", "w+")
    run = subprocess.Popen([args.run, "-n", str(n), "--elastic", "--port", str(port), "--timeout", "120s", "--",
                            sys.executable, me, "--worker", "--die-at-rank", str(last), "--die-at", str(DIE_AT)],
                           env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    again = None
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            text = open(log.name).read()
            if len(re.findall(r"changed: replicas \d+ -> \d+ \(lost\)", text)) >= n - 1:
                break
            if run.poll() is not None:
                break
            time.sleep(0.05)
        else:
            print("elastic_train: FAILED: the others did not go on without the killed rank within 60 s\n" +
                  open(log.name).read()[-3000:])
            return 1
        identity = dict(env, BRAID_RANK=str(last), BRAID_WORLD_SIZE=str(n), BRAID_LOCAL_RANK=str(last),
                        BRAID_LOCAL_SIZE=str(n), BRAID_STORE_ADDR=f"127.0.0.1:{port}", BRAID_ELASTIC="1",
                        BRAID_STORE_EXTERNAL="1", BRAID_TIMEOUT="30s")
        again = subprocess.run([sys.executable, me, "--worker"], env=identity, capture_output=True, text=True,
                               timeout=120)
        run.wait(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    text = open(log.name).read()
    done = re.findall(r"done step (\d+) replicas (\d+) hash ([0-9a-f]{16})", text + again.stdout)
    problems = []
    if run.returncode != 0:
        problems.append(f"braid-run exited {run.returncode}")
    if again.returncode != 0:
        problems.append(f"the restarted rank exited {again.returncode}: {again.stderr[-2000:]}")
    if len(done) != n or len({d for d in done}) != 1 or done[0][0] != str(STEPS) or done[0][1] != str(n):
        problems.append(f"the processes ended with {done}, not {n} alike at step {STEPS} with {n} replicas")
    if "(joined" not in again.stdout:
        problems.append("the restarted rank did not say it joined")
    if problems:
        print("elastic_train: FAILED: " + "; ".join(problems) + "\n" + text[-3000:])
        return 1
    os.unlink(log.name)
    print(f"elastic_train: {n} Python ranks, rank {last} killed at step {DIE_AT}, the others went on, its command "
          f"run again joined; all {n} ended {STEPS} steps with replica hash {done[0][2]}: OK")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run")
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--die-at", type=int)
    ap.add_argument("--die-at-rank", type=int)
    args = ap.parse_args()
    if args.worker:
        if args.die_at_rank is not None and os.environ.get("BRAID_RANK") != str(args.die_at_rank):
            args.die_at = None
        return worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
